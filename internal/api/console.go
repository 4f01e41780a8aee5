package api

import (
	"net/http"

	"github.com/vigil-video/vigil/internal/console"
	"github.com/vigil-video/vigil/internal/registry"
)

// ConsolePrefix is where the console's assets are served (package
// console); its page is at /. Neither needs a token: they hold no data.
const ConsolePrefix = "/ui/"

// mountConsole serves the console on mux: GET / (exactly) and GET
// ConsolePrefix. These are not API operations (not in Routes).
func mountConsole(mux *http.ServeMux) {
	h := console.Handler()
	mux.Handle("GET /{$}", h)
	mux.Handle("GET "+ConsolePrefix, http.StripPrefix(ConsolePrefix[:len(ConsolePrefix)-1], h))
}

// health answers GET /v1/health: `vigil doctor`'s checks run in process
// (Options.Health).
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.o.Health == nil {
		writeErr(w, http.StatusNotFound, "", "health checks are not served by this vigil")
		return
	}
	rep, err := s.o.Health(r.Context())
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, "", "health checks: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// analytics answers GET /v1/streams/{id}/analytics: the stream's latest
// counts and its recent analytics events (Options.Recent). A stream the
// registry does not hold is 404 with field id.
func (s *Server) analytics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !registry.ValidID(id) {
		writeErr(w, http.StatusBadRequest, "id", "not a valid stream id")
		return
	}
	if down, _ := s.natsDown(); !down {
		if _, err := s.o.Registry.Get(r.Context(), id); err != nil {
			s.storeErr(w, err)
			return
		}
	}
	if s.o.Recent == nil {
		writeErr(w, http.StatusNotFound, "", "analytics are not kept by this vigil")
		return
	}
	writeJSON(w, http.StatusOK, s.o.Recent.Of(id))
}
