package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

// One goroutine of nats.go v1.55.0 is let go: jetstream's ObjectStore.Put
// (event snapshots, internal/live) makes a publisher for each object,
// whose newAsyncReply starts resetPendingAcksOnReconnect, and removes it
// when Put returns (cleanupReplySub sets the status channel to nil). When
// that goroutine first runs after the removal, it reads the nil channel
// and waits for ever (jetstream/publish.go:567-570). It is nats.go's, it
// happens in some runs only (a loaded machine runs the goroutine late),
// and this package cannot fix it; every other goroutine is checked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
