package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// stillClip makes, with the ffmpeg CLI, a 4 s clip at 10 fps of a still
// picture (384×256: the astronaut's face of astronaut.png, 256×256, on
// grey), whose frames differ only by the encoder's noise, so that two
// snapshots taken a moment apart show the same picture.
func stillClip(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "still.mp4")
	cmd := exec.Command("ffmpeg", "-v", "error", "-y", "-loop", "1", "-i", testenv.Media(t, "astronaut.png"), "-filter_complex",
		"[0]crop=256:256:97:0,pad=384:256:64:0:gray,format=yuv420p", "-t", "4", "-r", "10", "-c:v", "libx264", "-preset", "veryfast", "-g", "10", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, b)
	}
	return out
}

// rawMessages keeps the detection messages of one stream as sent, by seq.
type rawMessages struct {
	mu  sync.Mutex
	seq map[uint64][]byte
}

func subscribeRaw(t *testing.T, nc *nats.Conn, stream string) *rawMessages {
	t.Helper()
	r := &rawMessages{seq: map[uint64][]byte{}}
	_, err := nc.Subscribe(sinks.Subject("vigil", stream), func(m *nats.Msg) {
		var msg sinks.Message
		if json.Unmarshal(m.Data, &msg) == nil {
			r.mu.Lock()
			r.seq[msg.Seq] = m.Data
			r.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return r
}

func (r *rawMessages) get(seq uint64) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.seq[seq]
	return b, ok
}

func (r *rawMessages) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seq)
}

// snapshot GETs path and decodes the JPEG; it returns the picture and
// the frame's seq (header Vigil-Seq).
func snapshot(t *testing.T, v *vigiltest.Vigil, path string) (*image.YCbCr, uint64) {
	t.Helper()
	resp, err := http.Get(v.EP.API + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Equal(t, "image/jpeg", resp.Header.Get("Content-Type"))
	img, err := jpeg.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	seq, err := strconv.ParseUint(resp.Header.Get(api.HeaderSeq), 10, 64)
	require.NoError(t, err)
	return img.(*image.YCbCr), seq
}

// The pictures of a real `vigil run` (embedded NATS, FFmpeg on a still
// clip, ONNX Runtime CPU with BlazeFace): snapshot.jpg is a JPEG of the
// stream's resolution; annotate=1 changes the pixels inside the detection
// boxes of that frame and none beyond a JPEG block around them; live.mjpeg
// sends JPEG parts at the viewer's rate; live.ws sends, for each frame,
// exactly the detections message published on NATS and then its JPEG;
// viewers that never read do not hold the stream up; an unknown stream is
// a 404 JSON error, and an oversized body still a 413.
func TestPictures(t *testing.T) {
	clip := stillClip(t)
	v := vigiltest.Start(t, t.TempDir(), "")
	raw := subscribeRaw(t, v.NC, "still")
	code, b := v.Call("POST", "/v1/streams", fmt.Sprintf(`{"id":"still","url":%q,"model":"blazeface","realtime":true,"loop":true}`, clip))
	require.Equal(t, http.StatusCreated, code, "%s", b)
	testenv.Eventually(t, func() bool { return raw.len() > 0 }, 60*time.Second, 50*time.Millisecond, "the stream's first message")

	t.Run("snapshot", func(t *testing.T) {
		plain, _ := snapshot(t, v, "/v1/streams/still/snapshot.jpg")
		require.Equal(t, image.Rect(0, 0, 384, 256), plain.Bounds(), "the stream's resolution, not the model's 128×128")
		ann, seq := snapshot(t, v, "/v1/streams/still/snapshot.jpg?annotate=1")
		require.Equal(t, plain.Bounds(), ann.Bounds())
		var msg sinks.Message
		testenv.Eventually(t, func() bool { _, ok := raw.get(seq); return ok }, 10*time.Second, 20*time.Millisecond, "the message of frame %d", seq)
		m, _ := raw.get(seq)
		require.NoError(t, json.Unmarshal(m, &msg))
		require.NotEmpty(t, msg.Detections, "BlazeFace finds the astronaut's face")

		// Changed: luma moved by more than 40 levels, beyond the noise
		// of two encodings of a still picture (a few levels).
		var inside, outside, outsideAll int
		for y := 0; y < 256; y++ {
			for x := 0; x < 384; x++ {
				d := int(plain.Y[plain.YOffset(x, y)]) - int(ann.Y[ann.YOffset(x, y)])
				hit := d > 40 || d < -40
				p := image.Pt(x, y)
				// JPEG codes 16×16 blocks (4:2:0 MCUs): a drawn pixel
				// can disturb its block, so "near" is within 16 px.
				in, near := false, false
				for _, det := range msg.Detections {
					r := image.Rect(int(det.Box.X1), int(det.Box.Y1), int(det.Box.X2)+1, int(det.Box.Y2)+1)
					in = in || p.In(r)
					near = near || p.In(r.Inset(-16))
				}
				switch {
				case in && hit:
					inside++
				case !near:
					outsideAll++
					if hit {
						outside++
					}
				}
			}
		}
		require.Greater(t, inside, 200, "the box outline and label are drawn inside the box")
		// Regression guard: nothing is drawn away from the boxes.
		require.LessOrEqual(t, outside, outsideAll/1000, "pixels changed away from the boxes: %d of %d", outside, outsideAll)
	})

	t.Run("mjpeg", func(t *testing.T) {
		resp, err := http.Get(v.EP.API + "/v1/streams/still/live.mjpeg?fps=2&annotate=1")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "multipart/x-mixed-replace; boundary=vigilframe", resp.Header.Get("Content-Type"))
		mr := multipart.NewReader(resp.Body, "vigilframe")
		var prev uint64
		for i := range 3 {
			p, err := mr.NextPart()
			require.NoError(t, err)
			require.Equal(t, "image/jpeg", p.Header.Get("Content-Type"))
			seq, err := strconv.ParseUint(p.Header.Get(api.HeaderSeq), 10, 64)
			require.NoError(t, err)
			img, err := jpeg.Decode(p)
			require.NoError(t, err)
			require.Equal(t, image.Rect(0, 0, 384, 256), img.Bounds())
			if i > 0 {
				// 2 fps of a 10 fps clip played in real time: 5 frames
				// apart; frames skipped under load only widen the gap.
				require.GreaterOrEqual(t, seq-prev, uint64(3), "parts %d apart at 2 fps", seq-prev)
			}
			prev = seq
		}
	})

	t.Run("websocket", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(v.EP.API, "http")+"/v1/streams/still/live.ws?fps=5", nil)
		require.NoError(t, err)
		defer c.CloseNow()
		c.SetReadLimit(16 << 20) // the library's default, 32 KiB, is less than a picture
		for range 3 {
			typ, text, err := c.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, websocket.MessageText, typ)
			var msg sinks.Message
			require.NoError(t, json.Unmarshal(text, &msg))
			typ, pic, err := c.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, websocket.MessageBinary, typ)
			img, err := jpeg.Decode(bytes.NewReader(pic))
			require.NoError(t, err)
			require.Equal(t, image.Rect(0, 0, msg.Width, msg.Height), img.Bounds(), "the JPEG of the message's frame")
			testenv.Eventually(t, func() bool { _, ok := raw.get(msg.Seq); return ok }, 10*time.Second, 20*time.Millisecond, "NATS message %d", msg.Seq)
			published, _ := raw.get(msg.Seq)
			require.Equal(t, string(published), string(text), "exactly the message published on NATS")
		}
		require.NoError(t, c.Close(websocket.StatusNormalClosure, ""))
	})

	t.Run("slow viewers", func(t *testing.T) {
		// Three viewers that ask for the most frames and never read.
		var conns []net.Conn
		for range 3 {
			c, err := net.Dial("tcp", strings.TrimPrefix(v.EP.API, "http://"))
			require.NoError(t, err)
			_, err = fmt.Fprintf(c, "GET /v1/streams/still/live.mjpeg?fps=15&annotate=1 HTTP/1.1\r\nHost: vigil\r\n\r\n")
			require.NoError(t, err)
			conns = append(conns, c)
		}
		testenv.Eventually(t, func() bool { return vigiltest.MetricValue(t, v, "vigil_live_viewers") == 3 }, 10*time.Second, 20*time.Millisecond, "3 viewers")
		before := raw.len()
		time.Sleep(3 * time.Second)
		got := raw.len() - before
		// 3 s of a 10 fps clip is 30 frames; a stream held up by its
		// viewers would publish none. Half leaves room for a loaded
		// 2-core machine (the cost itself is BenchmarkViewerCost's).
		require.GreaterOrEqual(t, got, 15, "frames published in 3 s while 3 viewers never read")
		for _, c := range conns {
			require.NoError(t, c.Close())
		}
		testenv.Eventually(t, func() bool { return vigiltest.MetricValue(t, v, "vigil_live_viewers") == 0 }, 15*time.Second, 50*time.Millisecond,
			"the views end when their clients leave")
	})

	t.Run("stream without frames", func(t *testing.T) {
		// A stream that never runs (disabled) holds no viewer slot: the
		// MJPEG view answers 503 JSON and the WebSocket closes with 4504
		// once no frame came within api.SnapshotWait, saying why; a tiny
		// ?fps= cannot make a view wait longer than two frames at
		// live.MinFPS.
		code, b := v.Call("POST", "/v1/streams", fmt.Sprintf(`{"id":"off","url":%q,"enabled":false}`, clip))
		require.Equal(t, http.StatusCreated, code, string(b))
		resp, err := http.Get(v.EP.API + "/v1/streams/off/live.mjpeg?fps=1e-300")
		require.NoError(t, err)
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", b)
		var e api.Error
		require.NoError(t, json.Unmarshal(b, &e), "%s", b)
		require.Contains(t, e.Error, "no frame of stream off")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(v.EP.API, "http")+"/v1/streams/off/live.ws", nil)
		require.NoError(t, err)
		_, _, err = c.Read(ctx)
		require.Equal(t, api.CloseNoFrame, websocket.CloseStatus(err), "%v", err)
		testenv.Eventually(t, func() bool { return vigiltest.MetricValue(t, v, "vigil_live_viewers") == 0 }, 10*time.Second, 50*time.Millisecond,
			"no view of the stream without frames is left")
	})

	t.Run("bad input", func(t *testing.T) {
		for _, p := range []string{"/v1/streams/nope/snapshot.jpg", "/v1/streams/nope/live.mjpeg", "/v1/streams/nope/live.ws"} {
			resp, err := http.Get(v.EP.API + p)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"), p)
			var e api.Error
			require.NoError(t, json.Unmarshal(b, &e), "%s", b)
			require.Equal(t, "id", e.Field)
			require.Contains(t, e.Error, "nope")
		}
		code, b := v.Call("GET", "/v1/streams/still/snapshot.jpg?annotate=maybe", "")
		require.Equal(t, http.StatusBadRequest, code, "%s", b)
		code, b = v.Call("GET", "/v1/snapshots/no$such", "")
		require.Equal(t, http.StatusBadRequest, code, "%s", b)
		code, b = v.Call("GET", "/v1/snapshots/still.x.e1", "")
		require.Equal(t, http.StatusNotFound, code, "%s", b)
		code, b = v.Call("POST", "/v1/streams", `{"id":"big","labels":{"x":"`+strings.Repeat("a", api.MaxBodyBytes)+`"}}`)
		require.Equal(t, http.StatusRequestEntityTooLarge, code, "%s", b)
	})
}

// Event snapshots of a real `vigil run` over testenv.FacePan with a zone
// and a line: track_start, zone_enter and line_cross events carry a
// snapshot id, others none; a plain nats.go client fetches the JPEG from
// the object store bucket vigil_snapshots (the clip's 512×256, with the
// event's object drawn in red), the API serves the same bytes, and the
// snapshot expires after live.snapshots.ttl.
func TestEventSnapshots(t *testing.T) {
	const ttl = 3 * time.Second
	v := vigiltest.Start(t, t.TempDir(), fmt.Sprintf("live: {snapshots: {ttl: %s}}", ttl))
	rec := record(t, v.NC, "pan")
	start := time.Now()
	code, b := v.Call("POST", "/v1/streams", fmt.Sprintf(`{"id":"pan","url":%q,"model":"blazeface","realtime":true,"loop":true,"analytics":%s}`,
		testenv.FacePan(t), panAnalytics))
	require.Equal(t, http.StatusCreated, code, "%s", b)

	var ev analytics.Event
	testenv.Eventually(t, func() bool {
		for _, e := range rec.events(t, start) {
			if e.Type == analytics.EventZoneEnter {
				ev = e
				return true
			}
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "a zone_enter event")
	for _, e := range rec.events(t, start) {
		switch e.Type {
		case analytics.EventTrackStart, analytics.EventZoneEnter, analytics.EventLineCross, analytics.EventLoiter:
			require.Equal(t, fmt.Sprintf("pan.%s.e%d", e.Epoch, e.Seq), e.Snapshot, "%s carries its snapshot", e.Type)
		default:
			require.Empty(t, e.Snapshot, "%s carries no snapshot", e.Type)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(v.EP.NATS)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	store, err := js.ObjectStore(ctx, "vigil_snapshots")
	require.NoError(t, err)
	var pic []byte
	// Stored just after the event is published: by the encoder's
	// goroutine, within milliseconds; the TTL bounds the wait.
	testenv.Eventually(t, func() bool {
		pic, err = store.GetBytes(ctx, ev.Snapshot)
		return err == nil
	}, ttl, 20*time.Millisecond, "snapshot %s in the object store", ev.Snapshot)
	img, err := jpeg.Decode(bytes.NewReader(pic))
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 512, 256), img.Bounds())
	red := 0
	box := image.Rect(int(ev.Box.X1)-2, int(ev.Box.Y1)-2, int(ev.Box.X2)+2, int(ev.Box.Y2)+2)
	for y := box.Min.Y; y < box.Max.Y; y++ {
		for x := box.Min.X; x < box.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if r>>8 > 180 && g>>8 < 100 && b>>8 < 100 {
				red++
			}
		}
	}
	require.Greater(t, red, 100, "the event's object is outlined in red")

	resp, err := http.Get(v.EP.API + "/v1/snapshots/" + ev.Snapshot)
	require.NoError(t, err)
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "image/jpeg", resp.Header.Get("Content-Type"))
	require.Equal(t, pic, served)

	// JetStream removes messages older than the bucket's max age on a
	// timer; 30 s leaves room for a loaded machine.
	testenv.Eventually(t, func() bool {
		_, err := store.GetBytes(ctx, ev.Snapshot)
		return errors.Is(err, jetstream.ErrObjectNotFound)
	}, ttl+30*time.Second, 100*time.Millisecond, "snapshot %s expired", ev.Snapshot)
	code, b = v.Call("GET", "/v1/snapshots/"+ev.Snapshot, "")
	require.Equal(t, http.StatusNotFound, code, "%s", b)
	require.Positive(t, vigiltest.MetricValue(t, v, `vigil_live_event_snapshots_total{outcome="stored"}`))
}
