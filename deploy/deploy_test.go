// Package deploy_test checks the files under deploy/: the Prometheus rules
// (promtool check and unit tests) and that the rules and the Grafana
// dashboard only use metric names that vigil exports.
package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is missing: make setup installs Debian's prometheus package")
	cmd := exec.Command(bin, args...)
	cmd.Dir = "prometheus"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %v:\n%s", args, out)
	t.Logf("promtool %v:\n%s", args, out)
}

func TestPrometheusRules(t *testing.T) {
	promtool(t, "check", "rules", "vigil-rules.yml")
	promtool(t, "test", "rules", "vigil-rules.test.yml")
}

// exported returns vigil's metric names (histograms with their series
// suffixes), from the collectors themselves.
func exported(t *testing.T) map[string]bool {
	reg := prometheus.NewRegistry()
	m := pipeline.NewMetrics(reg)
	// Touch every vector so that it is gathered.
	m.Decoded.WithLabelValues("s").Inc()
	m.Processed.WithLabelValues("s").Inc()
	m.Dropped.WithLabelValues("s", "queue", "deadline").Inc()
	m.Skipped.WithLabelValues("s", "rate_limit").Inc()
	m.Detections.WithLabelValues("s").Inc()
	m.Latency.WithLabelValues("s", "total").Observe(0.01)
	m.QueueDepth.WithLabelValues("s").Set(1)
	m.BudgetMisses.WithLabelValues("s").Inc()
	m.Up.WithLabelValues("s").Set(1)
	m.SetState("s", pipeline.StateRunning)
	m.Degraded.WithLabelValues("s").Set(1)
	m.TotalQueue.Set(1)
	m.BatchSize.Observe(4)
	m.BatchWait.Observe(0.001)
	m.EngineBatch.WithLabelValues("4").Observe(0.01)
	nm := sinks.NewNATSMetrics(reg)
	nm.Undelivered.WithLabelValues("detections", sinks.UndeliveredBufferFull).Inc()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		names[n] = true
		if mf.GetType().String() == "HISTOGRAM" {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		}
	}
	return names
}

var metricRef = regexp.MustCompile(`\bvigil_[a-z_]+`)

func TestDeployFilesUseExportedMetrics(t *testing.T) {
	names := exported(t)
	for _, f := range []string{"prometheus/vigil-rules.yml", "grafana/vigil.json"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		refs := metricRef.FindAllString(string(b), -1)
		require.NotEmpty(t, refs, f)
		for _, r := range refs {
			require.True(t, names[r], "%s uses %s, which vigil does not export", f, r)
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, _ := os.ReadFile("grafana/vigil.json")
	require.NoError(t, json.Unmarshal(b, &dash))
	require.GreaterOrEqual(t, len(dash.Panels), 4)
}
