package app_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
)

// A disabled stream runs on no node: GET /v1/nodes does not list it among
// the node's streams, and GET /v1/streams/{id} has no node and a real
// since. The node's heartbeat listed every stream its supervisor knew,
// disabled ones too, so a disabled stream showed "node" (and counted in
// vigil nodes ls) with "since": "0001-01-01T00:00:00Z".
func TestDisabledStreamOnNoNode(t *testing.T) {
	v := vigiltest.Start(t, t.TempDir(), "pipeline: {progress_interval: 0s}\ncluster: {lease_ttl: 1s}")
	clip := testenv.Media(t, "Megamind.avi")
	code, b := v.Call("POST", "/v1/streams", `{"id":"on","url":"`+clip+`","realtime":true,"loop":true}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	code, b = v.Call("POST", "/v1/streams", `{"id":"off","url":"`+clip+`","enabled":false}`)
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("on", "running", time.Minute)

	type node struct {
		Streams map[string]json.RawMessage `json:"streams"`
	}
	var nodes struct{ Nodes []node }
	// A heartbeat every quarter lease TTL (250 ms) lists "on" once it runs;
	// 10 s is a margin for a loaded machine.
	testenv.Eventually(t, func() bool {
		code, b := v.Call("GET", "/v1/nodes", "")
		if code != http.StatusOK || json.Unmarshal(b, &nodes) != nil || len(nodes.Nodes) != 1 {
			return false
		}
		_, ok := nodes.Nodes[0].Streams["on"]
		return ok
	}, 10*time.Second, 50*time.Millisecond, "the node's entry lists the running stream")
	// Two more heartbeats: had "off" been in them, it would be listed now.
	time.Sleep(600 * time.Millisecond)
	code, b = v.Call("GET", "/v1/nodes", "")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(b, &nodes))
	require.NotContains(t, nodes.Nodes[0].Streams, "off", string(b))

	code, b = v.Call("GET", "/v1/streams/off", "")
	require.Equal(t, http.StatusOK, code)
	var s struct {
		Node   *string `json:"node"`
		Status struct {
			State string    `json:"state"`
			Since time.Time `json:"since"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal(b, &s))
	require.Nil(t, s.Node, "a disabled stream runs on no node: %s", b)
	require.Equal(t, "stopped", s.Status.State, string(b))
	require.False(t, s.Status.Since.IsZero(), string(b))
}
