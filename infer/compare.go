package infer

import (
	"fmt"
	"math"

	"github.com/vigil-video/vigil/pipeline"
)

// Match thresholds for comparing two engines' detections of the same
// frame (vigil's GPU-against-CPU acceptance rule).
const (
	MatchIoU   = 0.9  // a pair must overlap at least this much
	MatchScore = 0.02 // and differ in score by at most this
)

// Comparison is the result of Compare.
type Comparison struct {
	// Total counts the detections compared: every reference detection plus
	// each candidate one left unpaired.
	Total int
	// Bad describes each failure: a pair below MatchIoU or above
	// MatchScore, or a detection without a counterpart.
	Bad []string
	// WorstIoU and WorstScore are over the pairs formed (1 and 0 with none).
	WorstIoU, WorstScore float64
	// Marginal counts, for CompareAt, the unpaired detections that scored
	// less than MatchScore above the score threshold: their counterpart
	// may have scored just below it, within MatchScore, so they are not in
	// Bad. Strict agreement (the same count) needs Marginal = 0 too.
	Marginal int
}

// Matched is Total minus the failures.
func (c Comparison) Matched() int { return c.Total - len(c.Bad) }

// Add merges another frame's comparison into c.
func (c *Comparison) Add(o Comparison) {
	if c.Total == 0 && len(c.Bad) == 0 {
		c.WorstIoU = 1
	}
	c.Total += o.Total
	c.Bad = append(c.Bad, o.Bad...)
	c.WorstIoU = math.Min(c.WorstIoU, o.WorstIoU)
	c.WorstScore = math.Max(c.WorstScore, o.WorstScore)
	c.Marginal += o.Marginal
}

// CompareAt is Compare for two engines that cut detections at the same
// score threshold thr: an unpaired detection scoring below thr+MatchScore
// counts as Marginal rather than as a failure, since a counterpart scoring
// under thr, within MatchScore of it, was cut by the threshold and not
// lost by the engine.
func CompareAt(ref, cand []pipeline.Detection, thr float32) Comparison {
	return compare(ref, cand, thr+MatchScore)
}

// ScoreThreshold is the score below which the adapter drops detections
// (its configured threshold or its default), or 0 for adapters that do not
// say.
func ScoreThreshold(a Adapter) float32 {
	if t, ok := a.(interface{ ScoreThreshold() float32 }); ok {
		return t.ScoreThreshold()
	}
	return 0
}

// Compare pairs each reference detection (ref) with the candidate
// detection of the same class that overlaps it most, each candidate used
// once, and checks every pair against MatchIoU and MatchScore; unpaired
// detections on either side are failures too.
func Compare(ref, cand []pipeline.Detection) Comparison { return compare(ref, cand, 0) }

// compare is Compare with unpaired detections scoring below marginal
// counted as Marginal instead of failures.
func compare(ref, cand []pipeline.Detection, marginal float32) Comparison {
	c := Comparison{WorstIoU: 1}
	used := make([]bool, len(cand))
	for _, a := range ref {
		best, bi := float32(0), -1
		for j, b := range cand {
			if v := IoU(a.Box, b.Box); !used[j] && b.ClassID == a.ClassID && v > best {
				best, bi = v, j
			}
		}
		c.Total++
		if bi < 0 && a.Score < marginal {
			c.Marginal++
			continue
		}
		if bi < 0 {
			c.Bad = append(c.Bad, fmt.Sprintf("%s %.3f at %v: no counterpart", a.Label, a.Score, a.Box))
			continue
		}
		used[bi] = true
		ds := math.Abs(float64(a.Score - cand[bi].Score))
		c.WorstIoU, c.WorstScore = math.Min(c.WorstIoU, float64(best)), math.Max(c.WorstScore, ds)
		if best < MatchIoU || ds > MatchScore {
			c.Bad = append(c.Bad, fmt.Sprintf("%s %.3f at %v vs %.3f at %v: IoU %.3f", a.Label, a.Score, a.Box, cand[bi].Score, cand[bi].Box, best))
		}
	}
	for j, b := range cand {
		if !used[j] && b.Score < marginal {
			c.Total++
			c.Marginal++
		} else if !used[j] {
			c.Total++
			c.Bad = append(c.Bad, fmt.Sprintf("%s %.3f at %v: only in the candidate", b.Label, b.Score, b.Box))
		}
	}
	return c
}
