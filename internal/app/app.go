// Package app is the service, `vigil run` (Run): it wires the metrics
// endpoint, NATS, the stream registry, the REST API and the engines
// (internal/engines) together, and turns registry changes into running
// streams (service.go: placement, the alert and degradation loops, events).
// `vigil detect` (Detect) runs the same engines and pipeline on one source
// without the service around them. The tools of cmd/vigil have packages of
// their own: internal/bench, internal/doctor, internal/shapes and
// internal/client. It holds no state of its own between calls.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/cluster"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/cuda"
	"github.com/vigil-video/vigil/internal/doctor"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/hwmon"
	"github.com/vigil-video/vigil/internal/live"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// Endpoints are the addresses a running vigil serves ("" when disabled).
type Endpoints struct {
	NATS    string // NATS client URL
	Metrics string // host:port of /metrics
	API     string // base URL of the REST API, e.g. http://127.0.0.1:8080
	// MQTT is the host:port of the embedded NATS server's MQTT listener
	// (nats.mqtt.listen), "" when off.
	MQTT string
}

// Run is `vigil run`. It starts the metrics endpoint, NATS (embedded with
// JetStream under data_dir, or external), opens the stream registry (a
// JetStream key-value bucket) and seeds it with the config's streams,
// serves the REST API, and reconciles running streams with the registry
// until ctx ends: added streams start, removed ones stop, changed ones
// restart, the others are not touched. Then it stops in order: streams
// (each RunStream returns after its goroutines), the API, the NATS sink
// (flush, so no published frame is lost), the embedded server, the metrics
// endpoint, and the engines last. Progress lines go to progress every
// Pipeline.ProgressInterval. ready, when not nil, is called once
// everything is up, just before reconciling starts streams (so a
// subscriber set up in ready sees every frame).
func Run(ctx context.Context, c config.Config, log *zap.Logger, progress io.Writer, ready func(Endpoints)) error {
	// config.Parse refuses these already; a Config built another way is
	// held to the same rule before anything listens.
	if err := c.CheckExposure(); err != nil {
		return cli.BadInput(err)
	}
	if c.Node.ID == "" { // a Config made without Parse
		c.Node.ID = config.DefaultNodeID()
	}
	sources, err := c.Sources()
	if err != nil {
		return cli.BadInput(err)
	}
	decode.SetLogger(log)
	defer decode.SetLogger(nil) // logs FFmpeg line counts still pending
	if err := engines.OpenRuntime(&c); err != nil {
		return err
	}
	if err := engines.CheckClasses(&c); err != nil {
		return err
	}
	if err := engines.CheckDegrade(&c); err != nil {
		return err
	}
	engs := engines.New(&c)
	defer engs.CloseLogging(log) // last: the streams using them have stopped
	devices, err := engines.PlacementDevices(&c)
	if err != nil {
		return err
	}
	// Open every configured engine before anything starts: a bad model in
	// the config is a start-up error (exit 2), not a failure at the first
	// frame. Models of streams registered through the API open when those
	// streams start; a failure marks only that stream failed.
	for _, s := range c.Streams {
		eng, err := engs.Instance(s.Model, "", devices[0])
		if err != nil {
			return fmt.Errorf("streams[%s].model: %w", s.ID, err)
		}
		// Batched copies must exist for every configured batch size.
		if !engs.Batching() {
			continue
		}
		if _, err := engs.BatchEngines(s.Model, "", devices[0], eng); err != nil {
			return cli.BadInput(fmt.Errorf("infer.batch_sizes: streams[%s]: %w", s.ID, err))
		}
	}
	var token, natsToken string
	for _, t := range []struct {
		field, path string
		dst         *string
	}{{"api.token_file", c.API.TokenFile, &token}, {"nats.token_file", c.NATS.TokenFile, &natsToken}} {
		if t.path == "" {
			continue
		}
		v, err := config.ReadToken(t.path)
		if err != nil {
			return cli.BadInput(fmt.Errorf("%s: %w", t.field, err))
		}
		*t.dst = v
	}
	engs.LogLoaded(log)
	var ep Endpoints

	reg := prometheus.NewRegistry()
	// Per-node series carry label node (node.id); per-stream series do
	// not: a stream's id names it across the fleet.
	nodeReg := prometheus.WrapRegistererWith(prometheus.Labels{"node": c.Node.ID}, reg)
	nodeReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := pipeline.NewMetrics(reg)
	engs.SetMetrics(metrics)
	if hw := hwmon.Start(log); hw != nil {
		reg.MustRegister(hw)
		defer hw.Close()
	}
	if c.Metrics.Listen != "off" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			// A failed write is a client that went away: no one is left
			// to tell.
			_, _ = io.WriteString(w, "ok\n")
		})
		addr, stop, err := serveHTTP(log.Named("metrics"), c.Metrics.Listen, mux, "", "")
		if err != nil {
			return fmt.Errorf("metrics.listen %s: %w", c.Metrics.Listen, err)
		}
		defer stop()
		if err := boundAsConfigured("metrics.listen", c.Metrics.Listen, addr); err != nil {
			return err
		}
		ep.Metrics = addr
		log.Info("metrics endpoint", zap.String("url", "http://"+addr+"/metrics"))
		if !config.Loopback(c.Metrics.Listen) {
			log.Warn("metrics endpoint open to the network without authentication: /metrics shows stream ids, "+
				"frame rates, drops and errors to anyone who can reach it (it cannot change anything); listen on "+
				"127.0.0.1 or restrict it with a firewall", zap.String("listen", c.Metrics.Listen))
		}
	}

	ep.NATS = c.NATS.URL
	if ep.NATS == "" {
		o := natsserver.OptionsFrom(&c, natsToken)
		ns, err := natsserver.StartOptions(o)
		if err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		if err := boundAsConfigured("nats.listen", c.NATS.Listen, ns.Addr().String()); err != nil {
			return err
		}
		ep.NATS = ns.ClientURL()
		log.Info("embedded NATS server started", zap.String("url", ep.NATS), zap.String("store", o.StoreDir),
			zap.Bool("auth", natsToken != ""), zap.String("sync_interval", c.NATS.SyncInterval))
		if c.NATS.Clustered() {
			// The registry needs JetStream, which in a cluster needs a
			// majority of the servers: wait for them as long as it takes
			// (nodes of a site start in any order).
			log.Info("embedded NATS server joining cluster", zap.String("cluster", c.NATS.Cluster.Name),
				zap.String("server_name", ns.Name()), zap.Strings("routes", c.NATS.Cluster.Routes))
			if err := natsserver.WaitJetStream(ctx, ns, func(d time.Duration) {
				log.Info("waiting for a majority of the NATS cluster's servers (JetStream meta leader)", zap.Duration("waited", d))
			}); err != nil {
				return err
			}
		}
		if !config.Loopback(c.NATS.Listen) && natsToken == "" {
			log.Warn("embedded NATS server open to the network without a token (nats.insecure: true): anyone who can "+
				"reach it can read every detection, publish false ones, and read or rewrite the stream registry, camera "+
				"credentials included; set nats.token_file", zap.String("listen", c.NATS.Listen))
		}
		if c.NATS.MQTT.Listen != "off" {
			addr := natsserver.MQTTAddr(ns)
			if err := boundAsConfigured("nats.mqtt.listen", c.NATS.MQTT.Listen, addr); err != nil {
				return err
			}
			ep.MQTT = addr
			// Topics are the subjects with / for . (vigil/<id>/analytics).
			log.Info("embedded NATS MQTT listener", zap.String("url", "mqtt://"+addr), zap.Bool("auth", natsToken != ""))
			if w := natsserver.MQTTWarning(o); w != "" {
				log.Warn(w, zap.String("listen", c.NATS.MQTT.Listen))
			}
		}
	}
	sink, err := sinks.DialNATS(ctx, sinks.NATSOptions{URL: ep.NATS, Token: natsToken, Prefix: c.NATS.SubjectPrefix, Node: c.Node.ID,
		Metrics: sinks.NewNATSMetrics(nodeReg), Logger: log.Named("nats")})
	if err != nil {
		return err
	}
	defer func() {
		if err := sink.Close(); err != nil {
			log.Warn("closing NATS", zap.Error(err))
		}
	}()
	// Each step that opens a store gets a window of its own: on a NATS
	// cluster still forming (the nodes of an embedded cluster starting
	// together), the first waits for JetStream's meta leader and must not
	// use up the time of the next (a clean-clone CI run's node stopped on
	// the lease bucket after the registry took the shared 15 s).
	var cancels []context.CancelFunc
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	openCtx := func() context.Context {
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		cancels = append(cancels, cancel)
		return octx
	}
	streams, err := registry.Open(openCtx(), sink.Conn(), c.NATS.Bucket, c.NATS.Replicas)
	if err != nil {
		return err
	}
	seed := make([]registry.Spec, len(c.Streams))
	for i, s := range c.Streams {
		seed[i] = c.Spec(s)
	}
	if n, err := streams.Seed(openCtx(), seed); err != nil {
		return err
	} else if n > 0 {
		log.Info("registry seeded from the config", zap.Int("streams", n))
	}

	var snaps *live.Snapshots
	if *c.Live.Snapshots.Enabled {
		snaps, err = live.OpenSnapshots(openCtx(), sink.Conn(), live.SnapshotOptions{Bucket: c.SnapshotsBucket(),
			TTL: c.Live.Snapshots.TTL.Duration, MaxBytes: c.Live.Snapshots.MaxBytes, Replicas: c.NATS.Replicas,
			Queue: c.Live.Snapshots.Queue, Quality: c.Live.JPEGQuality, Logger: log.Named("snapshots")})
		if err != nil {
			return err
		}
	}
	pictures := live.New(live.Options{DefaultFPS: c.Live.DefaultFPS, MaxFPS: c.Live.MaxFPSPerViewer, MaxViewers: c.Live.MaxViewers,
		Quality: c.Live.JPEGQuality, Encoders: c.Live.Encoders, Snapshots: snaps, Registerer: reg, Logger: log.Named("live")})

	// Streams, loops and the fleet membership run under runCtx, which
	// ends after the node has handed its streams over (drain), not at
	// the signal.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	stats := pipeline.NewStats()
	sup := pipeline.NewSupervisor(runCtx)
	if len(devices) > 1 {
		log.Info("placing streams across GPUs", zap.Ints("devices", devices))
	}
	for _, d := range c.Deprecations() {
		log.Warn(d)
	}
	if c.Decode.HWAccel == "hybrid" {
		nv, cpu := engines.HybridCapacity(&c)
		log.Info("hybrid decoding: streams go to NVDEC or the CPU in proportion to capacity, each weighing its pixel rate",
			zap.Float64("nvdec_pixel_rate_per_gpu", nv), zap.Float64("cpu_pixel_rate", cpu), zap.Duration("reweigh_interval", c.Decode.ReweighInterval.Duration))
	}
	svc := &service{c: &c, log: log, engs: engs, sink: sink, metrics: metrics, faults: decode.NewMetrics(reg), stats: stats, sup: sup, sources: sources,
		placer: pipeline.NewPlacer(len(devices)), devices: devices, specs: map[string]registry.Spec{},
		decoders: engines.NewDecodePlacer(&c, len(devices)), reweigher: engines.NewReweigher(),
		fleetWeights: map[string]fleetWeightState{}, fleetReweigher: engines.NewReweigher(), known: map[string]registry.Entry{},
		analytics: newAnalyticsMetrics(reg), analyzers: map[string]*streamAnalytics{}, pictures: pictures, eventSnapshots: snaps != nil,
		priorities: map[string]string{}, degraded: map[string]bool{}, models: map[string]string{}, lights: map[string]string{}, onLight: map[string]string{}, gov: &pipeline.Governor{Threshold: c.Pipeline.DegradeDepth,
			EngageAfter: c.Pipeline.DegradeAfter.Duration, ReleaseAfter: c.Pipeline.RestoreAfter.Duration},
		events: make(chan func()), done: make(chan struct{})}
	replicas := c.Cluster.Replicas
	if replicas == 0 && c.NATS.Replicas > 1 {
		replicas = c.NATS.Replicas // the registry's, for a cluster whose size the config states
	}
	node, err := cluster.New(openCtx(), cluster.Options{Conn: sink.Conn(), Bucket: c.Cluster.Bucket, Replicas: replicas,
		ID: c.Node.ID, Version: buildVersion(c.Version), TTL: c.Cluster.LeaseTTL.Duration,
		Capacity: cluster.Capacity{DecodePixelsPerSecond: c.Cluster.DecodePixelsPerSecond, EnginePixelsPerSecond: c.Cluster.EnginePixelsPerSecond,
			GPUs: gpuCount(&c, devices), MaxStreams: c.Cluster.MaxStreams},
		RebalanceInterval: c.Cluster.RebalanceInterval.Duration, MaxMoves: c.Cluster.MaxMoves,
		Runner: svc, Logger: log.Named("cluster"), Metrics: nodeReg})
	if err != nil {
		if errors.Is(err, cluster.ErrDuplicateNode) {
			return cli.BadInput(err)
		}
		return err
	}
	svc.node = node
	sink.SetFence(node.Fence)
	log.Info("joined the fleet", zap.String("node", c.Node.ID), zap.String("bucket", c.Cluster.Bucket),
		zap.Duration("lease_ttl", c.Cluster.LeaseTTL.Duration))
	if c.API.Listen != "off" {
		// The console's stream page shows counts and events of streams
		// that any node of the fleet runs: they are read from NATS.
		recent, err := api.NewRecent(sink.Conn(), c.NATS.SubjectPrefix)
		if err != nil {
			return err
		}
		defer recent.Close()
		health := doctor.NewHealth(reg)
		h := api.New(api.Options{Registry: streams, Status: sup.Status, CheckModel: c.CheckModel, Token: token, Sources: sources,
			Recent: recent, Health: func(ctx context.Context) (any, error) { return health.Report(ctx) },
			Classes: func(sp registry.Spec) *registry.FieldError { return engines.StreamClasses(&c, sp) },
			Logger:  log.Named("api"), NATS: sink.State, Known: svc.knownEntries, Ready: svc.ready,
			Where: func(id string) (string, *pipeline.StatusSnapshot) { return svc.where(id) },
			Nodes: func(ctx context.Context) (any, error) { return node.Nodes(ctx) },
			Drain: func(ctx context.Context, id string) error { return node.RequestDrain(ctx, id) },
			Live:  pictures, Snapshots: snaps,
		}).Handler()
		addr, stop, err := serveHTTP(log.Named("api"), c.API.Listen, h, c.API.TLSCert, c.API.TLSKey)
		if err != nil {
			return fmt.Errorf("api.listen %s: %w", c.API.Listen, err)
		}
		defer stop()
		if err := boundAsConfigured("api.listen", c.API.Listen, addr); err != nil {
			return err
		}
		scheme := "http"
		if c.API.TLSCert != "" {
			scheme = "https"
		}
		ep.API = scheme + "://" + addr
		log.Info("API", zap.String("url", ep.API+"/v1/streams"), zap.Bool("auth", token != ""),
			zap.Bool("allowed_sources", sources != nil))
		warnAPIExposure(log, &c, token, sources != nil)
	}
	// Before the API stops (deferred above, so later): ending the live
	// views lets its shutdown finish at once.
	defer pictures.Close()
	logDrift(openCtx(), log, streams, &c, seed, ep.API)
	if ready != nil {
		ready(ep)
	}

	var wg sync.WaitGroup
	engs.SetRunBatcher(func(b *pipeline.Batcher) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.Run(runCtx)
		}()
	})
	wg.Add(5)
	go func() {
		defer wg.Done()
		svc.loop(runCtx)
	}()
	nodeErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		if err := node.Run(runCtx); err != nil {
			log.Error("leaving the fleet", zap.Error(err))
			nodeErr <- err
		}
	}()
	if every := c.Decode.ReweighInterval.Duration; svc.decoders != nil && every > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			svc.reweighLoop(runCtx, every)
		}()
	}
	go func() {
		defer wg.Done()
		svc.alertLoop(runCtx)
	}()
	if snaps != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snaps.Run(runCtx)
		}()
	}
	go func() {
		defer wg.Done()
		svc.governorLoop(runCtx)
	}()
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			err := streams.WatchSynced(runCtx, func(ch registry.Change) { svc.do(func() { svc.reconcile(ch) }) }, func(key string, err error) {
				log.Error("ignoring a registry entry", zap.String("key", key), zap.Error(err))
			}, func() { svc.synced.Store(true) })
			svc.synced.Store(false)
			if err != nil && runCtx.Err() == nil {
				log.Warn("registry watch failed; retrying", zap.Error(err))
				select {
				case <-runCtx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
	if iv := c.Pipeline.ProgressInterval; iv != nil && iv.Duration > 0 && progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(iv.Duration)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					writeProgress(progress, stats.Snapshot(), sink.State(), time.Now())
				}
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
		// Hand the streams over before stopping them: each runs on
		// another node after its start-up there (docs/architecture.md).
		log.Info("shutting down: handing streams over to the other nodes")
		// Within the 15 s cmd/vigil gives a shutdown before it forces
		// the exit; streams not handed over by then expire elsewhere.
		dctx, cancel := context.WithTimeout(context.Background(), min(c.Cluster.LeaseTTL.Duration, 10*time.Second))
		start := time.Now()
		n := node.Drain(dctx)
		cancel()
		log.Info("streams handed over", zap.Int("streams", n), zap.Duration("took", time.Since(start)))
	case runErr = <-nodeErr:
	}
	stopRun()
	wg.Wait()
	sup.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	node.Close(cctx)
	cancel()
	return runErr
}

// buildVersion is the version vigil was built as, for the node's entry:
// given (config.Config.Version, what vigil version prints), else its
// module version and VCS revision.
func buildVersion(given string) string {
	if given != "" {
		return given
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return bi.Main.Version + "+" + s.Value[:12]
		}
	}
	return bi.Main.Version
}

// gpuCount is the GPUs streams are placed on (0: CPU engines only).
func gpuCount(c *config.Config, devices []int) int {
	if engines.GPUChain(c.Infer.Provider) == nil || cuda.Init() != nil {
		return 0
	}
	return len(devices)
}

// warnAPIExposure logs a WARN, at every start, for an API on an address
// other than loopback: without a token (api.insecure), or with a token
// sent in clear text (no api.tls_cert).
func warnAPIExposure(log *zap.Logger, c *config.Config, token string, restricted bool) {
	if config.Loopback(c.API.Listen) {
		return
	}
	listen := zap.String("listen", c.API.Listen)
	switch {
	case token == "":
		what := "register streams that make vigil connect to any URL they name (set api.allowed_sources to restrict them)"
		if restricted {
			what = "register streams (within api.allowed_sources)"
		}
		log.Warn("API open to the network without a token (api.insecure: true): anyone who can reach it can "+what+
			", and change or delete every stream; set api.token_file", listen)
	case c.API.TLSCert == "":
		log.Warn("API token sent in clear text over the network: set api.tls_cert and api.tls_key, or listen on "+
			"127.0.0.1 behind a TLS proxy", listen)
	}
}

// boundAsConfigured refuses a listener configured on loopback (localhost
// included) that the system bound elsewhere: "localhost" is a name, and
// the rule that spares loopback listeners a token must hold for the
// address actually bound. field names the setting in the error.
func boundAsConfigured(field, listen, bound string) error {
	if !config.Loopback(listen) {
		return nil
	}
	host, _, err := net.SplitHostPort(bound)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return cli.BadInput(fmt.Errorf("%s %s: bound to %s, which is not a loopback address", field, listen, bound))
	}
	return nil
}

// writeProgress writes the progress lines (pipeline.WriteProgress) and,
// while NATS is down, one more line saying so: how long, what the client
// holds and what was lost, e.g.
//
//	NATS             down 12 s: 288 messages (310 KiB of 8.0 MiB) held in the reconnect buffer, sent when it is back, lost if it fills or vigil stops; undelivered 0
func writeProgress(w io.Writer, snaps []pipeline.StreamSnapshot, st sinks.NATSState, now time.Time) {
	held := ""
	if !st.Connected {
		held = "NATS down " + cli.RoughDuration(now.Sub(st.DownSince))
	}
	pipeline.WriteProgress(w, snaps, held)
	if !st.Connected {
		fmt.Fprintf(w, "%-16s down %s: %d messages (%s of %s) held in the reconnect buffer, sent when it is back, lost if it fills or vigil stops; undelivered %d\n",
			"NATS", cli.RoughDuration(now.Sub(st.DownSince)), st.HeldMessages, cli.HumanBytes(st.HeldBytes), cli.HumanBytes(st.BufferLimitBytes), st.Undelivered)
	}
}

// serveHTTP listens on addr and serves h (over TLS when cert and key are
// set) until stop is called; it returns the bound address. A server that
// stops serving on its own (its listener failed) is logged on log, and so
// are requests stop had to cut after 2 s.
func serveHTTP(log *zap.Logger, addr string, h http.Handler, cert, key string) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			ln.Close()
			return "", nil, fmt.Errorf("TLS key pair: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("stopped serving", zap.String("listen", addr), zap.Error(err))
		}
	}()
	return ln.Addr().String(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("requests still running after 2 s were cut", zap.Error(err))
			// Close's error is from closing the listener again: Shutdown
			// closed it already.
			_ = srv.Close()
		}
		<-done
	}, nil
}
