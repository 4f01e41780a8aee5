package app

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
)

// The analytics metrics follow Prometheus' conventions, set occupancy
// from the counts and count crossings, and lose the series of a zone or
// line that a stream no longer has, and of a stream that goes.
func TestAnalyticsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newAnalyticsMetrics(reg)
	cfg := &analytics.Config{Zones: []analytics.Zone{{Name: "door"}, {Name: "yard"}}, Lines: []analytics.Line{{Name: "gate"}}}
	for _, s := range []string{"cam1", "cam2"} {
		m.retain(s, cfg)
		m.set(&analytics.Counts{StreamID: s, Zones: []analytics.ZoneCount{
			{Name: "door", Occupancy: map[string]int{"person": 2, "car": 0}}, {Name: "yard", Occupancy: map[string]int{"person": 1}}}})
		m.crossed(s, "gate", "person", "in")
	}
	m.crossed("cam1", "gate", "person", "in")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.Equal(t, 2.0, testutil.ToFloat64(m.occupancy.WithLabelValues("cam1", "door", "person")))
	require.Equal(t, 2.0, testutil.ToFloat64(m.crossings.WithLabelValues("cam1", "gate", "person", "in")))
	require.Equal(t, 6, testutil.CollectAndCount(m.occupancy), "door: person and car, yard: person, for each stream")

	// cam1 drops the yard and the line: their series go, the door stays.
	m.retain("cam1", &analytics.Config{Zones: []analytics.Zone{{Name: "door"}}})
	out, err := testutil.CollectAndFormat(m.occupancy, expfmt.TypeTextPlain, "vigil_analytics_zone_occupancy_tracks")
	require.NoError(t, err)
	require.NotContains(t, string(out), `stream="cam1",zone="yard"`)
	require.Contains(t, string(out), `class="person",stream="cam1",zone="door"`)
	require.Contains(t, string(out), `stream="cam2",zone="yard"`)
	require.Equal(t, 1, testutil.CollectAndCount(m.crossings), "cam2's gate only")

	// cam2 goes: nothing of it is left.
	m.forget("cam2")
	for _, c := range []prometheus.Collector{m.occupancy, m.crossings} {
		out, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain)
		require.NoError(t, err)
		require.False(t, strings.Contains(string(out), "cam2"), "%s", out)
	}
}
