package pipeline

import "time"

// Governor decides how far to degrade streams under sustained load, in
// levels from 0 (none) to Steps: it goes up one level when the total queue
// depth (frames waiting for engines, all streams) stays above Threshold
// for EngageAfter, and down one when it stays at or below Threshold/2 for
// ReleaseAfter. The two levels and the longer release delay are the
// hysteresis that keeps it from flapping; after each step the wait starts
// again, so the next step needs the load to last another EngageAfter (or
// the calm another ReleaseAfter). What each level does is the caller's
// (the service: level 1 switches streams to their lighter degrade_to
// model, level 2 cuts low-priority streams' frame rate). Driven by
// explicit times; not safe for concurrent use.
type Governor struct {
	Threshold    int
	EngageAfter  time.Duration
	ReleaseAfter time.Duration
	// Steps is the highest level; 0 counts as 1 (engaged or not). Lowering
	// it below the current level takes the level down to it at once.
	Steps int

	level int
	dir   int       // the direction of the current run: +1 up, -1 down, 0 none
	since time.Time // start of the current run; zero: none
}

// NewGovernor returns a governor with the defaults: threshold 10 frames,
// engage after 3 s above it, release after 10 s at or below half of it,
// one step.
func NewGovernor() *Governor {
	return &Governor{Threshold: 10, EngageAfter: 3 * time.Second, ReleaseAfter: 10 * time.Second}
}

// Engaged reports whether the governor is above level 0.
func (g *Governor) Engaged() bool { return g.level > 0 }

// Level reports the current level, 0 to Steps.
func (g *Governor) Level() int { return min(g.level, g.steps()) }

func (g *Governor) steps() int { return max(g.Steps, 1) }

// Observe records the total queue depth at now and reports whether the
// level changed (by one step, or down to a lowered Steps).
func (g *Governor) Observe(now time.Time, depth int) bool {
	if g.level > g.steps() {
		g.level, g.dir, g.since = g.steps(), 0, time.Time{}
		return true
	}
	dir := 0
	switch {
	case g.level < g.steps() && depth > g.Threshold: // loaded enough to go up?
		dir = 1
	case g.level > 0 && depth <= g.Threshold/2: // calm enough to go down?
		dir = -1
	}
	if dir != g.dir {
		g.dir, g.since = dir, time.Time{}
	}
	if dir == 0 {
		return false
	}
	if g.since.IsZero() {
		g.since = now
	}
	wait := g.EngageAfter
	if dir < 0 {
		wait = g.ReleaseAfter
	}
	if now.Sub(g.since) < wait {
		return false
	}
	g.level += dir
	g.since = now // the next step's wait starts here
	return true
}
