package registry_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/internal/testenv"
)

// TestUpdateConflictReplicated races two writers on one stream of a
// 3-replica bucket, 30 rounds: in each exactly one update wins, the loser
// gets ErrConflict (a replicated bucket answers most compare-and-set losers
// with error code 10164, not the 10071 of a single server), and the stored
// spec is the winner's, so no acknowledged write is lost.
func TestUpdateConflictReplicated(t *testing.T) {
	cl := testenv.StartNATSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var regs [2]*registry.Registry
	for i := range regs {
		nc, err := nats.Connect(cl.URL())
		require.NoError(t, err)
		defer nc.Close()
		var r *registry.Registry
		// The meta leader may still be settling: creating an R3 bucket
		// is retried for a while.
		testenv.Eventually(t, func() bool {
			r, err = registry.Open(ctx, nc, "race", 3)
			return err == nil
		}, 30*time.Second, 200*time.Millisecond, "opening an R3 bucket: %v", err)
		regs[i] = r
	}
	_, err := regs[0].Create(ctx, registry.Spec{ID: "cam", URL: "rtsp://cam/1"})
	require.NoError(t, err)
	codes := map[string]int{}
	for round := range 30 {
		e, err := regs[0].Get(ctx, "cam")
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sp := e.Spec
				sp.Labels = map[string]string{"writer": strconv.Itoa(w), "round": strconv.Itoa(round)}
				_, errs[w] = regs[w].Update(ctx, sp, e.Revision)
			}()
		}
		wg.Wait()
		winner := -1
		for w, err := range errs {
			switch {
			case err == nil:
				require.Equal(t, -1, winner, "round %d: both updates at revision %d succeeded", round, e.Revision)
				winner = w
			case errors.Is(err, registry.ErrConflict):
				codes[err.Error()]++
			default:
				t.Fatalf("round %d writer %d: %v, want ErrConflict", round, w, err)
			}
		}
		require.NotEqual(t, -1, winner, "round %d: no update succeeded: %v", round, errs)
		got, err := regs[1].Get(ctx, "cam")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"writer": strconv.Itoa(winner), "round": strconv.Itoa(round)}, got.Spec.Labels,
			"round %d: the stored spec is not the acknowledged winner's", round)
	}
}
