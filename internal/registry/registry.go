// Package registry stores the streams that operators register, in a NATS
// JetStream key-value bucket: on the embedded server (file storage under the
// data directory) or on an external server or cluster. Keys are
// "streams.<id>"; values are JSON Specs. Writes use the bucket's revisions
// for optimistic concurrency, so concurrent API calls (or several vigil
// nodes sharing the bucket) never overwrite each other silently.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors returned by Registry methods.
var (
	ErrNotFound = errors.New("stream not found")
	ErrExists   = errors.New("stream already exists")
	ErrConflict = errors.New("stream changed concurrently; retry")
)

// DefaultBucket is the key-value bucket name.
const DefaultBucket = "vigil_streams"

// Registry is a handle on the bucket; safe for concurrent use.
type Registry struct {
	kv jetstream.KeyValue
}

// Open creates the bucket if it does not exist (file storage, 5 revisions
// of history per key, replicas as given; 1 on the embedded server) and
// returns a handle. Errors name the bucket.
func Open(ctx context.Context, nc *nats.Conn, bucket string, replicas int) (*Registry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if replicas < 1 {
		replicas = 1
	}
	cfg := jetstream.KeyValueConfig{
		Bucket: bucket, Description: "vigil stream registry", History: 5,
		Storage: jetstream.FileStorage, Replicas: replicas,
	}
	// A cluster that has just formed can leave a request unanswered (its
	// meta leader changing) or lack the peers for the replicas yet: ask
	// again, each attempt with its own deadline, until ctx ends.
	var kv jetstream.KeyValue
	for {
		actx, cancel := context.WithTimeout(ctx, openAttempt)
		kv, err = js.CreateOrUpdateKeyValue(actx, cfg)
		cancel()
		if err == nil || !transient(err) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w (does the NATS server have JetStream enabled?)", bucket, err)
	}
	return &Registry{kv: kv}, nil
}

// openAttempt bounds one attempt of Open to create or update the bucket.
const openAttempt = 3 * time.Second

// transient reports whether err from a JetStream request is one a
// cluster that is still forming answers: no answer in time, no
// responders, "temporarily unavailable" (503), or not enough peers known
// yet for the replicas (10005).
func transient(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code == 503 || api.ErrorCode == 10005
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse)
}

// ErrNoBucket is returned by Lookup when the bucket does not exist (no
// vigil has used it yet).
var ErrNoBucket = errors.New("no stream registry bucket")

// Lookup returns a handle on an existing bucket without creating or
// changing it (for read-only tools); ErrNoBucket when there is none.
func Lookup(ctx context.Context, nc *nats.Conn, bucket string) (*Registry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w %s", ErrNoBucket, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %s: %w (does the NATS server have JetStream enabled?)", bucket, err)
	}
	return &Registry{kv: kv}, nil
}

// Entry is a stored spec with its revision.
type Entry struct {
	Spec     Spec
	Revision uint64
	Created  time.Time
}

// Create stores a new spec; ErrExists if the id is taken.
func (r *Registry) Create(ctx context.Context, s Spec) (uint64, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return 0, err
	}
	rev, err := r.kv.Create(ctx, Key(s.ID), b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %s", ErrExists, s.ID)
	}
	return rev, err
}

// Get returns a stream; ErrNotFound if there is none.
func (r *Registry) Get(ctx context.Context, id string) (Entry, error) {
	e, err := r.kv.Get(ctx, Key(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Entry{}, err
	}
	return decodeEntry(e)
}

// ErrInvalidEntry marks a stored value that is not a valid spec for its
// key (written to the bucket by something other than vigil's API).
var ErrInvalidEntry = errors.New("invalid registry entry")

func decodeEntry(e jetstream.KeyValueEntry) (Entry, error) {
	var s Spec
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return Entry{}, fmt.Errorf("%w: key %s holds invalid JSON: %v", ErrInvalidEntry, e.Key(), err)
	}
	if id := idFromKey(e.Key()); s.ID != id {
		return Entry{}, fmt.Errorf("%w: key %s holds the spec of %q", ErrInvalidEntry, e.Key(), s.ID)
	}
	return Entry{Spec: s, Revision: e.Revision(), Created: e.Created()}, nil
}

// List returns every valid stream, in no particular order; invalid
// entries are reported through bad (when not nil) and skipped, so one bad
// value cannot hide the others.
func (r *Registry) List(ctx context.Context, bad func(key string, err error)) ([]Entry, error) {
	lister, err := r.kv.ListKeysFiltered(ctx, "streams.*")
	if err != nil {
		return nil, err
	}
	var out []Entry
	for k := range lister.Keys() {
		e, err := r.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		ent, err := decodeEntry(e)
		if err != nil {
			if bad != nil {
				bad(k, err)
			}
			continue
		}
		out = append(out, ent)
	}
	return out, nil
}

// Update replaces a stream if it is still at revision rev; ErrConflict if
// it changed meanwhile, ErrNotFound if it was deleted.
func (r *Registry) Update(ctx context.Context, s Spec, rev uint64) (uint64, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return 0, err
	}
	n, err := r.kv.Update(ctx, Key(s.ID), b, rev)
	// A single server answers a lost compare-and-set with error code
	// 10071 and a replicated bucket mostly with 10164; nats.go maps both
	// to ErrKeyRevisionMismatch.
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, fmt.Errorf("%w: %s", ErrConflict, s.ID)
	}
	return n, err
}

// Delete removes a stream, even one whose stored value is invalid;
// ErrNotFound if there is none.
func (r *Registry) Delete(ctx context.Context, id string) error {
	if _, err := r.kv.Get(ctx, Key(id)); errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	} else if err != nil {
		return err
	}
	return r.kv.Delete(ctx, Key(id))
}

// seededKey marks that a config stream was seeded once ("seeded.<id>"), so
// that deleting it through the API is not undone by the next start.
func seededKey(id string) string { return "seeded." + id }

// Seed creates each spec that was never seeded before and is not stored,
// and leaves the others alone: operators' changes, deletions included, win
// over the config file. It returns how many it created.
func (r *Registry) Seed(ctx context.Context, specs []Spec) (int, error) {
	n := 0
	for _, s := range specs {
		if _, err := r.kv.Create(ctx, seededKey(s.ID), []byte("1")); errors.Is(err, jetstream.ErrKeyExists) {
			continue // seeded by an earlier start
		} else if err != nil {
			return n, fmt.Errorf("seeding %s: %w", s.ID, err)
		}
		_, err := r.Create(ctx, s)
		switch {
		case err == nil:
			n++
		case errors.Is(err, ErrExists):
		default:
			return n, fmt.Errorf("seeding %s: %w", s.ID, err)
		}
	}
	return n, nil
}

// Pending returns the specs that Seed would create now (never seeded and
// not stored), without writing anything.
func (r *Registry) Pending(ctx context.Context, specs []Spec) ([]Spec, error) {
	has := func(key string) (bool, error) {
		_, err := r.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	var out []Spec
	for _, s := range specs {
		seeded, err := has(seededKey(s.ID))
		if err != nil {
			return nil, err
		}
		stored, err := has(Key(s.ID))
		if err != nil {
			return nil, err
		}
		if !seeded && !stored {
			out = append(out, s)
		}
	}
	return out, nil
}

// Drift is a config stream that the registry holds otherwise than the
// config file says: changed or deleted through the API since it was
// seeded, or registered through the API before the file named it.
type Drift struct {
	ID string
	// Removed is true for a stream seeded once and deleted since: it is
	// not run, and the file's entry is ignored.
	Removed bool
	// Differences are the fields whose stored values differ from the
	// file's (empty when Removed).
	Differences []Difference
}

// Drift compares each spec (the config file's streams, after Seed) with
// the registry and returns those that differ, in the order given. Entries
// that are not valid specs are left out (Watch reports them).
func (r *Registry) Drift(ctx context.Context, specs []Spec) ([]Drift, error) {
	var out []Drift
	for _, s := range specs {
		e, err := r.Get(ctx, s.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			_, err := r.kv.Get(ctx, seededKey(s.ID))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // never seeded: Seed was not called
			} else if err != nil {
				return nil, err
			}
			out = append(out, Drift{ID: s.ID, Removed: true})
		case errors.Is(err, ErrInvalidEntry):
		case err != nil:
			return nil, err
		default:
			if d := e.Spec.Diff(s); len(d) > 0 {
				out = append(out, Drift{ID: s.ID, Differences: d})
			}
		}
	}
	return out, nil
}

// Change is one watched update: Spec is nil when the stream was deleted.
type Change struct {
	ID       string
	Spec     *Spec
	Revision uint64
}

// Watch calls fn for every stream present now, then for every change,
// until ctx ends. Entries that do not decode are reported through bad and
// skipped.
func (r *Registry) Watch(ctx context.Context, fn func(Change), bad func(key string, err error)) error {
	return r.WatchSynced(ctx, fn, bad, nil)
}

// WatchSynced is Watch that also calls synced, when not nil, once fn has
// been called for every stream present when the watch began (the
// registry has been read whole; vigil's /readyz waits for it).
func (r *Registry) WatchSynced(ctx context.Context, fn func(Change), bad func(key string, err error), synced func()) error {
	w, err := r.kv.Watch(ctx, "streams.*")
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("registry watch closed")
			}
			if e == nil { // end of the initial values
				if synced != nil {
					synced()
				}
				continue
			}
			id := idFromKey(e.Key())
			if id == "" {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				fn(Change{ID: id, Revision: e.Revision()})
				continue
			}
			ent, err := decodeEntry(e)
			if err != nil {
				bad(e.Key(), err)
				continue
			}
			fn(Change{ID: id, Spec: &ent.Spec, Revision: e.Revision()})
		}
	}
}
