package pipeline

import "time"

// Governor decides when to degrade low-priority streams: it engages when
// the total queue depth (frames waiting for engines, all streams) stays
// above Threshold for EngageAfter, and releases when it stays at or below
// Threshold/2 for ReleaseAfter. The two levels and the longer release
// delay are the hysteresis that keeps it from flapping. Driven by explicit
// times; not safe for concurrent use.
type Governor struct {
	Threshold    int
	EngageAfter  time.Duration
	ReleaseAfter time.Duration

	engaged bool
	since   time.Time // start of the current run above (or below) the level; zero: none
}

// NewGovernor returns a governor with the defaults: threshold 10 frames,
// engage after 3 s above it, release after 10 s at or below half of it.
func NewGovernor() *Governor {
	return &Governor{Threshold: 10, EngageAfter: 3 * time.Second, ReleaseAfter: 10 * time.Second}
}

// Engaged reports the current decision.
func (g *Governor) Engaged() bool { return g.engaged }

// Observe records the total queue depth at now and reports whether the
// decision changed.
func (g *Governor) Observe(now time.Time, depth int) bool {
	var pressing bool
	var wait time.Duration
	if g.engaged {
		pressing, wait = depth <= g.Threshold/2, g.ReleaseAfter // calm enough to release?
	} else {
		pressing, wait = depth > g.Threshold, g.EngageAfter // loaded enough to engage?
	}
	if !pressing {
		g.since = time.Time{}
		return false
	}
	if g.since.IsZero() {
		g.since = now
	}
	if now.Sub(g.since) < wait {
		return false
	}
	g.engaged, g.since = !g.engaged, time.Time{}
	return true
}
