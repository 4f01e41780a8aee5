package config

import (
	"net"
	"net/url"
	"regexp"
	"time"
)

// DefaultSyncInterval is nats.sync_interval's default: nats-server's own
// JetStream default (defaultSyncInterval in server/opts.go, 2 minutes).
const DefaultSyncInterval = "2m"

var clusterName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// SyncAlways reports whether nats.sync_interval is always (fsync every
// write); otherwise SyncEvery is the interval.
func (n *NATS) SyncAlways() bool { return n.SyncInterval == "always" }

// SyncEvery returns nats.sync_interval as a duration (0 for always or a
// value Validate refuses).
func (n *NATS) SyncEvery() time.Duration {
	d, err := time.ParseDuration(n.SyncInterval)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// Clustered reports whether the embedded server joins a cluster
// (nats.cluster.listen set, no nats.url).
func (n *NATS) Clustered() bool { return n.URL == "" && n.Cluster.Listen != "off" }

// validateCluster checks nats.cluster and nats.sync_interval, which
// configure the embedded server only.
func (c *Config) validateCluster(p *problems) {
	n, cl := &c.NATS, &c.NATS.Cluster
	if !n.SyncAlways() && n.SyncEvery() == 0 {
		p.add("nats.sync_interval", "%q: want a duration (e.g. 2m, 10s) or always", n.SyncInterval)
	} else if n.URL != "" && n.SyncInterval != DefaultSyncInterval {
		p.add("nats.sync_interval", "%q: it sets the embedded server's fsync interval, and nats.url selects an external "+
			"server: set sync_interval in that server's jetstream { } block", n.SyncInterval)
	}
	if !clusterName.MatchString(cl.Name) {
		p.add("nats.cluster.name", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", cl.Name)
	}
	if cl.ServerName != "" && !clusterName.MatchString(cl.ServerName) {
		p.add("nats.cluster.server_name", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", cl.ServerName)
	}
	if cl.Listen == "off" {
		switch {
		case len(cl.Routes) > 0:
			p.add("nats.cluster.routes", "set, but nats.cluster.listen is off: a node that joins a cluster must accept "+
				"the others' routes too; set nats.cluster.listen (e.g. 0.0.0.0:6222)")
		case n.URL == "" && n.Replicas > 1:
			p.add("nats.replicas", "%d: the embedded server is a single server, which holds one replica; set "+
				"nats.cluster.listen and nats.cluster.routes to cluster it with other nodes, or nats.url to use a NATS "+
				"cluster, or nats.replicas: 1", n.Replicas)
		}
		return
	}
	if n.URL != "" {
		p.add("nats.cluster.listen", "%q: clustering is the embedded server's, and nats.url selects an external one: "+
			"cluster that server in its own configuration, or set nats.cluster.listen: off", cl.Listen)
		return
	}
	if _, _, err := net.SplitHostPort(cl.Listen); err != nil {
		p.add("nats.cluster.listen", "%q: want host:port or off", cl.Listen)
	}
	if cl.Advertise != "" {
		if _, _, err := net.SplitHostPort(cl.Advertise); err != nil {
			p.add("nats.cluster.advertise", "%q: want host:port", cl.Advertise)
		}
	}
	for i, r := range cl.Routes {
		u, err := url.Parse(r)
		switch {
		case err != nil || (u.Scheme != "nats" && u.Scheme != "nats-route") || u.Host == "" || u.Port() == "":
			p.add("nats.cluster.routes", "[%d] %q: want nats://host:port", i, r)
		case u.User != nil:
			p.add("nats.cluster.routes", "[%d]: credentials in a route URL; set nats.token_file instead (routes "+
				"authenticate with it)", i)
		}
	}
	// A node's own route may be in the list, so the list's length is
	// the number of servers or one less.
	if max := len(cl.Routes) + 1; n.Replicas > max {
		p.add("nats.replicas", "%d: more than the embedded cluster's servers (at most %d: this node and "+
			"nats.cluster.routes)", n.Replicas, max)
	}
}
