package app_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/app"
)

// vigil doctor against a running vigil: the engine-time tail and queue
// delay are measured from its histograms; GPU and copy lines say why they
// cannot be measured on a machine without a GPU engine.
func TestDoctor(t *testing.T) {
	v := startVigil(t, t.TempDir(), "")
	code, b := v.call("POST", "/v1/streams", fileStream(t, "doc", "Megamind.avi", ""))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.waitState("doc", "running", 20*time.Second)
	var out bytes.Buffer
	checks, err := app.Doctor(context.Background(), app.DoctorOptions{URL: "http://" + v.ep.Metrics + "/metrics", Window: 3 * time.Second}, &out)
	require.NoError(t, err)
	t.Log(out.String())
	byName := map[string]app.Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	require.Len(t, checks, 6)
	require.NotEmpty(t, byName["frames dropped"].Measured)
	require.NotEmpty(t, byName["engine time tail (P99/mean)"].Measured)
	require.NotEmpty(t, byName["queue delay (mean)"].Measured)
	require.Contains(t, out.String(), "n/a  host-device copy share")
	require.Equal(t, 6, strings.Count(out.String(), "(want "))

	_, err = app.Doctor(context.Background(), app.DoctorOptions{URL: "http://127.0.0.1:1/metrics", Window: time.Millisecond}, &out)
	require.ErrorContains(t, err, "is vigil run up")
}
