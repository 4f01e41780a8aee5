package cluster

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
)

// TestReaderFromLeader checks what reader reads and where: a live key's
// value and revision; a deleted, purged or aged-out key (its last message a
// marker) is not found; list gives the live keys of a pattern only. And it
// sends no direct get (which any replica may answer, stale after a
// restart: nats-server#4162), only JetStream's message get and stream
// info, which the stream leader answers; nats.go's own kv.Get, on the same
// bucket, does send direct gets, so the check sees them when they happen.
func TestReaderFromLeader(t *testing.T) {
	nc := server(t, true)
	kv, err := openBucket(t.Context(), Options{Conn: nc, Bucket: "rd", TTL: testTTL})
	require.NoError(t, err)
	rd, err := newReader(nc, "rd")
	require.NoError(t, err)

	var direct, leader atomic.Int64
	sub1, err := nc.Subscribe("$JS.API.DIRECT.GET.KV_rd.>", func(*nats.Msg) { direct.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub1.Unsubscribe() }()
	sub2, err := nc.Subscribe("$JS.API.DIRECT.GET.KV_rd", func(*nats.Msg) { direct.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub2.Unsubscribe() }()
	sub3, err := nc.Subscribe("$JS.API.STREAM.MSG.GET.KV_rd", func(*nats.Msg) { leader.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub3.Unsubscribe() }()
	require.NoError(t, nc.Flush())

	rev, err := kv.Put(t.Context(), "node.a", []byte(`{"id":"a"}`))
	require.NoError(t, err)
	_, err = kv.Put(t.Context(), "node.b", []byte(`{"id":"b"}`))
	require.NoError(t, err)
	_, err = kv.Put(t.Context(), "node.c", []byte(`{"id":"c"}`))
	require.NoError(t, err)
	_, err = kv.Put(t.Context(), "lease.s0", []byte(`{"node":"a"}`))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(t.Context(), "node.b"))
	require.NoError(t, kv.Purge(t.Context(), "node.c"))

	e, err := rd.get(t.Context(), "node.a")
	require.NoError(t, err)
	require.Equal(t, `{"id":"a"}`, string(e.value))
	require.Equal(t, rev, e.revision)
	require.WithinDuration(t, time.Now(), e.created, time.Minute) // the server's clock is this host's
	for _, k := range []string{"node.b", "node.c", "node.never"} {
		_, err = rd.get(t.Context(), k)
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, k)
	}
	es, err := rd.list(t.Context(), "node.*")
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Contains(t, es, "node.a")

	// Aged out: the bucket's TTL leaves a limit marker, which is no value.
	_, err = kv.Put(t.Context(), "node.d", []byte(`{"id":"d"}`))
	require.NoError(t, err)
	testenv.Eventually(t, func() bool {
		_, err := rd.get(t.Context(), "node.d")
		return err != nil
	}, 3*testTTL, testTTL/8, "node.d aged out")
	_, err = rd.get(t.Context(), "node.d")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound)

	require.NoError(t, nc.Flush())
	require.Zero(t, direct.Load(), "reader sent direct gets")
	require.Positive(t, leader.Load(), "reader's message gets")
	_, err = kv.Put(t.Context(), "node.e", []byte(`{"id":"e"}`))
	require.NoError(t, err)
	_, err = kv.Get(t.Context(), "node.e")
	require.NoError(t, err)
	testenv.Eventually(t, func() bool { return direct.Load() > 0 }, 5*time.Second, 10*time.Millisecond,
		"kv.Get's direct get not seen: the check above would not see one either")
}
