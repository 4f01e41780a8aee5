package console_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/testenv"
	"github.com/vigil-video/vigil/internal/vigiltest"
	"github.com/vigil-video/vigil/sinks"
)

// readme makes TestConsoleInBrowser copy its screenshots over the
// README's (docs/img/console-*.png): `make screenshots`.
var readme = flag.Bool("readme", false, "refresh the README's screenshots (docs/img/console-*.png) from this run's")

// Chromium's flags for a test: headless, no sandbox (containers have no
// user namespaces), no GPU, and nothing that reaches out to the network
// on its own (QUIC, first-run pages, background fetches, component
// updates, sync). The profile is fresh: --user-data-dir under t.TempDir.
// chromedp talks to it over a pipe (no debugging port). It is skipped
// when chromium is missing, except in CI (CI set: .ci/run sets it), where
// make setup installs it.
func chromium(t *testing.T) []chromedp.ExecAllocatorOption {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed, and in CI `make setup` installs it (scripts/setup.sh): the console's browser tests must run")
		}
		t.Skip("chromium is not installed: `make setup` installs it (Debian's chromium); skipping the console's browser tests")
	}
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		// Containers often give /dev/shm 64 MiB, which a renderer can
		// exhaust; /tmp instead.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	}
}

// panAnalytics are a zone and a line on the FacePan clip (its face
// crosses x 256 both ways every 8 s), as the analytics tests use them.
const panAnalytics = `{"zones":[{"name":"right","polygon":[[256,0],[512,0],[512,256],[256,256]],"classes":["face"],"anchor":"center"}],` +
	`"lines":[{"name":"mid","a":[256,256],"b":[256,0],"classes":["face"],"anchor":"center"}]}`

// The console in a real browser (Debian's headless chromium driven by
// chromedp) against a real vigil (embedded NATS, CPU ONNX Runtime, a
// looping real clip): the login form without a token (and no Log out); the
// wall's tile with a picture that changes and an overlay whose boxes are
// those of the detection message of the frame shown; a zone drawn with the
// mouse saved in the registry where it was drawn; a 2-point zone refused
// with the API's message shown; a stream added through the form appearing
// on the wall; a bad URL answered next to its field; the edit form saving
// nothing when nothing changed, and only the changed field otherwise; live
// views (viewers) only for running streams' tiles, closed when a stream
// stops and opened when it is back; a missing stream's page ("stream not
// found", no editor, no live view); the health page. Screenshots of each
// page are written to t.ArtifactDir (and over the README's with -readme).
func TestConsoleInBrowser(t *testing.T) {
	opts := chromium(t)
	const token = "console-test-token-f00d"
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	v := vigiltest.Start(t, dir, fmt.Sprintf("api: {listen: \"127.0.0.1:0\", token_file: %q}\n", tokenFile))
	v.Token = token
	msgs := v.Messages("pan")
	clip := testenv.FacePan(t)
	code, b := v.Call("POST", "/v1/streams", fmt.Sprintf(`{"id":"pan","url":%q,"realtime":true,"loop":true,"model":"blazeface","analytics":%s}`, clip, panAnalytics))
	require.Equal(t, http.StatusCreated, code, string(b))
	v.WaitState("pan", "running", 60*time.Second)

	base := v.EP.API
	shots := screenshots(t)

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(cancelTimeout)
	var jsErrs jsErrors
	require.NoError(t, chromedp.Listen(ctx, jsErrs.listen))
	pg := &page{ctx: ctx, errs: &jsErrs}

	// Without a token the console asks for one; a wrong one is refused.
	// Log out is not offered before a login.
	pg.run(t, "open the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	require.False(t, pg.visible(t, "#logout"), "no Log out on the login form")
	shots.take(t, ctx, "login")
	pg.run(t, "log in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "wrong"), chromedp.Click(chromedp.CSS("#login-submit")),
		chromedp.WaitVisible(chromedp.CSS("#login-error")))
	require.Equal(t, "wrong token", pg.text(t, "#login-error"))
	pg.setValue(t, "#token", "")
	pg.run(t, "log in", chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-submit")), chromedp.WaitVisible(chromedp.CSS(`.tile[data-id="pan"]`)))
	require.True(t, pg.visible(t, "#logout"), "Log out once logged in")

	t.Run("wall", func(t *testing.T) {
		// The picture changes: a thumbnail of the image drawn to a
		// canvas differs between two frames (the face moves across the
		// clip at up to 4 px a frame).
		thumb := `(() => { const img = document.querySelector('.tile[data-id="pan"] .live img');
			if (!img || !img.complete || !img.naturalWidth) return '';
			const c = document.createElement('canvas'); c.width = 32; c.height = 16;
			const g = c.getContext('2d'); g.drawImage(img, 0, 0, 32, 16);
			return Array.from(g.getImageData(0, 0, 32, 16).data).join(','); })()`
		var first string
		testenv.Eventually(t, func() bool { pg.eval(t, thumb, &first); return first != "" }, 30*time.Second, 100*time.Millisecond, "a picture on the tile")
		testenv.Eventually(t, func() bool {
			var now string
			pg.eval(t, thumb, &now)
			return now != "" && now != first
		}, 30*time.Second, 200*time.Millisecond, "the tile's picture changes")

		// The overlay's boxes are those of the detection message of the
		// frame shown, as vigil published it on NATS (read by the test on
		// its own), in source pixels; the overlay covers the picture.
		var shown overlay
		testenv.Eventually(t, func() bool {
			pg.eval(t, overlayJS(`.tile[data-id="pan"] .live`), &shown)
			return shown.Seq != "" && len(shown.Boxes) > 0
		}, 30*time.Second, 100*time.Millisecond, "a frame with a box on the tile")
		var msg *sinks.Message
		testenv.Eventually(t, func() bool { msg = find(msgs, shown.Epoch, shown.Seq); return msg != nil },
			10*time.Second, 50*time.Millisecond, "detection message %s/%s on NATS", shown.Epoch, shown.Seq)
		require.Equal(t, [2]float64{float64(msg.Width), float64(msg.Height)}, shown.ViewBox, "the overlay is in source pixels")
		require.Len(t, shown.Boxes, len(msg.Detections))
		for i, d := range msg.Detections {
			want := []float64{float64(d.Box.X1), float64(d.Box.Y1), float64(d.Box.X2 - d.Box.X1), float64(d.Box.Y2 - d.Box.Y1)}
			// The SVG attributes hold the JSON numbers as JavaScript
			// parsed them: float32 values printed by Go, so the only
			// difference is float32 rounding of the width and height.
			require.InDeltaSlice(t, want, shown.Boxes[i], 1e-3, "box %d of seq %s", i, shown.Seq)
			require.Equal(t, d.TrackID, shown.Tracks[i])
		}
		require.InDelta(t, shown.Img[0], shown.SVG[0], 0.5, "overlay over the picture: left")
		require.InDelta(t, shown.Img[1], shown.SVG[1], 0.5, "top")
		require.InDelta(t, shown.Img[2], shown.SVG[2], 0.5, "width")
		require.InDelta(t, shown.Img[3], shown.SVG[3], 0.5, "height")
		var zones int
		pg.eval(t, `document.querySelectorAll('.tile[data-id="pan"] polygon.zone').length + document.querySelectorAll('.tile[data-id="pan"] line.line').length`, &zones)
		require.Equal(t, 2, zones, "the stream's zone and line are drawn")
		stats := pg.text(t, `.tile[data-id="pan"] .stats`)
		require.Contains(t, stats, vigiltest.NodeID, "the node running it")
		require.Regexp(t, `P99\s*\d+ ms`, stats)
		shots.take(t, ctx, "wall")
	})

	t.Run("zone editor", func(t *testing.T) {
		pg.run(t, "stream page", chromedp.Navigate(base+"/#/stream/pan"), chromedp.WaitVisible(chromedp.CSS("#draw-zone")))
		var frames string
		testenv.Eventually(t, func() bool {
			pg.eval(t, `document.querySelector('.stream-page .live').dataset.frames`, &frames)
			return frames != "0"
		}, 30*time.Second, 100*time.Millisecond, "a picture on the stream page")
		drawn := [][2]float64{{300, 40}, {480, 60}, {460, 220}, {310, 200}}
		pg.run(t, "draw a zone", chromedp.Click(chromedp.CSS("#draw-zone")))
		clickAt(t, ctx, drawn)
		// The class is picked from those seen in the picture (BlazeFace's
		// one, face).
		pg.run(t, "name it and pick its class", chromedp.Click(chromedp.CSS("#draw-finish")), chromedp.SendKeys(chromedp.CSS(`.editor-form input[name=name]`), "door"),
			chromedp.Click(chromedp.CSS(`.editor-form .picks button.pick`)))
		var classes string
		pg.eval(t, `document.querySelector('.editor-form input[name=classes]').value`, &classes)
		require.Equal(t, "face", classes)
		shots.take(t, ctx, "editor")
		pg.run(t, "save", chromedp.Click(chromedp.CSS("#editor-save")))
		var saved []([2]float64)
		var frameSize []int
		testenv.Eventually(t, func() bool {
			s, ok := v.Stream("pan")
			if !ok || s.Analytics == nil {
				return false
			}
			for _, z := range s.Analytics.Zones {
				if z.Name == "door" {
					require.Equal(t, []string{"face"}, z.Classes)
					saved = nil
					for _, p := range z.Polygon {
						saved = append(saved, [2]float64{p[0], p[1]})
					}
					frameSize = s.Analytics.FrameSize
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond, "zone door in the registry")
		require.Len(t, saved, len(drawn))
		kx, ky := 1.0, 1.0
		if len(frameSize) == 2 {
			kx, ky = 512/float64(frameSize[0]), 256/float64(frameSize[1])
		}
		for i, p := range drawn {
			// 2 px: the click lands on the nearest device pixel and the
			// console rounds to whole source pixels (this picture is shown
			// larger than its 512×256, so each is under 1 px).
			require.InDelta(t, p[0], saved[i][0]*kx, 2, "x of point %d", i)
			require.InDelta(t, p[1], saved[i][1]*ky, 2, "y of point %d", i)
		}
		testenv.Eventually(t, func() bool {
			var n int
			pg.eval(t, `document.querySelectorAll('.stream-page polygon.zone[data-name="door"]').length`, &n)
			return n == 1
		}, 10*time.Second, 50*time.Millisecond, "the saved zone drawn on the picture")

		// A zone of 2 points: the API refuses it, and the console shows
		// the API's own message.
		pg.run(t, "draw a 2-point zone", chromedp.Click(chromedp.CSS("#draw-zone")))
		clickAt(t, ctx, [][2]float64{{50, 50}, {150, 120}})
		pg.run(t, "save it", chromedp.Click(chromedp.CSS("#draw-finish")), chromedp.SendKeys(chromedp.CSS(`.editor-form input[name=name]`), "bad"),
			chromedp.Click(chromedp.CSS("#editor-save")), chromedp.WaitVisible(chromedp.CSS("#editor-error")))
		shownErr := pg.text(t, "#editor-error")
		s, _ := v.Stream("pan")
		zones, _ := json.Marshal(s.Analytics.Zones)
		code, body := v.Call("PATCH", "/v1/streams/pan", fmt.Sprintf(`{"analytics":{"zones":%s}}`,
			strings.TrimSuffix(string(zones), "]")+`,{"name":"bad","polygon":[[50,50],[150,120]]}]`))
		require.Equal(t, http.StatusBadRequest, code)
		var apiErr struct{ Error string }
		require.NoError(t, json.Unmarshal(body, &apiErr))
		require.Equal(t, apiErr.Error, shownErr, "the API's message, as it answers it")
		require.Contains(t, shownErr, "at least 3")
		s2, _ := v.Stream("pan")
		require.Equal(t, s.Revision, s2.Revision, "nothing stored")
		testenv.Eventually(t, func() bool {
			var bar int
			pg.eval(t, `document.querySelectorAll('.latency .seg').length`, &bar)
			return bar > 0
		}, 10*time.Second, 100*time.Millisecond, "the latency bar")
		pg.run(t, "cancel the drawing", chromedp.Click(chromedp.CSS(`.editor-form button[type=button]:last-child`)))
		// The events of the face crossing the zone and the line come with
		// their snapshots, which the page shows.
		testenv.Eventually(t, func() bool {
			var n int
			pg.eval(t, `[...document.querySelectorAll('.events img.snap')].filter((i) => i.complete && i.naturalWidth > 0).length`, &n)
			return n > 0
		}, 30*time.Second, 200*time.Millisecond, "an event's snapshot shown on the stream page")
		shots.take(t, ctx, "stream")

		// Edit (rename) the zone, then delete it.
		door := saved
		pg.run(t, "edit the zone", chromedp.Click(chromedp.CSS(`li[data-kind="zone"][data-name="door"] button.edit`)),
			chromedp.WaitVisible(chromedp.CSS(`.editor-form input[name=name]`)))
		pg.setValue(t, `.editor-form input[name=name]`, "porch")
		pg.run(t, "save the zone", chromedp.Click(chromedp.CSS("#editor-save")))
		zone := func(name string) *analytics.Zone {
			s, ok := v.Stream("pan")
			if !ok || s.Analytics == nil {
				return nil
			}
			for i := range s.Analytics.Zones {
				if s.Analytics.Zones[i].Name == name {
					return &s.Analytics.Zones[i]
				}
			}
			return nil
		}
		testenv.Eventually(t, func() bool { return zone("porch") != nil && zone("door") == nil }, 10*time.Second, 50*time.Millisecond, "door renamed porch")
		for i, p := range zone("porch").Polygon {
			require.Equal(t, door[i], [2]float64{p[0], p[1]}, "renaming keeps the polygon")
		}
		pg.run(t, "delete the zone", chromedp.WaitVisible(chromedp.CSS(`li[data-kind="zone"][data-name="porch"] button.delete`)),
			chromedp.Click(chromedp.CSS(`li[data-kind="zone"][data-name="porch"] button.delete`)))
		testenv.Eventually(t, func() bool { return zone("porch") == nil && zone("right") != nil }, 10*time.Second, 50*time.Millisecond, "porch deleted, right kept")
	})

	t.Run("stream form", func(t *testing.T) {
		// A bad URL: the API's error next to the url field.
		pg.run(t, "add form", chromedp.Navigate(base+"/#/new"), chromedp.WaitVisible(chromedp.CSS(`input[name=id]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name=id]`), "bad"), chromedp.SendKeys(chromedp.CSS(`input[name=url]`), "ftp://camera.example/1"),
			chromedp.Click(chromedp.CSS("#stream-save")), chromedp.WaitVisible(chromedp.CSS(`.field-error[data-field=url]`)))
		shownErr := pg.text(t, `.field-error[data-field=url]`)
		code, body := v.Call("POST", "/v1/streams", `{"id":"bad","url":"ftp://camera.example/1","enabled":true,"realtime":false,"loop":false}`)
		require.Equal(t, http.StatusBadRequest, code)
		var apiErr struct{ Error, Field string }
		require.NoError(t, json.Unmarshal(body, &apiErr))
		require.Equal(t, "url", apiErr.Field)
		require.Equal(t, apiErr.Error, shownErr)
		shots.take(t, ctx, "form")

		// A good one appears on the wall.
		pg.setValue(t, `input[name=id]`, "lobby")
		pg.setValue(t, `input[name=url]`, clip)
		pg.run(t, "fix it",
			chromedp.SendKeys(chromedp.CSS(`input[name=model]`), "blazeface"), chromedp.SendKeys(chromedp.CSS(`input[name=fps_limit]`), "5"),
			chromedp.Click(chromedp.CSS(`input[name=realtime]`)), chromedp.Click(chromedp.CSS(`input[name=loop]`)),
			chromedp.Click(chromedp.CSS("#stream-save")), chromedp.WaitVisible(chromedp.CSS(`.tile[data-id="lobby"]`)))
		s, ok := v.Stream("lobby")
		require.True(t, ok)
		require.Equal(t, 5.0, s.FPSLimit)
		require.True(t, s.Realtime && s.Loop)
		testenv.Eventually(t, func() bool {
			var f string
			pg.eval(t, `(document.querySelector('.tile[data-id="lobby"] .live') || {dataset: {}}).dataset.frames || '0'`, &f)
			return f != "0"
		}, 60*time.Second, 200*time.Millisecond, "the added stream's picture on the wall")

		// A stream that is down says why on its tile: its state and the
		// error of its status.
		code, b := v.Call("POST", "/v1/streams", `{"id":"gate","url":"rtsp://127.0.0.1:9/none","open_timeout":"1s"}`)
		require.Equal(t, http.StatusCreated, code, string(b))
		var why, want string
		testenv.Eventually(t, func() bool {
			s, ok := v.Stream("gate")
			if !ok || s.Status == nil || s.Status.CurrentError() == "" {
				return false
			}
			want = string(s.Status.State) + ": " + s.Status.CurrentError()
			pg.eval(t, `(document.querySelector('.tile[data-id="gate"] .why') || {}).textContent || ''`, &why)
			return why == want
		}, 30*time.Second, 200*time.Millisecond, "the down stream's tile says why")
		time.Sleep(2 * time.Second) // a second refresh of the tiles' numbers, for the screenshot
		shots.take(t, ctx, "wall")
	})

	t.Run("edit form", func(t *testing.T) {
		// pan was created without enabled or fps_limit: saving its form
		// unchanged sends nothing, so the stream keeps its revision and
		// its run (epoch); the PATCHes the page sends are recorded.
		pg.run(t, "edit form", chromedp.Navigate(base+"/#/edit/pan"), chromedp.WaitVisible(chromedp.CSS(`input[name=url]`)))
		testenv.Eventually(t, func() bool {
			var url string
			pg.eval(t, `document.querySelector('input[name=url]').value`, &url)
			return url != ""
		}, 10*time.Second, 50*time.Millisecond, "the form filled from the stream's spec")
		var ok bool
		pg.eval(t, `(() => { window.patches = []; const f = window.fetch;
			window.fetch = (u, i) => { if (i && i.method === 'PATCH') window.patches.push(i.body); return f(u, i); }; return true; })()`, &ok)
		before, _ := v.Stream("pan")
		require.NotNil(t, before.Status)
		require.Nil(t, before.Enabled)
		pg.run(t, "save unchanged", chromedp.Click(chromedp.CSS("#stream-save")), chromedp.WaitVisible(chromedp.CSS("#form-note")))
		require.Equal(t, "no change", pg.text(t, "#form-note"))
		var patches []string
		pg.eval(t, `window.patches`, &patches)
		require.Empty(t, patches, "nothing sent")
		after, _ := v.Stream("pan")
		require.Equal(t, before.Revision, after.Revision, "revision")
		require.NotNil(t, after.Status)
		require.Equal(t, before.Status.Epoch, after.Status.Epoch, "the stream's run")

		// One field changed: the patch holds that field only.
		pg.setValue(t, `input[name=fps_limit]`, "8")
		pg.run(t, "save fps_limit", chromedp.Click(chromedp.CSS("#stream-save")), chromedp.WaitVisible(chromedp.CSS(`.tile[data-id="pan"]`)))
		pg.eval(t, `window.patches`, &patches)
		require.Equal(t, []string{`{"fps_limit":8}`}, patches)
		after, _ = v.Stream("pan")
		require.Greater(t, after.Revision, before.Revision)
		require.Equal(t, 8.0, after.FPSLimit)
		require.Nil(t, after.Enabled, "enabled left unset")
	})

	t.Run("down streams", func(t *testing.T) {
		// Only tiles of running streams hold a live view (a viewer of
		// vigil_live_viewers): not the disabled stream's, nor gate's,
		// which cannot connect.
		code, b := v.Call("POST", "/v1/streams", fmt.Sprintf(`{"id":"off","url":%q,"enabled":false}`, clip))
		require.Equal(t, http.StatusCreated, code, string(b))
		pg.run(t, "wall", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`.tile[data-id="off"]`)))
		viewersMatch := func(panRunning bool) func() bool {
			return func() bool {
				var running int
				pg.eval(t, `document.querySelectorAll('.tile[data-state="running"]').length`, &running)
				var pan string
				pg.eval(t, `document.querySelector('.tile[data-id="pan"]').dataset.state`, &pan)
				return (pan == "running") == panRunning && vigiltest.MetricValue(t, v, "vigil_live_viewers") == float64(running)
			}
		}
		testenv.Eventually(t, viewersMatch(true), 20*time.Second, 200*time.Millisecond, "a viewer per running tile, none for off and gate")
		require.Equal(t, "no live picture: the stream is not running", pg.text(t, `.tile[data-id="off"] .note`))

		// A stream that stops gives its viewer back; started again, its
		// tile shows pictures again.
		var frames int
		pg.eval(t, `+document.querySelector('.tile[data-id="pan"] .live').dataset.frames`, &frames)
		code, b = v.Call("PATCH", "/v1/streams/pan", `{"enabled":false}`)
		require.Equal(t, http.StatusOK, code, string(b))
		testenv.Eventually(t, viewersMatch(false), 20*time.Second, 200*time.Millisecond, "pan's viewer closed")
		code, b = v.Call("PATCH", "/v1/streams/pan", `{"enabled":null}`)
		require.Equal(t, http.StatusOK, code, string(b))
		testenv.Eventually(t, func() bool {
			var now int
			pg.eval(t, `+document.querySelector('.tile[data-id="pan"] .live').dataset.frames`, &now)
			return now > frames
		}, 60*time.Second, 200*time.Millisecond, "pan's pictures back on its tile")

		// A stream page of a stream that does not exist says so, with no
		// live view or zone editor.
		pg.run(t, "missing stream", chromedp.Navigate(base+"/#/stream/nope"), chromedp.WaitVisible(chromedp.CSS(`p.why`)))
		testenv.Eventually(t, func() bool { return pg.text(t, `p.why`) == "stream not found" }, 10*time.Second, 50*time.Millisecond, "stream not found")
		require.False(t, pg.visible(t, "#draw-zone"), "no zone editor")
		require.False(t, pg.visible(t, ".stream-page .live"), "no live view")
		require.False(t, pg.visible(t, `a[href="#/edit/nope"]`), "no edit link")
		// Nor does its edit form offer to save or remove it.
		pg.run(t, "missing stream's form", chromedp.Navigate(base+"/#/edit/nope"), chromedp.WaitVisible(chromedp.CSS(`#form-error`)))
		require.Contains(t, pg.text(t, `#form-error`), "not found")
		require.False(t, pg.visible(t, "#stream-save"), "no save button")
		require.False(t, pg.visible(t, "#stream-remove"), "no remove button")
	})

	t.Run("health", func(t *testing.T) {
		pg.run(t, "health page", chromedp.Navigate(base+"/#/health"), chromedp.WaitVisible(chromedp.CSS(`tr[data-check="NATS connection"]`)),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-node="`)+vigiltest.NodeID+`"]`))
		require.Contains(t, pg.text(t, `dl.kv`), "yes", "NATS connected")
		shots.take(t, ctx, "health")
	})

	require.Empty(t, jsErrs.get(), "no uncaught JavaScript exception")
	testenv.NoSecret(t, "vigil's log", v.Logs.String(), token)
	require.Contains(t, v.Logs.String(), "console login refused", "the wrong token was logged as a refused login")
	if *readme && !t.Failed() {
		shots.readme(t)
	}
}

// page is the browser's tab, with helpers that fail the test they are
// given (the subtest's own: FailNow must not be called on a parent).
type page struct {
	ctx  context.Context
	errs *jsErrors
}

// run runs steps, with 30 s for them: far more than a page of the
// console needs for a few clicks and waits on a loaded 2-core machine; on
// failure the page and its console show what it was doing.
func (p *page) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		html, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.outerHTML`))
		t.Fatalf("%s: %v\npage: %s\nexceptions: %s\nconsole: %s", what, err, html, strings.Join(p.errs.get(), "\n"), strings.Join(p.errs.consoleLines(), "\n"))
	}
}

// eval evaluates js in the page and decodes its value into out.
func (p *page) eval(t *testing.T, js string, out any) {
	t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[any](js))
	require.NoError(t, err, js)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out), "%s gave %s", js, b)
}

// setValue replaces the value of a form's input, as a user who selects
// it and types over it would.
func (p *page) setValue(t *testing.T, sel, value string) {
	t.Helper()
	b, _ := json.Marshal(value)
	var ok bool
	p.eval(t, `(() => { const e = document.querySelector('`+sel+`'); if (!e) return false; e.value = `+string(b)+`;
		e.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, &ok)
	require.True(t, ok, "no %s", sel)
}

// visible reports whether the element sel is shown (it exists and takes room on the page).
func (p *page) visible(t *testing.T, sel string) bool {
	t.Helper()
	var shown bool
	p.eval(t, `(() => { const e = document.querySelector('`+sel+`'); return !!e && e.getClientRects().length > 0; })()`, &shown)
	return shown
}

// text is the text of the element sel.
func (p *page) text(t *testing.T, sel string) string {
	t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

// overlay is what a live view shows at one instant (overlayJS).
type overlay struct {
	Seq, Epoch string
	ViewBox    [2]float64
	Boxes      [][]float64 // x, y, width, height of each rect.box
	Tracks     []string
	Img, SVG   [4]float64 // client rects: left, top, width, height
}

// overlayJS reads the live view sel: the frame shown, its overlay's boxes
// and where picture and overlay are on the page, in one evaluation (the
// page's script cannot run in between).
func overlayJS(sel string) string {
	return `(() => { const el = document.querySelector('` + sel + `'); if (!el) return {};
		const rect = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
		const svg = el.querySelector('svg'); const vb = svg.viewBox.baseVal;
		const boxes = [...el.querySelectorAll('rect.box')];
		return { Seq: el.dataset.seq || '', Epoch: el.dataset.epoch || '', ViewBox: [vb ? vb.width : 0, vb ? vb.height : 0],
			Boxes: boxes.map((r) => ['x', 'y', 'width', 'height'].map((a) => parseFloat(r.getAttribute(a)))),
			Tracks: boxes.map((r) => r.dataset.track), Img: rect(el.querySelector('img')), SVG: rect(svg) }; })()`
}

// find returns the detection message epoch/seq from those received.
func find(ml *vigiltest.MessageLog, epoch, seq string) *sinks.Message {
	for _, m := range ml.All() {
		if m.Epoch == epoch && fmt.Sprint(m.Seq) == seq {
			return &m
		}
	}
	return nil
}

// clickAt clicks the stream page's live picture at points given in source
// pixels (the clip is 512×256), converted to page coordinates from where
// the overlay is on the page.
func clickAt(t *testing.T, ctx context.Context, points [][2]float64) {
	t.Helper()
	type place struct{ Left, Top, Width, Height, VW, VH float64 }
	r, err := chromedp.Run(ctx, chromedp.Evaluate[place](`(() => { const svg = document.querySelector('.stream-page .live svg');
		const r = svg.getBoundingClientRect(); const vb = svg.viewBox.baseVal;
		return {Left: r.left, Top: r.top, Width: r.width, Height: r.height, VW: vb.width, VH: vb.height}; })()`))
	require.NoError(t, err)
	require.Equal(t, 512.0, r.VW)
	for _, p := range points {
		x, y := r.Left+p[0]*r.Width/r.VW, r.Top+p[1]*r.Height/r.VH
		require.NoError(t, chromedp.Do(ctx, chromedp.MouseClickXY(x, y)))
	}
}

// jsErrors collects the page's uncaught exceptions.
type jsErrors struct {
	mu      sync.Mutex
	errs    []string
	console []string // errors and warnings written to the console, for failures
}

func (j *jsErrors) listen(ev any) {
	if e, ok := ev.(*runtime.EventConsoleAPICalled); ok && (e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning) {
		j.mu.Lock()
		for _, a := range e.Args {
			j.console = append(j.console, fmt.Sprintf("console.%s: %s %s", e.Type, a.Description, a.Value))
		}
		j.mu.Unlock()
	}
	if e, ok := ev.(*runtime.EventExceptionThrown); ok {
		j.mu.Lock()
		d := e.ExceptionDetails
		msg := fmt.Sprintf("%s:%d:%d %s", d.URL, d.LineNumber, d.ColumnNumber, d.Text)
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		j.errs = append(j.errs, msg)
		j.mu.Unlock()
	}
}

func (j *jsErrors) consoleLines() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.console...)
}

func (j *jsErrors) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.errs...)
}

// shots are the screenshots of a run, by page name.
type shots struct{ dir string }

func screenshots(t *testing.T) *shots { return &shots{dir: t.ArtifactDir()} }

// take writes a screenshot of the whole page to <ArtifactDir>/console-<name>.png.
func (s *shots) take(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "console-"+name+".png"), png, 0o644))
}

// readme copies the screenshots over the README's.
func (s *shots) readme(t *testing.T) {
	t.Helper()
	out := filepath.Join(testenv.RepoRoot(), "docs", "img")
	require.NoError(t, os.MkdirAll(out, 0o755))
	names, err := filepath.Glob(filepath.Join(s.dir, "console-*.png"))
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, n := range names {
		b, err := os.ReadFile(n)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(out, filepath.Base(n)), b, 0o644))
	}
	t.Logf("README screenshots refreshed in %s: %d files", out, len(names))
}
