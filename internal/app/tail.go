package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

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
	Token  string // NATS token (nats.token_file), or ""
}

// Tail is `vigil tail`: it subscribes to <prefix>.<stream|*>.detections and
// prints one line per frame to out, e.g.
//
//	megamind  #120  pts 5.005 s  1 det  total 14.2 ms (infer 3.1)  face 0.96 [301,88 412,199]
func Tail(ctx context.Context, o TailOptions, out io.Writer) error {
	if o.Prefix == "" {
		o.Prefix = "vigil"
	}
	token := "*"
	if o.Stream != "" {
		if !registry.ValidID(o.Stream) {
			return badInput(fmt.Errorf("--stream %q: want 1-64 characters of A-Z a-z 0-9 _ -", o.Stream))
		}
		token = o.Stream
	}
	nc, err := nats.Connect(o.URL, nats.Name("vigil-tail"), nats.Token(o.Token), nats.MaxReconnects(-1), nats.Timeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("connecting to NATS at %s: %w (is vigil run up? see --nats)", redact.URLs(o.URL), err)
	}
	defer nc.Close()
	msgs := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(sinks.Subject(o.Prefix, token), msgs)
	if err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	for n := 0; o.Count == 0 || n < o.Count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			if o.JSON {
				fmt.Fprintf(out, "%s\n", m.Data)
				continue
			}
			var msg sinks.Message
			if err := json.Unmarshal(m.Data, &msg); err != nil {
				fmt.Fprintf(out, "%s: undecodable message: %v\n", m.Subject, err)
				continue
			}
			fmt.Fprintln(out, FormatMessage(&msg))
		}
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
		fmt.Fprintf(&b, "  %s %.2f [%.0f,%.0f %.0f,%.0f]", d.Label, d.Score, d.Box.X1, d.Box.Y1, d.Box.X2, d.Box.Y2)
	}
	return b.String()
}
