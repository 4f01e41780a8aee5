package pipeline

import (
	"slices"
	"sync"
)

// Placer assigns streams to devices (GPUs): a new stream goes to the least
// loaded device (ties to the lowest index), a placed stream stays where it
// is (sticky: moving one restarts it), and when a stream is added or
// removed Rebalance moves streams from the most to the least loaded device
// while that strictly narrows the gap. A stream's load is its weight, for
// instance its expected frames per second. Safe for concurrent use.
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

// Rebalance moves streams, one at a time, from the most to the least
// loaded device while some stream on the former is lighter than the gap
// between them (so the move strictly narrows it), taking the heaviest such
// stream each time (fewest moves); ties go to the smallest stream id, so
// the result does not depend on map order. It returns the moves made.
func (p *Placer) Rebalance() []Move {
	p.mu.Lock()
	defer p.mu.Unlock()
	var moves []Move
	for range len(p.where) { // each move narrows the spread; this bounds the loop
		hi, lo := 0, 0
		for i, l := range p.load {
			if l > p.load[hi] {
				hi = i
			}
			if l < p.load[lo] {
				lo = i
			}
		}
		gap := p.load[hi] - p.load[lo]
		var ids []string
		for id, d := range p.where {
			if d == hi && p.weight[id] < gap {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			break
		}
		slices.SortFunc(ids, func(a, b string) int {
			if p.weight[a] != p.weight[b] {
				if p.weight[a] > p.weight[b] {
					return -1
				}
				return 1
			}
			if a < b {
				return -1
			}
			return 1
		})
		id := ids[0]
		p.where[id] = lo
		p.load[hi] -= p.weight[id]
		p.load[lo] += p.weight[id]
		moves = append(moves, Move{Stream: id, From: hi, To: lo})
	}
	return moves
}

// Loads returns each device's total weight.
func (p *Placer) Loads() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.load)
}
