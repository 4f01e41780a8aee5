// Package api serves vigil's REST API under /v1: stream registration
// (create, list, get, patch, delete) over the registry, with each stream's
// live status from the supervisor, and the OpenAPI 3 document at
// /v1/openapi.json. JSON in and out; errors are {"error": ..., "field": ...}.
package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/live"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

// MaxBodyBytes bounds request bodies (64 KiB: a stream spec is < 4 KiB).
const MaxBodyBytes = 64 << 10

// OpenAPI is the OpenAPI 3.0 document served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// Options configure a Server.
type Options struct {
	Registry *registry.Registry
	// Status returns a stream's live status (pipeline.Supervisor.Status).
	Status func(id string) (pipeline.StatusSnapshot, bool)
	// CheckModel validates a spec's model reference; nil accepts any.
	CheckModel func(string) error
	// Labels returns the class names of a model (engines.Labels), which
	// the classes of a spec's analytics are checked against
	// (registry.Spec.CheckClasses); nil: classes are not checked.
	Labels func(model string) ([]string, error)
	// Classes, when set, checks the classes of a spec's analytics instead
	// of Labels: against its model's class names and, for a stream that
	// may switch to its model's lighter degrade_to model, that model's
	// too (engines.StreamClasses).
	Classes func(sp registry.Spec) *registry.FieldError
	// NATS, when set, returns the state of the NATS connection that the
	// registry (and every message vigil publishes) goes through. While it
	// is down, reads answer from Known and writes fail at once (503).
	NATS func() sinks.NATSState
	// Known returns the registry as vigil last read it (the streams it
	// runs or holds stopped), for reads while NATS is down; nil: none.
	Known func() []registry.Entry
	// Where, when set, returns the node running a stream and its status
	// there (this node's supervisor, or the status another node last
	// reported); ("", nil) when no node runs it. It replaces Status.
	Where func(id string) (node string, st *pipeline.StatusSnapshot)
	// Nodes lists the fleet's nodes (GET /v1/nodes; package cluster's
	// NodeStatus); Drain asks node id to hand its streams over (POST
	// /v1/nodes/{id}/drain). nil: 404.
	Nodes func(ctx context.Context) (any, error)
	Drain func(ctx context.Context, id string) error
	// Token, when not empty, is required as "Authorization: Bearer <Token>"
	// or as the SessionCookie that POST /v1/session sets (the console).
	Token string
	// Health, when set, runs the health checks of `vigil doctor` in
	// process (GET /v1/health; doctor.Health). nil: 404.
	Health func(ctx context.Context) (any, error)
	// Recent, when set, keeps each stream's latest analytics counts and
	// recent events (GET /v1/streams/{id}/analytics). nil: 404.
	Recent *Recent
	// Sources, when not nil, is api.allowed_sources: a stream whose URL it
	// refuses is answered 403 with field "url", on create and on patch.
	Sources *allowlist.List
	// Ready, when set, says whether this node should be sent work: nil
	// for ready, else why not. GET /readyz answers 200 or 503 with it,
	// without a token (orchestrators' probes carry none, and the answer
	// tells nothing about the streams). The service sets it; nil: ready
	// whenever the API answers.
	Ready func() error
	// Live serves the streams' pictures (snapshot.jpg, live.mjpeg,
	// live.ws; pictures.go); nil: those answer 404.
	Live *live.Hub
	// Snapshots serves event snapshots (GET /v1/snapshots/{id}); nil:
	// 404 (live.snapshots.enabled off).
	Snapshots *live.Snapshots
	Logger    *zap.Logger
}

// Server implements the API; Handler returns its http.Handler.
type Server struct {
	o Options
}

// New returns a server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return &Server{o: o}
}

// Route is one API operation; Routes lists them all (the OpenAPI document
// must describe exactly these, which a test checks).
type Route struct {
	Method, Path string
	handler      func(*Server, http.ResponseWriter, *http.Request)
}

// Routes are the API's operations.
var Routes = []Route{
	{"GET", "/v1/openapi.json", (*Server).openapi},
	{"GET", "/v1/streams", (*Server).list},
	{"POST", "/v1/streams", (*Server).create},
	{"GET", "/v1/streams/{id}", (*Server).get},
	{"PATCH", "/v1/streams/{id}", (*Server).patch},
	{"DELETE", "/v1/streams/{id}", (*Server).delete},
	{"GET", ReadyPath, (*Server).readyz},
	{"GET", "/v1/nodes", (*Server).nodes},
	{"POST", "/v1/nodes/{id}/drain", (*Server).drain},
	{"GET", "/v1/streams/{id}/snapshot.jpg", (*Server).snapshotJPG},
	{"GET", "/v1/streams/{id}/live.mjpeg", (*Server).liveMJPEG},
	{"GET", "/v1/streams/{id}/live.ws", (*Server).liveWS},
	{"GET", "/v1/snapshots/{id}", (*Server).eventSnapshot},
	{"POST", SessionPath, (*Server).createSession},
	{"DELETE", SessionPath, (*Server).deleteSession},
	{"GET", "/v1/health", (*Server).health},
	{"GET", "/v1/streams/{id}/analytics", (*Server).analytics},
}

// allowed returns the methods of the Routes whose path pattern matches
// path (a {name} segment matches any one non-empty segment), in Routes'
// order; none for a path no route has.
func allowed(path string) []string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var out []string
	for _, r := range Routes {
		pat := strings.Split(strings.Trim(r.Path, "/"), "/")
		if len(pat) != len(segs) {
			continue
		}
		match := true
		for i, p := range pat {
			if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
				match = segs[i] != ""
			} else {
				match = p == segs[i]
			}
			if !match {
				break
			}
		}
		if match && !slices.Contains(out, r.Method) {
			out = append(out, r.Method)
		}
	}
	return out
}

// ReadyPath is the readiness endpoint: 200 "ready" when Options.Ready
// says so, else 503 "not ready: <why>" (text/plain). It needs no token.
// Liveness is /healthz on the metrics listener.
const ReadyPath = "/readyz"

// Handler returns the API's handler: authentication, then the routes and
// the console (its page at / and its assets under ConsolePrefix).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range Routes {
		h := r.handler
		mux.HandleFunc(r.Method+" "+r.Path, func(w http.ResponseWriter, req *http.Request) { h(s, w, req) })
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The catch-all pattern also takes a known path with a method it
		// does not serve, which ServeMux would answer 405 without it.
		if allow := allowed(r.URL.Path); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeErr(w, http.StatusMethodNotAllowed, "", fmt.Sprintf("%s %s: method not allowed (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		writeErr(w, http.StatusNotFound, "", fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	mountConsole(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.o.Token != "" && !public(r) && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="vigil"`)
			writeErr(w, http.StatusUnauthorized, "Authorization", "missing or wrong bearer token (or session cookie)")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Stream is a stream as the API shows it: the spec with its URL redacted,
// plus live status.
type Stream struct {
	registry.Spec
	Revision uint64                   `json:"revision"`
	Status   *pipeline.StatusSnapshot `json:"status,omitempty"`
	// Node is the node.id of the node running the stream (absent when
	// none does: disabled, or not placed yet).
	Node string `json:"node,omitempty"`
}

// StreamList is the body of GET /v1/streams.
type StreamList struct {
	// Streams are sorted by id.
	Streams []Stream `json:"streams"`
	// NATS is the state of vigil's NATS connection, which carries the
	// registry, detections, events and alerts (absent when unknown).
	NATS *sinks.NATSState `json:"nats,omitempty"`
	// RegistryError is set when the registry could not be read because
	// NATS is down: Streams are then the streams as vigil last read them.
	RegistryError string `json:"registry_error,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, field, msg string) {
	writeJSON(w, code, Error{Error: msg, Field: field})
}

func (s *Server) view(e registry.Entry) Stream {
	v := Stream{Spec: e.Spec.Redacted(), Revision: e.Revision}
	if s.o.Where != nil {
		v.Node, v.Status = s.o.Where(e.Spec.ID)
		return v
	}
	if s.o.Status != nil {
		if st, ok := s.o.Status(e.Spec.ID); ok {
			v.Status = &st
		}
	}
	return v
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
	}
	_, _ = io.WriteString(w, "ready\n")
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	// Nodes are package cluster's NodeStatus values, by id.
	Nodes any `json:"nodes"`
}

func (s *Server) nodes(w http.ResponseWriter, r *http.Request) {
	if s.o.Nodes == nil {
		writeErr(w, http.StatusNotFound, "", "this vigil is not part of a fleet")
		return
	}
	ns, err := s.o.Nodes(r.Context())
	if err != nil {
		writeErr(w, http.StatusServiceUnavailable, "", "reading the lease bucket: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, NodeList{Nodes: ns})
}

func (s *Server) drain(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.o.Drain == nil {
		writeErr(w, http.StatusNotFound, "", "this vigil is not part of a fleet")
		return
	}
	if err := s.o.Drain(r.Context(), id); err != nil {
		writeErr(w, http.StatusNotFound, "id", err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"node": id, "status": "draining"})
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	out := StreamList{Streams: []Stream{}}
	var es []registry.Entry
	if down, st := s.natsDown(); down {
		out.NATS = &st
		out.RegistryError = "NATS unreachable: " + downFor(st) + "; the list is the registry as vigil last read it"
		if s.o.Known != nil {
			es = s.o.Known()
		}
	} else {
		var err error
		es, err = s.o.Registry.List(r.Context(), func(key string, err error) {
			s.o.Logger.Warn("skipping an invalid registry entry (fix or delete it)", zap.String("key", key), zap.Error(err))
		})
		if err != nil {
			s.storeErr(w, err)
			return
		}
		if s.o.NATS != nil {
			st := s.o.NATS()
			out.NATS = &st
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Spec.ID < es[j].Spec.ID })
	for _, e := range es {
		out.Streams = append(out.Streams, s.view(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !registry.ValidID(id) {
		writeErr(w, http.StatusBadRequest, "id", fmt.Sprintf("%q is not a valid stream id", id))
		return
	}
	if down, _ := s.natsDown(); down {
		if s.o.Known != nil {
			for _, e := range s.o.Known() {
				if e.Spec.ID == id {
					writeJSON(w, http.StatusOK, s.view(e))
					return
				}
			}
		}
		s.storeErr(w, fmt.Errorf("%w: %s", registry.ErrNotFound, id))
		return
	}
	e, err := s.o.Registry.Get(r.Context(), id)
	if err != nil {
		s.storeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(e))
}

// natsDown reports whether the NATS connection (and so the registry) is
// down, with its state.
func (s *Server) natsDown() (bool, sinks.NATSState) {
	if s.o.NATS == nil {
		return false, sinks.NATSState{}
	}
	st := s.o.NATS()
	return !st.Connected, st
}

// refuseWhileDown answers 503 to a change of the registry while NATS is
// down, at once rather than after the registry's timeout; it reports
// whether it did.
func (s *Server) refuseWhileDown(w http.ResponseWriter) bool {
	down, st := s.natsDown()
	if down {
		writeErr(w, http.StatusServiceUnavailable, "", "the stream registry is on NATS, which is unreachable ("+downFor(st)+"); nothing was changed: retry when it is back")
	}
	return down
}

// downFor says since when NATS is down, e.g. "disconnected since
// 10:01:02 UTC, 12 s".
func downFor(st sinks.NATSState) string {
	if st.DownSince.IsZero() {
		return "disconnected"
	}
	return fmt.Sprintf("disconnected since %s, %d s", st.DownSince.UTC().Format("15:04:05 MST"), int(time.Since(st.DownSince).Seconds()))
}

// readBody reads a bounded JSON body; it writes the error response itself.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !(r.Method == http.MethodPatch && mt == "application/merge-patch+json")) {
			writeErr(w, http.StatusUnsupportedMediaType, "Content-Type", fmt.Sprintf("%q: send application/json (or application/merge-patch+json for PATCH)", ct))
			return nil, false
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeErr(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("request body over %d bytes", MaxBodyBytes))
		return nil, false
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, "", "reading body: "+err.Error())
		return nil, false
	}
	return b, true
}

// decodeSpec decodes strictly: unknown fields are errors naming the field.
func decodeSpec(b []byte, sp *registry.Spec) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) == nil {
		for _, k := range slices.Sorted(maps.Keys(top)) {
			if !specFields[k] {
				return &registry.FieldError{Field: k, Msg: "unknown field"}
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(sp); err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			// The top level's members were checked above, so this one is
			// inside the one object of a spec with fields of its own,
			// analytics (encoding/json names only the member).
			return &registry.FieldError{Field: "analytics", Msg: fmt.Sprintf("unknown field %s", f)}
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return &registry.FieldError{Msg: fmt.Sprintf("the body must be a JSON object, not %s", te.Value)}
			}
			return &registry.FieldError{Field: te.Field, Msg: typeMsg(te)}
		}
		if strings.Contains(msg, "is not a duration") {
			// analytics.Duration's UnmarshalText: encoding/json does not
			// say where.
			return &registry.FieldError{Field: "analytics", Msg: msg}
		}
		var se *json.SyntaxError
		if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return &registry.FieldError{Msg: fmt.Sprintf("invalid JSON: %s", strings.TrimPrefix(msg, "json: "))}
		}
		return &registry.FieldError{Msg: "invalid JSON: " + msg}
	}
	if dec.More() {
		return &registry.FieldError{Msg: "invalid JSON: more than one value"}
	}
	return nil
}

// typeMsg says what a member of the wrong JSON type should be. A number
// of the right type that the field cannot hold (a fraction for a whole
// number, or one out of range) is shown as given, without "number": it was
// one ("want a number, got number 1.5" said nothing).
func typeMsg(te *json.UnmarshalTypeError) string {
	k := te.Type.Kind()
	n, isNum := strings.CutPrefix(te.Value, "number ")
	switch {
	case !isNum:
		return fmt.Sprintf("want %s, got %s", jsonKind(k), te.Value)
	case k >= reflect.Int && k <= reflect.Uint64 && strings.ContainsAny(n, ".eE"):
		return fmt.Sprintf("want %s, got %s", jsonKind(k), n)
	default:
		return fmt.Sprintf("%s: out of range", n)
	}
}

// jsonKind names a Go kind the way a JSON user thinks of it.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Float32, reflect.Float64:
		return "a number"
	default:
		return "a whole number"
	}
}

func (s *Server) badSpec(w http.ResponseWriter, err error) {
	var fe *registry.FieldError
	if errors.As(err, &fe) {
		msg := fe.Msg
		if fe.Field != "" {
			msg = fe.Error()
		}
		writeErr(w, http.StatusBadRequest, fe.Field, msg)
		return
	}
	writeErr(w, http.StatusBadRequest, "", err.Error())
}

// validate checks every field of sp (registry.Spec.Validate) and, with
// Options.Labels, the classes its analytics name; it returns the first
// problem as a *registry.FieldError.
func (s *Server) validate(sp *registry.Spec) error {
	if err := sp.Validate(s.o.CheckModel); err != nil {
		return err
	}
	switch {
	case s.o.Classes != nil:
		if fe := s.o.Classes(*sp); fe != nil {
			return fe
		}
	case s.o.Labels != nil:
		if fe := sp.CheckClasses(s.o.Labels); fe != nil {
			return fe
		}
	}
	return nil
}

// allowed checks sp's URL against api.allowed_sources and, when refused,
// answers 403 naming the field and logs it; it reports whether sp may be
// stored.
func (s *Server) allowed(w http.ResponseWriter, sp registry.Spec) bool {
	err := s.o.Sources.Check(sp.URL)
	if err == nil {
		return true
	}
	s.o.Logger.Warn("stream refused", zap.String("stream", sp.ID), zap.Error(err))
	writeErr(w, http.StatusForbidden, "url", "url: "+err.Error())
	return false
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var sp registry.Spec
	if err := decodeSpec(b, &sp); err != nil {
		s.badSpec(w, err)
		return
	}
	if err := s.validate(&sp); err != nil {
		s.badSpec(w, err)
		return
	}
	if !s.allowed(w, sp) {
		return
	}
	if s.refuseWhileDown(w) {
		return
	}
	rev, err := s.o.Registry.Create(r.Context(), sp)
	if err != nil {
		s.storeErr(w, err)
		return
	}
	s.o.Logger.Info("stream registered", zap.String("stream", sp.ID), zap.String("url", sp.Redacted().URL))
	w.Header().Set("Location", "/v1/streams/"+sp.ID)
	writeJSON(w, http.StatusCreated, s.view(registry.Entry{Spec: sp, Revision: rev}))
}

// patch applies a JSON merge patch (RFC 7396) to the stored spec: given
// members replace, null removes, objects (labels) merge recursively,
// absent members stay. The id cannot change; unknown members are errors
// even when null. A patch that changes nothing makes no new revision.
func (s *Server) patch(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !registry.ValidID(id) {
		writeErr(w, http.StatusBadRequest, "id", fmt.Sprintf("%q is not a valid stream id", id))
		return
	}
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	// UseNumber: a number is checked against its field by decodeSpec
	// below, which names the field (one that no float64 holds, 1e309,
	// failed here as "must be a JSON object").
	var patch map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&patch); err != nil || patch == nil || dec.More() {
		writeErr(w, http.StatusBadRequest, "", "the body must be a JSON object (a merge patch)")
		return
	}
	for k := range patch {
		if !specFields[k] {
			writeErr(w, http.StatusBadRequest, k, k+": unknown field")
			return
		}
	}
	if s.refuseWhileDown(w) {
		return
	}
	cur, err := s.o.Registry.Get(r.Context(), id)
	if err != nil {
		s.storeErr(w, err)
		return
	}
	doc, _ := json.Marshal(cur.Spec)
	var target map[string]any
	_ = json.Unmarshal(doc, &target)
	mb, _ := json.Marshal(mergePatch(target, patch))
	var sp registry.Spec
	if err := decodeSpec(mb, &sp); err != nil {
		s.badSpec(w, err)
		return
	}
	if sp.ID != id {
		writeErr(w, http.StatusBadRequest, "id", "the id of a stream cannot change; delete and create instead")
		return
	}
	if err := s.validate(&sp); err != nil {
		s.badSpec(w, err)
		return
	}
	// Also when the patch leaves the url alone: a stream stored before the
	// list was tightened does not start, and is changed only to fix it.
	if !s.allowed(w, sp) {
		return
	}
	if after, _ := json.Marshal(sp); bytes.Equal(after, doc) {
		writeJSON(w, http.StatusOK, s.view(cur)) // nothing changed
		return
	}
	rev, err := s.o.Registry.Update(r.Context(), sp, cur.Revision)
	if err != nil {
		s.storeErr(w, err)
		return
	}
	s.o.Logger.Info("stream changed", zap.String("stream", id))
	writeJSON(w, http.StatusOK, s.view(registry.Entry{Spec: sp, Revision: rev}))
}

// mergePatch applies patch to target as RFC 7396 section 2 describes.
func mergePatch(target, patch map[string]any) map[string]any {
	if target == nil {
		target = map[string]any{}
	}
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(target, k)
		case map[string]any:
			tv, _ := target[k].(map[string]any)
			target[k] = mergePatch(tv, pv)
		default:
			target[k] = v
		}
	}
	return target
}

// specFields are the JSON members of registry.Spec.
var specFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeOf(registry.Spec{})
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = true
	}
	return m
}()

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !registry.ValidID(id) {
		writeErr(w, http.StatusBadRequest, "id", fmt.Sprintf("%q is not a valid stream id", id))
		return
	}
	if s.refuseWhileDown(w) {
		return
	}
	if err := s.o.Registry.Delete(r.Context(), id); err != nil {
		s.storeErr(w, err)
		return
	}
	if s.o.Recent != nil {
		s.o.Recent.Forget(id)
	}
	s.o.Logger.Info("stream removed", zap.String("stream", id))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) storeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, registry.ErrNotFound):
		writeErr(w, http.StatusNotFound, "id", err.Error())
	case errors.Is(err, registry.ErrInvalidEntry):
		writeErr(w, http.StatusConflict, "id", err.Error()+"; DELETE it and create it again")
	case errors.Is(err, registry.ErrExists):
		writeErr(w, http.StatusConflict, "id", err.Error())
	case errors.Is(err, registry.ErrConflict):
		writeErr(w, http.StatusConflict, "", err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		writeErr(w, http.StatusServiceUnavailable, "", "registry unavailable: "+err.Error())
	default:
		s.o.Logger.Error("registry error", zap.Error(err))
		writeErr(w, http.StatusInternalServerError, "", "registry error: "+err.Error())
	}
}
