package live

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	o   SnapshotOptions
	js  jetstream.JetStream
	cfg jetstream.ObjectStoreConfig
	// store is the bucket once made (storeMu); until then each use tries
	// to make it, at most every bucketRetry.
	storeMu sync.Mutex
	store   jetstream.ObjectStore
	lastTry time.Time
	q       chan *pipeline.TapFrame
	m       *metrics // the hub's (New sets it); else unregistered ones
	// encode runs a job on the hub's encoders (New sets it); nil: on the
	// calling goroutine.
	encode func(func()) bool
	log    *zap.Logger
}

// bucketRetry is how often a bucket that could not be made is tried
// again, while snapshots are counted as store_error.
const bucketRetry = 5 * time.Second

// OpenSnapshots creates or updates the bucket on nc's JetStream. A
// JetStream that does not answer in time (a NATS cluster still electing
// its leader while the nodes start) is no error: the bucket is made at
// the first snapshot after it answers, tried at most every bucketRetry,
// and snapshots until then are counted as store_error. Errors are the
// server's refusals (a bucket with other settings that cannot change, no
// JetStream).
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
	s := &Snapshots{o: o, js: js, cfg: cfg, q: make(chan *pipeline.TapFrame, o.Queue), m: newMetrics(nil), log: o.Logger}
	if _, err := s.bucket(ctx); err != nil {
		var refused *jetstream.APIError
		if errors.As(err, &refused) {
			return nil, err
		}
		o.Logger.Warn("event snapshots bucket not made yet; tried again at the first snapshot", zap.String("bucket", o.Bucket), zap.Error(err))
	}
	return s, nil
}

// bucket returns the object store, making it when it does not exist yet
// (at most every bucketRetry after a failure).
func (s *Snapshots) bucket(ctx context.Context) (jetstream.ObjectStore, error) {
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if s.store != nil {
		return s.store, nil
	}
	if !s.lastTry.IsZero() && time.Since(s.lastTry) < bucketRetry {
		return nil, fmt.Errorf("event snapshots bucket %s: not made yet (tried %s ago)", s.o.Bucket, time.Since(s.lastTry).Round(time.Millisecond))
	}
	s.lastTry = time.Now()
	st, err := s.js.CreateOrUpdateObjectStore(ctx, s.cfg)
	if err != nil {
		return nil, fmt.Errorf("event snapshots bucket %s: %w", s.o.Bucket, err)
	}
	s.store = st
	return st, nil
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
		store, err := s.bucket(pctx)
		if err == nil {
			_, err = store.Put(pctx, jetstream.ObjectMeta{Name: em.ID, Description: em.Highlight.Caption,
				Headers: nats.Header{"Content-Type": []string{"image/jpeg"}}}, bytes.NewReader(b))
		}
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
	store, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	b, err := store.GetBytes(ctx, id)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNoSnapshot
	}
	return b, err
}

// Bucket is the object store's name.
func (s *Snapshots) Bucket() string { return s.o.Bucket }
