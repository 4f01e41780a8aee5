package app_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/vigiltest"
)

// An alert's log line carries "reasons" only when it has some: a
// budget_miss alert has none and used to log "reasons": null.
func TestAlertLogHasNoNullReasons(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "pipeline: {progress_interval: 0s, alert_interval: 100ms}\n")
	// A 1 ms budget: the first frame (and the first after each idle spell,
	// before any cost is measured) is not predicted late, runs, and is
	// published long after 1 ms; the frames after it are dropped as
	// deadline, which raises frame_drop alerts with reasons.
	code, b := v.Call("POST", "/v1/streams", vigiltest.FileStream(t, "late", "Megamind.avi", `,"budget_ms":1`))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitLogs(`"msg":"alert","stream":"late","type":"budget_miss","count":\d+}`,
		`"msg":"alert","stream":"late","type":"frame_drop","count":\d+,"reasons":\{"deadline":\d+`)
	require.NotContains(t, v.Logs.String(), `"reasons":null`)
}
