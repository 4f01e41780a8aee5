package pipeline

import (
	"slices"
	"sync"
)

// Placer assigns streams to devices (GPUs): a new stream goes to the least
// loaded device (ties to the lowest index), a placed stream stays where it
// is (sticky: moving one restarts it), and Rebalance, called when streams
// are removed or reweighted, moves as few streams as it can to narrow the
// spread. A stream's load is its weight (vigil run weighs every stream 1).
// Safe for concurrent use.
type Placer struct {
	mu     sync.Mutex
	load   []float64
	where  map[string]int
	weight map[string]float64
}

// Move is one stream moved by Rebalance from device From to device To.
type Move struct {
	Stream   string
	From, To int
}

// NewPlacer returns a placer over devices devices (at least 1).
func NewPlacer(devices int) *Placer {
	return &Placer{load: make([]float64, max(devices, 1)), where: map[string]int{}, weight: map[string]float64{}}
}

// Devices is the number of devices.
func (p *Placer) Devices() int { return len(p.load) }

// Place returns the device of stream id, placing it on the least loaded
// device with the given weight (> 0; 0 or less counts as 1) if it is new.
// A placed stream keeps its device; a new weight replaces the old one.
func (p *Placer) Place(id string, weight float64) int {
	if weight <= 0 {
		weight = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.where[id]; ok {
		p.load[d] += weight - p.weight[id]
		p.weight[id] = weight
		return d
	}
	d := 0
	for i, l := range p.load {
		if l < p.load[d] {
			d = i
		}
	}
	p.where[id], p.weight[id] = d, weight
	p.load[d] += weight
	return d
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
	}
}

// Rebalance moves streams, one at a time, to the least loaded device while
// a move narrows the spread: a stream of weight w on device d may move to
// the least loaded device lo when w < load[d] - load[lo]. Of those moves
// it takes the one that lowers the sum of squared loads most (reduction
// 2w(load[d]-load[lo]-w)), so each restart buys as much balance as it can;
// ties go to the smallest stream id, so the result does not depend on map
// order. The sum of squares falls with every move, so the loop ends. It
// returns the moves made.
func (p *Placer) Rebalance() []Move {
	p.mu.Lock()
	defer p.mu.Unlock()
	var moves []Move
	for range len(p.where) + 1 {
		lo := 0
		for i, l := range p.load {
			if l < p.load[lo] {
				lo = i
			}
		}
		best, bestID := 0.0, ""
		for id, d := range p.where {
			w, gap := p.weight[id], p.load[d]-p.load[lo]
			if d == lo || w >= gap {
				continue
			}
			if gain := 2 * w * (gap - w); gain > best || (gain == best && bestID != "" && id < bestID) {
				best, bestID = gain, id
			}
		}
		if bestID == "" {
			break
		}
		from := p.where[bestID]
		p.where[bestID] = lo
		p.load[from] -= p.weight[bestID]
		p.load[lo] += p.weight[bestID]
		moves = append(moves, Move{Stream: bestID, From: from, To: lo})
	}
	return moves
}

// Loads returns each device's total weight.
func (p *Placer) Loads() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.load)
}
