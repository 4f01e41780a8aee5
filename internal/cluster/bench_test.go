package cluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/vigil-video/vigil/internal/testenv"
)

// BenchmarkFleetControlPlane measures the fleet's control plane at 1,000
// streams on 3 nodes of a 3-server NATS cluster (R3 lease bucket), all in
// this process, with the default lease TTL (10 s): lease operations per
// second per node and CPU (nodes and servers together) in steady state,
// and over 10 kills (a node's loop stopped without handing over) the time
// until every stream of the killed node was taken by a survivor. Streams
// are recorded, not run (runner), so start-up is not included: add a
// stream's start-up (TestFleet logs it). Run with -benchtime=1x; b.N is
// ignored. docs/performance.md has the numbers.
func BenchmarkFleetControlPlane(b *testing.B) {
	const streams, kills = 1000, 10
	ttl := 10 * time.Second
	cl := testenv.StartNATSCluster(b, 3)
	// VIGIL_BENCH_LOG names a file for the nodes' logs (every grant,
	// take and move, with times) and the kills': what a slow failover
	// is read from.
	log := zap.NewNop()
	if p := os.Getenv("VIGIL_BENCH_LOG"); p != "" {
		cfg := zap.NewProductionConfig()
		cfg.OutputPaths, cfg.Sampling = []string{p}, nil
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		var err error
		if log, err = cfg.Build(); err != nil {
			b.Fatal(err)
		}
	}
	var ids []string
	for i := range streams {
		ids = append(ids, "s"+strconv.Itoa(i))
	}
	type member struct {
		n    *Node
		r    *runner
		reg  *prometheus.Registry
		stop func()
	}
	join := func(id string) *member {
		nc, err := nats.Connect(cl.URL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		m := &member{r: newRunner(ids...), reg: prometheus.NewRegistry()}
		o := Options{Conn: nc, Bucket: "leases", ID: id, Version: "bench", TTL: ttl, RebalanceInterval: ttl / 4,
			MaxMoves: 100, Runner: m.r, Logger: log.Named(id), Metrics: m.reg}
		testenv.Eventually(b, func() bool {
			m.n, err = New(context.Background(), o)
			return err == nil
		}, 60*time.Second, 200*time.Millisecond, "joining: %v", err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = m.n.Run(ctx) }()
		var once sync.Once
		m.stop = func() { once.Do(func() { cancel(); <-done }) }
		b.Cleanup(m.stop)
		return m
	}
	members := map[string]*member{}
	for _, id := range []string{"a", "b", "c"} {
		members[id] = join(id)
	}
	total := func() int {
		n := 0
		for _, m := range members {
			n += m.r.count()
		}
		return n
	}
	start := time.Now()
	testenv.Eventually(b, func() bool { return total() == streams }, 120*time.Second, 100*time.Millisecond, "all streams placed")
	b.Logf("placed %d streams on 3 nodes in %s", streams, time.Since(start).Round(time.Millisecond))

	ops := func(m *member) float64 { return testutil.ToFloat64(m.n.m.ops.WithLabelValues("renew", "ok")) }
	before := map[string]float64{}
	for id, m := range members {
		before[id] = ops(m)
	}
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(30 * time.Second)
	cpu, wall := cpuTime()-cpu0, time.Since(t0)
	for _, id := range []string{"a", "b", "c"} {
		m := members[id]
		rate := (ops(m) - before[id]) / wall.Seconds()
		b.Logf("node %s: %d leases, %.1f lease renewals/s", id, m.r.count(), rate)
		b.ReportMetric(rate, "renewals/s/node-"+id)
	}
	b.Logf("steady state: %.3f CPU cores for 3 nodes and 3 NATS servers (%s CPU over %s)", cpu.Seconds()/wall.Seconds(), cpu, wall.Round(time.Millisecond))
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")

	var took []time.Duration
	next := 0
	for k := range kills {
		// Kill the node with the most streams; a fresh node replaces it.
		var victim string
		for id, m := range members {
			if victim == "" || m.r.count() > members[victim].r.count() {
				victim = id
			}
		}
		lost := members[victim].r.count()
		had := map[string]int{}
		for id, m := range members {
			had[id] = m.r.count()
		}
		killed := time.Now()
		log.Info("bench: node killed", zap.Int("kill", k), zap.String("node", victim), zap.Int("streams", lost))
		members[victim].stop()
		delete(members, victim)
		// Up to 6 TTLs (a slow takeover is a figure too, not a stop).
		for total() != streams && time.Since(killed) < 6*ttl {
			time.Sleep(10 * time.Millisecond)
		}
		d := time.Since(killed)
		if total() != streams {
			b.Logf("kill %d: %d of %d streams running after %s", k, total(), streams, d.Round(time.Millisecond))
		}
		took = append(took, d)
		log.Info("bench: every stream running again", zap.Int("kill", k), zap.Duration("after", d))
		var spread []string
		retries := 0.0
		for id, m := range members {
			spread = append(spread, fmt.Sprintf("%s +%d", id, m.r.count()-had[id]))
			retries += testutil.ToFloat64(m.n.m.retries)
		}
		slices.Sort(spread)
		b.Logf("kill %d: node %s with %d streams; all running elsewhere after %s, taken %v (compare-and-sets retried so far: %.0f)",
			k, victim, lost, d.Round(time.Millisecond), spread, retries)
		id := fmt.Sprintf("r%d", next)
		next++
		members[id] = join(id)
		// Let the placer even the loads out again (100 moves per
		// quarter TTL) before the next kill.
		joined := time.Now()
		// Loads within a tenth of the mean stop the placer's moves.
		for members[id].r.count() < streams*9/30 && time.Since(joined) < 60*time.Second {
			time.Sleep(100 * time.Millisecond)
		}
		var state []string
		for mid, m := range members {
			state = append(state, fmt.Sprintf("%s %d (moves asked %.0f, handoffs %.0f)", mid, m.r.count(),
				testutil.ToFloat64(m.n.m.moves), testutil.ToFloat64(m.n.m.handoffs)))
		}
		slices.Sort(state)
		b.Logf("kill %d: %s joined; after %s: %v", k, id, time.Since(joined).Round(time.Millisecond), state)
	}
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[len(took)*99/100]
	b.Logf("failover over %d kills (lease TTL %s): P50 %s, P99 %s, all %v", kills, ttl, p50.Round(time.Millisecond), p99.Round(time.Millisecond), took)
	b.ReportMetric(p50.Seconds(), "failover-p50-s")
	b.ReportMetric(p99.Seconds(), "failover-p99-s")
	for _, m := range members {
		m.n.Drain(context.Background())
		m.stop()
	}
}

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
