package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/pipeline"
)

// Client calls a running vigil's REST API (the `vigil streams` commands).
type Client struct {
	Base  string // e.g. http://127.0.0.1:8080
	Token string
	HTTP  *http.Client
}

// New builds a client; caFile, when set, is a PEM file of CAs to
// trust for an https:// base (a self-signed api.tls_cert, for example).
func New(base, tokenFile, caFile string) (*Client, error) {
	c := &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{Timeout: 30 * time.Second}}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, cli.BadInput(fmt.Errorf("--token-file: %w", err))
		}
		c.Token = strings.TrimSpace(string(b))
		if c.Token == "" {
			// Sent as it is, it came back as the API's 401, which says
			// nothing of the file.
			return nil, cli.BadInput(fmt.Errorf("--token-file: %s is empty", tokenFile))
		}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, cli.BadInput(fmt.Errorf("--ca: %w", err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, cli.BadInput(fmt.Errorf("--ca %s: no PEM certificate in it", caFile))
		}
		c.HTTP.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	return c, nil
}

// APIError is an error response from the API.
type APIError struct {
	Status int
	Body   api.Error
}

func (e *APIError) Error() string {
	if e.Body.Field != "" {
		return fmt.Sprintf("%s (HTTP %d, field %s)", e.Body.Error, e.Status, e.Body.Field)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Body.Error, e.Status)
}

// Do sends method path with body (JSON-encoded when not nil) and decodes a
// 2xx response into out (when not nil). Non-2xx answers are *APIError;
// 4xx ones are also bad input (exit status 2).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return cli.BadInput(fmt.Errorf("--api %s: %w", redact.URL(c.Base), err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("calling the vigil API at %s: %w (is vigil run up? see --api)", redact.URL(c.Base), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("reading the answer of the vigil API at %s: %w", redact.URL(c.Base), err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, &ae.Body) != nil || ae.Body.Error == "" {
			ae.Body.Error = strings.TrimSpace(string(b))
		}
		if resp.StatusCode/100 == 4 {
			return cli.BadInput(ae)
		}
		return ae
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// PrintStreams writes streams as a table (format "table") or as JSON
// ("json", the API's own objects: an array when list is true, else the
// single object). A single stream's table is followed by its past error,
// if it has one, with its time (the table shows only a current error).
func PrintStreams(w io.Writer, format string, streams []api.Stream, list bool) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if !list && len(streams) == 1 {
			return enc.Encode(streams[0])
		}
		if streams == nil {
			streams = []api.Stream{}
		}
		return enc.Encode(streams)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for i, c := range streamColumns {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c.head)
	}
	fmt.Fprintln(tw)
	for _, s := range streams {
		for i, c := range streamColumns {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c.value(s, s.Status))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if list || len(streams) != 1 {
		return nil
	}
	if st := streams[0].Status; st != nil && st.LastError != "" && st.CurrentError() == "" {
		_, err := fmt.Fprintf(w, "past error (%s, now %s): %s\n", st.LastErrorTime.Local().Format("2006-01-02 15:04:05 MST"), st.State, oneLineSpaces(st.LastError))
		return err
	}
	return nil
}

// PrintStreamList writes the answer of GET /v1/streams: as a table
// (PrintStreams) preceded, while NATS is down, by a line saying so and
// what the client holds; as JSON, the array of streams (the API's
// /v1/streams has the connection's state too).
func PrintStreamList(w io.Writer, format string, l api.StreamList, now time.Time) error {
	if format == "table" && l.NATS != nil && !l.NATS.Connected {
		n := l.NATS
		fmt.Fprintf(w, "NATS is down (for %s): %d messages (%s of %s) held in the reconnect buffer, sent when it is back, lost if it fills or vigil stops; %d undelivered since start\n",
			cli.RoughDuration(now.Sub(n.DownSince)), n.HeldMessages, cli.HumanBytes(n.HeldBytes), cli.HumanBytes(n.BufferLimitBytes), n.Undelivered)
		if l.RegistryError != "" {
			fmt.Fprintf(w, "registry unreachable: streams as vigil last read them\n")
		}
	}
	return PrintStreams(w, format, l.Streams, true)
}

// streamColumn is one column of the streams table: its heading and its
// value for a stream (st is nil when vigil has no status for it).
type streamColumn struct {
	head  string
	value func(s api.Stream, st *pipeline.StatusSnapshot) string
}

// streamColumns are the streams table's columns, in order. ERROR comes
// last so that a long error neither truncates nor misaligns the others.
var streamColumns = []streamColumn{
	{"ID", func(s api.Stream, _ *pipeline.StatusSnapshot) string { return s.ID }},
	{"STATE", func(s api.Stream, st *pipeline.StatusSnapshot) string {
		switch {
		case st != nil:
			return string(st.State)
		case !s.IsEnabled():
			return "disabled"
		}
		return "-"
	}},
	// The node.id of the node running it (any node's API shows every
	// stream of the fleet).
	{"NODE", func(s api.Stream, _ *pipeline.StatusSnapshot) string { return orDash(s.Node) }},
	{"FPS IN", statusValue(func(st *pipeline.StatusSnapshot) string { return fmt.Sprintf("%.1f", st.FPSIn) })},
	{"FPS OUT", statusValue(func(st *pipeline.StatusSnapshot) string {
		if st.FPSBuffered > 0 {
			return fmt.Sprintf("%.1f (%.1f buffered)", st.FPSOut, st.FPSBuffered)
		}
		return fmt.Sprintf("%.1f", st.FPSOut)
	})},
	// Faults only (vigil_frames_dropped_total); frames skipped by policy
	// get a column of their own next to it.
	{"FPS DROP", statusValue(func(st *pipeline.StatusSnapshot) string { return fmt.Sprintf("%.1f", st.FPSDropped) })},
	// Skipped by policy (vigil_frames_skipped_total): not lost.
	{"FPS SKIP", statusValue(func(st *pipeline.StatusSnapshot) string { return fmt.Sprintf("%.1f", st.FPSSkipped) })},
	{"RESOLUTION", statusValue(func(st *pipeline.StatusSnapshot) string {
		if st.Width == 0 {
			return "-"
		}
		return fmt.Sprintf("%dx%d", st.Width, st.Height)
	})},
	// With B-frames, the reorder delay: latency budgets start after it.
	{"CODEC", statusValue(func(st *pipeline.StatusSnapshot) string {
		if st.ReorderDelayMS > 0 {
			return fmt.Sprintf("%s (reorder %.0f ms)", orDash(st.Codec), st.ReorderDelayMS)
		}
		return orDash(st.Codec)
	})},
	{"RECONNECTS", statusValue(func(st *pipeline.StatusSnapshot) string { return strconv.Itoa(st.Reconnects) })},
	{"MODEL", func(s api.Stream, _ *pipeline.StatusSnapshot) string {
		if s.Model == "" {
			return "(default)"
		}
		return s.Model
	}},
	// The API redacts the URL already; a server of another version might
	// not.
	{"URL", func(s api.Stream, _ *pipeline.StatusSnapshot) string { return redact.URL(s.URL) }},
	// Only while it is why the stream is not running, and whole: the
	// cause is often at its end.
	{"ERROR", func(_ api.Stream, st *pipeline.StatusSnapshot) string {
		if st == nil {
			return ""
		}
		return oneLineSpaces(st.CurrentError())
	}},
}

// statusValue is a column that shows "-" without a status.
func statusValue(f func(*pipeline.StatusSnapshot) string) func(api.Stream, *pipeline.StatusSnapshot) string {
	return func(_ api.Stream, st *pipeline.StatusSnapshot) string {
		if st == nil {
			return "-"
		}
		return f(st)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLineSpaces joins the lines of s with spaces, so that a table row
// stays one line.
func oneLineSpaces(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\t", " ")), " ")
}
