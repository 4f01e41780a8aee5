package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/sinks"
)

// TailOptions are `vigil tail`'s flags.
type TailOptions struct {
	URL    string // NATS URL
	Stream string // stream id, or "" for all
	Prefix string // subject prefix (default "vigil")
	Count  int    // exit after this many messages; 0: run until ctx ends
	JSON   bool   // print the raw messages instead of readable lines
	// Analytics prints the streams' analytics events and counts
	// (<prefix>.<id>.analytics and .counts) instead of their detections.
	Analytics bool
	Token     string // NATS token (nats.token_file), or ""
	// Bucket is the stream registry's key-value bucket (nats.bucket of
	// the vigil watched), where Stream is looked up (default
	// registry.DefaultBucket).
	Bucket string
	// Notes receives what tail says besides the messages: a stream that
	// is disabled, a registry it cannot read, a quiet spell. nil: none.
	Notes io.Writer
	// Quiet is how long without a message before a note says so, once per
	// quiet spell (default 10 s: a stream that runs publishes every frame,
	// and a camera that sends nothing for 10 s is stalled by default).
	Quiet time.Duration
}

// DefaultTailQuiet is TailOptions.Quiet's default: decode's default stall
// timeout, past which a running stream would have reconnected.
const DefaultTailQuiet = 10 * time.Second

// Tail is `vigil tail`: it subscribes to <prefix>.<stream|*>.detections and
// prints one line per frame to out, e.g.
//
//	megamind  #120  pts 5.005 s  1 det  total 14.2 ms (infer 3.1)  face#3 0.96 [301,88 412,199] (left_seat)
//
// (#3: the detection's track, the n of its track id; in parentheses the
// zones it is in), or with o.Analytics <prefix>.<stream|*>.analytics and
// .counts, one line per event or counts message (FormatEvent,
// FormatCounts).
//
// A Stream that is not in the registry is bad input (the error lists the
// registered ones) rather than a silent wait; a disabled one, and each
// spell of Quiet without a message, get a note on o.Notes.
func Tail(ctx context.Context, o TailOptions, out io.Writer) error {
	if o.Prefix == "" {
		o.Prefix = "vigil"
	}
	if o.Bucket == "" {
		o.Bucket = registry.DefaultBucket
	}
	if o.Quiet <= 0 {
		o.Quiet = DefaultTailQuiet
	}
	if o.Notes == nil {
		o.Notes = io.Discard
	}
	token := "*"
	if o.Stream != "" {
		if !registry.ValidID(o.Stream) {
			return cli.BadInput(fmt.Errorf("--stream %q: want 1-64 characters of A-Z a-z 0-9 _ -", o.Stream))
		}
		token = o.Stream
	}
	nc, err := nats.Connect(o.URL, nats.Name("vigil-tail"), nats.Token(o.Token), nats.MaxReconnects(-1), nats.Timeout(3*time.Second))
	if errors.Is(err, nats.ErrAuthorization) {
		// The server answered: a wrong or missing token is bad input.
		return cli.BadInput(fmt.Errorf("connecting to NATS at %s: %w (a wrong or missing token: see --token-file, nats.token_file of the vigil you watch)", redact.URLs(o.URL), err))
	}
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w (is vigil run up? see --nats)", redact.URLs(o.URL), err)
	}
	defer nc.Close()
	if o.Stream != "" {
		if err := checkTailStream(ctx, nc, o); err != nil {
			return err
		}
	}
	msgs := make(chan *nats.Msg, 256)
	kinds := []string{sinks.KindDetections}
	if o.Analytics {
		kinds = []string{sinks.KindAnalytics, sinks.KindCounts}
	}
	var subjects []string
	for _, k := range kinds {
		subject := sinks.StreamSubject(o.Prefix, token, k)
		sub, err := nc.ChanSubscribe(subject, msgs)
		if err != nil {
			return fmt.Errorf("subscribing: %w", err)
		}
		// Unsubscribe's error changes nothing: nc.Close, deferred above
		// and run just after, ends the subscription anyway.
		defer func() { _ = sub.Unsubscribe() }()
		subjects = append(subjects, subject)
	}
	subject := strings.Join(subjects, " or ")
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	quiet := time.NewTimer(o.Quiet)
	defer quiet.Stop()
	for n := 0; o.Count == 0 || n < o.Count; {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil
		case <-quiet.C:
			fmt.Fprintf(o.Notes, "vigil tail: no message on %s for %s; see the streams' state with: vigil streams ls\n", subject, o.Quiet)
			continue
		case m = <-msgs:
			quiet.Reset(o.Quiet)
			n++
		}
		if o.JSON {
			fmt.Fprintf(out, "%s\n", m.Data)
			continue
		}
		line, err := formatSubject(m.Subject, m.Data)
		if err != nil {
			fmt.Fprintf(out, "%s: undecodable message: %v\n", m.Subject, err)
			continue
		}
		fmt.Fprintln(out, line)
	}
	return nil
}

// formatSubject renders a message of one of tail's subjects by its kind
// (the subject's last token).
func formatSubject(subject string, data []byte) (string, error) {
	switch subject[strings.LastIndexByte(subject, '.')+1:] {
	case sinks.KindAnalytics:
		var e analytics.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return "", err
		}
		return FormatEvent(&e), nil
	case sinks.KindCounts:
		var c analytics.Counts
		if err := json.Unmarshal(data, &c); err != nil {
			return "", err
		}
		return FormatCounts(&c), nil
	}
	var msg sinks.Message
	if err := json.Unmarshal(data, &msg); err != nil {
		return "", err
	}
	return FormatMessage(&msg), nil
}

// checkTailStream looks o.Stream up in the registry: not there is bad
// input naming the streams that are; disabled gets a note. A registry
// tail cannot read (another bucket, no JetStream, no permission) gets a
// note, and tail goes on: the messages may still come.
func checkTailStream(ctx context.Context, nc *nats.Conn, o TailOptions) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cannot := func(err error) error {
		fmt.Fprintf(o.Notes, "vigil tail: cannot check that stream %s exists: %v (see --bucket)\n", o.Stream, err)
		return nil
	}
	reg, err := registry.Lookup(ctx, nc, o.Bucket)
	if err != nil {
		return cannot(err)
	}
	e, err := reg.Get(ctx, o.Stream)
	switch {
	case errors.Is(err, registry.ErrNotFound):
		all, err := reg.List(ctx, nil)
		if err != nil {
			return cannot(err)
		}
		ids := make([]string, len(all))
		for i, e := range all {
			ids[i] = e.Spec.ID
		}
		slices.Sort(ids)
		known := "none"
		if len(ids) > 0 {
			known = strings.Join(ids, ", ")
		}
		return cli.BadInput(fmt.Errorf("--stream %q: no such stream in registry %s (registered: %s); add it with: vigil streams add", o.Stream, o.Bucket, known))
	case err != nil:
		return cannot(err)
	case !e.Spec.IsEnabled():
		fmt.Fprintf(o.Notes, "vigil tail: stream %s is disabled: nothing is published until it is enabled (vigil streams set %s --disabled=false)\n", o.Stream, o.Stream)
	}
	return nil
}

// FormatMessage renders a message as one human-readable line.
func FormatMessage(m *sinks.Message) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s #%-6d pts %8.3f s  %2d det  total %6.1f ms (infer %.1f)", m.StreamID, m.Seq, m.PTS,
		len(m.Detections), m.LatencyMS.Total, m.LatencyMS.Infer)
	for i, d := range m.Detections {
		if i == 5 {
			fmt.Fprintf(&b, "  +%d more", len(m.Detections)-5)
			break
		}
		fmt.Fprintf(&b, "  %s%s %.2f [%.0f,%.0f %.0f,%.0f]", d.Label, shortTrack(d.TrackID), d.Score, d.Box.X1, d.Box.Y1, d.Box.X2, d.Box.Y2)
		if len(d.Zones) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(d.Zones, " "))
		}
	}
	return b.String()
}

// shortTrack is "#<n>" for a track id "<epoch>-<n>" (within one run of a
// stream, n alone names the track), "" for none.
func shortTrack(id string) string {
	if id == "" {
		return ""
	}
	return "#" + id[strings.LastIndexByte(id, '-')+1:]
}

// FormatEvent renders an analytics event as one line, e.g.
//
//	pan          pts   10.120 s  line_cross   mid in           face#1 [245,82 337,174]
//	pan          pts   15.960 s  track_end    face#1 15.9 s, zones right, lines mid
func FormatEvent(e *analytics.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s pts %8.3f s  %-12s", e.StreamID, e.PTS, e.Type)
	what := ""
	switch e.Type {
	case analytics.EventZoneEnter, analytics.EventZoneExit:
		what = e.Zone
	case analytics.EventLoiter:
		what = fmt.Sprintf("%s %.1f s", e.Zone, e.Duration)
	case analytics.EventLineCross:
		what = e.Line + " " + string(e.Direction)
	case analytics.EventStationary:
		what = fmt.Sprintf("still %.1f s", e.Duration)
	case analytics.EventWarning:
		fmt.Fprintf(&b, " %s: %s", e.Reason, e.Message)
		return b.String()
	}
	if what != "" {
		fmt.Fprintf(&b, " %-16s", what)
	}
	fmt.Fprintf(&b, " %s%s [%.0f,%.0f %.0f,%.0f]", e.Label, shortTrack(e.TrackID), e.Box.X1, e.Box.Y1, e.Box.X2, e.Box.Y2)
	if e.Type == analytics.EventTrackEnd {
		fmt.Fprintf(&b, " %.1f s, zones %s, lines %s", e.Duration, listOrNone(e.Zones), listOrNone(e.Lines))
	}
	return b.String()
}

// FormatCounts renders a counts message as one line, e.g.
//
//	pan          counts v9     zone right: face 1  line mid: in face 2, out face 2
func FormatCounts(c *analytics.Counts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s counts v%-5d", c.StreamID, c.Version)
	for _, z := range c.Zones {
		fmt.Fprintf(&b, "  zone %s: %s", z.Name, byLabel(z.Occupancy))
	}
	for _, l := range c.Lines {
		fmt.Fprintf(&b, "  line %s: in %s, out %s", l.Name, byLabel(l.In), byLabel(l.Out))
	}
	return b.String()
}

// byLabel writes counts by label, sorted: "face 1, person 2"; "0" for none.
func byLabel[N int | uint64](m map[string]N) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, " ")
}
