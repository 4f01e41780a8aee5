package quantize

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/pipeline"
)

// The values of Options.KeepFloat besides a number of blocks.
const (
	// KeepFloatAuto quantises every block, checks the copy (Check) and,
	// when it fails, keeps the blocks the sensitivity search ranks worst
	// in float, as few as make the check pass.
	KeepFloatAuto = "auto"
	// KeepFloatNone quantises every block the graph edit can.
	KeepFloatNone = "none"
)

// RankFrames is how many calibration frames the sensitivity search
// measures each block's output error on: the error of one block is a
// smooth quantity (no threshold), so a few frames rank the blocks; eight
// keep the search to about a second a block on a 2-core machine.
const RankFrames = 8

// CheckFrames is how many frames of the calibration clip after the
// calibration frames a copy is checked on (the calibration frames
// themselves when the clip has no more).
const CheckFrames = 64

// Check's bounds: the goal for INT8 against fp32 (issue 18: at
// least 99 % of fp32 detections matched, at most 1 % of INT8 detections
// without a match), at IoU ≥ CheckIoU with the same class.
const (
	CheckMatched = 0.99
	CheckExtra   = 0.01
	CheckIoU     = 0.5
)

// ErrKeepFloat is returned (wrapped) for an Options.KeepFloat that is
// neither "auto", "none" nor a number of blocks ≥ 0.
var ErrKeepFloat = errors.New(`keep-float: want auto, none or a number of blocks`)

// ParseKeepFloat returns the number of blocks s keeps float: -1 for auto
// ("" is auto), 0 for none. Errors wrap ErrKeepFloat.
func ParseKeepFloat(s string) (int, error) {
	switch s {
	case "", KeepFloatAuto:
		return -1, nil
	case KeepFloatNone:
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w, not %q", ErrKeepFloat, s)
	}
	return n, nil
}

// Block is a unit the search keeps float or quantises: a convolution
// with the SiLU (Sigmoid, Mul) or Relu after it, or any other quantised
// node alone (quantize_model.py blocks).
type Block struct {
	ID    string   `json:"id"` // its first node's name
	Op    string   `json:"op"` // "Conv+SiLU", "Add", ...
	Nodes []string `json:"nodes"`
}

// Sensitivity is one block's output error when it alone is quantised:
// over the RankFrames calibration frames, the sum over the model's
// outputs of ‖INT8 − fp32‖₂ / ‖fp32‖₂.
type Sensitivity struct {
	Block string  `json:"block"`
	Op    string  `json:"op"`
	Error float64 `json:"relative_l2_error"`
}

// CheckResult is how a copy compares with fp32 on the check frames (of
// the calibration clip) and on the start-up check's built-in frames.
type CheckResult struct {
	Frames  int `json:"frames"`
	FP32    int `json:"fp32_detections"`
	INT8    int `json:"int8_detections"`
	Matched int `json:"matched"`
	// Startup is Agree's reason on the built-in frames, "" when it
	// passes (infer.precision int8 will then run the copy).
	Startup string `json:"startup_check,omitempty"`
}

// Passes reports whether the copy meets CheckMatched and CheckExtra on
// the check frames and passes the start-up check.
func (c CheckResult) Passes() bool {
	m := Match{Ref: c.FP32, Cand: c.INT8, Matched: c.Matched}
	return m.MatchedShare() >= CheckMatched && m.ExtraShare() <= CheckExtra && c.Startup == ""
}

func (c CheckResult) String() string {
	m := Match{Ref: c.FP32, Cand: c.INT8, Matched: c.Matched}
	s := fmt.Sprintf("%d check frames: fp32 %d detections, INT8 %d, matched %.1f %%, extra %.1f %%; start-up check ",
		c.Frames, c.FP32, c.INT8, 100*m.MatchedShare(), 100*m.ExtraShare())
	if c.Startup == "" {
		return s + "passes"
	}
	return s + "fails (" + c.Startup + ")"
}

// Step is one copy the search tried: k blocks kept float.
type Step struct {
	Float   int         `json:"float_blocks"`
	Check   CheckResult `json:"check"`
	Seconds float64     `json:"seconds"`
}

// Search is what the keep-float choice did; Quantize writes it beside
// the copy (<key>.search.json).
type Search struct {
	Mode        string        `json:"keep_float"`
	Blocks      []Block       `json:"blocks"`
	Sensitivity []Sensitivity `json:"sensitivity,omitempty"` // worst first
	Steps       []Step        `json:"steps,omitempty"`
	Float       []string      `json:"float"` // the blocks kept float
	Check       CheckResult   `json:"check"` // of the copy written
}

// sample is one preprocessed frame kept from calibration.
type sample struct {
	in   []float32
	w, h int
}

// searcher holds what the search measures copies against.
type searcher struct {
	o       Options
	model   string // the fp32 model
	ranges  string // the ranges file
	tmp     string
	cache   string         // where the sensitivity ranking is kept (same model, calibration and script)
	sc      *decode.Scaler // the engines' resizer, for the start-up check's built-in frames
	fp32    *infer.Engine
	rank    []sample
	rankRef [][][]float32 // fp32 outputs of rank, copied
	check   []sample
	ref     [][]pipeline.Detection // fp32 detections of check
}

func newSearcher(o Options, ranges, tmp, cache string, rank, check []sample) (*searcher, error) {
	s := &searcher{o: o, model: o.Model.File, ranges: ranges, tmp: tmp, cache: cache, sc: decode.NewScaler(), rank: rank, check: check}
	fp32, err := s.open(o.Model.File)
	if err != nil {
		s.sc.Close()
		return nil, err
	}
	s.fp32 = fp32
	for _, sm := range rank {
		outs, err := fp32.Raw(sm.in)
		if err != nil {
			s.close()
			return nil, err
		}
		cp := make([][]float32, len(outs))
		for i, v := range outs {
			cp[i] = slices.Clone(v)
		}
		s.rankRef = append(s.rankRef, cp)
	}
	for _, sm := range check {
		outs, err := fp32.Raw(sm.in)
		if err != nil {
			s.close()
			return nil, err
		}
		s.ref = append(s.ref, fp32.Decode(outs, sm.w, sm.h, nil))
	}
	return s, nil
}

func (s *searcher) close() {
	s.fp32.Close()
	s.sc.Close()
}

// variant is one copy to write: only (when non-nil) the blocks quantised,
// or all but float.
type variant struct {
	Out   string   `json:"out"`
	Float []string `json:"float,omitempty"`
	Only  []string `json:"only,omitempty"`
}

// variantStats are quantize_model.py's counts for one copy.
type variantStats struct {
	Nodes      int `json:"quantized_nodes"`
	FloatNodes int `json:"float_nodes"`
	Pairs      int `json:"qdq_pairs"`
	Weights    int `json:"weights"`
}

// write makes the copies vs in one run of the script.
func (s *searcher) write(ctx context.Context, vs []variant) ([]variantStats, error) {
	spec := filepath.Join(s.tmp, "variants.json")
	b, _ := json.Marshal(vs)
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		return nil, err
	}
	var out struct {
		Variants []variantStats `json:"variants"`
	}
	if err := runScript(ctx, &out, "variants", s.model, s.ranges, spec); err != nil {
		return nil, err
	}
	return out.Variants, nil
}

// open opens the model file at path (the fp32 model or a copy) with the
// searcher's resizer, so that the engine serves Raw and Detect alike.
func (s *searcher) open(path string) (*infer.Engine, error) {
	return infer.Open(infer.Options{Name: s.o.Model.Name, Path: path, Spec: s.o.Model.Spec, Resizer: s.sc, IntraOpThreads: s.o.Threads})
}

// checkCopy compares the copy at path with fp32 on the check frames and
// the built-in frames.
func (s *searcher) checkCopy(path string) (CheckResult, error) {
	q, err := s.open(path)
	if err != nil {
		return CheckResult{}, err
	}
	defer q.Close()
	r := CheckResult{Frames: len(s.check)}
	var tot Match
	for i, sm := range s.check {
		outs, err := q.Raw(sm.in)
		if err != nil {
			return r, err
		}
		tot.Add(Pair(s.ref[i], q.Decode(outs, sm.w, sm.h, nil), CheckIoU))
	}
	r.FP32, r.INT8, r.Matched = tot.Ref, tot.Cand, tot.Matched
	// The engines already open: the fp32 model and this copy.
	r.Startup, _, err = Agree(s.fp32, q)
	return r, err
}

// tryFloat writes the copy with the first k blocks of order kept float
// to out and checks it.
func (s *searcher) tryFloat(ctx context.Context, order []string, k int, out string) (Step, variantStats, error) {
	t0 := time.Now()
	st, err := s.write(ctx, []variant{{Out: out, Float: order[:k]}})
	if err != nil {
		return Step{}, variantStats{}, err
	}
	c, err := s.checkCopy(out)
	return Step{Float: k, Check: c, Seconds: time.Since(t0).Seconds()}, st[0], err
}

// rankChunk is how many single-block copies are written at once (disk:
// each is about the size of the fp32 model).
const rankChunk = 16

// sensitivity quantises each block alone and measures the output error
// on the rank frames; worst first. The ranking is kept in s.cache, so
// that copies with other keep-float choices reuse it.
func (s *searcher) sensitivity(ctx context.Context, blocks []Block) ([]Sensitivity, error) {
	var res []Sensitivity
	if b, err := os.ReadFile(s.cache); err == nil && json.Unmarshal(b, &res) == nil && len(res) == len(blocks) {
		return res, nil
	}
	res = nil
	for lo := 0; lo < len(blocks); lo += rankChunk {
		chunk := blocks[lo:min(lo+rankChunk, len(blocks))]
		vs := make([]variant, len(chunk))
		for i, b := range chunk {
			vs[i] = variant{Out: filepath.Join(s.tmp, fmt.Sprintf("only-%d.onnx", lo+i)), Only: []string{b.ID}}
		}
		if _, err := s.write(ctx, vs); err != nil {
			return nil, err
		}
		for i, b := range chunk {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			e, err := s.outputError(vs[i].Out)
			os.Remove(vs[i].Out)
			if err != nil {
				return nil, fmt.Errorf("block %s: %w", b.ID, err)
			}
			res = append(res, Sensitivity{Block: b.ID, Op: b.Op, Error: e})
		}
	}
	// Worst (largest error) first.
	slices.SortStableFunc(res, func(a, b Sensitivity) int { return cmp.Compare(b.Error, a.Error) })
	b, _ := json.Marshal(res)
	return res, os.WriteFile(s.cache, b, 0o644)
}

// outputError is Sensitivity.Error for the copy at path.
func (s *searcher) outputError(path string) (float64, error) {
	q, err := s.open(path)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	var num, den []float64
	for i, sm := range s.rank {
		outs, err := q.Raw(sm.in)
		if err != nil {
			return 0, err
		}
		if num == nil {
			num, den = make([]float64, len(outs)), make([]float64, len(outs))
		}
		for k, o := range outs {
			ref := s.rankRef[i][k]
			for j, v := range o {
				d := float64(v) - float64(ref[j])
				num[k] += d * d
				den[k] += float64(ref[j]) * float64(ref[j])
			}
		}
	}
	e := 0.0
	for k := range num {
		if den[k] > 0 {
			e += math.Sqrt(num[k] / den[k])
		}
	}
	return e, nil
}

// search writes the copy for keep (-1: auto) to out and returns what it
// did. blocks are the model's blocks in graph order.
func (s *searcher) search(ctx context.Context, keep int, blocks []Block, out string, progress func(string)) (Search, variantStats, error) {
	res := Search{Mode: KeepFloatNone, Blocks: blocks}
	if keep < 0 {
		res.Mode = KeepFloatAuto
	} else if keep > 0 {
		res.Mode = strconv.Itoa(keep)
	}
	ids := make([]string, len(blocks))
	for i, b := range blocks {
		ids[i] = b.ID
	}
	var order []string
	if keep != 0 {
		if keep < 0 {
			// Auto: no search when every block quantised passes.
			st, vst, err := s.tryFloat(ctx, ids, 0, out)
			if err != nil {
				return res, vst, err
			}
			res.Steps = append(res.Steps, st)
			progress(fmt.Sprintf("all %d blocks quantised: %s", len(blocks), st.Check))
			if st.Check.Passes() {
				res.Check = st.Check
				return res, vst, nil
			}
		}
		progress(fmt.Sprintf("sensitivity: quantising each of %d blocks alone, output error on %d frames", len(blocks), len(s.rank)))
		sens, err := s.sensitivity(ctx, blocks)
		if err != nil {
			return res, variantStats{}, err
		}
		res.Sensitivity = sens
		for _, x := range sens {
			order = append(order, x.Block)
		}
	}
	if keep >= 0 {
		k := min(keep, len(order))
		st, vst, err := s.tryFloat(ctx, order, k, out)
		if err != nil {
			return res, vst, err
		}
		res.Steps = append(res.Steps, st)
		res.Float, res.Check = order[:k], st.Check
		return res, vst, nil
	}
	// Auto: double k until the copy passes, then halve the gap to the
	// last k that failed. (Agreement is not strictly monotonic in k;
	// this finds a passing k near the smallest.)
	tried := map[int]Step{}
	try := func(k int) (Step, error) {
		if st, ok := tried[k]; ok {
			return st, nil
		}
		st, _, err := s.tryFloat(ctx, order, k, filepath.Join(s.tmp, "try.onnx"))
		if err != nil {
			return st, err
		}
		os.Remove(filepath.Join(s.tmp, "try.onnx"))
		tried[k] = st
		res.Steps = append(res.Steps, st)
		progress(fmt.Sprintf("%d blocks float: %s", k, st.Check))
		return st, nil
	}
	bad, good := 0, len(order)
	for k := 1; k < len(order); k *= 2 {
		st, err := try(k)
		if err != nil {
			return res, variantStats{}, err
		}
		if st.Check.Passes() {
			good = k
			break
		}
		bad = k
	}
	for good-bad > 1 {
		mid := (bad + good) / 2
		st, err := try(mid)
		if err != nil {
			return res, variantStats{}, err
		}
		if st.Check.Passes() {
			good = mid
		} else {
			bad = mid
		}
	}
	st, vst, err := s.tryFloat(ctx, order, good, out)
	if err != nil {
		return res, vst, err
	}
	res.Float, res.Check = order[:good], st.Check
	return res, vst, nil
}
