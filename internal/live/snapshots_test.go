package live

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/natsserver"
)

// A JetStream that does not answer while vigil starts (a cluster still
// electing its leader; here a context already over) does not stop the
// start: the bucket is made at its next use. Found in a clean-clone CI
// run of a 3-server embedded cluster, whose node refused to start
// ("event snapshots bucket vigil_snapshots: context deadline exceeded").
func TestSnapshotsBucketMadeLater(t *testing.T) {
	ns, err := natsserver.Start("127.0.0.1:0", t.TempDir(), "")
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	defer nc.Close()

	over, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := OpenSnapshots(over, nc, SnapshotOptions{Bucket: "t_snapshots", TTL: time.Minute})
	require.NoError(t, err, "a JetStream that did not answer is no reason not to start")
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	_, err = s.Get(ctx, "x")
	require.Error(t, err, "within bucketRetry of the failed try, the bucket is not tried again")
	require.NotErrorIs(t, err, ErrNoSnapshot)
	s.storeMu.Lock()
	s.lastTry = time.Now().Add(-bucketRetry)
	s.storeMu.Unlock()
	_, err = s.Get(ctx, "x")
	require.ErrorIs(t, err, ErrNoSnapshot, "the bucket is made at its next use")
}
