package pipeline

import (
	"math"
	"slices"
	"sync"
)

// Placer assigns streams to devices (GPUs, or decoders): a new stream goes
// to the least loaded device (ties to the lowest index), a placed stream
// stays where it is (sticky: moving one restarts it), and Rebalance, called
// when streams are removed or reweighted, moves as few streams as it can to
// narrow the spread. A stream's load is its weight: vigil run weighs every
// stream 1 across GPUs, and by its pixel rate (width × height × frames per
// second) between NVDEC and the CPU under hybrid decoding. Safe for
// concurrent use.
type Placer struct {
	mu     sync.Mutex
	load   []float64
	cap    []float64 // relative capacities, all 1 for NewPlacer
	where  map[string]int
	weight map[string]float64
	among  map[string][]int // PlaceAmong's allowed devices; absent: all
	// margin and maxMoves: SetMoveRule's.
	margin   float64
	maxMoves int
}

// Move is one stream moved by Rebalance from device From to device To.
type Move struct {
	Stream   string
	From, To int
}

// NewPlacer returns a placer over devices devices (at least 1).
func NewPlacer(devices int) *Placer {
	caps := make([]float64, max(devices, 1))
	for i := range caps {
		caps[i] = 1
	}
	return NewPlacerCapacity(caps)
}

// NewPlacerCapacity returns a placer over len(caps) devices of unequal
// capacity (in any unit, e.g. decoded frames per second; values <= 0 count
// as 1): a device's relative load is its load divided by its capacity,
// Place and PlaceAmong fill the device whose relative load would be lowest,
// and Rebalance narrows the spread of relative loads. vigil's hybrid
// decoding places streams on NVDEC engines and the CPU this way, in
// proportion to their measured decode rates.
func NewPlacerCapacity(caps []float64) *Placer {
	if len(caps) == 0 {
		caps = []float64{1}
	}
	c := make([]float64, len(caps))
	for i, v := range caps {
		c[i] = v
		if v <= 0 {
			c[i] = 1
		}
	}
	return &Placer{load: make([]float64, len(c)), cap: c, where: map[string]int{}, weight: map[string]float64{}, among: map[string][]int{}}
}

// Devices is the number of devices.
func (p *Placer) Devices() int { return len(p.load) }

// Place returns the device of stream id, placing it on the least loaded
// device with the given weight (> 0; 0 or less counts as 1) if it is new.
// A placed stream keeps its device; a new weight replaces the old one.
func (p *Placer) Place(id string, weight float64) int {
	return p.PlaceAmong(id, weight, nil)
}

// PlaceAmong is Place restricted to the devices in among (nil: all): a new
// stream goes to the one whose relative load with it added would be lowest
// (ties to the first listed). Indices out of range are ignored; if none is
// left it places on device 0. A placed stream keeps its device, even if it
// is not in among. The allowed devices are remembered: Rebalance moves the
// stream only among them.
func (p *Placer) PlaceAmong(id string, weight float64, among []int) int {
	if weight <= 0 {
		weight = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.reweighLocked(id, weight); ok {
		return d
	}
	if among != nil {
		p.among[id] = slices.Clone(among)
	} else {
		among = make([]int, len(p.load))
		for i := range among {
			among[i] = i
		}
	}
	d, best := 0, math.Inf(1)
	for _, i := range among {
		if i < 0 || i >= len(p.load) {
			continue
		}
		if r := (p.load[i] + weight) / p.cap[i]; r < best {
			d, best = i, r
		}
	}
	p.where[id], p.weight[id] = d, weight
	p.load[d] += weight
	return d
}

// reweighLocked gives placed stream id weight w, moving its device's load
// by the difference, and returns the device; false if id is not placed.
// Caller holds p.mu.
func (p *Placer) reweighLocked(id string, w float64) (int, bool) {
	d, ok := p.where[id]
	if ok {
		p.load[d] += w - p.weight[id]
		p.weight[id] = w
	}
	return d, ok
}

// SetMoveRule bounds what Rebalance does, so that streams whose weights
// change a little never move back and forth. A move must gain more than
// margin: with r(d) a device's load over its capacity, moving a stream of
// weight w from d to t is made only when r(d) with half of the stream
// still there exceeds r(t) with half of it already there by more than
// margin (0.05: 5 % of a device's capacity; 0, the default, takes any
// move that narrows the spread). The reverse move then has exactly the
// opposite gap, so no move is undone until weights or streams change.
// maxMoves caps the moves of one Rebalance call (0: no cap); each move
// restarts a stream.
func (p *Placer) SetMoveRule(margin float64, maxMoves int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.margin, p.maxMoves = max(margin, 0), max(maxMoves, 0)
}

// Weight returns the weight of a placed stream.
func (p *Placer) Weight(id string) (float64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.weight[id]
	return w, ok
}

// Device returns the device of a placed stream.
func (p *Placer) Device(id string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.where[id]
	return d, ok
}

// Remove forgets stream id.
func (p *Placer) Remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.where[id]; ok {
		p.load[d] -= p.weight[id]
		delete(p.where, id)
		delete(p.weight, id)
		delete(p.among, id)
	}
}

// Rebalance moves streams, one at a time (each only among the devices
// PlaceAmong allowed it), while a move lowers the sum over devices of
// load²/capacity (for equal capacities: the sum of squared
// loads, the spread). Moving a stream of weight w from device d to t
// lowers it by (2w·load[d] - w²)/cap[d] - (2w·load[t] + w²)/cap[t], which
// is 2w times the gap of SetMoveRule's rule; of the moves with a gap over
// the margin it takes the largest gain, so each restart buys as much
// balance as it can; ties go to the smallest stream id, then the lowest
// device, so the result does not depend on map order. The sum falls with
// every move, so the loop ends; it also stops after SetMoveRule's
// maxMoves. It returns the moves made.
func (p *Placer) Rebalance() []Move {
	p.mu.Lock()
	defer p.mu.Unlock()
	var moves []Move
	for range len(p.where) + 1 {
		if p.maxMoves > 0 && len(moves) >= p.maxMoves {
			break
		}
		best, bestID, bestTo := 1e-9, "", 0
		for id, d := range p.where {
			w := p.weight[id]
			out := (2*w*p.load[d] - w*w) / p.cap[d]
			for t := range p.load {
				if t == d || (p.among[id] != nil && !slices.Contains(p.among[id], t)) {
					continue
				}
				gain := out - (2*w*p.load[t]+w*w)/p.cap[t]
				if gain <= 2*w*p.margin {
					continue
				}
				if gain > best || (gain == best && bestID != "" && (id < bestID || id == bestID && t < bestTo)) {
					best, bestID, bestTo = gain, id, t
				}
			}
		}
		if bestID == "" {
			break
		}
		from := p.where[bestID]
		p.where[bestID] = bestTo
		p.load[from] -= p.weight[bestID]
		p.load[bestTo] += p.weight[bestID]
		moves = append(moves, Move{Stream: bestID, From: from, To: bestTo})
	}
	return moves
}

// Loads returns each device's total weight.
func (p *Placer) Loads() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.load)
}

// Reweigher gives a Placer the weights measured on running streams, with
// hysteresis: a measurement replaces a stream's weight only when it and
// the Confirm-1 measurements before it all differ from the weight by more
// than the factor 1+Band, on the same side (all heavier or all lighter),
// so that the jitter of a measured frame rate never reweighs a stream and a
// real change (a camera switched from 720p to 1080p, from 15 to 30 fps)
// does within Confirm measurements. Use it from one goroutine.
type Reweigher struct {
	// Band is the relative change that counts (0.2: 20 %; 0 or less:
	// any change).
	Band float64
	// Confirm is how many measurements in a row must be outside the band
	// (1 or less: one).
	Confirm int
	pending map[string]int // id -> measurements in a row outside the band, signed by side
}

// Observe records a measured weight (> 0; others are ignored) of stream id
// on p and reports whether it replaced the stream's weight; a stream p has
// not placed is ignored. The caller rebalances p after a change.
func (r *Reweigher) Observe(p *Placer, id string, measured float64) bool {
	cur, ok := p.Weight(id)
	if !ok {
		return false
	}
	w, changed := r.Next(id, cur, measured)
	if !changed {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reweighLocked(id, w)
	return true
}

// Next applies r's rule to one measured weight of stream id whose weight
// is cur, for callers that keep weights outside a Placer (the fleet's
// node entries): it returns the weight to hold and whether it changed. A
// cur of 0 or less (no weight yet) takes the measurement at once; a
// measurement of 0 or less (none) is ignored.
func (r *Reweigher) Next(id string, cur, measured float64) (float64, bool) {
	if !(measured > 0) {
		return cur, false
	}
	if !(cur > 0) {
		delete(r.pending, id)
		return measured, true
	}
	if r.pending == nil {
		r.pending = map[string]int{}
	}
	band := 1 + max(r.Band, 0)
	side := 0
	switch {
	case measured > cur*band:
		side = 1
	case measured*band < cur:
		side = -1
	}
	n := r.pending[id]
	if side == 0 || n*side < 0 { // inside the band, or turned the other way
		n = 0
	}
	n += side
	if n*side < max(r.Confirm, 1) {
		r.pending[id] = n
		return cur, false
	}
	delete(r.pending, id)
	return measured, true
}

// Forget drops what r holds of stream id (removed).
func (r *Reweigher) Forget(id string) { delete(r.pending, id) }
