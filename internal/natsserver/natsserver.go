// Package natsserver starts the embedded NATS server (nats-server/v2) that
// vigil uses when no external nats.url is configured, with its MQTT
// listener when nats.mqtt.listen asks for one.
package natsserver

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/vigil-video/vigil/internal/config"
)

// Name is the embedded server's server_name. nats-server's MQTT support
// keeps its sessions and retained messages in JetStream, which wants a
// stable server name; it must not change between runs that share a store.
const Name = "vigil-embedded"

// Options configure the embedded server; OptionsFrom makes them from
// vigil's config the way vigil run does.
type Options struct {
	// Listen is the NATS client listener's host:port (port 0: a free port).
	Listen string
	// StoreDir, when not empty, enables JetStream with file storage there
	// (the stream registry's key-value bucket and MQTT's state live in it).
	StoreDir string
	// Token, when not empty, is required from every client: NATS clients
	// present it as their token (nats.Token), MQTT clients as their
	// password (with any non-empty user name: MQTT 3.1.1 sends a password
	// only with a user name, and nats-server checks the password alone
	// against the token).
	Token string
	// MQTTListen is the MQTT 3.1.1 listener's host:port (port 0: a free
	// port); "" or "off": none. MQTT needs JetStream (StoreDir).
	MQTTListen string
	// Cluster, when its Listen is set, makes the server one of a NATS
	// cluster (JetStream clustered over RAFT).
	Cluster Cluster
	// SyncAlways makes JetStream fsync every write before acknowledging
	// it; otherwise SyncInterval (0: nats-server's default, 2 minutes) is
	// how often it flushes its files.
	SyncAlways   bool
	SyncInterval time.Duration
}

// Cluster configures the routes of a clustered embedded server.
type Cluster struct {
	// Listen is the route listener's host:port (port 0: a free port);
	// "" or "off": not clustered.
	Listen string
	// Routes are the other servers' route URLs (nats://host:port); the
	// server's own may be among them (nats-server skips it).
	Routes []string
	// Name is the cluster's name, the same on every server.
	Name string
	// ServerName is this server's name, unique in the cluster; "": the
	// host name.
	ServerName string
	// Advertise is the host:port other servers are told to reach this
	// one at; "": nats-server's choice.
	Advertise string
}

// clustered reports whether c asks for a route listener.
func (c Cluster) clustered() bool { return c.Listen != "" && c.Listen != "off" }

// RouteUser is the user name routes authenticate with when the server
// has a token (the token is the password).
const RouteUser = "vigil"

// OptionsFrom returns the options vigil run starts its embedded server with:
// nats.listen, JetStream in <data_dir>/jetstream, the token read from
// nats.token_file (passed in, already read), and nats.mqtt.listen.
func OptionsFrom(c *config.Config, token string) Options {
	cl := c.NATS.Cluster
	return Options{Listen: c.NATS.Listen, StoreDir: filepath.Join(c.DataDir, "jetstream"), Token: token,
		MQTTListen: c.NATS.MQTT.Listen, SyncAlways: c.NATS.SyncAlways(), SyncInterval: c.NATS.SyncEvery(),
		Cluster: Cluster{Listen: cl.Listen, Routes: cl.Routes, Name: cl.Name, ServerName: cl.ServerName, Advertise: cl.Advertise}}
}

// Start runs an in-process NATS server listening on listen ("host:port";
// port 0 picks a free port) and waits up to 10 s for it to accept clients.
// When storeDir is not empty, JetStream is enabled with file storage there
// (the stream registry's key-value bucket lives in it). Shut it down with
// Shutdown and WaitForShutdown. When token is not empty every client must
// present it (nats.Token); otherwise the server accepts anyone who can
// reach listen, which is why the default address is loopback. Errors name
// the address or directory. It is StartOptions without MQTT.
func Start(listen, storeDir, token string) (*server.Server, error) {
	return StartOptions(Options{Listen: listen, StoreDir: storeDir, Token: token})
}

// StartOptions runs an in-process NATS server as o says and waits up to
// 10 s for every listener it asked for (NATS, MQTT) to accept clients.
// Shut it down with Shutdown and WaitForShutdown. Errors name the address
// or directory: a listen address that is not host:port, a port in use,
// MQTT without a StoreDir.
func StartOptions(o Options) (*server.Server, error) {
	host, port, err := splitListen("embedded NATS", o.Listen)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: Name, Host: host, Port: port,
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20, Authorization: o.Token,
	}
	if o.MQTTListen != "" && o.MQTTListen != "off" {
		if o.StoreDir == "" {
			return nil, fmt.Errorf("embedded NATS MQTT listener %s: MQTT needs JetStream, and no store directory was given", o.MQTTListen)
		}
		mhost, mport, err := splitListen("embedded NATS MQTT", o.MQTTListen)
		if err != nil {
			return nil, err
		}
		// The server's token (Authorization) applies to MQTT clients too:
		// nats-server takes an MQTT CONNECT's password as the token.
		opts.MQTT = server.MQTTOpts{Host: mhost, Port: mport}
	}
	if o.StoreDir != "" {
		if err := os.MkdirAll(o.StoreDir, 0o750); err != nil {
			return nil, fmt.Errorf("embedded NATS store directory: %w", err)
		}
		opts.JetStream, opts.StoreDir = true, o.StoreDir
		opts.SyncAlways, opts.SyncInterval = o.SyncAlways, o.SyncInterval
	}
	if o.Cluster.clustered() {
		if err := clusterOptions(opts, o); err != nil {
			return nil, err
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		if opts.MQTT.Port != 0 {
			return nil, fmt.Errorf("embedded NATS did not start listening on %s and MQTT on %s within 10 s (port in use?)", o.Listen, o.MQTTListen)
		}
		return nil, fmt.Errorf("embedded NATS did not start listening on %s within 10 s (port in use?)", o.Listen)
	}
	return s, nil
}

// clusterOptions fills opts' server name, cluster and routes from
// o.Cluster. With a token, routes authenticate as RouteUser with the
// token as password, in both directions.
func clusterOptions(opts *server.Options, o Options) error {
	cl := o.Cluster
	host, port, err := splitListen("embedded NATS cluster", cl.Listen)
	if err != nil {
		return err
	}
	opts.ServerName = cl.ServerName
	if opts.ServerName == "" {
		if opts.ServerName, err = os.Hostname(); err != nil {
			return fmt.Errorf("embedded NATS cluster: no nats.cluster.server_name, and the host name: %w", err)
		}
	}
	opts.Cluster = server.ClusterOpts{Name: cl.Name, Host: host, Port: port, Advertise: cl.Advertise}
	if o.Token != "" {
		opts.Cluster.Username, opts.Cluster.Password = RouteUser, o.Token
	}
	for _, r := range cl.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return fmt.Errorf("embedded NATS cluster route %q: want nats://host:port", r)
		}
		if o.Token != "" {
			u.User = url.UserPassword(RouteUser, o.Token)
		}
		opts.Routes = append(opts.Routes, u)
	}
	return nil
}

// listenKey is the config key of each listener splitListen checks.
var listenKey = map[string]string{"embedded NATS": "nats.listen", "embedded NATS MQTT": "nats.mqtt.listen",
	"embedded NATS cluster": "nats.cluster.listen"}

// splitListen parses a host:port for the listener named what; port 0
// becomes nats-server's RANDOM_PORT (for nats-server 0 means "default" or
// "off"), and a port in use fails at once rather than after the 10 s wait.
func splitListen(what, listen string) (string, int, error) {
	host, portS, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("%s listen address %q: %w", what, listen, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return "", 0, fmt.Errorf("%s listen address %q: bad port: %w", what, listen, err)
	}
	if port == 0 {
		return host, server.RANDOM_PORT, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", 0, fmt.Errorf("%s cannot listen on %s: %w (is another vigil or NATS server running? set %s)", what, listen, err, listenKey[what])
	}
	ln.Close()
	return host, port, nil
}

// MQTTAddr returns the host:port the MQTT listener of s is bound to (the
// port chosen when 0 was asked for), or "" when s has no MQTT listener.
func MQTTAddr(s *server.Server) string {
	v, err := s.Varz(nil)
	if err != nil || v.MQTT.Port <= 0 {
		return ""
	}
	return net.JoinHostPort(v.MQTT.Host, strconv.Itoa(v.MQTT.Port))
}

// MQTTWarning returns the WARN vigil run logs at every start for an MQTT
// listener that serves the network without a token (nats.mqtt.insecure:
// true; config.Validate refuses it otherwise), or "" when there is
// nothing to warn about: no MQTT, a loopback address, or a token.
func MQTTWarning(o Options) string {
	if o.MQTTListen == "" || o.MQTTListen == "off" || o.Token != "" || config.Loopback(o.MQTTListen) {
		return ""
	}
	return "embedded NATS MQTT listener open to the network without a token (nats.mqtt.insecure: true): any MQTT " +
		"client that can reach " + o.MQTTListen + " can read every detection and event, publish false ones, and " +
		"read or rewrite the stream registry, camera credentials included; set nats.token_file"
}

// WaitJetStream waits until s's JetStream can serve requests: at once for
// a single server; for a clustered one, until the cluster's meta group has
// a leader, which needs a majority of the cluster's servers to be up and
// routed. It polls every 100 ms and calls waiting (when not nil) every
// 10 s with how long it has waited, so that vigil run can say what it is
// waiting for; it returns ctx's error if ctx ends first.
func WaitJetStream(ctx context.Context, s *server.Server, waiting func(time.Duration)) error {
	start := time.Now()
	poll, say := time.NewTicker(100*time.Millisecond), time.NewTicker(10*time.Second)
	defer poll.Stop()
	defer say.Stop()
	for {
		if h := s.Healthz(&server.HealthzOptions{JSMetaOnly: true}); h.Error == "" && h.StatusCode < 300 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedded NATS: JetStream not ready after %s (is a majority of the cluster's servers up and "+
				"reachable at nats.cluster.routes?): %w", time.Since(start).Round(time.Second), ctx.Err())
		case <-poll.C:
		case <-say.C:
			if waiting != nil {
				waiting(time.Since(start))
			}
		}
	}
}
