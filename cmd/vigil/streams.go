package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/registry"
)

const streamsUsage = `Usage: vigil streams COMMAND [flags]

Manage the streams of a running vigil through its REST API.

  vigil streams ls  [-o table|json]                 list streams and their live status
  vigil streams get ID [-o table|json]              one stream
  vigil streams add --id ID --url URL [spec flags]  register a stream (it starts at once)
  vigil streams set ID [spec flags]                 change only the given fields (the stream restarts)
  vigil streams rm ID                               remove a stream (it stops)
  vigil streams apply --config FILE [ID...]         make the registry hold the file's streams as the
                                                    file says (all, or those named); vigil run logs
                                                    this command for each config stream that differs

Common flags (before or after the command's own):
  --api URL          vigil's API (default http://127.0.0.1:8080, or $VIGIL_API)
  --token-file FILE  bearer token, when vigil has api.token_file
  --ca FILE          PEM CA to trust for an https --api
Run 'vigil streams add --help' for the spec flags.
`

// specFlags are the flags of add and set; only those set go in the body.
type specFlags struct {
	fs     *flag.FlagSet
	labels labelFlag
}

type labelFlag map[string]string

func (l labelFlag) String() string { return "" }
func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want key=value", v)
	}
	l[k] = val
	return nil
}

func addSpecFlags(fs *flag.FlagSet) *specFlags {
	fs.String("url", "", "camera or file URL: rtsp://, rtsps://, http(s)://, file:// or a path")
	fs.String("model", "", "model name (blazeface, blazeface-back, yolox-nano, a configured one) or .onnx path")
	fs.Float64("fps-limit", 0, "cap on processed frames per second (0: none)")
	fs.Int("budget-ms", 0, "per-frame latency budget in ms (0: default)")
	fs.String("priority", "", "high, normal or low")
	fs.String("transport", "", "RTSP transport: tcp or udp")
	fs.Int("fps-burst", 0, "admission token bucket size for --fps-limit (0: 1)")
	fs.Int("queue-size", 0, "frames waiting for the engine (0: pipeline.queue_size)")
	fs.Int("decode-threads", 0, "FFmpeg decoder threads (0: FFmpeg chooses)")
	fs.Bool("disabled", false, "store the stream but do not run it (set --disabled=false to enable)")
	fs.Bool("realtime", false, "pace a file at its native frame rate")
	fs.Bool("loop", false, "restart a file at its end")
	fs.String("open-timeout", "", "limit up to the first frame, e.g. 60s")
	fs.String("stall-timeout", "", "limit between packets, e.g. 10s")
	fs.String("analytics", "", "file holding one analytics: block (tracker, zones, lines; see docs/api.md); none removes it. A change of analytics alone applies without restarting the stream")
	sf := &specFlags{fs: fs, labels: labelFlag{}}
	fs.Var(sf.labels, "label", "key=value label (repeatable)")
	return sf
}

// body returns the JSON fields of the flags given on the command line.
// Errors: an --analytics file that does not load or is not valid
// (*cli.BadInputError naming its field).
func (sf *specFlags) body() (map[string]any, error) {
	b := map[string]any{}
	var err error
	sf.fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok { // --label, collected below
			return
		}
		get := g.Get
		switch f.Name {
		case "url", "model", "priority", "transport", "open-timeout", "stall-timeout":
			b[strings.ReplaceAll(f.Name, "-", "_")] = get()
		case "fps-limit":
			b["fps_limit"] = get()
		case "budget-ms", "fps-burst", "queue-size", "decode-threads":
			b[strings.ReplaceAll(f.Name, "-", "_")] = get()
		case "disabled":
			b["enabled"] = !get().(bool)
		case "realtime", "loop":
			b[f.Name] = get()
		case "analytics":
			if v := get().(string); v == "none" {
				b["analytics"] = nil // removes it (a merge patch's null)
			} else if a, aerr := config.LoadAnalytics(v); aerr != nil {
				err = &cli.BadInputError{Err: fmt.Errorf("--analytics %w", aerr)}
			} else {
				b["analytics"] = a
			}
		}
	})
	if len(sf.labels) > 0 {
		b["labels"] = map[string]string(sf.labels)
	}
	return b, err
}

func cmdStreams(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, streamsUsage)
		if len(args) == 0 {
			return &cli.BadInputError{Err: errors.New("a command is required: ls, get, add, set, rm or apply")}
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	synopsis := map[string]string{"ls": "streams ls [flags]", "get": "streams get ID [flags]", "add": "streams add --id ID --url URL [flags]",
		"set": "streams set ID [flags]", "rm": "streams rm ID [flags]", "apply": "streams apply --config FILE [ID...] [flags]"}[sub]
	if synopsis == "" {
		synopsis = "streams " + sub
	}
	fs := newFlags("streams "+sub, synopsis, stderr)
	apiURL := fs.String("api", envOr("VIGIL_API", "http://127.0.0.1:8080"), "vigil API base URL")
	tokenFile := fs.String("token-file", "", "file holding the bearer token")
	ca := fs.String("ca", "", "PEM CA file to trust for https")
	output := fs.String("o", "table", "output: table or json")
	var sf *specFlags
	var id, cfgPath *string
	switch sub {
	case "apply":
		cfgPath = fs.String("config", "", "the config file whose streams to apply (vigil run --config)")
	case "add":
		id = fs.String("id", "", "stream id: 1-64 of A-Z a-z 0-9 _ -")
		sf = addSpecFlags(fs)
	case "set":
		sf = addSpecFlags(fs)
	case "ls", "get", "rm":
	default:
		fmt.Fprint(stderr, streamsUsage)
		return &cli.BadInputError{Err: fmt.Errorf("unknown command %q", sub)}
	}
	// Allow the positional ID before the flags (vigil streams get cam1 -o json).
	var pos []string
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if err := parse(fs, rest); err != nil {
		return err
	}
	pos = append(pos, fs.Args()...)
	if *output != "table" && *output != "json" {
		return &cli.BadInputError{Err: fmt.Errorf("-o %q: want table or json", *output)}
	}
	if _, err := url.ParseRequestURI(*apiURL); err != nil {
		return &cli.BadInputError{Err: fmt.Errorf("--api %q: not a URL", redact.URL(*apiURL))}
	}
	needID := sub == "get" || sub == "set" || sub == "rm"
	if needID && len(pos) != 1 || !needID && sub != "apply" && len(pos) != 0 {
		fs.Usage()
		if needID {
			return &cli.BadInputError{Err: fmt.Errorf("usage: vigil %s (one stream ID, got %d arguments)", synopsis, len(pos))}
		}
		return &cli.BadInputError{Err: fmt.Errorf("usage: vigil %s (no arguments, got %q)", synopsis, pos)}
	}
	var file config.Config
	if sub == "apply" {
		if *cfgPath == "" {
			fs.Usage()
			return &cli.BadInputError{Err: fmt.Errorf("usage: vigil %s (--config is required)", synopsis)}
		}
		var err error
		if file, err = loadConfig(*cfgPath); err != nil {
			return err
		}
	}
	c, err := client.New(*apiURL, *tokenFile, *ca)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch sub {
	case "ls":
		var out api.StreamList
		if err := c.Do(ctx, http.MethodGet, "/v1/streams", nil, &out); err != nil {
			return err
		}
		return client.PrintStreamList(stdout, *output, out, time.Now())
	case "get":
		var s api.Stream
		if err := c.Do(ctx, http.MethodGet, "/v1/streams/"+url.PathEscape(pos[0]), nil, &s); err != nil {
			return err
		}
		return client.PrintStreams(stdout, *output, []api.Stream{s}, false)
	case "add":
		body, err := sf.body()
		if err != nil {
			return err
		}
		body["id"] = *id
		var s api.Stream
		if err := c.Do(ctx, http.MethodPost, "/v1/streams", body, &s); err != nil {
			return err
		}
		return client.PrintStreams(stdout, *output, []api.Stream{s}, false)
	case "set":
		body, err := sf.body()
		if err != nil {
			return err
		}
		if len(body) == 0 {
			return &cli.BadInputError{Err: errors.New("streams set: give at least one field to change")}
		}
		var s api.Stream
		if err := c.Do(ctx, http.MethodPatch, "/v1/streams/"+url.PathEscape(pos[0]), body, &s); err != nil {
			return err
		}
		return client.PrintStreams(stdout, *output, []api.Stream{s}, false)
	case "apply":
		return applyStreams(ctx, c, &file, pos, stdout)
	default: // rm
		if err := c.Do(ctx, http.MethodDelete, "/v1/streams/"+url.PathEscape(pos[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s\n", pos[0])
		return nil
	}
}

// applyStreams makes the registry hold the streams of file (those named in
// ids, or all) as the file says: a stream that is not registered is added,
// one that is gets a merge patch that sets every field to the file's value
// and removes the fields and labels the file does not set. It prints one
// line per stream: added, changed (it restarts) or unchanged.
func applyStreams(ctx context.Context, c *client.Client, file *config.Config, ids []string, stdout io.Writer) error {
	byID := map[string]config.Stream{}
	var all []string
	for _, s := range file.Streams {
		byID[s.ID] = s
		all = append(all, s.ID)
	}
	if len(ids) == 0 {
		ids = all
	}
	for _, id := range ids {
		if _, ok := byID[id]; !ok {
			return &cli.BadInputError{Err: fmt.Errorf("stream %q is not in %s (its streams: %s)", id, file.Source, strings.Join(all, ", "))}
		}
	}
	for _, id := range ids {
		want := file.Spec(byID[id])
		path := "/v1/streams/" + url.PathEscape(id)
		var cur api.Stream
		err := c.Do(ctx, http.MethodGet, path, nil, &cur)
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			if err := c.Do(ctx, http.MethodPost, "/v1/streams", want, nil); err != nil {
				return fmt.Errorf("adding %s: %w", id, err)
			}
			fmt.Fprintf(stdout, "%s: added\n", id)
			continue
		}
		if err != nil {
			return err
		}
		var out api.Stream
		if err := c.Do(ctx, http.MethodPatch, path, replacePatch(want, cur.Spec), &out); err != nil {
			return fmt.Errorf("changing %s: %w", id, err)
		}
		switch d := cur.Spec.Diff(out.Spec); {
		case out.Revision == cur.Revision:
			fmt.Fprintf(stdout, "%s: unchanged\n", id)
		case len(d) == 1 && d[0].Field == "analytics":
			fmt.Fprintf(stdout, "%s: changed (analytics only: applied without a restart)\n", id)
		default:
			fmt.Fprintf(stdout, "%s: changed (it restarts)\n", id)
		}
	}
	return nil
}

// replacePatch is the JSON merge patch (RFC 7396) that turns stored into
// want: want's fields, and null for every other field and, inside the
// objects both have (labels, analytics and its tracker), for each member
// want does not have (a merge patch merges objects, so a member is
// removed only by naming it). Arrays (zones, lines) are replaced whole.
func replacePatch(want, stored registry.Spec) map[string]any {
	p, old := jsonObject(want), jsonObject(stored)
	t := reflect.TypeFor[registry.Spec]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if _, ok := p[name]; !ok {
			p[name] = nil
		}
	}
	nullMissing(p, old)
	delete(p, "id") // the path names it; it cannot change
	return p
}

// nullMissing sets to null each member of old that p does not have, in
// every object that both have, at any depth.
func nullMissing(p, old map[string]any) {
	for k, ov := range old {
		pv, ok := p[k]
		if !ok {
			p[k] = nil
			continue
		}
		if pm, ok := pv.(map[string]any); ok {
			if om, ok := ov.(map[string]any); ok {
				nullMissing(pm, om)
			}
		}
	}
}

// jsonObject is v as the JSON object it encodes to.
func jsonObject(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}
