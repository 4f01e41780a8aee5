package pipeline

import (
	"sort"
	"time"
)

// Alert types.
const (
	AlertFrameDrop  = "frame_drop"
	AlertBudgetMiss = "budget_miss"
)

// Alert is published as JSON to vigil.<stream_id>.alerts.
type Alert struct {
	StreamID string `json:"stream_id"`
	// Node is the node.id of the vigil that published the alert (set by
	// the service; empty outside it).
	Node string `json:"node,omitempty"`
	// Type is frame_drop or budget_miss.
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	// Since is the start of the window the counts cover.
	Since time.Time `json:"since"`
	// Count is the number of dropped frames (all reasons) or of frames
	// published over budget in the window.
	Count int `json:"count"`
	// Reasons splits a frame_drop count by drop reason.
	Reasons map[DropReason]int `json:"reasons,omitempty"`
}

// Alerter rate-limits alerts: per stream and type, the first problem is
// reported at once, then at most one alert per interval carrying the counts
// accumulated since the previous one. It is driven by explicit times (for
// tests) and is not safe for concurrent use.
type Alerter struct {
	interval time.Duration
	state    map[[2]string]*alertState
}

type alertState struct {
	last    time.Time // previous alert sent
	since   time.Time // start of the pending window
	count   int
	reasons map[DropReason]int
}

// NewAlerter returns an alerter with the given minimum interval between two
// alerts of one type for one stream.
func NewAlerter(interval time.Duration) *Alerter {
	return &Alerter{interval: interval, state: map[[2]string]*alertState{}}
}

func (a *Alerter) get(id, typ string) *alertState {
	k := [2]string{id, typ}
	st := a.state[k]
	if st == nil {
		st = &alertState{}
		a.state[k] = st
	}
	return st
}

// Add records drops (by reason) and budget misses of stream id seen at now.
func (a *Alerter) Add(now time.Time, id string, drops map[DropReason]int, misses int) {
	for r, n := range drops {
		st := a.get(id, AlertFrameDrop)
		if st.count == 0 {
			st.since = now
		}
		st.count += n
		if st.reasons == nil {
			st.reasons = map[DropReason]int{}
		}
		st.reasons[r] += n
	}
	if misses > 0 {
		st := a.get(id, AlertBudgetMiss)
		if st.count == 0 {
			st.since = now
		}
		st.count += misses
	}
}

// Forget drops a removed stream's state.
func (a *Alerter) Forget(id string) {
	delete(a.state, [2]string{id, AlertFrameDrop})
	delete(a.state, [2]string{id, AlertBudgetMiss})
}

// Due returns the alerts to send at now, sorted by stream and type, and
// starts new windows for them.
func (a *Alerter) Due(now time.Time) []Alert {
	var out []Alert
	for k, st := range a.state {
		if st.count == 0 || (!st.last.IsZero() && now.Sub(st.last) < a.interval) {
			continue
		}
		out = append(out, Alert{StreamID: k[0], Type: k[1], Time: now, Since: st.since, Count: st.count, Reasons: st.reasons})
		st.last, st.count, st.reasons = now, 0, nil
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].StreamID != out[j].StreamID {
			return out[i].StreamID < out[j].StreamID
		}
		return out[i].Type < out[j].Type
	})
	return out
}
