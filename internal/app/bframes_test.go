package app_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/rtsptest"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// droppedSeries returns stream's vigil_frames_dropped_total series with a
// non-zero count, whatever their stage and reason.
func droppedSeries(t *testing.T, v *vigiltest.Vigil, stream string) []string {
	t.Helper()
	resp, err := http.Get("http://" + v.EP.Metrics + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "vigil_frames_dropped_total{") && strings.Contains(l, `stream="`+stream+`"`) && !strings.HasSuffix(l, " 0") {
			out = append(out, l)
		}
	}
	return out
}

// A live camera with 3 B-frames (b-pyramid) over RTSP: its P-frames leave
// the decoder about 200 ms after their packet arrived, which is the
// camera's encoding, not an overload. An idle vigil with the default
// 200 ms budget drops none of its frames (it dropped every 4th as deadline
// before), raises no frame_drop alert, shows the reorder delay in the
// stream's status, and warns once (event and log) that it is more than
// half the budget. Messages keep latency_ms.total from the packet's arrival
// and say how much of it was reordering.
func TestBFrameCameraIdleDropsNothing(t *testing.T) {
	// Megamind: 23.98 fps (41.7 ms a frame), 3 B-frames between references.
	file := rtsptest.EncodeH264BFrames(t, testenv.Media(t, "Megamind.avi"), 0)
	srv := rtsptest.Start(t, file, rtsptest.Options{Loop: true})
	v := vigiltest.Start(t, t.TempDir(), "pipeline: {progress_interval: 0s, alert_interval: 500ms}\n")
	alerts := v.Alerts()
	ev := v.Events("bcam")
	msgs := v.Messages("bcam")
	code, b := v.Call("POST", "/v1/streams", `{"id":"bcam","url":"`+srv.URL+`"}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	// 8 s of frames: past the connect burst and several measuring windows.
	testenv.Eventually(t, func() bool { return msgs.Len() >= 190 }, 90*time.Second, 20*time.Millisecond, "190 messages")
	// The alert loop sends a drop within a 250 ms tick: one second is four
	// of them.
	time.Sleep(time.Second)

	require.Empty(t, droppedSeries(t, v, "bcam"), "no decodable frame dropped")
	for _, a := range alerts.All() {
		require.NotContains(t, a, `"frame_drop"`)
	}
	s, _ := v.Stream("bcam")
	// The P-frame waits for the 3 B-frames shown before it and for the
	// decoder's reorder depth of 2 (x264's b-pyramid): 5 frame intervals,
	// 208 ms. The delay is measured in whole intervals; one either way is
	// room for the decoder's output timing.
	const frame = 1000 / 23.976
	require.InDelta(t, 5*frame, s.Status.ReorderDelayMS, frame+1, "status: %+v", s.Status)

	n := 0
	for _, e := range ev.All() {
		if e.Type == "reorder_delay" {
			n++
			require.Contains(t, e.Reason, "200ms budget", e.Raw)
		}
	}
	require.Equal(t, 1, n, "warned once: %v", ev.All())
	v.WaitLogs(`"level":"warn".*"msg":"stream reorder delay","stream":"bcam"`)

	honest := 0
	for _, m := range msgs.All() {
		require.GreaterOrEqual(t, m.LatencyMS.Decode, m.LatencyMS.Reorder, "reordering is part of decode")
		if m.LatencyMS.Total > m.BudgetMS && !m.OverBudget {
			honest++ // total from the packet's arrival; the budget after reordering
		}
	}
	require.Positive(t, honest, "P-frames: latency_ms.total over budget_ms, not over budget")
}
