package decode_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tsPacket is the MPEG-TS packet size in bytes (ISO/IEC 13818-1 §2.4.3.2).
const tsPacket = 188

// liveHTTP serves an MPEG-TS file over HTTP (chunked, not seekable) the
// way a live encoder would: the bytes that complete video packet i go out
// interval·i after the request (an MPEG-TS video PES has no length: the
// demuxer completes packet i when packet i+1 starts, so those bytes run to
// packet i+1's first TS packet). Packet byte offsets come from ffprobe.
// With stopAfter > 0 only that many packets are completed, and then the
// connection stays open and silent, like a camera that hangs. It returns
// the URL; the server stops when the test ends.
func liveHTTP(t *testing.T, file string, interval time.Duration, stopAfter int) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "packet=pos", "-of", "csv=p=0", file).Output()
	require.NoError(t, err)
	var cuts []int // cuts[i]: where the bytes that complete packet i end
	fields := strings.Fields(string(out))
	for i := 1; i < len(fields); i++ {
		pos, err := strconv.Atoi(strings.Trim(fields[i], ","))
		require.NoError(t, err)
		cuts = append(cuts, min(pos+tsPacket, len(data)))
	}
	cuts = append(cuts, len(data))
	if stopAfter > 0 {
		cuts = cuts[:stopAfter]
	}
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "video/mp2t")
		start, sent := time.Now(), 0
		for i, end := range cuts {
			select {
			case <-done:
				return
			case <-r.Context().Done():
				return
			case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
			}
			if end <= sent {
				continue
			}
			if _, err := w.Write(data[sent:end]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			sent = end
		}
		if stopAfter > 0 { // hang: keep the connection open, send nothing
			select {
			case <-done:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) }) // runs first: the handlers return, then Close
	return srv.URL + "/live.ts"
}
