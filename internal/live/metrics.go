package live

import "github.com/prometheus/client_golang/prometheus"

// Variants of an encoded picture (label variant).
const (
	VariantPlain     = "plain"     // the frame as decoded
	VariantAnnotated = "annotated" // with the overlay drawn (Annotate)
	VariantEvent     = "event"     // an event snapshot (the object highlighted)
)

// Outcomes of an event snapshot (label outcome).
const (
	OutcomeStored     = "stored"      // in the object store
	OutcomeQueueFull  = "queue_full"  // dropped: the encoder's queue was full
	OutcomeNoPicture  = "no_picture"  // dropped: the frame could not be copied (GPU)
	OutcomeStoreError = "store_error" // dropped: the object store refused it (full, down)
)

// metrics are the live package's collectors:
//
//   - vigil_live_viewers: viewers watching now (live views and snapshot
//     requests waiting for a frame), across streams;
//   - vigil_live_viewers_refused_total: viewers refused at the cap
//     (live.max_viewers);
//   - vigil_live_jpeg_encoded_total{variant} and
//     vigil_live_jpeg_encode_seconds{variant}: pictures encoded, and the
//     time to draw and encode each (off the pipeline's goroutines);
//   - vigil_live_viewer_frames_skipped_total: frames a viewer did not get
//     because it had not taken the previous one yet (a slow client);
//   - vigil_live_event_snapshots_total{outcome}: event snapshots stored or
//     dropped, by why.
type metrics struct {
	viewers  prometheus.Gauge
	refused  prometheus.Counter
	encoded  *prometheus.CounterVec
	encodeS  *prometheus.HistogramVec
	skipped  prometheus.Counter
	snapshot *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		viewers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_live_viewers",
			Help: "Viewers of live pictures now (live views, and snapshot requests waiting for a frame), across streams."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_live_viewers_refused_total",
			Help: "Viewers refused because live.max_viewers were watching."}),
		encoded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_live_jpeg_encoded_total",
			Help: "JPEG pictures encoded for viewers and event snapshots, by variant (plain, annotated, event)."}, []string{"variant"}),
		encodeS: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vigil_live_jpeg_encode_seconds",
			Help:    "Time to draw (annotated, event) and encode one JPEG picture, by variant.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12)}, []string{"variant"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_live_viewer_frames_skipped_total",
			Help: "Frames a viewer did not get because it had not taken the previous one yet (a slow client)."}),
		snapshot: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_live_event_snapshots_total",
			Help: "Event snapshots stored in the object store or dropped, by outcome (stored, queue_full, no_picture, store_error)."}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.viewers, m.refused, m.encoded, m.encodeS, m.skipped, m.snapshot)
	}
	for _, v := range []string{VariantPlain, VariantAnnotated, VariantEvent} {
		m.encoded.WithLabelValues(v)
	}
	for _, o := range []string{OutcomeStored, OutcomeQueueFull, OutcomeNoPicture, OutcomeStoreError} {
		m.snapshot.WithLabelValues(o)
	}
	return m
}
