package analytics

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// CLEAR MOT (Bernardin and Stiefelhagen, "Evaluating Multiple Object
// Tracking Performance: The CLEAR MOT Metrics", EURASIP JIVP 2008) and
// the identity metrics IDF1/IDP/IDR (Ristani et al., "Performance
// Measures and a Data Set for Multi-Target, Multi-Camera Tracking", ECCV
// workshops 2016), computed as TrackEval does (Luiten and Hoffhues,
// github.com/JonathonLuiten/TrackEval, MIT; trackeval/metrics/clear.py
// and identity.py): per frame, the ground-truth ids, the tracker's ids
// and their similarity matrix (IoU); a pair matches at similarity ≥ the
// threshold (0.5).

// mframe is one frame of a sequence to evaluate.
type mframe struct {
	gt, tr []int       // ids
	sim    [][]float64 // len(gt) × len(tr)
}

type clearResult struct {
	TP, FN, FP, IDSW int
	MOTA, MOTP       float64
}

type identityResult struct {
	IDTP, IDFN, IDFP int
	IDF1, IDP, IDR   float64
}

const metricEps = 2.220446049250313e-16 // numpy's finfo(float).eps, as TrackEval uses

// clearMOT is TrackEval's CLEAR.eval_sequence: in each frame, pairs are
// matched by the Hungarian algorithm on similarity, with a bonus of 1000
// for keeping the pair of the previous frame (so identity is kept where
// it can be); an id switch is a ground-truth object matched to another
// tracker id than the last one it was matched to. MOTA = (TP − FP −
// IDSW) / (TP + FN); MOTP is the mean similarity of the matches. Frames
// without ground truth or without tracker output are counted and skipped,
// as TrackEval does (they leave the previous-frame pairs as they were).
func clearMOT(frames []mframe, threshold float64) clearResult {
	var r clearResult
	var simSum float64
	prevTS := map[int]int{} // gt → tracker id matched in the previous evaluated frame
	prev := map[int]int{}   // gt → tracker id last matched
	var a assigner
	for _, f := range frames {
		if len(f.gt) == 0 {
			r.FP += len(f.tr)
			continue
		}
		if len(f.tr) == 0 {
			r.FN += len(f.gt)
			continue
		}
		cost := make([]float64, len(f.gt)*len(f.tr))
		for i, g := range f.gt {
			for j, t := range f.tr {
				s := f.sim[i][j]
				if s < threshold-metricEps {
					continue // score 0: never matched
				}
				if p, ok := prevTS[g]; ok && p == t {
					s += 1000
				}
				cost[i*len(f.tr)+j] = -s
			}
		}
		rowTo := make([]int, len(f.gt))
		a.solve(cost, len(f.gt), len(f.tr), -metricEps, rowTo)
		clear(prevTS)
		matched := 0
		for i, j := range rowTo {
			if j < 0 {
				continue
			}
			g, t := f.gt[i], f.tr[j]
			if p, ok := prev[g]; ok && p != t {
				r.IDSW++
			}
			prev[g], prevTS[g] = t, t
			simSum += f.sim[i][j]
			matched++
		}
		r.TP += matched
		r.FN += len(f.gt) - matched
		r.FP += len(f.tr) - matched
	}
	r.MOTA = float64(r.TP-r.FP-r.IDSW) / math.Max(1, float64(r.TP+r.FN))
	r.MOTP = simSum / math.Max(1, float64(r.TP))
	return r
}

// identity is TrackEval's Identity.eval_sequence: ground-truth and
// tracker ids are matched one to one over the whole sequence to maximise
// the number of frames in which the pair's similarity is ≥ the threshold
// (IDTP); TrackEval minimises IDFN + IDFP on an extended matrix, which is
// the same matching since IDFN + IDFP = all boxes − 2·IDTP.
func identity(frames []mframe, threshold float64) identityResult {
	gtIdx, trIdx := map[int]int{}, map[int]int{}
	var pairs [][2]int
	nGT, nTR := 0, 0
	for _, f := range frames {
		nGT += len(f.gt)
		nTR += len(f.tr)
		for i, g := range f.gt {
			for j, t := range f.tr {
				if f.sim[i][j] >= threshold {
					pairs = append(pairs, [2]int{index(gtIdx, g), index(trIdx, t)})
				}
			}
		}
	}
	G, T := len(gtIdx), len(trIdx)
	cost := make([]float64, G*T)
	for _, p := range pairs {
		cost[p[0]*T+p[1]]--
	}
	var r identityResult
	if G > 0 && T > 0 {
		rowTo := make([]int, G)
		var a assigner
		a.solve(cost, G, T, -0.5, rowTo)
		for g, t := range rowTo {
			if t >= 0 {
				r.IDTP += int(-cost[g*T+t])
			}
		}
	}
	r.IDFN, r.IDFP = nGT-r.IDTP, nTR-r.IDTP
	r.IDF1 = float64(r.IDTP) / math.Max(1, float64(r.IDTP)+0.5*float64(r.IDFP)+0.5*float64(r.IDFN))
	r.IDR = float64(r.IDTP) / math.Max(1, float64(r.IDTP+r.IDFN))
	r.IDP = float64(r.IDTP) / math.Max(1, float64(r.IDTP+r.IDFP))
	return r
}

func index[K comparable](m map[K]int, id K) int {
	i, ok := m[id]
	if !ok {
		i = len(m)
		m[id] = i
	}
	return i
}

// fr builds a frame from ids and a row-major similarity matrix.
func fr(gt, tr []int, sim ...float64) mframe {
	f := mframe{gt: gt, tr: tr, sim: make([][]float64, len(gt))}
	for i := range gt {
		f.sim[i] = sim[i*len(tr) : (i+1)*len(tr)]
	}
	return f
}

func rep(n int, f mframe) []mframe {
	out := make([]mframe, n)
	for i := range out {
		out[i] = f
	}
	return out
}

// The metric code against expected values. The cases and their CLEAR
// values are Roboflow's trackers test/eval/test_clear.py and
// test_identity.py (Apache-2.0), which hold its port of TrackEval to
// numerical parity with TrackEval itself; the identity values marked
// "by hand" are worked out in the comments (the source only bounds them).
func TestMetricsKnownCases(t *testing.T) {
	ids := func(v ...int) []int { return v }
	clearCases := []struct {
		name   string
		frames []mframe
		want   clearResult // MOTA/MOTP checked when not NaN
		mota   float64
		motp   float64
	}{
		{"perfect, 2 objects, 3 frames", []mframe{
			fr(ids(0, 1), ids(0, 1), 0.9, 0.1, 0.1, 0.9),
			fr(ids(0, 1), ids(0, 1), 0.8, 0.2, 0.2, 0.85),
			fr(ids(0, 1), ids(0, 1), 0.85, 0.15, 0.1, 0.9),
		}, clearResult{TP: 6}, 1, math.NaN()},
		{"complete miss", []mframe{fr(ids(0, 1), nil), fr(ids(0, 1), nil)}, clearResult{FN: 4}, 0, math.NaN()},
		{"all false positives", []mframe{fr(nil, ids(0, 1)), fr(nil, ids(0, 1))}, clearResult{FP: 4}, math.NaN(), math.NaN()},
		{"single id switch", []mframe{fr(ids(0), ids(10), 0.9), fr(ids(0), ids(20), 0.8), fr(ids(0), ids(20), 0.85)},
			clearResult{TP: 3, IDSW: 1}, math.NaN(), math.NaN()},
		{"multiple id switches", []mframe{fr(ids(0), ids(1), 0.9), fr(ids(0), ids(2), 0.85), fr(ids(0), ids(3), 0.8), fr(ids(0), ids(4), 0.75)},
			clearResult{TP: 4, IDSW: 3}, math.NaN(), math.NaN()},
		{"below threshold", []mframe{
			fr(ids(0, 1), ids(0, 1), 0.8, 0.1, 0.1, 0.8),
			fr(ids(0, 1), ids(0, 1), 0.3, 0.1, 0.1, 0.3),
		}, clearResult{TP: 2, FN: 2, FP: 2}, math.NaN(), math.NaN()},
		{"more trackers than gt", []mframe{fr(ids(0), ids(0, 1, 2), 0.9, 0.1, 0.1), fr(ids(0), ids(0, 1, 2), 0.85, 0.1, 0.1)},
			clearResult{TP: 2, FP: 4}, math.NaN(), math.NaN()},
		{"more gt than trackers", []mframe{fr(ids(0, 1, 2), ids(0), 0.9, 0.1, 0.1), fr(ids(0, 1, 2), ids(0), 0.85, 0.1, 0.1)},
			clearResult{TP: 2, FN: 4}, math.NaN(), math.NaN()},
		{"empty sequence", nil, clearResult{}, math.NaN(), math.NaN()},
		{"non-diagonal optimum", []mframe{fr(ids(0, 1), ids(10, 20), 0.3, 0.9, 0.8, 0.2)}, clearResult{TP: 2}, math.NaN(), math.NaN()},
		{"fragmentation", []mframe{fr(ids(0), ids(1), 0.9), fr(ids(0), nil), fr(ids(0), ids(1), 0.85), fr(ids(0), nil), fr(ids(0), ids(1), 0.8)},
			clearResult{TP: 3, FN: 2}, math.NaN(), math.NaN()},
		{"exactly at threshold matches", []mframe{fr(ids(0), ids(0), 0.5)}, clearResult{TP: 1}, math.NaN(), math.NaN()},
		{"just above threshold", []mframe{fr(ids(0), ids(0), 0.5001)}, clearResult{TP: 1}, math.NaN(), math.NaN()},
		{"complex multi-object", []mframe{
			fr(ids(0, 1, 2), ids(10, 11, 12), 0.9, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.9),
			fr(ids(0, 1, 2), ids(10, 11, 12), 0.85, 0.1, 0.1, 0.1, 0.85, 0.1, 0.1, 0.1, 0.85),
			fr(ids(0, 1), ids(10, 11), 0.9, 0.1, 0.1, 0.9),
			fr(ids(0, 1, 3), ids(10, 11, 13), 0.9, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.9),
		}, clearResult{TP: 11}, math.NaN(), math.NaN()},
		{"previous pairs preferred over higher similarity", []mframe{
			fr(ids(0, 1), ids(10, 20), 0.9, 0.1, 0.1, 0.85),
			fr(ids(0, 1), ids(10, 20), 0.7, 0.75, 0.75, 0.7),
		}, clearResult{TP: 4}, math.NaN(), math.NaN()},
		{"MOTA formula: (TP − FP − IDSW)/(TP + FN) = 0.25", []mframe{
			fr(ids(0, 1), ids(10, 11, 12), 0.9, 0.1, 0.1, 0.1, 0.9, 0.1),
			fr(ids(0, 1), ids(10, 20, 12), 0.9, 0.1, 0.1, 0.1, 0.9, 0.1),
		}, clearResult{TP: 4, FP: 2, IDSW: 1}, 0.25, math.NaN()},
		{"MOTP formula: mean similarity 0.8", []mframe{fr(ids(0), ids(0), 0.9), fr(ids(0), ids(0), 0.8), fr(ids(0), ids(0), 0.7)},
			clearResult{TP: 3}, 1, 0.8},
		{"non-sequential gt ids", []mframe{
			fr(ids(100, 200), ids(1, 2), 0.9, 0.1, 0.1, 0.9),
			fr(ids(100, 200), ids(1, 2), 0.85, 0.15, 0.15, 0.85),
		}, clearResult{TP: 4}, math.NaN(), math.NaN()},
	}
	for _, c := range clearCases {
		t.Run("clear/"+c.name, func(t *testing.T) {
			got := clearMOT(c.frames, 0.5)
			require.Equal(t, c.want.TP, got.TP, "TP")
			require.Equal(t, c.want.FN, got.FN, "FN")
			require.Equal(t, c.want.FP, got.FP, "FP")
			require.Equal(t, c.want.IDSW, got.IDSW, "IDSW")
			if !math.IsNaN(c.mota) {
				require.InDelta(t, c.mota, got.MOTA, 1e-9, "MOTA")
			}
			if !math.IsNaN(c.motp) {
				require.InDelta(t, c.motp, got.MOTP, 1e-9, "MOTP")
			}
		})
	}

	idCases := []struct {
		name   string
		frames []mframe
		want   identityResult
	}{
		{"empty", []mframe{fr(nil, nil)}, identityResult{}},
		{"no tracker output", []mframe{fr(ids(0, 1), nil), fr(ids(0, 1), nil)}, identityResult{IDFN: 4}},
		{"no gt", []mframe{fr(nil, ids(10, 20)), fr(nil, ids(10, 20))}, identityResult{IDFP: 4}},
		{"perfect", []mframe{fr(ids(0, 1), ids(10, 20), 0.8, 0, 0, 0.8), fr(ids(0, 1), ids(10, 20), 0.8, 0, 0, 0.8)},
			identityResult{IDTP: 4, IDF1: 1, IDR: 1, IDP: 1}},
		// By hand: the swap in frame 2 leaves 0↔10 and 1↔20 one frame
		// each (or 0↔20 and 1↔10, the same): IDTP 2, IDFN 2, IDFP 2,
		// IDF1 = 2/(2 + 1 + 1) = 0.5 (the source only says IDTP ≥ 2,
		// IDF1 ≥ 0.3).
		{"id swap (by hand)", []mframe{fr(ids(0, 1), ids(10, 20), 0.8, 0.1, 0.1, 0.8), fr(ids(0, 1), ids(10, 20), 0.1, 0.8, 0.8, 0.1)},
			identityResult{IDTP: 2, IDFN: 2, IDFP: 2, IDF1: 0.5, IDR: 0.5, IDP: 0.5}},
		{"below threshold", []mframe{fr(ids(0), ids(10), 0.3)}, identityResult{IDFN: 1, IDFP: 1}},
		{"3 gt, 2 trackers", []mframe{fr(ids(0, 1, 2), ids(10, 20), 0.8, 0, 0, 0.8, 0, 0)},
			identityResult{IDTP: 2, IDFN: 1, IDF1: 0.8, IDR: 2.0 / 3, IDP: 1}},
		{"1 gt, 3 trackers", []mframe{fr(ids(0), ids(10, 20, 30), 0.8, 0, 0)},
			identityResult{IDTP: 1, IDFP: 2, IDF1: 0.5, IDR: 1, IDP: 1.0 / 3}},
		{"consistent over 3 frames", []mframe{fr(ids(0), ids(10), 0.9), fr(ids(0), ids(10), 0.85), fr(ids(0), ids(10), 0.8)},
			identityResult{IDTP: 3, IDF1: 1, IDR: 1, IDP: 1}},
		// By hand: gt 0 is tracked by 10 for 6 frames, then by 20 for 4;
		// the best one-to-one matching keeps 0↔10: IDTP 6, IDFN 4, IDFP 4,
		// IDF1 = 6/(6 + 2 + 2) = 0.6, while CLEAR sees one switch.
		{"switch after 6 of 10 frames (by hand)", append(rep(6, fr(ids(0), ids(10), 0.9)), rep(4, fr(ids(0), ids(20), 0.9))...),
			identityResult{IDTP: 6, IDFN: 4, IDFP: 4, IDF1: 0.6, IDR: 0.6, IDP: 0.6}},
	}
	for _, c := range idCases {
		t.Run("identity/"+c.name, func(t *testing.T) {
			got := identity(c.frames, 0.5)
			require.Equal(t, c.want.IDTP, got.IDTP, "IDTP")
			require.Equal(t, c.want.IDFN, got.IDFN, "IDFN")
			require.Equal(t, c.want.IDFP, got.IDFP, "IDFP")
			require.InDelta(t, c.want.IDF1, got.IDF1, 1e-9, "IDF1")
			require.InDelta(t, c.want.IDR, got.IDR, 1e-9, "IDR")
			require.InDelta(t, c.want.IDP, got.IDP, 1e-9, "IDP")
		})
	}
	// The by-hand switch case, under CLEAR: one switch, MOTA 0.9.
	c := clearMOT(append(rep(6, fr(ids(0), ids(10), 0.9)), rep(4, fr(ids(0), ids(20), 0.9))...), 0.5)
	require.Equal(t, clearResult{TP: 10, IDSW: 1, MOTA: 0.9, MOTP: 0.9}, roundClear(c))
}

func roundClear(c clearResult) clearResult {
	c.MOTA = math.Round(c.MOTA*1e9) / 1e9
	c.MOTP = math.Round(c.MOTP*1e9) / 1e9
	return c
}
