package doctor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HealthWindow is the least time between the two gathers that Health's
// rates and latencies come from; a first call waits this long.
const HealthWindow = 2 * time.Second

// healthStale is how old a previous gather may be and still serve as the
// first of two: older, the rates would average over minutes.
const healthStale = 5 * time.Minute

// Health runs the report's checks in process, on the service's own
// registry rather than on scrapes of /metrics: the API's GET /v1/health,
// which the console's health page shows. Each call gathers once and
// compares with the gather of the previous call (a console polling every
// few seconds gets the rates of those seconds); a first call, or one
// after a pause of healthStale, gathers twice HealthWindow apart. It is
// safe for concurrent use.
type Health struct {
	g prometheus.Gatherer

	mu     sync.Mutex
	prev   families
	prevAt time.Time
}

// HealthReport is the body of GET /v1/health.
type HealthReport struct {
	// WindowSeconds is the time between the two gathers compared.
	WindowSeconds float64 `json:"window_s"`
	// Checks are `vigil doctor`'s checks; Measured is "" for one that
	// cannot be measured here (e.g. GPU checks without a GPU).
	Checks []Check `json:"checks"`
}

// NewHealth returns a Health over g.
func NewHealth(g prometheus.Gatherer) *Health { return &Health{g: g} }

// Report gathers and checks; it fails when gathering fails or ctx ends
// during a first call's wait.
func (h *Health) Report(ctx context.Context) (HealthReport, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prev == nil || time.Since(h.prevAt) > healthStale {
		a, err := h.gather()
		if err != nil {
			return HealthReport{}, err
		}
		h.prev, h.prevAt = a, time.Now()
	}
	if wait := HealthWindow - time.Since(h.prevAt); wait > 0 {
		select {
		case <-ctx.Done():
			return HealthReport{}, ctx.Err()
		case <-time.After(wait):
		}
	}
	b, err := h.gather()
	if err != nil {
		return HealthReport{}, err
	}
	rep := HealthReport{WindowSeconds: time.Since(h.prevAt).Seconds(), Checks: evaluate(h.prev, b)}
	h.prev, h.prevAt = b, time.Now()
	return rep, nil
}

func (h *Health) gather() (families, error) {
	mfs, err := h.g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gathering metrics: %w", err)
	}
	f := families{}
	for _, mf := range mfs {
		f[mf.GetName()] = mf
	}
	return f, nil
}
