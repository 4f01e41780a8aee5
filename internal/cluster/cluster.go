// Package cluster splits the registry's streams among the vigil nodes that
// share a NATS (JetStream) cluster: every enabled stream is run by the one
// node holding its lease, a key in a JetStream key-value bucket
// (docs/architecture.md, "The fleet").
//
// The bucket (cluster.bucket, default vigil_leases) holds, all with the
// bucket's TTL (cluster.lease_ttl) and a limit marker when a key ages out,
// so that watchers see expiries:
//
//   - lease.<stream>: {"node", "instance"}; its owner renews it with
//     compare-and-set on the revision. A lease whose instance is empty is
//     a grant (written by the placer, or by the old owner handing the
//     stream over): the named node takes it with one more compare-and-set.
//     The revision of the write that made a node the owner is the fencing
//     token it stamps on every message (sinks.HeaderLease).
//   - node.<id>: the node's NodeInfo (capacity, load, streams, version),
//     renewed as a heartbeat; created if absent, so that a second node
//     with the same node.id refuses to start.
//   - leader: the lease of the placer, the one node that grants unowned
//     streams and asks for moves.
//   - move.<stream>: {"to"}: the placer asks the owner to hand the stream
//     over (rebalancing after a node joined).
//   - drain.<node>: `vigil nodes drain` asks the node to hand all of its
//     streams over and take no more.
//
// Safety does not rest on the bucket's timers alone: a node measures each
// lease from the moment it sent its last successful write, on its own
// monotonic clock, and considers it lost after three quarters of the TTL
// (the bucket cannot expire it before a full TTL from a write it received
// after that moment). The fence (Fence) refuses every message of a stream
// whose lease is past that point, so a node that was paused or cut off
// never publishes after another node could have taken over, even before
// its control loop has noticed.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/pipeline"
)

// Key prefixes and names of the lease bucket (see the package comment).
const (
	leasePrefix = "lease."
	nodePrefix  = "node."
	movePrefix  = "move."
	drainPrefix = "drain."
	leaderKey   = "leader"
)

// DefaultCapacity is a node's capacity when its config gives none, in
// pixels per second: 8 streams of 1920x1080 at 30 fps.
const DefaultCapacity = 8 * 1920 * 1080 * 30

// Errors of New and Run.
var (
	// ErrDuplicateNode: another running vigil uses this node.id.
	ErrDuplicateNode = errors.New("node.id is in use by another running vigil")
	// ErrBucket: the lease bucket could not be created or opened.
	ErrBucket = errors.New("lease bucket")
)

// Capacity is what a node can run, as it publishes it.
type Capacity struct {
	// DecodePixelsPerSecond and EnginePixelsPerSecond: width x height x
	// fps summed over streams (0: unknown).
	DecodePixelsPerSecond float64 `json:"decode_pixels_per_second,omitempty"`
	EnginePixelsPerSecond float64 `json:"engine_pixels_per_second,omitempty"`
	// GPUs are the devices streams are placed on (0: CPU only).
	GPUs int `json:"gpus"`
	// MaxStreams caps the node's streams (0: no limit).
	MaxStreams int `json:"max_streams,omitempty"`
}

// Effective is the capacity placement divides load by, in pixels per
// second: the smaller of the known capacities, DefaultCapacity when
// neither is known.
func (c Capacity) Effective() float64 {
	var vs []float64
	for _, v := range []float64{c.DecodePixelsPerSecond, c.EnginePixelsPerSecond} {
		if v > 0 {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return DefaultCapacity
	}
	return slices.Min(vs)
}

// StreamInfo is one running stream as its node reports it.
type StreamInfo struct {
	// Weight is the stream's load for placement in pixels per second:
	// width x height x the larger of its declared and decoded frame rates,
	// held with hysteresis by its node (vigil run: the first reading, once
	// the stream has run 5 s, sets it; a later one replaces it only when two
	// in a row, 5 s apart, are more than 25 % off; it is kept while the
	// stream restarts on the node); 0 before the first reading.
	Weight float64 `json:"weight"`
	// State is the stream's pipeline.State; FPSIn and FPSOut its decoded
	// and published frame rates over the last 5 s.
	State  string  `json:"state"`
	FPSIn  float64 `json:"fps_in"`
	FPSOut float64 `json:"fps_out"`
	// Lease is the fencing token the stream's messages carry.
	Lease uint64 `json:"lease"`
}

// NodeInfo is a node's entry in the bucket (node.<id>), renewed every
// quarter of the lease TTL.
type NodeInfo struct {
	ID       string `json:"id"`
	Instance string `json:"instance"`
	Version  string `json:"version"`
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	// API is the node's REST API base URL ("" when off).
	API      string    `json:"api,omitempty"`
	Started  time.Time `json:"started"`
	Capacity Capacity  `json:"capacity"`
	// Load is the sum of its streams' weights (pixels per second).
	Load    float64               `json:"load"`
	Streams map[string]StreamInfo `json:"streams"`
	// Draining: handing its streams over, taking no new ones.
	Draining bool `json:"draining,omitempty"`
	Leader   bool `json:"leader,omitempty"`
	// Renewed is the wall time of this write (for `vigil nodes ls`: lease
	// age); decisions never read wall time.
	Renewed time.Time `json:"renewed"`
}

// Want is a stream the registry wants running (enabled), as placement
// sees it.
type Want struct {
	ID string
	// Priority: high streams are placed first.
	Priority string
}

// Runner is what the node drives: the service that runs streams.
type Runner interface {
	// Start runs stream id: this node now holds its lease. It may be
	// called for a stream the runner does not know yet (not yet seen in
	// the registry); the runner then starts it when it sees it.
	Start(id string)
	// Stop stops stream id and returns once it publishes no more.
	Stop(id string)
	// Wanted lists the enabled streams of the registry.
	Wanted() []Want
	// Running reports the running streams for the node's entry.
	Running() map[string]StreamInfo
}

// Options configure a Node.
type Options struct {
	Conn *nats.Conn
	// Bucket is cluster.bucket; Replicas cluster.replicas (0: 3 when the
	// NATS cluster has enough servers for it, else 1).
	Bucket   string
	Replicas int
	// ID is node.id; Version the vigil version; API the REST API's base
	// URL.
	ID, Version, API string
	// TTL is cluster.lease_ttl.
	TTL      time.Duration
	Capacity Capacity
	// RebalanceInterval and MaxMoves bound the placer's moves.
	RebalanceInterval time.Duration
	MaxMoves          int
	Runner            Runner
	Logger            *zap.Logger
	// Metrics registers the vigil_cluster_* collectors (nil: none).
	Metrics prometheus.Registerer

	// wall is the wall clock (nil: time.Now), read only for what people
	// read (NodeInfo.Started and Renewed); tests jump it.
	wall func() time.Time
}

// lease is a lease this node holds. deadline is read by the fence on
// every publish; the rest belongs to the loop.
type lease struct {
	rev, token uint64
	// deadline is when the lease counts as lost, in nanoseconds of the
	// node's monotonic clock (Node.mono).
	deadline atomic.Int64
	// busy: being handed over; not renewed.
	busy bool
}

// seen is the loop's view of one key.
type seen struct {
	rev uint64
	val []byte
	del bool
	at  int64 // Node.mono when seen
	// expired: the server expired this lease (or the leader lease) with
	// a limit marker at revision rev; val and at are still those of the
	// last write seen (observe says why).
	expired bool
}

// Node is this vigil's membership in the fleet. Create it with New (which
// registers node.<id>), run its loop with Run, and hand its streams over
// with Drain before stopping it.
type Node struct {
	o        Options
	kv       jetstream.KeyValue
	rd       *reader // reads that decide something: from the stream leader (read.go)
	log      *zap.Logger
	m        *metrics
	base     time.Time
	instance string
	started  time.Time

	mu   sync.RWMutex
	held map[string]*lease // stream -> lease; the fence reads it
	// where is stream -> its node and status, from the nodes' entries
	// (for the API on any node).
	where map[string]Where

	// The loop's own state.
	view     map[string]*seen
	nodeRev  uint64
	leader   *lease
	draining atomic.Bool
	// beat is Node.mono at the send of the last successful heartbeat.
	beat          atomic.Int64
	weights       map[string]float64
	moved         map[string]int64  // stream -> mono of its last move
	unwanted      map[string]int    // held stream -> ticks it has not been wanted
	grants        map[string]uint64 // grants to this node seen, not yet taken: stream -> revision
	placeDue      bool              // a lease was seen released or expired: place after the watch's batch
	lastRebalance int64
	reqs          chan func()
	stopped       chan struct{}
}

// mono is the node's monotonic clock, in nanoseconds since New (base
// holds time.Now's monotonic reading, which time.Since uses). Lease
// decisions read only this clock: a wall-clock jump changes nothing
// (TestWallClockJump); the wall clock (Options.wall) only labels what
// people read.
func (n *Node) mono() int64 { return int64(time.Since(n.base)) }

// safe is how long after sending a successful write a lease is still
// this node's: three quarters of the TTL. The quarter left covers clock
// rate differences between this node and the servers, the flight time of
// a message the fence let through, and the bucket's own timing.
func (n *Node) safe() int64 { return int64(n.o.TTL) * 3 / 4 }

// New opens (or creates) the lease bucket and registers this node,
// waiting up to one TTL for a stale entry of the same node.id (a node
// killed without draining) to expire. Errors: ErrBucket naming the bucket
// and the server's reason; ErrDuplicateNode naming the other node's host,
// pid and start time.
func New(ctx context.Context, o Options) (*Node, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.MaxMoves < 0 {
		o.MaxMoves = 0
	}
	if o.wall == nil {
		o.wall = time.Now
	}
	n := &Node{o: o, log: o.Logger, base: time.Now(), instance: pipeline.NewEpoch(), started: o.wall(),
		held: map[string]*lease{}, where: map[string]Where{}, view: map[string]*seen{}, weights: map[string]float64{}, moved: map[string]int64{}, unwanted: map[string]int{}, grants: map[string]uint64{},
		reqs: make(chan func()), stopped: make(chan struct{}), m: newMetrics(o.Metrics)}
	kv, err := openBucket(ctx, o)
	if err != nil {
		return nil, err
	}
	n.kv = kv
	if n.rd, err = newReader(o.Conn, o.Bucket); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBucket, o.Bucket, err)
	}
	if err := n.register(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// openBucket creates or updates the lease bucket: file storage, one
// value per key, every key expiring one TTL after its last write with a
// limit marker kept for one TTL (so watchers see the expiry).
func openBucket(ctx context.Context, o Options) (jetstream.KeyValue, error) {
	js, err := jetstream.New(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrBucket, o.Bucket, err)
	}
	cfg := jetstream.KeyValueConfig{Bucket: o.Bucket, Description: "vigil leases, nodes and placement (package cluster)",
		History: 1, TTL: o.TTL, LimitMarkerTTL: o.TTL, Storage: jetstream.FileStorage, Replicas: o.Replicas}
	auto := o.Replicas == 0
	if auto {
		cfg.Replicas = 3
	}
	// A cluster that has just formed can leave a request unanswered or
	// lack the peers for the replicas yet (10005): ask again, each
	// attempt with its own deadline, until ctx ends (as registry.Open).
	var kv jetstream.KeyValue
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		kv, err = js.CreateOrUpdateKeyValue(actx, cfg)
		cancel()
		var apiErr *jetstream.APIError
		if auto && cfg.Replicas > 1 && errors.As(err, &apiErr) && slices.Contains([]jetstream.ErrorCode{10074, 10023, 10103}, apiErr.ErrorCode) {
			// Not a cluster (10074), or too few servers for 3
			// replicas (10023: insufficient resources, 10103:
			// replicas > peers).
			cfg.Replicas = 1
			continue
		}
		if err == nil || !transient(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s (%d replicas): %w (does the NATS server have JetStream enabled, with room for it, and may this client create buckets?)",
			ErrBucket, o.Bucket, cfg.Replicas, err)
	}
	return kv, nil
}

// transient reports whether err from a JetStream request is one a
// cluster that is still forming answers (registry.transient's rule): no
// answer in time, no responders, 503, or not enough peers known yet
// (10005).
func transient(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		// 10039 and 10076 (JetStream not enabled) are 503s that last.
		return api.Code == 503 && api.ErrorCode != 10039 && api.ErrorCode != 10076 || api.ErrorCode == 10005
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// info returns this node's entry as it is now.
func (n *Node) info(running map[string]StreamInfo) NodeInfo {
	host, _ := os.Hostname()
	load := 0.0
	for _, s := range running {
		load += s.Weight
	}
	if running == nil {
		running = map[string]StreamInfo{}
	}
	return NodeInfo{ID: n.o.ID, Instance: n.instance, Version: n.o.Version, Host: host, PID: os.Getpid(), API: n.o.API,
		Started: n.started.UTC(), Capacity: n.o.Capacity, Load: load, Streams: running, Draining: n.draining.Load(),
		Leader: n.leader != nil, Renewed: n.o.wall().UTC()}
}

// register creates node.<id>. An entry that is there already belongs to
// a running node if it is renewed within one TTL (refused, naming it), or
// to a dead one if it expires instead (taken).
func (n *Node) register(ctx context.Context) error {
	key := nodePrefix + n.o.ID
	for {
		b, _ := json.Marshal(n.info(nil))
		sent := n.mono()
		rev, err := n.kv.Create(ctx, key, b)
		if err == nil {
			n.nodeRev = rev
			n.beat.Store(sent)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("registering node %s in %s: %w", n.o.ID, n.o.Bucket, err)
		}
		e, err := n.rd.get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// Expired meanwhile, or the create was refused on an old
			// value a replica behind still holds (kv.Create reads back
			// with a direct get): try again after a pause, not in a
			// tight loop.
			select {
			case <-ctx.Done():
				return fmt.Errorf("registering node %s in %s: %w", n.o.ID, n.o.Bucket, ctx.Err())
			case <-time.After(n.o.TTL / 16):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("registering node %s in %s: %w", n.o.ID, n.o.Bucket, err)
		}
		var other NodeInfo
		_ = json.Unmarshal(e.value, &other)
		n.log.Info("an entry for this node.id exists; waiting up to one lease TTL to see whether its node is alive",
			zap.String("node", n.o.ID), zap.String("host", other.Host), zap.Int("pid", other.PID))
		alive, err := n.renewedWithin(ctx, key, e.revision, n.o.TTL+n.o.TTL/4)
		if err != nil {
			return err
		}
		if alive {
			return fmt.Errorf("%w: node.id %q is held by the vigil on host %s (pid %d, started %s, version %s); give each node its own node.id",
				ErrDuplicateNode, n.o.ID, other.Host, other.PID, other.Started.Format(time.RFC3339), other.Version)
		}
	}
}

// renewedWithin watches key for d: true if it is written again after
// revision rev (its node is alive), false if it expires or is deleted.
func (n *Node) renewedWithin(ctx context.Context, key string, rev uint64, d time.Duration) (bool, error) {
	w, err := n.kv.Watch(ctx, key)
	if err != nil {
		return false, fmt.Errorf("watching %s: %w", key, err)
	}
	defer stopWatch(w, n.log)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
			return false, nil // neither renewed nor expired: try again
		case e := <-w.Updates():
			switch {
			case e == nil:
			case e.Operation() != jetstream.KeyValuePut:
				return false, nil
			case e.Revision() > rev:
				return true, nil
			}
		}
	}
}

// stopWatch stops a bucket watch and reads what is left of its updates
// until nats.go closes the channel. nats.go's delivery goroutine blocks
// sending each entry into the watch's 256-entry channel (holding the
// watcher's lock, jetstream/kv.go WatchFiltered, v1.55.0); a watch
// stopped while that channel was full, as a busy fleet's is, would leave
// that goroutine blocked for good. The channel is closed once the
// goroutine returns from its last delivery (the subscription's closed
// handler); 10 s is far more than that takes, a bound so that a
// misbehaving client cannot hold the loop's exit forever.
func stopWatch(w jetstream.KeyWatcher, log *zap.Logger) {
	_ = w.Stop()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-timeout.C:
			log.Warn("lease bucket watch not closed 10 s after it was stopped; its delivery goroutine may stay blocked")
			return
		}
	}
}

// Where is the node running a stream and the stream's status there, as
// that node last reported it.
type Where struct {
	Node string
	StreamInfo
}

// Where returns where stream runs, from the nodes' entries (at most a
// quarter TTL old); false if no node reports it.
func (n *Node) Where(stream string) (Where, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	w, ok := n.where[stream]
	return w, ok
}

// Ready is the node's part of /readyz: nil when it holds its leases or
// can take some, that is, its entry was renewed within a lease's safe
// time (it is in the fleet and the bucket answers) and it is not
// draining (a node at cluster.max_streams holds leases: ready).
func (n *Node) Ready() error {
	switch {
	case n.mono()-n.beat.Load() >= n.safe():
		return fmt.Errorf("node entry not renewed for %s (lease bucket unreachable?)", time.Duration(n.mono()-n.beat.Load()).Round(time.Millisecond))
	case n.draining.Load():
		return errors.New("draining: handing streams over, taking no more")
	}
	return nil
}

// ID returns node.id.
func (n *Node) ID() string { return n.o.ID }

// Fence is the sink's fence (sinks.Fence): a stream may publish while
// this node holds its lease and the lease is within its safe time, with
// the lease's fencing token.
func (n *Node) Fence(stream string) (uint64, bool) {
	n.mu.RLock()
	l := n.held[stream]
	n.mu.RUnlock()
	if l == nil || n.mono() >= l.deadline.Load() {
		return 0, false
	}
	return l.token, true
}

// Holds reports whether this node holds stream's lease now (within its
// safe time).
func (n *Node) Holds(stream string) bool {
	_, ok := n.Fence(stream)
	return ok
}

// Token returns the fencing token of a held stream (0 if not held).
func (n *Node) Token(stream string) uint64 {
	t, _ := n.Fence(stream)
	return t
}

// Run is the node's loop: it watches the bucket, renews leases every
// quarter TTL, takes the grants made to it, hands streams over on
// request, and, while it holds the leader lease, places streams. It
// returns when ctx ends (after Drain, normally) or with an error when
// another node took its node.id over.
func (n *Node) Run(ctx context.Context) error {
	defer close(n.stopped)
	for ctx.Err() == nil {
		err := n.loop(ctx)
		if errors.Is(err, ErrDuplicateNode) {
			n.loseAll("node.id taken over")
			return err
		}
		if ctx.Err() == nil {
			n.log.Warn("lease bucket watch failed; retrying", zap.Error(err))
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

func (n *Node) loop(ctx context.Context) error {
	w, err := n.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer stopWatch(w, n.log)
	tick := time.NewTicker(n.o.TTL / 4)
	defer tick.Stop()
	// The placer looks for leases (and the leader lease) not renewed for
	// a TTL more often than it renews: a dead node's streams are granted
	// within a sixteenth of a TTL of the TTL.
	placeTick := time.NewTicker(n.o.TTL / 16)
	defer placeTick.Stop()
	n.tick(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("lease bucket watch closed")
			}
			if e != nil {
				n.observe(ctx, e)
			}
			// Everything the watch has ready, then the grants seen in
			// it in one batch: after a node died, hundreds arrive at once.
			for more := true; more; {
				select {
				case e, ok := <-w.Updates():
					if !ok {
						return errors.New("lease bucket watch closed")
					}
					if e != nil {
						n.observe(ctx, e)
					}
				default:
					more = false
				}
			}
			n.takeGrants(ctx)
			// One placement for all the leases seen released or
			// expired in the batch: a dead node's hundreds expire at
			// once, and a placement per expiry kept the loop from
			// reading the rest (each wrote every pending grant).
			if n.placeDue && n.isLeader() && !n.draining.Load() {
				n.place(ctx, false)
			}
			n.placeDue = false
		case <-tick.C:
			if err := n.tick(ctx); err != nil {
				return err
			}
		case <-placeTick.C:
			if n.leader == nil && !n.draining.Load() {
				n.elect(ctx)
			}
			if n.isLeader() && !n.draining.Load() {
				n.place(ctx, false)
			}
		case f := <-n.reqs:
			f()
		}
	}
}

// do runs f on the loop and waits for it; false if the loop ended.
func (n *Node) do(ctx context.Context, f func()) bool {
	done := make(chan struct{})
	select {
	case n.reqs <- func() { f(); close(done) }:
	case <-ctx.Done():
		return false
	case <-n.stopped:
		return false
	}
	<-done
	return true
}

// observe updates the view with one watched entry and reacts: a grant to
// this node is taken, a move asked of it is made, an expired lease is
// granted again at once when this node is the placer.
func (n *Node) observe(ctx context.Context, e jetstream.KeyValueEntry) {
	key := e.Key()
	s := &seen{rev: e.Revision(), val: e.Value(), del: e.Operation() != jetstream.KeyValuePut, at: n.mono()}
	// A held lease the server expired (a limit marker, seen as a purge;
	// vigil never purges) stays its holder's in the view until a TTL
	// after its last write was seen, as if the server had not expired
	// it: the server expires keys on its stream leader's wall clock, and
	// a leader whose clock jumped forward expires them early, while their
	// holders' fences are still open (TestServerExpiryEarly). A released
	// lease (a delete) and an expired grant (no node took it, so none
	// publishes under it) are free at once: the bench saw the server
	// expire a batch of fresh grants, whose old keys it was expiring as
	// they were written, and waiting a TTL for them cost 10 s.
	if prev := n.view[key]; e.Operation() == jetstream.KeyValuePurge && prev != nil && !prev.del &&
		(strings.HasPrefix(key, leasePrefix) || key == leaderKey) {
		var v leaseValue
		if json.Unmarshal(prev.val, &v) == nil && v.Instance != "" {
			s = &seen{rev: e.Revision(), val: prev.val, at: prev.at, expired: true}
		}
	}
	n.view[key] = s
	switch {
	case strings.HasPrefix(key, leasePrefix):
		id := key[len(leasePrefix):]
		if s.del || s.expired {
			n.m.expired.Inc()
			n.placeDue = true // once the watch's batch is read (loop)
			return
		}
		var v leaseValue
		if json.Unmarshal(s.val, &v) == nil && v.Node == n.o.ID && v.Instance == "" && !n.draining.Load() {
			n.grants[id] = s.rev // taken in a batch (takeGrants)
		}
	case strings.HasPrefix(key, movePrefix) && !s.del:
		var v moveValue
		id := key[len(movePrefix):]
		if json.Unmarshal(s.val, &v) == nil && n.heldLease(id) != nil && v.To != n.o.ID {
			n.handOver(ctx, id, v.To)
			_ = n.kv.Delete(ctx, key, jetstream.LastRevision(s.rev))
		}
	case key == drainPrefix+n.o.ID && !s.del:
		n.log.Info("drain requested through the API")
		_ = n.kv.Delete(ctx, key, jetstream.LastRevision(s.rev))
		n.drain(ctx)
	case strings.HasPrefix(key, nodePrefix):
		node := key[len(nodePrefix):]
		var ni NodeInfo
		if !s.del && json.Unmarshal(s.val, &ni) != nil {
			return
		}
		n.mu.Lock()
		for id, w := range n.where {
			if w.Node == node {
				delete(n.where, id)
			}
		}
		for id, st := range ni.Streams {
			n.where[id] = Where{Node: node, StreamInfo: st}
			if st.Weight > 0 {
				n.weights[id] = st.Weight
			}
		}
		n.mu.Unlock()
	}
}

// leaseValue is the value of lease.<stream> and of leader.
type leaseValue struct {
	Node string `json:"node"`
	// Instance is the owner's run (empty: a grant not yet taken).
	Instance string `json:"instance,omitempty"`
	// From is the node that handed the stream over, if any.
	From string `json:"from,omitempty"`
}

// moveValue is the value of move.<stream>.
type moveValue struct {
	To string `json:"to"`
}

func (n *Node) heldLease(id string) *lease {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.held[id]
}

// takeGrants makes the grants seen this node's leases, 16 compare-and-sets
// at a time, and starts their streams.
func (n *Node) takeGrants(ctx context.Context) {
	if len(n.grants) == 0 {
		return
	}
	b, _ := json.Marshal(leaseValue{Node: n.o.ID, Instance: n.instance})
	type result struct {
		id   string
		rev  uint64
		sent int64
		err  error
	}
	results := make(chan result, len(n.grants))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for id, rev := range n.grants {
		delete(n.grants, id)
		if n.heldLease(id) != nil || n.draining.Load() {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sent := n.mono()
			nrev, err := n.update(ctx, leasePrefix+id, b, rev)
			results <- result{id: id, rev: nrev, sent: sent, err: err}
		}()
	}
	wg.Wait()
	close(results)
	var taken []string
	for r := range results {
		n.m.op("take", r.err)
		if r.err != nil {
			n.log.Debug("taking a granted lease failed", zap.String("stream", r.id), zap.Error(r.err))
			continue
		}
		l := &lease{rev: r.rev, token: r.rev}
		l.deadline.Store(r.sent + n.safe())
		n.mu.Lock()
		n.held[r.id] = l
		n.mu.Unlock()
		n.log.Info("lease taken", zap.String("stream", r.id), zap.Uint64("token", r.rev))
		taken = append(taken, r.id)
	}
	n.m.held.Set(float64(n.heldCount()))
	sort.Strings(taken)
	for _, id := range taken {
		n.o.Runner.Start(id)
	}
}

// update is a compare-and-set of key on revision rev that rides out the
// stream leader's in-flight check: on a replicated bucket the leader
// refuses a compare-and-set on a key with an earlier write still being
// applied (error 10164, "wrong last sequence" without a number;
// nats-server v2.15.3 jetstream_batching.go), although rev is the
// latest. A node that saw a grant through its watch may ask that soon:
// BenchmarkFleetControlPlane saw takes of fresh grants fail so, leaving
// the stream to wait a TTL for the placer. When a read shows the key
// still at rev, the conflict was that check, and update asks again, up to
// 3 more times, 20 ms apart. A real conflict (the key changed) is
// returned as it came.
func (n *Node) update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	for attempt := 0; ; attempt++ {
		r, err := n.kv.Update(n.opctx(ctx), key, val, rev)
		if err == nil || attempt == 3 || !isConflict(err) {
			return r, err
		}
		e, gerr := n.rd.get(n.opctx(ctx), key)
		if gerr != nil || e.revision != rev {
			return r, err
		}
		n.m.retries.Inc()
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// opctx bounds one bucket operation to a quarter TTL, so that a stuck
// request cannot hold the loop past a lease's safe time.
func (n *Node) opctx(ctx context.Context) context.Context {
	c, cancel := context.WithTimeout(ctx, n.o.TTL/4)
	context.AfterFunc(c, cancel)
	return c
}

func (n *Node) heldCount() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.held)
}

// heldIDs returns the ids of the streams whose leases the node holds, in
// no order.
func (n *Node) heldIDs() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Collect(maps.Keys(n.held))
}

// drop forgets a lease (the fence refuses the stream from now on) and
// stops its stream.
func (n *Node) drop(id, why string) {
	n.mu.Lock()
	_, ok := n.held[id]
	delete(n.held, id)
	n.mu.Unlock()
	if !ok {
		return
	}
	n.m.held.Set(float64(n.heldCount()))
	n.m.lost.Inc()
	n.log.Warn("lease lost: stream stopped", zap.String("stream", id), zap.String("reason", why))
	n.o.Runner.Stop(id)
}

func (n *Node) loseAll(why string) {
	ids := n.heldIDs()
	for _, id := range ids {
		n.drop(id, why)
	}
}

// tick renews every lease and the node entry, drops leases past their
// safe time, and runs the placer.
func (n *Node) tick(ctx context.Context) error {
	now := n.mono()
	n.mu.RLock()
	var expired []string
	renew := map[string]*lease{}
	for id, l := range n.held {
		switch {
		case l.deadline.Load() <= now:
			expired = append(expired, id)
		case !l.busy:
			renew[id] = l
		}
	}
	n.mu.RUnlock()
	for _, id := range expired {
		n.drop(id, "not renewed within three quarters of the lease TTL")
	}
	n.renewAll(ctx, renew)
	n.releaseUnwanted(ctx)
	if err := n.heartbeat(ctx); err != nil {
		return err
	}
	n.elect(ctx)
	if n.isLeader() && !n.draining.Load() {
		n.place(ctx, true)
	}
	return nil
}

// releaseUnwanted releases the leases of streams the registry no longer
// wants run (removed or disabled) for two ticks in a row: one tick of
// grace, since a grant can arrive before the registry change that made
// the stream wanted.
func (n *Node) releaseUnwanted(ctx context.Context) {
	wanted := map[string]bool{}
	for _, w := range n.o.Runner.Wanted() {
		wanted[w.ID] = true
	}
	n.mu.RLock()
	var ids []string
	for id := range n.held {
		ids = append(ids, id)
	}
	n.mu.RUnlock()
	for _, id := range ids {
		if wanted[id] {
			delete(n.unwanted, id)
			continue
		}
		if n.unwanted[id]++; n.unwanted[id] >= 2 {
			delete(n.unwanted, id)
			n.log.Info("releasing the lease of a stream removed or disabled", zap.String("stream", id))
			n.release(ctx, id)
		}
	}
}

// renewAll renews the given leases by compare-and-set, 16 at a time.
func (n *Node) renewAll(ctx context.Context, ls map[string]*lease) {
	b, _ := json.Marshal(leaseValue{Node: n.o.ID, Instance: n.instance})
	type result struct {
		id       string
		rev      uint64
		sent     int64
		err      error
		mismatch bool
	}
	results := make(chan result, len(ls))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for id, l := range ls {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sent := n.mono()
			rev, err := n.update(ctx, leasePrefix+id, b, l.rev)
			results <- result{id: id, rev: rev, sent: sent, err: err,
				mismatch: errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound)}
		}()
	}
	wg.Wait()
	close(results)
	for r := range results {
		n.m.op("renew", r.err)
		l := ls[r.id]
		switch {
		case r.err == nil:
			l.rev = r.rev
			l.deadline.Store(r.sent + n.safe())
		case r.mismatch:
			n.recheck(ctx, r.id, l)
		case ctx.Err() == nil:
			n.log.Warn("lease renewal failed; retrying", zap.String("stream", r.id), zap.Error(r.err))
		}
	}
}

// recheck reads a lease whose renewal lost its compare-and-set: still
// this instance's (an earlier renewal succeeded but its reply was lost),
// its revision is adopted, without extending its safe time; otherwise the
// lease is lost.
func (n *Node) recheck(ctx context.Context, id string, l *lease) {
	e, err := n.rd.get(n.opctx(ctx), leasePrefix+id)
	if err == nil {
		var v leaseValue
		if json.Unmarshal(e.value, &v) == nil && v.Node == n.o.ID && v.Instance == n.instance {
			l.rev = e.revision
			return
		}
	}
	n.drop(id, "the lease changed hands or expired")
}

// heartbeat writes node.<id> (compare-and-set on its revision). If
// another vigil wrote it meanwhile, it returns ErrDuplicateNode; if it
// expired (this node was paused or cut off for a TTL), it creates it
// again.
func (n *Node) heartbeat(ctx context.Context) error {
	b, _ := json.Marshal(n.info(n.o.Runner.Running()))
	key := nodePrefix + n.o.ID
	sent := n.mono()
	rev, err := n.kv.Update(n.opctx(ctx), key, b, n.nodeRev)
	n.m.op("heartbeat", err)
	if err == nil {
		n.nodeRev = rev
		n.beat.Store(sent)
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // NATS unreachable: try again next tick
	}
	e, gerr := n.rd.get(n.opctx(ctx), key)
	if gerr == nil {
		var other NodeInfo
		if json.Unmarshal(e.value, &other) == nil && other.Instance == n.instance {
			n.nodeRev = e.revision
			return nil
		}
		return fmt.Errorf("%w: node.id %q was taken by the vigil on host %s (pid %d) while this node was cut off", ErrDuplicateNode, n.o.ID, other.Host, other.PID)
	}
	if rev, err := n.kv.Create(n.opctx(ctx), key, b); err == nil {
		n.nodeRev = rev
		n.beat.Store(sent)
		n.log.Warn("node entry had expired (paused or cut off for a lease TTL); registered again")
	}
	return nil
}

// elect renews the leader lease, or tries to create it when the view
// shows none.
func (n *Node) elect(ctx context.Context) {
	b, _ := json.Marshal(leaseValue{Node: n.o.ID, Instance: n.instance})
	if l := n.leader; l != nil {
		sent := n.mono()
		if l.deadline.Load() <= sent || n.draining.Load() {
			n.resign(ctx)
			return
		}
		rev, err := n.kv.Update(n.opctx(ctx), leaderKey, b, l.rev)
		n.m.op("renew", err)
		if err == nil {
			l.rev = rev
			l.deadline.Store(sent + n.safe())
		} else if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
			n.leader = nil
			n.m.leader.Set(0)
		}
		return
	}
	if n.draining.Load() {
		return
	}
	s := n.view[leaderKey]
	if s != nil && !s.del && n.mono()-s.at < int64(n.o.TTL) {
		return
	}
	sent := n.mono()
	var rev uint64
	var err error
	if s != nil && !s.del {
		// Not renewed for a TTL (see takeOver): its holder stopped
		// leading a quarter TTL ago, whenever the server expires it.
		rev, err = n.kv.Update(n.opctx(ctx), leaderKey, b, s.rev)
	}
	if s == nil || s.del || isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		// No leader, or the key changed since it was seen (expired
		// and gone, or another node leads: then this fails).
		rev, err = n.kv.Create(n.opctx(ctx), leaderKey, b)
	}
	if err != nil {
		return
	}
	l := &lease{rev: rev, token: rev}
	l.deadline.Store(sent + n.safe())
	n.leader = l
	n.m.leader.Set(1)
	n.lastRebalance = n.mono() // let the nodes' loads settle before moving anything
	n.log.Info("placing streams for the fleet (leader)", zap.Uint64("token", rev))
}

// isLeader reports whether this node holds the leader lease within its
// safe time (a node resumed after a pause may still think it leads).
func (n *Node) isLeader() bool {
	return n.leader != nil && n.mono() < n.leader.deadline.Load()
}

// resign gives the leader lease up.
func (n *Node) resign(ctx context.Context) {
	if n.leader == nil {
		return
	}
	_ = n.kv.Delete(n.opctx(ctx), leaderKey, jetstream.LastRevision(n.leader.rev))
	n.leader = nil
	n.m.leader.Set(0)
}

// candidate is a node placement may choose.
type candidate struct {
	id    string
	cap   Capacity
	load  float64
	count int
}

func (c *candidate) score(w float64) float64 { return (c.load + w) / c.cap.Effective() }

// nodes returns the live nodes of the view: renewed within half a TTL
// (two heartbeats), not draining, by id.
func (n *Node) nodes() map[string]*candidate {
	out := map[string]*candidate{}
	now := n.mono()
	for key, s := range n.view {
		if !strings.HasPrefix(key, nodePrefix) || s.del || now-s.at > int64(n.o.TTL)/2 {
			continue
		}
		var ni NodeInfo
		if json.Unmarshal(s.val, &ni) != nil || ni.Draining {
			continue
		}
		out[ni.ID] = &candidate{id: ni.ID, cap: ni.Capacity}
	}
	return out
}

// owners returns stream -> node of the leases in the view that are held:
// not deleted, and written within the last TTL as this node saw them
// (expired by the server or not: see observe).
// stale has the revision of each lease not written for a TTL: its owner
// has been stopped for a quarter TTL (see takeOver).
func (n *Node) owners() (owners map[string]string, stale map[string]uint64) {
	out, stale := map[string]string{}, map[string]uint64{}
	now := n.mono()
	for key, s := range n.view {
		if !strings.HasPrefix(key, leasePrefix) || s.del {
			continue
		}
		if now-s.at >= int64(n.o.TTL) {
			stale[key[len(leasePrefix):]] = s.rev
			continue
		}
		var v leaseValue
		if json.Unmarshal(s.val, &v) == nil {
			out[key[len(leasePrefix):]] = v.Node
		}
	}
	return out, stale
}

// weight is a stream's weight for placement: as its node last reported
// it, else the mean of the known weights, else 1.
func (n *Node) weight(id string, mean float64) float64 {
	if w := n.weights[id]; w > 0 {
		return w
	}
	return mean
}

func (n *Node) meanWeight() float64 {
	if len(n.weights) == 0 {
		return 1
	}
	sum := 0.0
	for _, w := range n.weights {
		sum += w
	}
	return sum / float64(len(n.weights))
}

// place grants every wanted stream without a lease to the live node with
// the lowest load relative to its capacity after taking it (high priority
// first), and, when rebalance is true and RebalanceInterval has passed,
// asks for up to MaxMoves moves that even the loads out.
func (n *Node) place(ctx context.Context, rebalance bool) {
	cands := n.nodes()
	if len(cands) == 0 {
		return
	}
	owners, stale := n.owners()
	mean := n.meanWeight()
	for id, node := range owners {
		if c := cands[node]; c != nil {
			c.load += n.weight(id, mean)
			c.count++
		}
	}
	wants := n.o.Runner.Wanted()
	rank := map[string]int{"high": 0, "": 1, "normal": 1, "low": 2}
	sort.Slice(wants, func(i, j int) bool {
		if rank[wants[i].Priority] != rank[wants[j].Priority] {
			return rank[wants[i].Priority] < rank[wants[j].Priority]
		}
		return wants[i].ID < wants[j].ID
	})
	// Choose first (each choice counts in the next), then write the
	// grants 16 at a time: after a node died, hundreds are due at once.
	type grant struct {
		id, node string
		val      []byte
		rev      uint64
		err      error
	}
	var gs []*grant
	for _, w := range wants {
		if _, ok := owners[w.ID]; ok {
			continue
		}
		wt := n.weight(w.ID, mean)
		best := pick(cands, wt, "")
		if best == nil {
			n.log.Warn("no node can take the stream (every node at cluster.max_streams)", zap.String("stream", w.ID))
			break
		}
		b, _ := json.Marshal(leaseValue{Node: best.id})
		gs = append(gs, &grant{id: w.ID, node: best.id, val: b})
		best.load += wt
		best.count++
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			g.rev, g.err = n.takeOver(ctx, g.id, g.val, stale)
		}()
	}
	wg.Wait()
	for _, g := range gs {
		n.m.op("grant", g.err)
		if g.err != nil {
			continue // held after all (the view was behind), or NATS is down
		}
		n.view[leasePrefix+g.id] = &seen{rev: g.rev, val: g.val, at: n.mono()}
		n.log.Info("stream granted", zap.String("stream", g.id), zap.String("node", g.node))
	}
	now := n.mono()
	if !rebalance || n.o.MaxMoves == 0 || now-n.lastRebalance < int64(n.o.RebalanceInterval) {
		return
	}
	n.lastRebalance = now
	n.rebalance(ctx, cands, owners, mean, now)
}

// takeOver writes a grant for stream id: create-if-absent, or, for a
// lease not written for a full TTL as this node saw it (stale), a
// compare-and-set on the revision seen. The second does not wait for the
// server to expire the key (its expiry timer can run up to three
// quarters of a TTL late, BenchmarkFleetControlPlane) and is as safe: the
// owner's last write reached the server before this node saw it, so the
// owner sent it more than a TTL ago and stopped a quarter TTL ago; and an
// owner that did write meanwhile changed the revision, which fails the
// compare-and-set.
//
// When the compare-and-set fails, the key may have changed in a way the
// view has not shown yet: most often the server's expiry timer deleted
// it meanwhile (a stale lease's server-side expiry is due at about the
// same time). Then create-if-absent, which succeeds only on a deleted or
// expired key, grants it now rather than after the view catches up.
func (n *Node) takeOver(ctx context.Context, id string, grant []byte, stale map[string]uint64) (uint64, error) {
	if rev, ok := stale[id]; ok {
		r, err := n.kv.Update(n.opctx(ctx), leasePrefix+id, grant, rev)
		if !isConflict(err) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return r, err
		}
	}
	return n.kv.Create(n.opctx(ctx), leasePrefix+id, grant)
}

// pick returns the candidate with the lowest score after taking weight w
// (ties: fewest streams, then id), skipping except and the nodes at
// max_streams; nil if none.
func pick(cands map[string]*candidate, w float64, except string) *candidate {
	var best *candidate
	for _, c := range cands {
		if c.id == except || c.cap.MaxStreams > 0 && c.count >= c.cap.MaxStreams {
			continue
		}
		if best == nil || c.score(w) < best.score(w) ||
			c.score(w) == best.score(w) && (c.count < best.count || c.count == best.count && c.id < best.id) {
			best = c
		}
	}
	return best
}

// rebalance asks for up to MaxMoves moves, each from the most loaded
// node to the least loaded one, while their relative loads differ by more
// than a tenth of the mean, of the stream that evens the two out best,
// only when it lowers the higher of the two and narrows their difference
// by half the stream's weight or more; a stream moved in the previous two
// intervals stays.
func (n *Node) rebalance(ctx context.Context, cands map[string]*candidate, owners map[string]string, mean float64, now int64) {
	load, capacity := 0.0, 0.0
	for _, c := range cands {
		load += c.load
		capacity += c.cap.Effective()
	}
	avg := load / capacity
	for range n.o.MaxMoves {
		var hi, lo *candidate
		for _, c := range cands {
			r := c.load / c.cap.Effective()
			if hi == nil || r > hi.load/hi.cap.Effective() || r == hi.load/hi.cap.Effective() && c.id < hi.id {
				hi = c
			}
			if (lo == nil || r < lo.load/lo.cap.Effective() || r == lo.load/lo.cap.Effective() && c.id < lo.id) &&
				(c.cap.MaxStreams == 0 || c.count < c.cap.MaxStreams) {
				lo = c
			}
		}
		if hi == nil || lo == nil || hi == lo {
			return
		}
		before := hi.load / hi.cap.Effective()
		// 10 % of the mean: measured rates wobble by a few percent, and
		// a move must pay for a restart with a clear gain.
		tol := avg / 10
		gap := before - lo.load/lo.cap.Effective()
		if gap <= tol {
			return
		}
		var stream string
		bestAfter := before
		for id, node := range owners {
			if node != hi.id || now-n.moved[id] < 2*int64(n.o.RebalanceInterval) && n.moved[id] != 0 {
				continue
			}
			w := n.weight(id, mean)
			hiAfter, loAfter := (hi.load-w)/hi.cap.Effective(), (lo.load+w)/lo.cap.Effective()
			// The gap between the two must narrow by at least half the
			// stream's weight (a quarter of what a small stream's move
			// narrows it by): else 7 streams against 6 swap one back
			// and forth whenever the measured weights wobble (the
			// higher load falls a little, the gap stays one stream).
			if gap-math.Abs(hiAfter-loAfter) < (w/hi.cap.Effective()+w/lo.cap.Effective())/4 {
				continue
			}
			after := max(hiAfter, loAfter)
			if after < bestAfter || after == bestAfter && stream != "" && id < stream {
				stream, bestAfter = id, after
			}
		}
		if stream == "" || bestAfter >= before {
			return
		}
		b, _ := json.Marshal(moveValue{To: lo.id})
		if _, err := n.kv.Put(n.opctx(ctx), movePrefix+stream, b); err != nil {
			return
		}
		n.m.moves.Inc()
		n.moved[stream] = now
		w := n.weight(stream, mean)
		hi.load -= w
		hi.count--
		lo.load += w
		lo.count++
		owners[stream] = lo.id
		n.log.Info("moving a stream to even out the nodes' loads", zap.String("stream", stream), zap.String("from", hi.id), zap.String("to", lo.id))
	}
}

// handOver stops a held stream, then writes its lease as a grant to
// node to (compare-and-set on this node's revision): to takes it and
// starts the stream, so the stream's gap is its stop here plus its
// start-up there. If to never takes it, the grant expires after a TTL
// and the placer grants it again.
func (n *Node) handOver(ctx context.Context, id, to string) {
	l := n.heldLease(id)
	if l == nil {
		return
	}
	n.stopHeld(id, l)
	b, _ := json.Marshal(leaseValue{Node: to, From: n.o.ID})
	_, err := n.update(ctx, leasePrefix+id, b, l.rev)
	n.m.op("handover", err)
	if err != nil {
		n.log.Warn("handing a stream over failed; it runs again wherever the placer puts it after its lease expires",
			zap.String("stream", id), zap.String("to", to), zap.Error(err))
		return
	}
	n.m.handoffs.Inc()
	n.log.Info("stream handed over", zap.String("stream", id), zap.String("to", to))
}

// stopHeld marks l busy, stops its stream and forgets the lease here
// (handOver and release then write it for the next owner).
func (n *Node) stopHeld(id string, l *lease) {
	l.busy = true
	n.o.Runner.Stop(id)
	n.mu.Lock()
	delete(n.held, id)
	n.mu.Unlock()
	n.m.held.Set(float64(n.heldCount()))
}

// release deletes a held lease (revision-conditional) after stopping
// its stream, so that it can be granted at once.
func (n *Node) release(ctx context.Context, id string) {
	l := n.heldLease(id)
	if l == nil {
		return
	}
	n.stopHeld(id, l)
	err := n.kv.Delete(n.opctx(ctx), leasePrefix+id, jetstream.LastRevision(l.rev))
	n.m.op("release", err)
}

// drain marks the node draining, hands every held stream to the live
// node with the lowest load after taking it (releasing it when there is
// none), and gives the leader lease up.
func (n *Node) drain(ctx context.Context) {
	n.draining.Store(true)
	_ = n.heartbeat(ctx) // draining: the placer grants it nothing more
	n.resign(ctx)
	cands := n.nodes()
	delete(cands, n.o.ID)
	owners, _ := n.owners()
	mean := n.meanWeight()
	for id, node := range owners {
		if c := cands[node]; c != nil {
			c.load += n.weight(id, mean)
			c.count++
		}
	}
	ids := n.heldIDs()
	sort.Strings(ids)
	for i, id := range ids {
		w := n.weight(id, mean)
		if best := pick(cands, w, n.o.ID); best != nil {
			n.handOver(ctx, id, best.id)
			best.load += w
			best.count++
		} else {
			n.release(ctx, id)
		}
		if i%16 == 15 { // long drains: keep the rest renewed
			n.tick(ctx)
		}
	}
	n.log.Info("drained: every stream handed over", zap.Int("streams", len(ids)))
}

// Drain hands every stream over (see drain) and deletes this node's
// entry, within ctx; call it before cancelling Run's context. It returns
// the streams it handed over or released.
func (n *Node) Drain(ctx context.Context) int {
	count := 0
	n.do(ctx, func() {
		count = n.heldCount()
		n.drain(ctx)
		_ = n.kv.Delete(n.opctx(ctx), nodePrefix+n.o.ID, jetstream.LastRevision(n.nodeRev))
	})
	return count
}

// Close releases what Drain did not (leases, the leader lease, the node
// entry) without handing streams over; Run must have returned.
func (n *Node) Close(ctx context.Context) {
	ids := n.heldIDs()
	for _, id := range ids {
		n.release(ctx, id)
	}
	n.resign(ctx)
}

// RequestDrain asks node id (any node of the fleet) to hand its streams
// over: it writes drain.<id>, which that node acts on within a moment.
// Errors: the node is unknown (no live entry as the stream leader holds
// the bucket), or NATS fails.
func (n *Node) RequestDrain(ctx context.Context, id string) error {
	if _, err := n.rd.get(ctx, nodePrefix+id); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("no live node %q", id)
		}
		return err
	}
	_, err := n.kv.Put(ctx, drainPrefix+id, []byte("{}"))
	return err
}

// Bucket returns the lease bucket.
func (n *Node) Bucket() jetstream.KeyValue { return n.kv }

// NodeStatus is a node as `vigil nodes ls` shows it.
type NodeStatus struct {
	NodeInfo
	// LeaseAge is the time since the node's entry was last written, by
	// the server's clock (a heartbeat every quarter TTL).
	LeaseAge time.Duration `json:"lease_age_ns"`
}

// Nodes lists the nodes with a live entry in the bucket, by id, as the
// bucket's stream leader holds it (reader). Errors come from NATS.
func (n *Node) Nodes(ctx context.Context) ([]NodeStatus, error) {
	es, err := n.rd.list(ctx, nodePrefix+"*")
	if err != nil {
		return nil, err
	}
	var out []NodeStatus
	for _, e := range es {
		var ni NodeInfo
		if json.Unmarshal(e.value, &ni) != nil {
			continue
		}
		out = append(out, NodeStatus{NodeInfo: ni, LeaseAge: time.Since(e.created)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Owners returns stream -> node of every lease in the bucket (grants not
// yet taken included), as the bucket's stream leader holds it (reader).
// Errors come from NATS.
func (n *Node) Owners(ctx context.Context) (map[string]string, error) {
	es, err := n.rd.list(ctx, leasePrefix+"*")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, e := range es {
		var v leaseValue
		if json.Unmarshal(e.value, &v) == nil {
			out[k[len(leasePrefix):]] = v.Node
		}
	}
	return out, nil
}

// isConflict reports a lost compare-and-set or create.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}
