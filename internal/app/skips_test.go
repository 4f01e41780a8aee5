package app_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/doctor"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// A stream with fps_limit skips frames on purpose: that is not a fault.
// Over several alert intervals it raises no frame_drop alert, doctor does
// not warn about drops, the skips are counted apart
// (vigil_frames_skipped_total{reason="rate_limit"}, skipped_since_last)
// and nothing is counted as dropped.
func TestFPSLimitIsNotAFault(t *testing.T) {
	// No latency budget: this test is about skips, and on a shared 2-core
	// machine a deadline drop (a real fault, rightly alerted) could come
	// from other load.
	v := vigiltest.Start(t, t.TempDir(), "pipeline: {progress_interval: 0s, alert_interval: 500ms, budget_ms: 0}\n")
	alerts := v.Alerts()
	msgs := v.Messages("limited")
	// Megamind at 23.98 fps, admitted at 5 fps: about 4 of 5 frames skipped.
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "limited", "Megamind.avi", `,"fps_limit":5`))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("limited", "running", 20*time.Second)

	var out bytes.Buffer
	checks, err := doctor.Run(context.Background(), doctor.Options{URL: "http://" + v.EP.Metrics + "/metrics", Window: 3 * time.Second}, &out)
	require.NoError(t, err)
	t.Log(out.String())
	var drop doctor.Check
	for _, c := range checks {
		if c.Name == "frames dropped" {
			drop = c
		}
	}
	require.True(t, drop.OK, "doctor does not warn about skips: %+v", drop)
	require.Contains(t, drop.Measured, "skipped by policy")
	require.NotContains(t, out.String(), "WARN frames dropped")

	st, _ := v.Stream("limited")
	require.Positive(t, st.Status.FPSSkipped, "the status shows the skips: %+v", st.Status)
	require.Zero(t, st.Status.FPSDropped, "and no drops")
	skipped := vigiltest.MetricValue(t, v, `vigil_frames_skipped_total{reason="rate_limit",stream="limited"}`)
	decoded := vigiltest.MetricValue(t, v, `vigil_frames_decoded_total{stream="limited"}`)
	// 5 of 23.98 fps admitted: 79 % skipped; half that is far from any
	// timing noise of the token bucket.
	require.Greater(t, skipped, 0.4*decoded, "skipped %v of %v decoded", skipped, decoded)
	for _, r := range []string{"rate_limit", "queue_full", "deadline"} {
		for _, stage := range []string{"ingest", "queue"} {
			require.Zero(t, vigiltest.MetricValue(t, v, `vigil_frames_dropped_total{reason="`+r+`",stage="`+stage+`",stream="limited"}`), r)
		}
	}
	sumSkipped, sumDropped := 0, 0
	all := msgs.All()
	for _, m := range all {
		sumSkipped += m.SkippedSinceLast
		sumDropped += m.DroppedSinceLast
	}
	n := len(all)
	require.Positive(t, n)
	require.Positive(t, sumSkipped, "messages carry skipped_since_last")
	require.Zero(t, sumDropped, "and no dropped_since_last")
	// Doctor's window held 6 alert intervals, the first skip would have
	// been alerted at once (250 ms tick).
	require.Empty(t, alerts.All(), "no alert for frames skipped on purpose")
}
