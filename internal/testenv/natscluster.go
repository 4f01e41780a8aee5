package testenv

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is a cluster of in-process NATS servers with JetStream on
// loopback ports, for tests where clustering matters (replicated buckets,
// a server that stops and comes back). Each server keeps its ports and its
// store directory across Stop and Start, as a restarted server would.
type NATSCluster struct {
	t       testing.TB
	opts    []*server.Options
	Servers []*server.Server
}

// StartNATSCluster starts n servers (JetStream, file storage under the
// test's temporary directory) routed to each other, waits until JetStream
// has a meta leader, and shuts them down when the test ends.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{t: t}
	clientPorts, routePorts := freePorts(t, n), freePorts(t, n)
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
	}
	dir := t.TempDir()
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: clientPorts[i],
			NoLog: true, NoSigs: true, JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("s%d", i+1)),
			Cluster: server.ClusterOpts{Name: "vigil-test", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
		}
		c.opts = append(c.opts, o)
		c.Servers = append(c.Servers, nil)
	}
	for i := range n {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.Servers {
			c.Stop(i)
		}
	})
	Eventually(t, func() bool {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "no JetStream meta leader in the %d-server cluster", n)
	return c
}

// URL returns the client URLs of every server, comma-separated (nats.go
// takes the list and fails over between them).
func (c *NATSCluster) URL() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// Stop shuts server i down and waits for it (no-op if it is stopped).
func (c *NATSCluster) Stop(i int) {
	if s := c.Servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Servers[i] = nil
	}
}

// Start starts server i again with its ports and store, and waits until
// it accepts clients; the test fails if it does not within 10 s.
func (c *NATSCluster) Start(i int) {
	c.t.Helper()
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatalf("NATS server %d: %v", i+1, err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		c.t.Fatalf("NATS server %d did not accept clients within 10 s", i+1)
	}
	c.Servers[i] = s
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 now (a route
// needs its peers' ports before they listen, so port 0 does not do).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}
