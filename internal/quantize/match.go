package quantize

import (
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/pipeline"
)

// Match is how one frame's detections of two engines pair up.
type Match struct {
	// Ref and Cand count the reference (fp32) and candidate (INT8)
	// detections; Matched the pairs formed.
	Ref, Cand, Matched int
	// WorstIoU is the lowest IoU among the pairs (1 with none).
	WorstIoU float32
}

// Add sums another frame's match into m.
func (m *Match) Add(o Match) {
	if m.Ref+m.Cand == 0 {
		m.WorstIoU = 1
	}
	m.Ref, m.Cand, m.Matched = m.Ref+o.Ref, m.Cand+o.Cand, m.Matched+o.Matched
	m.WorstIoU = min(m.WorstIoU, o.WorstIoU)
}

// MatchedShare is the share of reference detections with a candidate
// (1 when there are none).
func (m Match) MatchedShare() float64 {
	if m.Ref == 0 {
		return 1
	}
	return float64(m.Matched) / float64(m.Ref)
}

// ExtraShare is the share of candidate detections with no reference one
// (0 when there are none).
func (m Match) ExtraShare() float64 {
	if m.Cand == 0 {
		return 0
	}
	return float64(m.Cand-m.Matched) / float64(m.Cand)
}

// Pair pairs each reference detection, best score first, with the
// unpaired candidate of the same class that overlaps it most, if that IoU
// is at least minIoU (the COCO-style greedy matching of detections to
// ground truth).
func Pair(ref, cand []pipeline.Detection, minIoU float32) Match {
	m := Match{Ref: len(ref), Cand: len(cand), WorstIoU: 1}
	order := make([]int, len(ref))
	for i := range order {
		order[i] = i
	}
	// Insertion sort by score, highest first: a frame has few detections.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && ref[order[j]].Score > ref[order[j-1]].Score; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	used := make([]bool, len(cand))
	for _, i := range order {
		a := ref[i]
		best, bi := minIoU, -1
		for j, b := range cand {
			if v := infer.IoU(a.Box, b.Box); !used[j] && b.ClassID == a.ClassID && v >= best {
				best, bi = v, j
			}
		}
		if bi >= 0 {
			used[bi] = true
			m.Matched++
			m.WorstIoU = min(m.WorstIoU, best)
		}
	}
	return m
}
