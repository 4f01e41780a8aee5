package natsserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/internal/testenv"
)

// freePorts returns n loopback ports that were free a moment ago: the
// route listeners must be known before the servers start, since each
// server's routes name the others'.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		defer ln.Close()
	}
	return ports
}

// startCluster starts n embedded servers the way n vigil nodes would:
// each one's config file (data_dir, nats.cluster with every node's route,
// its own included, nats.token_file) through config.Parse, OptionsFrom and
// StartOptions, then waits for JetStream's meta group on each.
func startCluster(t testing.TB, n int, extra string) []*server.Server {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("cluster-secret\n"), 0o600))
	ports := freePorts(t, n)
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		yaml := fmt.Sprintf("nats:\n  listen: 127.0.0.1:0\n  token_file: %s\n  replicas: 3\n%s  cluster:\n"+
			"    listen: 127.0.0.1:%d\n    name: test\n    server_name: node%d\n    routes: [%s]\n",
			tokenFile, extra, ports[i], i, strings.Join(routes, ", "))
		s, _ := vigilServer(t, filepath.Join(dir, fmt.Sprint(i)), yaml)
		servers[i] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range servers {
		require.NoError(t, natsserver.WaitJetStream(ctx, s, nil))
	}
	return servers
}

func connectTo(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Token("cluster-secret"), nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// TestEmbeddedClusterR3 starts three embedded servers through vigil's
// config path, opens the registry bucket with three replicas on them
// (registry.Open, as vigil run does), and checks that it keeps every
// entry and takes writes after the server leading its stream stops.
func TestEmbeddedClusterR3(t *testing.T) {
	servers := startCluster(t, 3, "  sync_interval: always\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	reg, err := registry.Open(ctx, connectTo(t, servers[0]), "vigil_streams", 3)
	require.NoError(t, err)
	for i := range 5 {
		_, err := reg.Create(ctx, registry.Spec{ID: fmt.Sprintf("cam%d", i), URL: "rtsp://127.0.0.1/cam"})
		require.NoError(t, err)
	}
	js, err := jetstream.New(connectTo(t, servers[1]))
	require.NoError(t, err)
	info, err := js.Stream(ctx, "KV_vigil_streams")
	require.NoError(t, err)
	si, err := info.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, si.Config.Replicas)
	require.NotNil(t, si.Cluster)
	require.Len(t, si.Cluster.Replicas, 2, "a leader and two followers")

	// Stop the stream's leader: the two others elect a new one, and a
	// client of a surviving server reads every entry and writes.
	leader := -1
	for i, s := range servers {
		if s.Name() == si.Cluster.Leader {
			leader = i
		}
	}
	require.GreaterOrEqual(t, leader, 0, "leader %q is one of the servers", si.Cluster.Leader)
	servers[leader].Shutdown()
	servers[leader].WaitForShutdown()
	survivor := connectTo(t, servers[(leader+1)%3])
	// A new stream leader (and meta leader, if that was the stopped
	// server too) needs an election: nats-server's RAFT election timeouts
	// are seconds, so 20 s is a wide margin. A JetStream request sent
	// during the election goes unanswered, so each attempt has its own
	// short deadline.
	var (
		reg2 *registry.Registry
		list []registry.Entry
	)
	attempt := func(f func(context.Context) error) func() bool {
		return func() bool {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err = f(actx)
			return err == nil
		}
	}
	testenv.Eventually(t, attempt(func(ctx context.Context) (err error) {
		if reg2 == nil {
			if reg2, err = registry.Lookup(ctx, survivor, "vigil_streams"); err != nil {
				return err
			}
		}
		if list, err = reg2.List(ctx, nil); err == nil && len(list) != 5 {
			err = fmt.Errorf("%d entries", len(list))
		}
		return err
	}), 20*time.Second, 100*time.Millisecond, "the registry lists its 5 entries after the leader stopped (last: %v)", lastErr{&err})
	testenv.Eventually(t, attempt(func(ctx context.Context) error {
		_, err := reg2.Create(ctx, registry.Spec{ID: "after", URL: "rtsp://127.0.0.1/after"})
		if errors.Is(err, registry.ErrExists) { // an earlier attempt's write landed after its deadline
			err = nil
		}
		return err
	}), 20*time.Second, 100*time.Millisecond, "a write succeeds with two of three servers (last: %v)", lastErr{&err})
	e, err := reg2.Get(ctx, "cam3")
	require.NoError(t, err)
	require.Equal(t, "rtsp://127.0.0.1/cam", e.Spec.URL)
}

// TestEmbeddedClusterRefusesWrongToken checks that routes authenticate:
// a server with another token does not join (the others see no route
// from it), so it cannot read the cluster's registry.
func TestEmbeddedClusterRefusesWrongToken(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(good, []byte("right"), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("wrong"), 0o600))
	ports := freePorts(t, 2)
	routes := fmt.Sprintf("[nats://127.0.0.1:%d, nats://127.0.0.1:%d]", ports[0], ports[1])
	a, _ := vigilServer(t, filepath.Join(dir, "a"), fmt.Sprintf("nats:\n  listen: 127.0.0.1:0\n  token_file: %s\n  cluster:\n"+
		"    listen: 127.0.0.1:%d\n    server_name: a\n    routes: %s\n", good, ports[0], routes))
	b, _ := vigilServer(t, filepath.Join(dir, "b"), fmt.Sprintf("nats:\n  listen: 127.0.0.1:0\n  token_file: %s\n  cluster:\n"+
		"    listen: 127.0.0.1:%d\n    server_name: b\n    routes: %s\n", bad, ports[1], routes))
	// What a route carries must not cross: a subscriber on each server
	// sees nothing of what is published on the other. (Routez can list a
	// refused route for a moment: the dialling side registers it on the
	// other's INFO, before the other refuses its CONNECT.)
	ca, err := nats.Connect(a.ClientURL(), nats.Token("right"))
	require.NoError(t, err)
	defer ca.Close()
	cb, err := nats.Connect(b.ClientURL(), nats.Token("wrong"))
	require.NoError(t, err)
	defer cb.Close()
	var crossed atomic.Int32
	for _, c := range []*nats.Conn{ca, cb} {
		_, err := c.Subscribe("vigil.probe", func(m *nats.Msg) {
			if string(m.Data) != c.Opts.Token {
				crossed.Add(1)
			}
		})
		require.NoError(t, err)
		require.NoError(t, c.Flush())
	}
	// nats-server retries a route every second; three rounds of refusals
	// is long enough (a route between two servers on loopback is up, with
	// its interest, in milliseconds when allowed).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		require.NoError(t, ca.Publish("vigil.probe", []byte("right")))
		require.NoError(t, cb.Publish("vigil.probe", []byte("wrong")))
	}
	require.NoError(t, ca.Flush())
	require.NoError(t, cb.Flush())
	require.Zero(t, crossed.Load(), "messages crossed between servers with different tokens")
	require.Zero(t, len(routesTo(t, a, b))+len(routesTo(t, b, a)), "a route between servers with different tokens stayed")
}

// routesTo returns s's routes to other that have exchanged messages (a
// refused route never does).
func routesTo(t *testing.T, s, other *server.Server) []*server.RouteInfo {
	t.Helper()
	rz, err := s.Routez(nil)
	require.NoError(t, err)
	var out []*server.RouteInfo
	for _, r := range rz.Routes {
		if r.RemoteID == other.ID() && r.InMsgs+r.OutMsgs > 0 {
			out = append(out, r)
		}
	}
	return out
}

// TestClusterConfigErrors checks that every misuse of nats.cluster and
// nats.sync_interval is reported with its key and what to do.
func TestClusterConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"routes without listen", "nats:\n  cluster:\n    routes: [nats://10.0.0.2:6222]\n",
			"nats.cluster.routes: set, but nats.cluster.listen is off"},
		{"replicas on one embedded server", "nats:\n  replicas: 3\n", "nats.replicas: 3: the embedded server is a single server"},
		{"replicas above the cluster", "nats:\n  replicas: 3\n  cluster:\n    listen: 127.0.0.1:6222\n    routes: [nats://127.0.0.1:6223]\n",
			"nats.replicas: 3: more than the embedded cluster's servers (at most 2"},
		{"cluster with nats.url", "nats:\n  url: nats://10.0.0.9:4222\n  cluster:\n    listen: 127.0.0.1:6222\n",
			"nats.cluster.listen: \"127.0.0.1:6222\": clustering is the embedded server's"},
		{"bad route", "nats:\n  cluster:\n    listen: 127.0.0.1:6222\n    routes: [\"10.0.0.2:6222\", \"http://x:1\"]\n",
			`nats.cluster.routes: [0] "10.0.0.2:6222": want nats://host:port; nats.cluster.routes: [1] "http://x:1"`},
		{"credentials in a route", "nats:\n  cluster:\n    listen: 127.0.0.1:6222\n    routes: [\"nats://u:secret@10.0.0.2:6222\"]\n",
			"nats.cluster.routes: [0]: credentials in a route URL; set nats.token_file"},
		{"route listener open without token", "nats:\n  cluster:\n    listen: 0.0.0.0:6222\n",
			`nats.cluster.listen: "0.0.0.0:6222" is not a loopback address and nats.token_file is not set`},
		{"bad listen", "nats:\n  cluster:\n    listen: 6222\n", `nats.cluster.listen: "6222": want host:port or off`},
		{"bad names", "nats:\n  cluster:\n    listen: 127.0.0.1:6222\n    name: a.b\n    server_name: \"x y\"\n",
			`nats.cluster.name: "a.b"`},
		{"bad sync", "nats:\n  sync_interval: sometimes\n", `nats.sync_interval: "sometimes": want a duration (e.g. 2m, 10s) or always`},
		{"sync with nats.url", "nats:\n  url: nats://10.0.0.9:4222\n  sync_interval: always\n",
			"nats.sync_interval: \"always\": it sets the embedded server's fsync interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte("data_dir: "+t.TempDir()+"\n"+tc.yaml), "vigil.yaml")
			require.ErrorContains(t, err, tc.want)
		})
	}
	// The whole cluster section, valid, with the token: no error.
	t.Setenv("VIGIL_TEST_NODE", "node-a")
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tok, []byte("t"), 0o600))
	c, err := config.Parse([]byte("data_dir: "+dir+"\nnats:\n  listen: 0.0.0.0:4222\n  token_file: "+tok+"\n  replicas: 3\n"+
		"  sync_interval: 1s\n  cluster:\n    listen: 0.0.0.0:6222\n    name: site-a\n    server_name: ${VIGIL_TEST_NODE}\n"+
		"    routes: [nats://vigil-0:6222, nats://vigil-1:6222, nats://vigil-2:6222]\n"), "vigil.yaml")
	require.NoError(t, err)
	require.True(t, c.NATS.Clustered())
	require.Equal(t, "node-a", c.NATS.Cluster.ServerName, "server_name expands environment variables (a pod's name)")
	require.Equal(t, time.Second, c.NATS.SyncEvery())
}

// lastErr prints the error *p holds when the message is formatted (when
// testenv.Eventually gives up), not when the call is made.
type lastErr struct{ p *error }

func (l lastErr) String() string { return fmt.Sprint(*l.p) }

// BenchmarkClusterKVPut measures what nats.sync_interval costs: one
// writer's sequential puts (256-byte values, the size of a lease or a
// small stream spec) into an R3 bucket on three embedded servers on this
// machine's disk, acknowledged after a majority stored each; with always,
// after each server's fsync. Not a test (deploy/README.md, "Durability").
func BenchmarkClusterKVPut(b *testing.B) {
	for _, sync := range []string{"2m", "always"} {
		b.Run("sync_interval="+sync, func(b *testing.B) {
			servers := startCluster(b, 3, "  sync_interval: "+sync+"\n")
			ctx := context.Background()
			js, err := jetstream.New(connectTo(b, servers[0]))
			require.NoError(b, err)
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench", Replicas: 3, Storage: jetstream.FileStorage})
			require.NoError(b, err)
			val := make([]byte, 256)
			b.ResetTimer()
			for i := range b.N {
				if _, err := kv.Put(ctx, fmt.Sprintf("k%d", i%1000), val); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
		})
	}
}
