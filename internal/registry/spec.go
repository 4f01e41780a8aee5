package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/redact"
)

// Spec is one registered stream, as stored in the bucket (JSON) and as the
// API takes it. The URL is stored with its credentials (vigil needs them
// to connect); everything that leaves vigil shows Redacted() instead.
type Spec struct {
	// ID: 1-64 of [A-Za-z0-9_-]; a NATS subject token and a metric label.
	ID string `json:"id"`
	// URL: rtsp://, rtsps://, http(s)://, file:// or a path.
	URL string `json:"url"`
	// Model: a model name or an .onnx path; empty takes the default model.
	Model string `json:"model,omitempty"`
	// FPSLimit caps processed frames per second (0: no cap); frames over
	// it are skipped by policy with reason rate_limit (not lost).
	FPSLimit float64 `json:"fps_limit,omitempty"`
	// FPSBurst is the admission token bucket's size (default 1).
	FPSBurst int `json:"fps_burst,omitempty"`
	// BudgetMS is the per-frame latency budget in ms, arrival to publish
	// (0: pipeline.budget_ms).
	BudgetMS int `json:"budget_ms,omitempty"`
	// Priority: high, normal (default) or low.
	Priority string `json:"priority,omitempty"`
	// Enabled streams run; disabled ones are stored but stopped. Default
	// true.
	Enabled *bool `json:"enabled,omitempty"`
	// Transport for RTSP: tcp (default) or udp.
	Transport string `json:"transport,omitempty"`
	// Labels are free-form key/value pairs (at most 16; keys
	// [A-Za-z0-9_.-]{1,63}, values up to 256 bytes).
	Labels map[string]string `json:"labels,omitempty"`
	// Realtime and Loop make a file behave like a camera.
	Realtime bool `json:"realtime,omitempty"`
	Loop     bool `json:"loop,omitempty"`
	// QueueSize bounds the frames waiting for the engine (0:
	// pipeline.queue_size; at most 1000).
	QueueSize int `json:"queue_size,omitempty"`
	// DecodeThreads is FFmpeg's decoder thread count (0: FFmpeg chooses,
	// with slice threads only for live and real-time streams, since frame
	// threads delay each frame by threads-1 frames; at most 64).
	DecodeThreads int `json:"decode_threads,omitempty"`
	// OpenTimeout and StallTimeout are Go duration strings ("60s").
	OpenTimeout  string `json:"open_timeout,omitempty"`
	StallTimeout string `json:"stall_timeout,omitempty"`
	// Analytics are the stream's tracking, zones and lines (package
	// analytics); nil: none, detections carry no track ids. A change of
	// this field alone is applied to the running stream without
	// restarting it (hot reload: docs/api.md).
	Analytics *analytics.Config `json:"analytics,omitempty"`
}

// IsEnabled reports Enabled, defaulting to true.
func (s *Spec) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// Redacted returns a copy whose URL has its password replaced by "***".
func (s Spec) Redacted() Spec {
	s.URL = decode.RedactURL(s.URL)
	return s
}

// FieldError is a validation failure of one field; the API returns it as
// {"error": Msg, "field": Field} with status 400.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

var (
	validID       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	validLabelKey = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)
)

// ValidID reports whether id can be a stream id.
func ValidID(id string) bool { return validID.MatchString(id) }

// Validate checks every field and returns the first problem as a
// *FieldError (the API answers one field at a time). resolveModel, when
// not nil, checks that the model exists.
func (s *Spec) Validate(resolveModel func(string) error) error {
	if p := s.Problems(resolveModel); len(p) > 0 {
		return p[0]
	}
	return nil
}

// Problems checks every field and returns every problem, in the order of
// the fields (labels by key), or nil when the spec is valid; check-config
// reports them all at once. resolveModel, when not nil, checks that the
// model exists.
func (s *Spec) Problems(resolveModel func(string) error) []*FieldError {
	var p []*FieldError
	add := func(field, format string, args ...any) { p = append(p, fieldErr(field, format, args...)) }
	if !validID.MatchString(s.ID) {
		add("id", "%q: want 1-64 characters of A-Z a-z 0-9 _ -", s.ID)
	}
	if _, _, err := decode.ParseURL(s.URL); err != nil {
		add("url", "%v", err)
	} else if len(s.URL) > 2048 {
		add("url", "longer than 2048 bytes")
	} else if maskedPassword(s.URL) {
		add("url", "the password is %s, which vigil shows in place of passwords: give the real one (to keep the stored URL, leave url out of the change)", redact.Mask)
	}
	if !(s.FPSLimit >= 0 && s.FPSLimit <= 1000) { // also refuses NaN
		add("fps_limit", "%v: want 0 (no limit) to 1000", s.FPSLimit)
	}
	if s.FPSBurst < 0 || s.FPSBurst > 1000 {
		add("fps_burst", "%d: want 0 (default 1) to 1000", s.FPSBurst)
	}
	if s.BudgetMS < 0 || s.BudgetMS > 60000 {
		add("budget_ms", "%d: want 0 (default) to 60000", s.BudgetMS)
	}
	if s.QueueSize < 0 || s.QueueSize > 1000 {
		add("queue_size", "%d: want 0 (default) to 1000", s.QueueSize)
	}
	if s.DecodeThreads < 0 || s.DecodeThreads > 64 {
		add("decode_threads", "%d: want 0 (FFmpeg chooses) to 64", s.DecodeThreads)
	}
	switch s.Priority {
	case "", "high", "normal", "low":
	default:
		add("priority", "%q: want high, normal or low", s.Priority)
	}
	switch s.Transport {
	case "", "tcp", "udp":
	default:
		add("transport", "%q: want tcp or udp", s.Transport)
	}
	if len(s.Labels) > 16 {
		add("labels", "%d labels: at most 16", len(s.Labels))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if !validLabelKey.MatchString(k) {
			add("labels", "key %q: want 1-63 characters of A-Z a-z 0-9 _ . -", k)
		}
		if len(s.Labels[k]) > 256 {
			add("labels", "value of %q is longer than 256 bytes", k)
		}
	}
	for _, d := range []struct{ field, v string }{{"open_timeout", s.OpenTimeout}, {"stall_timeout", s.StallTimeout}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v <= 0 || v > time.Hour {
			add(d.field, "%q: want a duration from 1ms to 1h, e.g. 10s", d.v)
		}
	}
	if resolveModel != nil {
		if err := resolveModel(s.Model); err != nil {
			add("model", "%v", err)
		}
	}
	if s.Analytics != nil {
		for _, fe := range s.Analytics.Problems() {
			add("analytics."+fe.Field, "%s", fe.Msg)
		}
	}
	return p
}

// CheckClasses checks the classes that the analytics' zones and lines
// name against the class names of the stream's model, which labels
// returns (engines.Labels). It returns nil when the spec has no analytics
// or they name no class (labels is then not called), a *FieldError
// naming the class (analytics.zones[0].classes[1]), or one on "model"
// when labels fails.
func (s *Spec) CheckClasses(labels func(model string) ([]string, error)) *FieldError {
	a := s.Analytics
	if a == nil || !namesClasses(a) {
		return nil
	}
	l, err := labels(s.Model)
	if err != nil {
		return fieldErr("model", "cannot read the model's classes to check analytics' classes against: %v", err)
	}
	if err := a.CheckClasses(l); err != nil {
		var fe *analytics.FieldError
		if errors.As(err, &fe) {
			return fieldErr("analytics."+fe.Field, "%s", fe.Msg)
		}
		return fieldErr("analytics", "%v", err)
	}
	return nil
}

// namesClasses reports whether a zone or a line of a names classes.
func namesClasses(a *analytics.Config) bool {
	for _, z := range a.Zones {
		if len(z.Classes) > 0 {
			return true
		}
	}
	for _, l := range a.Lines {
		if len(l.Classes) > 0 {
			return true
		}
	}
	return false
}

// Durations returns the parsed timeouts (0 where unset). Validate first.
func (s *Spec) Durations() (open, stall time.Duration) {
	open, _ = time.ParseDuration(s.OpenTimeout)
	stall, _ = time.ParseDuration(s.StallTimeout)
	return open, stall
}

// Key is the bucket key of a stream: "streams.<id>". The "streams."
// prefix leaves room for other record kinds (node status, placement) when
// several vigil nodes share one bucket.
func Key(id string) string { return "streams." + id }

// idFromKey is the inverse of Key ("" for other keys).
func idFromKey(k string) string {
	id, ok := strings.CutPrefix(k, "streams.")
	if !ok {
		return ""
	}
	return id
}

// Difference is one field whose stored value is not the wanted one. Stored
// and Want are the values as JSON ("" when unset), with credentials
// redacted; a URL that differs only in its credentials says so in Want.
type Difference struct {
	Field        string
	Stored, Want string
}

// String reads "fps_limit: registry 0, file 5" (the config file is what a
// stored spec is compared with).
func (d Difference) String() string {
	unset := func(v string) string {
		if v == "" {
			return "unset"
		}
		return v
	}
	return d.Field + ": registry " + unset(d.Stored) + ", file " + unset(d.Want)
}

// Diff lists the fields of s whose values differ from want's, in the
// order of the spec's fields. An unset Enabled equals true (its default).
func (s Spec) Diff(want Spec) []Difference {
	have, wantM := specMap(s), specMap(want)
	haveR, wantR := specMap(s.Redacted()), specMap(want.Redacted())
	var out []Difference
	t := reflect.TypeFor[Spec]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if reflect.DeepEqual(have[name], wantM[name]) {
			continue
		}
		d := Difference{Field: name, Stored: jsonValue(haveR[name]), Want: jsonValue(wantR[name])}
		if d.Stored == d.Want {
			d.Want += " (other credentials)"
		}
		out = append(out, d)
	}
	return out
}

// specMap is s as the JSON object it is stored as, Enabled true left out.
func specMap(s Spec) map[string]any {
	if s.IsEnabled() {
		s.Enabled = nil
	}
	b, _ := json.Marshal(s)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func jsonValue(v any) string {
	if v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// maskedPassword reports whether raw's password is redact.Mask: a URL
// copied from vigil's own output (the API, logs, the console's edit form),
// which would replace the real password with the mask.
func maskedPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	p, ok := u.User.Password()
	return ok && p == redact.Mask
}
