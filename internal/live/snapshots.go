package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/pipeline"
)

// SnapshotOptions configure event snapshots (live.snapshots).
type SnapshotOptions struct {
	// Bucket is the JetStream object store's name: <nats prefix>_snapshots.
	Bucket string
	// TTL is how long a snapshot is kept (the bucket's max age; 0: for
	// good, until MaxBytes).
	TTL time.Duration
	// MaxBytes caps the bucket's size (0: no cap). The object store
	// refuses new objects when full (its stream discards new messages,
	// so that no stored snapshot loses a chunk): they are dropped and
	// counted (outcome store_error) until older ones expire.
	MaxBytes int64
	// Replicas of the bucket in a NATS cluster (nats.replicas).
	Replicas int
	// Queue bounds the frames waiting to be encoded (default 8): when it is
	// full a frame's snapshots are dropped and counted (queue_full), so
	// that the pipeline never waits for the encoder.
	Queue int
	// Quality is the JPEG quality, 1-100 (default 80).
	Quality int
	Logger  *zap.Logger
}

// EventMark asks for an event snapshot: the service's analyzer gives one
// to the stream's tap (pipeline.Tap.Mark) for each event that carries a
// snapshot, and the picture of that frame, with the object highlighted,
// is stored under ID.
type EventMark struct {
	// ID is the object's name (SnapshotID).
	ID string
	// Highlight is the event's object and its caption ("zone_enter door").
	Highlight Highlight
}

// SnapshotID names an event's snapshot: "<stream>.<epoch>.e<seq>", the
// event's identity (as its Nats-Msg-Id, with dots).
func SnapshotID(streamID, epoch string, seq uint64) string {
	return streamID + "." + epoch + ".e" + strconv.FormatUint(seq, 10)
}

// ValidSnapshotID reports whether id can be a SnapshotID: 1-160
// characters of A-Z a-z 0-9 _ - and '.'.
func ValidSnapshotID(id string) bool {
	if id == "" || len(id) > 160 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// ErrNoSnapshot is returned by Get for a snapshot that is not in the
// bucket: never stored (dropped, or still being encoded) or expired.
var ErrNoSnapshot = errors.New("no such snapshot (never stored, or expired)")

// Snapshots encodes event snapshots and stores them in a JetStream
// object store, on its own goroutine (Run).
type Snapshots struct {
	o     SnapshotOptions
	store jetstream.ObjectStore
	q     chan *pipeline.TapFrame
	m     *metrics // the hub's (New sets it); else unregistered ones
	// encode runs a job on the hub's encoders (New sets it); nil: on the
	// calling goroutine.
	encode func(func()) bool
	log    *zap.Logger
}

// OpenSnapshots creates or updates the bucket on nc's JetStream. Errors
// are JetStream's (no JetStream, a bucket with other settings that
// cannot change).
func OpenSnapshots(ctx context.Context, nc *nats.Conn, o SnapshotOptions) (*Snapshots, error) {
	if o.Queue <= 0 {
		o.Queue = 8
	}
	if o.Quality <= 0 || o.Quality > 100 {
		o.Quality = 80
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.ObjectStoreConfig{Bucket: o.Bucket, Description: "vigil event snapshots (JPEG), by snapshot id",
		TTL: o.TTL, MaxBytes: o.MaxBytes, Storage: jetstream.FileStorage, Replicas: max(o.Replicas, 1)}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = -1
	}
	st, err := js.CreateOrUpdateObjectStore(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("event snapshots bucket %s: %w", o.Bucket, err)
	}
	return &Snapshots{o: o, store: st, q: make(chan *pipeline.TapFrame, o.Queue), m: newMetrics(nil), log: o.Logger}, nil
}

// offer queues a marked frame without blocking: when the queue is full
// its snapshots are dropped and counted. On the stream's worker.
func (s *Snapshots) offer(tf *pipeline.TapFrame, m *metrics) {
	select {
	case s.q <- tf:
	default:
		m.snapshot.WithLabelValues(OutcomeQueueFull).Add(float64(len(tf.Marks)))
		if tf.Picture != nil {
			tf.Picture.Free()
		}
	}
}

// Run encodes and stores the queued snapshots until ctx ends. Start it
// after New made the Hub that serves it (which shares its metrics and
// encoder tokens with it).
func (s *Snapshots) Run(ctx context.Context) {
	var lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case tf := <-s.q:
			if err := s.store1(ctx, tf); err != nil && time.Since(lastLog) > time.Second {
				s.log.Warn("event snapshot not stored", zap.String("stream", tf.Result.StreamID), zap.Error(err))
				lastLog = time.Now()
			}
		}
	}
}

// store1 draws, encodes and stores each snapshot of one frame.
func (s *Snapshots) store1(ctx context.Context, tf *pipeline.TapFrame) error {
	if tf.Picture == nil {
		s.m.snapshot.WithLabelValues(OutcomeNoPicture).Add(float64(len(tf.Marks)))
		return tf.Err
	}
	var errs []error
	for i, mk := range tf.Marks {
		em, ok := mk.(EventMark)
		if !ok {
			continue
		}
		t := time.Now()
		var b []byte
		draw := func() {
			fullRange(tf.Picture) // once: it marks the picture full-range
			img := tf.Picture.Image
			if i < len(tf.Marks)-1 {
				img = cloneYCbCr(img) // the next mark draws on a clean picture
			}
			Annotate(img, tf.Result.Detections, nil, &em.Highlight)
			b = encode(img, s.o.Quality)
		}
		if s.encode == nil {
			draw()
		} else if !s.encode(draw) {
			return errors.New("stopping")
		}
		s.m.encodeS.WithLabelValues(VariantEvent).Observe(time.Since(t).Seconds())
		s.m.encoded.WithLabelValues(VariantEvent).Inc()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.store.Put(pctx, jetstream.ObjectMeta{Name: em.ID, Description: em.Highlight.Caption,
			Headers: nats.Header{"Content-Type": []string{"image/jpeg"}}}, bytes.NewReader(b))
		cancel()
		if err != nil {
			s.m.snapshot.WithLabelValues(OutcomeStoreError).Inc()
			errs = append(errs, fmt.Errorf("%s: %w", em.ID, err))
			continue
		}
		s.m.snapshot.WithLabelValues(OutcomeStored).Inc()
	}
	tf.Picture.Free()
	return errors.Join(errs...)
}

// Get returns the JPEG of snapshot id. Errors: ErrNoSnapshot, or
// JetStream's (NATS down, timeout).
func (s *Snapshots) Get(ctx context.Context, id string) ([]byte, error) {
	b, err := s.store.GetBytes(ctx, id)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNoSnapshot
	}
	return b, err
}

// Bucket is the object store's name.
func (s *Snapshots) Bucket() string { return s.o.Bucket }
