package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/app"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/testenv"
)

// readyz returns GET /readyz's status code and body, or 0 and the error.
func readyz(base string) (int, string) {
	resp, err := http.Get(base + api.ReadyPath)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Three `vigil run`s whose embedded NATS servers form one cluster
// (nats.cluster, the registry with 3 replicas) all become ready, and
// each /readyz says "not ready" until its registry has been read: the
// ready callback runs before the registry watch starts.
func TestClusterNodesReady(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("s3cret"), 0o600))
	var routes []string
	for range 3 { // free ports for the route listeners, which every node must know
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		routes = append(routes, "nats://"+ln.Addr().String())
		require.NoError(t, ln.Close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type node struct {
		ep      chan app.Endpoints
		before  chan string
		done    chan error
		apiBase string
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		c, err := config.Parse([]byte(fmt.Sprintf(`
data_dir: %s
api: {listen: "127.0.0.1:0", token_file: %s}
log: {level: warn}
metrics: {listen: "off"}
node: {id: node%d}
nats:
  listen: 127.0.0.1:0
  token_file: %s
  replicas: 3
  cluster: {listen: %s, server_name: node%d, routes: [%s]}
`, filepath.Join(dir, fmt.Sprint(i)), tokenFile, i, tokenFile, strings.TrimPrefix(routes[i], "nats://"), i,
			strings.Join(routes, ", "))), "node.yaml")
		require.NoError(t, err)
		n := &node{ep: make(chan app.Endpoints, 1), before: make(chan string, 1), done: make(chan error, 1)}
		nodes[i] = n
		go func() {
			n.done <- app.Run(ctx, c, zaptest.NewLogger(t), nil, func(ep app.Endpoints) {
				code, body := readyz(ep.API)
				n.before <- fmt.Sprint(code, " ", body)
				n.ep <- ep
			})
		}()
	}
	for i, n := range nodes {
		select {
		case ep := <-n.ep:
			n.apiBase = ep.API
		case err := <-n.done:
			t.Fatalf("node %d stopped before it was ready: %v", i, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("node %d not up within 60 s", i)
		}
		require.Equal(t, "503 not ready: stream registry not read yet\n", <-n.before, "node %d", i)
	}
	for i, n := range nodes {
		testenv.Eventually(t, func() bool { code, _ := readyz(n.apiBase); return code == http.StatusOK },
			10*time.Second, 20*time.Millisecond, "node %d ready", i)
	}
	cancel()
	for _, n := range nodes {
		require.NoError(t, <-n.done)
	}
}
