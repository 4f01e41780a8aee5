package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvOperation is the header NATS's key-value layer writes on a delete or
// purge ("DEL", "PURGE"; nats.go names it KV-Operation, unexported).
const kvOperation = "KV-Operation"

// entry is one key's last value as the bucket's stream leader holds it.
type entry struct {
	value    []byte
	revision uint64
	created  time.Time // when the value was written (the server's clock)
}

// reader reads the lease bucket from its stream's leader. nats.go's
// key-value gets are direct gets, which any replica answers once it is
// about 90 % caught up, and its key listing is a consumer that may sit on
// any replica; a replica behind can answer with an old value, or with
// none where the newest ones have aged out of the bucket's TTL there
// (nats-server#4162; NATS documents direct gets as not read-your-writes
// and points at a message get to the stream leader for consistent reads).
// In TestFleet, just after a NATS server restarted, `vigil nodes ls`
// left out a live node whose entry was renewed every half second. Every
// read the fleet decides on (registration, heartbeats, lease rechecks, the
// node and owner lists, a drain's target) goes through reader instead:
// JetStream's message get ($JS.API.STREAM.MSG.GET) and stream info, both
// answered by the leader. The node's watcher still keeps its view.
type reader struct {
	js     nats.JetStreamContext
	stream string // the bucket's stream, KV_<bucket>
	pre    string // the subject of a key less the key, $KV.<bucket>.
}

func newReader(nc *nats.Conn, bucket string) (*reader, error) {
	js, err := nc.JetStream()
	if err != nil {
		return nil, err
	}
	return &reader{js: js, stream: "KV_" + bucket, pre: "$KV." + bucket + "."}, nil
}

// get returns key's last value. Errors: jetstream.ErrKeyNotFound when it
// has none (never written, deleted, purged, or aged out: the last message
// is then a marker); NATS's errors (ctx's deadline bounds the request).
func (r *reader) get(ctx context.Context, key string) (entry, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	m, err := r.js.GetLastMsg(r.stream, r.pre+key, nats.Context(ctx))
	if err != nil {
		if errors.Is(err, nats.ErrMsgNotFound) {
			return entry{}, jetstream.ErrKeyNotFound
		}
		return entry{}, fmt.Errorf("reading %s from %s: %w", key, r.stream, err)
	}
	if m.Header.Get(kvOperation) != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
		return entry{}, jetstream.ErrKeyNotFound
	}
	return entry{value: m.Data, revision: m.Sequence, created: m.Time}, nil
}

// list returns the keys that match pattern (a key with NATS wildcards,
// "node.*") and have a value, each with its last value: the stream
// leader's subjects, then a get of each. A key deleted or aged out between
// the two is left out. Errors come from NATS.
func (r *reader) list(ctx context.Context, pattern string) (map[string]entry, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	info, err := r.js.StreamInfo(r.stream, &nats.StreamInfoRequest{SubjectsFilter: r.pre + pattern}, nats.Context(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing %s in %s: %w", pattern, r.stream, err)
	}
	out := map[string]entry{}
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, r.pre)
		e, err := r.get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[key] = e
	}
	return out, nil
}

// readTimeout bounds a read whose context has no deadline (an API
// request's): the default of nats.go's jetstream package for its requests.
const readTimeout = 5 * time.Second

// bounded returns ctx, with readTimeout when it has no deadline.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, readTimeout)
}
