package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/vigil-video/vigil/internal/live"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
)

// SnapshotWait bounds how long GET /v1/streams/{id}/snapshot.jpg waits
// for the stream's next processed frame before answering 503: a stream
// running at 1 fps or more delivers one well within it.
const SnapshotWait = 5 * time.Second

// writeWait bounds one write of a live view (a part of the MJPEG stream,
// a WebSocket message): a client that takes longer is dropped, and only
// its own view ends.
const writeWait = 10 * time.Second

// mjpegBoundary separates the parts of live.mjpeg.
const mjpegBoundary = "vigilframe"

// Headers of snapshot.jpg: the frame's identity, so that a client can
// match the picture with the frame's detections message.
const (
	HeaderSeq   = "Vigil-Seq"
	HeaderEpoch = "Vigil-Epoch"
)

// pictureQuery is what a picture request asks for: ?fps=N and
// ?annotate=1 (0, 1, true, false).
type pictureQuery struct {
	fps      float64
	annotate bool
}

// pictureStream checks that pictures are served and that stream id
// exists, and parses the query; it answers the error itself (404 JSON
// for an unknown stream, 400 for a bad parameter) and reports whether to
// go on.
func (s *Server) pictureStream(w http.ResponseWriter, r *http.Request) (string, pictureQuery, bool) {
	var q pictureQuery
	id := r.PathValue("id")
	if !registry.ValidID(id) {
		writeErr(w, http.StatusBadRequest, "id", fmt.Sprintf("%q is not a valid stream id", id))
		return "", q, false
	}
	if s.o.Live == nil {
		writeErr(w, http.StatusNotFound, "", "pictures are not served by this vigil")
		return "", q, false
	}
	if v := r.URL.Query().Get("fps"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if _, maxFPS := s.o.Live.Limits(); err != nil || !(f > 0) || math.IsInf(f, 0) {
			writeErr(w, http.StatusBadRequest, "fps", fmt.Sprintf("fps %q: want a number of frames per second above 0 (at most %g is served)", v, maxFPS))
			return "", q, false
		}
		q.fps = f
	}
	switch v := r.URL.Query().Get("annotate"); v {
	case "", "0", "false":
	case "1", "true":
		q.annotate = true
	default:
		writeErr(w, http.StatusBadRequest, "annotate", fmt.Sprintf("annotate %q: want 1 or 0", v))
		return "", q, false
	}
	if !s.exists(w, r, id) {
		return "", q, false
	}
	return id, q, true
}

// exists reports whether stream id is registered (as vigil last read the
// registry while NATS is down), answering 404 JSON when not.
func (s *Server) exists(w http.ResponseWriter, r *http.Request, id string) bool {
	if down, _ := s.natsDown(); down {
		if s.o.Known != nil {
			for _, e := range s.o.Known() {
				if e.Spec.ID == id {
					return true
				}
			}
		}
		s.storeErr(w, fmt.Errorf("%w: %s", registry.ErrNotFound, id))
		return false
	}
	if _, err := s.o.Registry.Get(r.Context(), id); err != nil {
		s.storeErr(w, err)
		return false
	}
	return true
}

// watch starts a view, answering 503 when it cannot.
func (s *Server) watch(w http.ResponseWriter, id string, fps float64, annotate bool) (*live.Viewer, bool) {
	v, err := s.o.Live.Watch(id, fps, annotate)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeErr(w, http.StatusServiceUnavailable, "", "live pictures: "+err.Error())
		return nil, false
	}
	return v, true
}

// frameErr answers a view that got no frame: 501 for a stream whose
// frames cannot be copied into a picture (a pixel format pictures do not
// take, a failed copy out of GPU memory: the error says which), 503
// otherwise.
func (s *Server) frameErr(w http.ResponseWriter, id string, err error) {
	switch {
	case errors.Is(err, pipeline.ErrNoPicture):
		writeErr(w, http.StatusNotImplemented, "", fmt.Sprintf("stream %s has no pictures: %v (see docs/api.md, Pictures)", id, err))
	case errors.Is(err, context.DeadlineExceeded):
		writeErr(w, http.StatusServiceUnavailable, "", fmt.Sprintf("no frame of stream %s within %s: %s", id, SnapshotWait, s.whyNoFrame(id)))
	default:
		writeErr(w, http.StatusServiceUnavailable, "", fmt.Sprintf("no frame of stream %s: %v", id, err))
	}
}

// whyNoFrame says what the stream's status says about it.
func (s *Server) whyNoFrame(id string) string {
	var node string
	var st *pipeline.StatusSnapshot
	switch {
	case s.o.Where != nil:
		node, st = s.o.Where(id)
	case s.o.Status != nil:
		if v, ok := s.o.Status(id); ok {
			st = &v
		}
	}
	switch {
	case st == nil:
		return "it is not running here (disabled, or not placed yet)"
	case st.State != pipeline.StateRunning && st.LastError != "":
		return fmt.Sprintf("it is %s (%s)", st.State, st.LastError)
	case st.State != pipeline.StateRunning:
		return fmt.Sprintf("it is %s", st.State)
	case node != "":
		return "it runs on node " + node + ", which has not delivered one here (ask that node's API)"
	}
	return "it has not processed a frame yet"
}

// snapshotJPG serves the stream's next processed frame as a JPEG.
func (s *Server) snapshotJPG(w http.ResponseWriter, r *http.Request) {
	id, q, ok := s.pictureStream(w, r)
	if !ok {
		return
	}
	_, maxFPS := s.o.Live.Limits()
	v, ok := s.watch(w, id, maxFPS, q.annotate)
	if !ok {
		return
	}
	defer v.Close()
	ctx, cancel := context.WithTimeout(r.Context(), SnapshotWait)
	defer cancel()
	fr, err := v.Next(ctx)
	if err != nil {
		s.frameErr(w, id, err)
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(HeaderSeq, strconv.FormatUint(fr.Result.Seq, 10))
	w.Header().Set(HeaderEpoch, fr.Result.Epoch)
	w.Header().Set("Content-Length", strconv.Itoa(len(fr.JPEG)))
	_, _ = w.Write(fr.JPEG)
}

// untimed lifts the server's read and write timeouts from a live view's
// connection: they bound a request, and a view lasts as long as the
// client watches (each write gets writeWait instead). Without it the
// server's ReadTimeout would also cancel the request's context.
func untimed(w http.ResponseWriter) *http.ResponseController {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	return rc
}

// liveMJPEG serves a multipart/x-mixed-replace stream of JPEG pictures.
func (s *Server) liveMJPEG(w http.ResponseWriter, r *http.Request) {
	id, q, ok := s.pictureStream(w, r)
	if !ok {
		return
	}
	v, ok := s.watch(w, id, q.fps, q.annotate)
	if !ok {
		return
	}
	defer v.Close()
	rc := untimed(w)
	// The first frame before the headers, so that a stream without
	// pictures, or without frames (stopped, failing, removed), is answered
	// with an error instead of a view that never shows anything.
	wait := frameWait(q.fps)
	fr, err := nextWithin(r.Context(), v, wait)
	if err != nil {
		if r.Context().Err() == nil {
			s.frameErr(w, id, err)
		}
		return
	}
	w.Header().Set("Content-Type", "multipart/x-mixed-replace; boundary="+mjpegBoundary)
	w.Header().Set("Cache-Control", "no-store")
	for {
		_ = rc.SetWriteDeadline(time.Now().Add(writeWait))
		_, err := fmt.Fprintf(w, "--%s\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n%s: %d\r\n\r\n", mjpegBoundary, len(fr.JPEG), HeaderSeq, fr.Result.Seq)
		if err == nil {
			_, err = w.Write(fr.JPEG)
		}
		if err == nil {
			_, err = io.WriteString(w, "\r\n")
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return // the client went away or is too slow
		}
		if fr, err = nextWithin(r.Context(), v, wait); err != nil {
			return // no frame for wait (the stream stopped or was removed), or the client left
		}
	}
}

// frameWait is how long a live view waits for its next frame before it
// ends (its stream stopped, failed or was removed), so that a view of a
// stream without frames does not hold a viewer slot for ever:
// SnapshotWait, or two of the view's frame intervals at a rate slower
// than that allows.
func frameWait(fps float64) time.Duration {
	if fps > 0 {
		return max(SnapshotWait, 2*time.Duration(float64(time.Second)/max(fps, live.MinFPS)))
	}
	return SnapshotWait
}

// nextWithin is v.Next with a deadline of wait; errors wrap
// context.DeadlineExceeded when no frame came in time.
func nextWithin(ctx context.Context, v *live.Viewer, wait time.Duration) (*live.Frame, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return v.Next(ctx)
}

// Close codes of live.ws (RFC 6455 §7.4.2: 4000-4999 are the
// application's).
const (
	// CloseNoPicture: the stream's frames cannot be copied into pictures, as
	// snapshot.jpg's 501.
	CloseNoPicture websocket.StatusCode = 4501
	// CloseUnavailable: vigil is stopping.
	CloseUnavailable websocket.StatusCode = 4503
	// CloseNoFrame: no frame of the stream came within the view's wait
	// (SnapshotWait, or two frame intervals of a slow view): the stream
	// is stopped, failing, starting or was removed. The reason says which,
	// from its status; reopen the view when it runs again.
	CloseNoFrame websocket.StatusCode = 4504
)

// liveWS serves a WebSocket that sends, for every frame, the detections
// message as published on NATS (text), then the frame's JPEG (binary).
func (s *Server) liveWS(w http.ResponseWriter, r *http.Request) {
	id, q, ok := s.pictureStream(w, r)
	if !ok {
		return
	}
	v, ok := s.watch(w, id, q.fps, false)
	if !ok {
		return
	}
	defer v.Close()
	untimed(w)
	// The default options refuse a request from another origin than the
	// API's own: the console's cookie must not open views for other sites.
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered
	}
	defer c.CloseNow()
	ctx := c.CloseRead(r.Context()) // ends when the client closes
	wait := frameWait(q.fps)
	for {
		fr, err := nextWithin(ctx, v, wait)
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			_ = c.Close(CloseNoFrame, closeReason(fmt.Sprintf("no frame within %s: %s", wait, s.whyNoFrame(id))))
			return
		case errors.Is(err, pipeline.ErrNoPicture):
			_ = c.Close(CloseNoPicture, closeReason("no pictures: "+err.Error()))
			return
		case errors.Is(err, live.ErrClosed):
			_ = c.Close(CloseUnavailable, "vigil is stopping")
			return
		case err != nil:
			return
		}
		if err := s.wsFrame(ctx, c, fr); err != nil {
			return
		}
	}
}

// closeReason cuts why to the 123 bytes a WebSocket close reason may
// hold (RFC 6455 §5.5: a control frame's payload is at most 125 bytes, 2 of
// them the code), without leaving half a UTF-8 sequence at the cut.
func closeReason(why string) string {
	return strings.ToValidUTF8(why[:min(len(why), 123)], "")
}

// wsFrame writes one frame: its message, then its JPEG.
func (s *Server) wsFrame(ctx context.Context, c *websocket.Conn, fr *live.Frame) error {
	msg := fr.Message
	if msg == nil { // a sink that does not say: the frame's own fields
		msg, _ = json.Marshal(struct {
			StreamID   string               `json:"stream_id"`
			Epoch      string               `json:"epoch"`
			Seq        uint64               `json:"seq"`
			PTS        float64              `json:"pts"`
			Width      int                  `json:"width"`
			Height     int                  `json:"height"`
			Detections []pipeline.Detection `json:"detections"`
		}{fr.Result.StreamID, fr.Result.Epoch, fr.Result.Seq, fr.Result.PTS, fr.Result.Width, fr.Result.Height, fr.Result.Detections})
	}
	wctx, cancel := context.WithTimeout(ctx, writeWait)
	defer cancel()
	if err := c.Write(wctx, websocket.MessageText, msg); err != nil {
		return err
	}
	return c.Write(wctx, websocket.MessageBinary, fr.JPEG)
}

// eventSnapshot serves an event snapshot from the object store.
func (s *Server) eventSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !live.ValidSnapshotID(id) {
		writeErr(w, http.StatusBadRequest, "id", fmt.Sprintf("%q is not a snapshot id", id))
		return
	}
	if s.o.Snapshots == nil {
		writeErr(w, http.StatusNotFound, "", "event snapshots are off (live.snapshots.enabled)")
		return
	}
	b, err := s.o.Snapshots.Get(r.Context(), id)
	switch {
	case errors.Is(err, live.ErrNoSnapshot):
		writeErr(w, http.StatusNotFound, "id", fmt.Sprintf("snapshot %s: %v", id, err))
		return
	case err != nil:
		writeErr(w, http.StatusServiceUnavailable, "", fmt.Sprintf("reading the bucket %s: %v", s.o.Snapshots.Bucket(), err))
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	// A snapshot never changes: its id names one event.
	w.Header().Set("Cache-Control", "private, max-age=86400, immutable")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}
