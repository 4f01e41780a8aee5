package api

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Recent counts the bytes it keeps, gives them back when a stream is
// forgotten or an event leaves a stream's ring, and drops new messages
// past recentBytes, so that publishers on NATS cannot make it grow
// without bound.
func TestRecentBounded(t *testing.T) {
	r := &Recent{prefix: "vigil", streams: map[string]*recentStream{}}
	ev := `{"type":"zone_enter","pad":"` + strings.Repeat("x", 100) + `"}`
	for range RecentEvents + 10 {
		r.add(&nats.Msg{Subject: "vigil.a.analytics", Data: []byte(ev)})
	}
	r.add(&nats.Msg{Subject: "vigil.a.counts", Data: []byte(`{"version":1}`)})
	r.add(&nats.Msg{Subject: "vigil.a.counts", Data: []byte(`{"version":22}`)})
	require.Equal(t, RecentEvents*len(ev)+len(`{"version":22}`), r.bytes)
	r.add(&nats.Msg{Subject: "vigil.b.analytics", Data: []byte(ev)})
	r.add(&nats.Msg{Subject: "vigil.b.analytics", Data: []byte(`not json`)})
	r.add(&nats.Msg{Subject: "other.b.analytics", Data: []byte(ev)})
	require.Len(t, r.Of("b").Events, 1, "invalid JSON and other prefixes are left out")
	r.Forget("a")
	require.Equal(t, len(ev), r.bytes)

	big := `"` + strings.Repeat("y", recentBytes/4) + `"`
	for i := range 8 {
		r.add(&nats.Msg{Subject: "vigil.s" + string(rune('a'+i)) + ".analytics", Data: []byte(big)})
	}
	require.LessOrEqual(t, r.bytes, recentBytes)
	require.Len(t, r.Of("sd").Events, 0, "past the budget, new messages are dropped")
	require.Len(t, r.Of("sa").Events, 1)
}
