// Package console is vigil's web console: a page of plain ES modules and
// CSS, embedded in the binary and served by the API (internal/api) at /
// on its listener, with the API's token and TLS. It needs no Node.js and
// no build step: the files under ui/ are what the browser runs.
//
// The page talks to the API only: GET /v1/streams for the wall, the
// live.ws feed of each stream (a JSON detection message, then the JPEG
// of its frame) for the pictures, whose overlay (boxes, labels, track
// ids, zones, lines) it draws itself, PATCH /v1/streams/{id} for the
// zone and line editor, GET /v1/health and /v1/nodes for the health
// page. It logs in with POST /v1/session, which sets the session cookie
// that pictures and WebSockets carry.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed ui
var files embed.FS

// Files are the console's assets: index.html, the modules under js/, and
// style.css.
var Files = func() fs.FS {
	f, err := fs.Sub(files, "ui")
	if err != nil { // ui is embedded above: cannot happen
		panic(err)
	}
	return f
}()

// Handler serves Files: "/" is index.html, other paths are files under
// ui/ (prefix already stripped). Every answer says not to cache it for
// long (a new vigil serves new assets at the same paths), not to sniff
// types, and which origins the page may use: its own only.
func Handler() http.Handler {
	fsrv := http.FileServerFS(Files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; connect-src 'self'; style-src 'self'; frame-ancestors 'none'")
		fsrv.ServeHTTP(w, r)
	})
}
