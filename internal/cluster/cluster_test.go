package cluster

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// runner is a Runner that records what the node asks of it.
type runner struct {
	mu      sync.Mutex
	wanted  []Want
	running map[string]bool
}

func newRunner(ids ...string) *runner {
	r := &runner{running: map[string]bool{}}
	for _, id := range ids {
		r.wanted = append(r.wanted, Want{ID: id})
	}
	return r
}

func (r *runner) Start(id string) { r.mu.Lock(); r.running[id] = true; r.mu.Unlock() }
func (r *runner) Stop(id string)  { r.mu.Lock(); delete(r.running, id); r.mu.Unlock() }
func (r *runner) Wanted() []Want {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Want(nil), r.wanted...)
}

func (r *runner) Running() map[string]StreamInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]StreamInfo{}
	for id := range r.running {
		out[id] = StreamInfo{Weight: 1, State: "running"}
	}
	return out
}

func (r *runner) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.running) }

// server starts one embedded NATS server with JetStream and returns a
// connection to it.
func server(t *testing.T, jetStream bool) *nats.Conn {
	t.Helper()
	dir := ""
	if jetStream {
		dir = t.TempDir()
	}
	ns, err := natsserver.Start("127.0.0.1:0", dir, "")
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

const testTTL = 2 * time.Second

func options(nc *nats.Conn, id string, r Runner, t *testing.T) Options {
	return Options{Conn: nc, Bucket: "leases", ID: id, Version: "test", TTL: testTTL, RebalanceInterval: testTTL,
		MaxMoves: 1, Runner: r, Logger: zaptest.NewLogger(t).Named(id)}
}

// run runs n's loop until the test ends (or stop is called).
func run(t *testing.T, n *Node) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = n.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// Two nodes with one node.id: the second refuses to start, naming the
// first (host and pid), within one lease TTL. Once the first is gone
// without deregistering (killed), its entry expires and a node with its
// id starts again within a TTL and a quarter.
func TestDuplicateNodeID(t *testing.T) {
	nc := server(t, true)
	ctx := t.Context()
	a, err := New(ctx, options(nc, "cam-host", newRunner(), t))
	require.NoError(t, err)
	stopA := run(t, a)
	require.NoError(t, a.Ready())
	start := time.Now()
	_, err = New(ctx, options(nc, "cam-host", newRunner(), t))
	require.ErrorIs(t, err, ErrDuplicateNode)
	host, _ := os.Hostname()
	require.ErrorContains(t, err, `node.id "cam-host" is held by the vigil on host `+host+` (pid `+strconv.Itoa(os.Getpid()))
	// A heartbeat every quarter TTL: the refusal comes with the first.
	require.Less(t, time.Since(start), testTTL, "refused within a TTL")

	stopA() // killed: no Drain, no Close; its entry stays until it expires
	start = time.Now()
	b, err := New(ctx, options(nc, "cam-host", newRunner(), t))
	require.NoError(t, err)
	require.ErrorContains(t, a.Ready(), "node entry not renewed", "a stopped node is not ready")
	run(t, b)
	require.NoError(t, b.Ready())
	b.Drain(ctx)
	require.ErrorContains(t, b.Ready(), "draining")
	// 2 s of slack over the TTL: the server expires keys on a timer of
	// its own (at least 250 ms) and the CI machine is slow.
	require.Less(t, time.Since(start), testTTL+2*time.Second)
	b.Close(context.Background())
}

// A server without JetStream: a clear error naming the bucket and what
// to check.
func TestBucketCannotBeCreated(t *testing.T) {
	nc := server(t, false)
	_, err := New(t.Context(), options(nc, "n1", newRunner(), t))
	require.ErrorIs(t, err, ErrBucket)
	require.ErrorContains(t, err, "lease bucket leases")
	require.ErrorContains(t, err, "JetStream enabled")
}

// The bucket's TTL is what expires leases (kv.Update drops a per-key
// TTL, so vigil does not use those): a key written again every quarter
// TTL lives on for 3 TTLs; one left alone expires with a limit marker
// that a watcher sees, and can be created again.
func TestBucketTTL(t *testing.T) {
	nc := server(t, true)
	kv, err := openBucket(t.Context(), Options{Conn: nc, Bucket: "ttl", TTL: testTTL})
	require.NoError(t, err)
	w, err := kv.Watch(t.Context(), "gone", jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	rev, err := kv.Create(t.Context(), "kept", []byte("1"))
	require.NoError(t, err)
	_, err = kv.Create(t.Context(), "gone", []byte("1"))
	require.NoError(t, err)
	written := time.Now()
	<-w.Updates() // the create
	for time.Since(written) < 3*testTTL {
		time.Sleep(testTTL / 4)
		rev, err = kv.Update(t.Context(), "kept", []byte("1"), rev)
		require.NoError(t, err, "renewing at %s", time.Since(written))
	}
	select {
	case e := <-w.Updates():
		require.Equal(t, jetstream.KeyValuePurge, e.Operation())
	case <-time.After(time.Second):
		t.Fatal("no marker for the expired key")
	}
	_, err = kv.Get(t.Context(), "gone")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)
	_, err = kv.Create(t.Context(), "gone", []byte("2"))
	require.NoError(t, err, "created again after it expired")
}

// The fence closes at the lease's safe time on its own, before the loop
// notices anything: a node whose loop is stuck (or paused) publishes
// nothing after three quarters of a TTL from its last renewal. The
// deadline is on the monotonic clock only: the test moves base (the
// clock's origin) as a suspended process would see time pass, and a
// wall-clock jump has nothing to move.
func TestFenceClosesAtSafeTime(t *testing.T) {
	n := &Node{o: Options{TTL: testTTL}, base: time.Now(), held: map[string]*lease{}}
	l := &lease{token: 42}
	l.deadline.Store(n.mono() + n.safe())
	n.held["cam"] = l
	tok, ok := n.Fence("cam")
	require.True(t, ok)
	require.Equal(t, uint64(42), tok)
	n.base = n.base.Add(-testTTL * 3 / 4) // three quarters of a TTL pass
	_, ok = n.Fence("cam")
	require.False(t, ok, "fence still open at the safe time")
	_, ok = n.Fence("other")
	require.False(t, ok)
}

// Three nodes on a 3-server cluster (R3 bucket) share 9 streams 3/3/3;
// one is killed (its loop stopped without handing over): its streams
// are granted to the other two within a TTL and a half, spread by
// capacity (neither takes all); the survivors' leases were never lost.
func TestFailoverSpreads(t *testing.T) {
	cl := testenv.StartNATSCluster(t, 3)
	var ids []string
	for i := range 9 {
		ids = append(ids, "s"+strconv.Itoa(i))
	}
	runners := map[string]*runner{}
	nodes := map[string]*Node{}
	stops := map[string]func(){}
	for _, id := range []string{"a", "b", "c"} {
		nc, err := nats.Connect(cl.URL())
		require.NoError(t, err)
		defer nc.Close()
		runners[id] = newRunner(ids...)
		var n *Node
		testenv.Eventually(t, func() bool {
			n, err = New(t.Context(), options(nc, id, runners[id], t))
			return err == nil
		}, 30*time.Second, 200*time.Millisecond, "joining: %v", err)
		nodes[id] = n
		stops[id] = run(t, n)
	}
	testenv.Eventually(t, func() bool {
		return runners["a"].count() == 3 && runners["b"].count() == 3 && runners["c"].count() == 3
	}, 20*time.Second, 50*time.Millisecond, "3 streams on each node")
	killed := time.Now()
	stops["c"]()
	testenv.Eventually(t, func() bool {
		return runners["a"].count()+runners["b"].count() == 9
	}, testTTL*3/2+2*time.Second, 50*time.Millisecond, "the killed node's streams running elsewhere")
	t.Logf("failover took %s; a runs %d, b runs %d", time.Since(killed), runners["a"].count(), runners["b"].count())
	require.GreaterOrEqual(t, runners["a"].count(), 4)
	require.GreaterOrEqual(t, runners["b"].count(), 4)
	for _, id := range []string{"a", "b"} {
		nodes[id].Drain(context.Background())
	}
	for _, id := range []string{"a", "b"} {
		stops[id]()
		nodes[id].Close(context.Background())
	}
}

// A stream removed from the registry (or disabled) has its lease
// released after two ticks of grace, so no node keeps one for nothing.
func TestUnwantedReleased(t *testing.T) {
	nc := server(t, true)
	r := newRunner("s0", "s1")
	n, err := New(t.Context(), options(nc, "n1", r, t))
	require.NoError(t, err)
	run(t, n)
	testenv.Eventually(t, func() bool { return r.count() == 2 }, 10*time.Second, 20*time.Millisecond, "both streams running")
	r.mu.Lock()
	r.wanted = r.wanted[:1]
	r.mu.Unlock()
	testenv.Eventually(t, func() bool {
		owners, err := n.Owners(t.Context())
		return err == nil && r.count() == 1 && owners["s1"] == "" && owners["s0"] == "n1"
	}, 10*time.Second, 20*time.Millisecond, "the lease of the stream no longer wanted released")
	n.Drain(context.Background())
}

// A watch stopped while nats.go's delivery goroutine is blocked on its
// full channel (a busy bucket, a loop behind) leaves no goroutine behind
// once stopWatch returns. With a plain Stop the goroutine stays blocked
// in its channel send for good: BenchmarkFleetControlPlane's goleak
// failure, on the watches of the nodes it had stopped.
func TestStopWatchLeavesNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// Registered first, so it runs last: after the server and the
	// connection are gone.
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	nc := server(t, true)
	kv, err := openBucket(t.Context(), Options{Conn: nc, Bucket: "watch", TTL: time.Minute})
	require.NoError(t, err)
	w, err := kv.WatchAll(t.Context())
	require.NoError(t, err)
	for i := range 400 { // more than the watch's channel holds (256)
		_, err := kv.Put(t.Context(), "k"+strconv.Itoa(i), []byte("x"))
		require.NoError(t, err)
	}
	testenv.Eventually(t, func() bool { return len(w.Updates()) == cap(w.Updates()) }, 10*time.Second, 10*time.Millisecond,
		"the watch's channel full")
	stopWatch(w, zaptest.NewLogger(t))
}

// A node whose wall clock jumps an hour forward or back keeps its leases
// safe, since it measures them on the monotonic clock only. The test
// jumps the node's wall clock (Options.wall, every wall-clock read of
// the package) on a running node with a real server:
//
//   - while it runs: it drops no lease it holds (its fence stays open
//     at every look and nothing is lost over two TTLs of renewals), and
//     the jump did reach its entry (Renewed is an hour off);
//   - while its loop is held, as a paused node's: its fence is shut
//     three quarters of a TTL after the hold began, the latest its last
//     renewal could have been sent, although the clock jumped meanwhile
//     (a deadline on a wall clock set back an hour would stay open that
//     hour). That bound is exact: the check runs after it, no margin.
func TestWallClockJump(t *testing.T) {
	const ttl = 3 * time.Second // a little over testTTL: renewals must not miss on a loaded machine
	for _, jump := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(jump.String(), func(t *testing.T) {
			nc := server(t, true)
			var offset atomic.Int64
			o := options(nc, "n1", newRunner("s0", "s1"), t)
			o.TTL, o.RebalanceInterval = ttl, ttl
			o.wall = func() time.Time { return time.Now().Add(time.Duration(offset.Load())).Round(0) }
			n, err := New(t.Context(), o)
			require.NoError(t, err)
			r := o.Runner.(*runner)
			run(t, n)
			testenv.Eventually(t, func() bool { return n.Holds("s0") && n.Holds("s1") && r.count() == 2 },
				10*time.Second, 20*time.Millisecond, "both leases held")
			renewals := func() float64 { return testutil.ToFloat64(n.m.ops.WithLabelValues("renew", "ok")) }

			// Running: the jump costs no lease.
			before := renewals()
			offset.Store(int64(jump))
			for start := time.Now(); time.Since(start) < 2*ttl; time.Sleep(20 * time.Millisecond) {
				require.True(t, n.Holds("s0") && n.Holds("s1"), "a lease dropped %s after the wall clock jumped %s", time.Since(start), jump)
			}
			require.Equal(t, 2, r.count())
			require.Zero(t, testutil.ToFloat64(n.m.lost), "leases lost")
			// A renewal every quarter TTL: 8 rounds of 3 writes (2
			// leases and the leader lease); at least 2 rounds, since
			// the machine may be slow.
			require.GreaterOrEqual(t, renewals()-before, 6.0, "renewals after the jump")
			nodes, err := n.Nodes(t.Context())
			require.NoError(t, err)
			require.Len(t, nodes, 1)
			require.WithinDuration(t, time.Now().Add(jump), nodes[0].Renewed, ttl, "the jumped wall clock in the node's entry")

			// Paused: the fence shuts on time whatever the wall clock did.
			release := make(chan struct{})
			var once sync.Once
			// Before run's cleanup (cleanups run last first): a failing
			// check must not leave the loop held.
			t.Cleanup(func() { once.Do(func() { close(release) }) })
			held := make(chan time.Time, 1)
			go n.do(context.Background(), func() { held <- time.Now(); <-release })
			heldAt := <-held
			offset.Add(int64(jump))
			time.Sleep(time.Until(heldAt.Add(ttl * 3 / 4)))
			require.False(t, n.Holds("s0") || n.Holds("s1"), "the fence open %s after the loop was held (wall clock jumped %s meanwhile)",
				time.Since(heldAt), jump)
			once.Do(func() { close(release) })
			n.Drain(context.Background())
		})
	}
}

// The placer's moves even the loads out and then stop: an odd number of
// equal streams (7 against 6) stays put although their measured weights
// wobble (the lightest stream of the 7 weighing less than the difference
// lowered the higher load a little, and the next interval moved one
// back), while a real imbalance still moves streams.
func TestRebalanceStops(t *testing.T) {
	nc := server(t, true)
	kv, err := openBucket(t.Context(), Options{Conn: nc, Bucket: "moves", TTL: time.Minute})
	require.NoError(t, err)
	for _, c := range []struct {
		name  string
		a, b  []float64 // the weights of the streams on nodes a and b
		moves int
	}{
		{"7 and 6, wobbling", []float64{1.02, 1.02, 1.02, 1.02, 1.02, 1.02, 0.97}, []float64{1, 1, 1, 1, 1, 1}, 0},
		{"13 and 0", []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, nil, 6},
		{"8 and 5", []float64{1, 1, 1, 1, 1, 1, 1, 1}, []float64{1, 1, 1, 1, 1}, 1},
		{"one heavy stream alone", []float64{10}, []float64{1}, 0},
		{"500 and 0, up to max_moves", slices.Repeat([]float64{1}, 500), nil, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &Node{o: Options{TTL: time.Minute, RebalanceInterval: time.Second, MaxMoves: 20}, kv: kv, log: zaptest.NewLogger(t),
				base: time.Now(), weights: map[string]float64{}, moved: map[string]int64{}, m: newMetrics(nil)}
			cands := map[string]*candidate{"a": {id: "a"}, "b": {id: "b"}}
			owners := map[string]string{}
			for node, ws := range map[string][]float64{"a": c.a, "b": c.b} {
				for i, w := range ws {
					id := node + strconv.Itoa(i)
					n.weights[id], owners[id] = w, node
					cands[node].load += w
					cands[node].count++
				}
			}
			n.rebalance(t.Context(), cands, owners, 1, n.mono())
			require.Equal(t, float64(c.moves), testutil.ToFloat64(n.m.moves))
		})
	}
}

// A lease the server expires early, as a server whose wall clock jumped
// forward does (it expires keys on its own wall clock; with embedded
// clustering a node's clock is a server's), is not granted to another
// node while its holder may still publish: the placer waits a TTL from
// the last write it saw, as for any lease not renewed, and the holder
// stops at its next renewal. The test expires the key by purging it
// (what the watchers see of an expiry is the same: a purge marker) and
// checks at every look that no two nodes hold the stream at once.
func TestServerExpiryEarly(t *testing.T) {
	nc := server(t, true)
	oa, ob := options(nc, "a", newRunner("s0", "s1", "s2"), t), options(nc, "b", newRunner("s0", "s1", "s2"), t)
	oa.MaxMoves, ob.MaxMoves = 0, 0 // a keeps all three; b is the node a free stream would go to
	a, err := New(t.Context(), oa)
	require.NoError(t, err)
	run(t, a)
	testenv.Eventually(t, func() bool { return a.Holds("s0") && a.Holds("s1") && a.Holds("s2") }, 10*time.Second, 20*time.Millisecond, "a holds the 3 streams")
	b, err := New(t.Context(), ob)
	require.NoError(t, err)
	run(t, b)
	testenv.Eventually(t, func() bool {
		seen := 0
		a.do(t.Context(), func() { seen = len(a.nodes()) })
		return seen == 2
	}, 10*time.Second, 20*time.Millisecond, "the placer (a) sees b")

	require.NoError(t, a.Bucket().Purge(t.Context(), leasePrefix+"s0"))
	purged := time.Now()
	var moved time.Duration
	for time.Since(purged) < 3*testTTL {
		ha, hb := a.Holds("s0"), b.Holds("s0")
		require.False(t, ha && hb, "a and b both hold s0 %s after the server expired it", time.Since(purged))
		if hb && moved == 0 {
			moved = time.Since(purged)
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.NotZero(t, moved, "s0 runs on b within 3 TTLs")
	t.Logf("s0 taken by b %s after its early expiry", moved)
	b.Drain(context.Background())
	a.Drain(context.Background())
}
