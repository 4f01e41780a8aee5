// Package shapes is `vigil shapes`: every registered stream's resolution
// against the fixed input shape of its model (Run), the letterbox fit and
// its padding (FitShape), and a better-fitting input shape for the rows it
// flags (SuggestShape). Resolutions come from a running vigil's API
// (internal/client) or from opening each stream (decode.ProbeSize); model
// shapes from the model files (infer.Inspect). No pipeline is built.
package shapes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/redact"
	"github.com/vigil-video/vigil/internal/registry"
)

// Fit is how a source frame fits a model's fixed input under vigil's
// letterbox (infer.NewLetterbox): scaled by Scale to ContentWidth ×
// ContentHeight at the top-left, the rest padding.
type Fit struct {
	Scale         float64 `json:"scale"`
	ContentWidth  int     `json:"content_width"`
	ContentHeight int     `json:"content_height"`
	PadRight      int     `json:"pad_right"`
	PadBottom     int     `json:"pad_bottom"`
	// WastePct is the padding's share of the input's pixels, in percent.
	WastePct float64 `json:"waste_pct"`
}

// FitShape computes how a srcW×srcH frame fits an inW×inH input (all > 0).
func FitShape(srcW, srcH, inW, inH int) Fit {
	lb := infer.NewLetterbox(srcW, srcH, inW, inH)
	in := inW * inH
	return Fit{
		Scale: lb.Scale, ContentWidth: lb.ContentW, ContentHeight: lb.ContentH,
		PadRight: inW - lb.ContentW, PadBottom: inH - lb.ContentH,
		WastePct: 100 * float64(in-lb.ContentW*lb.ContentH) / float64(in),
	}
}

// SuggestShape returns an input shape with the source's aspect ratio for a
// model whose input is inW×inH: the larger side equal to the input's larger
// side, the other that times the source's aspect ratio, rounded up to a
// multiple of 32 (at least 32, at most the larger side). Rounding up keeps
// the letterbox scale of today's input (the source's larger side still
// spans the input), so objects keep their size in pixels and less than 32
// rows or columns stay padding; rounding to the nearest multiple would
// shrink the scale when it rounds down.
func SuggestShape(srcW, srcH, inW, inH int) (w, h int) {
	long := max(inW, inH)
	other := func(a, b int) int { // long · a/b, rounded up to 32
		v := int(math.Ceil(float64(long)*float64(a)/float64(b)/32-1e-9)) * 32
		return min(max(v, 32), long)
	}
	if srcW >= srcH {
		return long, other(srcH, srcW)
	}
	return other(srcW, srcH), long
}

// Flags of a shapes row.
const (
	FlagWaste   = "waste"   // padding over --max-waste of the input
	FlagUpscale = "upscale" // source smaller than the input in both dimensions
	FlagUnknown = "unknown" // the source's resolution is not known
	FlagModel   = "model"   // the model could not be read
)

// Suggestion is a better-fitting input shape for a flagged row.
type Suggestion struct {
	Width  int `json:"width"`
	Height int `json:"height"`
	Fit    Fit `json:"fit"`
	// Note says what the shape needs (another model export, adapter limits).
	Note string `json:"note"`
}

// Row is one stream against one model.
type Row struct {
	Stream string `json:"stream"`
	// SourceWidth and SourceHeight are 0 when unknown.
	SourceWidth  int    `json:"source_width"`
	SourceHeight int    `json:"source_height"`
	Model        string `json:"model"`
	// InUse is true for the model the stream runs (false: --all-models).
	InUse       bool   `json:"in_use"`
	ModelFile   string `json:"model_file"`
	Adapter     string `json:"adapter,omitempty"`
	InputWidth  int    `json:"input_width,omitempty"`
	InputHeight int    `json:"input_height,omitempty"`
	// BatchSizes are infer.batch_sizes; MissingBatchCopies those whose
	// <model>.b<N>.onnx copy does not exist.
	BatchSizes         []int       `json:"batch_sizes"`
	MissingBatchCopies []int       `json:"missing_batch_copies,omitempty"`
	Fit                *Fit        `json:"fit,omitempty"`
	Flags              []string    `json:"flags"`
	Suggestion         *Suggestion `json:"suggestion,omitempty"`
	// Note says why the resolution is unknown or the model unreadable.
	Note string `json:"note,omitempty"`
}

// Report is the result of vigil shapes.
type Report struct {
	// Source is "api" (the last decoded frame of each stream, from a
	// running vigil) or "probe" (the first frame, opened by vigil shapes).
	Source string `json:"source"`
	// From is the API URL or where the registry was read.
	From        string  `json:"from"`
	MaxWastePct float64 `json:"max_waste_pct"`
	Rows        []Row   `json:"rows"`
	// Skipped lists models --all-models could not read, with the reason.
	Skipped []string `json:"skipped_models,omitempty"`
}

// Options configure Shapes.
type Options struct {
	// Client reads the streams from a running vigil's API (unless Probe).
	Client *client.Client
	// Probe opens each registered stream instead, read from the registry
	// over NATS (NATS, else the config's nats.url, else the embedded server
	// at nats.listen, else data_dir's store opened here).
	Probe    bool
	NATS     string
	Timeout  time.Duration // per stream (Probe)
	Parallel int           // streams probed at once (Probe; default 4)
	// AllModels adds a row per configured and built-in model.
	AllModels bool
	// MaxWaste is the padding share, in percent, above which a row is flagged.
	MaxWaste float64
	JSON     bool
}

// shapeStream is a registered stream and what is known of its resolution.
type shapeStream struct {
	id, model string
	w, h      int
	note      string
}

// Run is `vigil shapes`: every registered stream's resolution against
// the fixed input shape of its model (and of every configured model with
// AllModels), as a table or JSON on out.
func Run(ctx context.Context, c config.Config, o Options, out io.Writer) (Report, error) {
	r := Report{Source: "api", MaxWastePct: o.MaxWaste}
	if err := engines.OpenRuntime(&c); err != nil {
		return r, err
	}
	var streams []shapeStream
	var err error
	if o.Probe {
		r.Source = "probe"
		decode.SetLogger(nil) // a failed open is reported in the row's note
		var specs []registry.Spec
		sources, err := c.Sources()
		if err != nil {
			return r, cli.BadInput(err)
		}
		specs, r.From, err = registeredSpecs(ctx, &c, o.NATS)
		if err != nil {
			return r, err
		}
		streams = probeStreams(ctx, specs, sources, o.Timeout, o.Parallel)
	} else {
		r.From = redact.URL(o.Client.Base)
		streams, err = apiStreams(ctx, o.Client)
		if err != nil {
			return r, err
		}
	}
	for i := range streams {
		if streams[i].model == "" {
			streams[i].model = c.Pipeline.DefaultModel
		}
	}
	r.Rows, r.Skipped = shapeRows(&c, streams, o.AllModels, o.MaxWaste)
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return r, enc.Encode(r)
	}
	return r, writeShapes(out, r, o.AllModels)
}

// apiStreams lists the streams and their last frame's size from the API.
func apiStreams(ctx context.Context, cl *client.Client) ([]shapeStream, error) {
	var list struct {
		Streams []api.Stream `json:"streams"`
	}
	if err := cl.Do(ctx, http.MethodGet, "/v1/streams", nil, &list); err != nil {
		return nil, err
	}
	var out []shapeStream
	for _, s := range list.Streams {
		ss := shapeStream{id: s.ID, model: s.Model}
		switch st := s.Status; {
		case st != nil && st.Width > 0 && st.Height > 0:
			ss.w, ss.h = st.Width, st.Height
		case !s.IsEnabled():
			ss.note = "disabled, so no frame; --probe opens it"
		case st == nil:
			ss.note = "no status from vigil; --probe opens it"
		default:
			ss.note = fmt.Sprintf("no frame decoded yet (%s", st.State)
			if st.LastError != "" {
				ss.note += ": " + st.LastError
			}
			ss.note += "); --probe opens it"
		}
		out = append(out, ss)
	}
	return out, nil
}

// registeredSpecs reads the registered streams with their credentials:
// from the NATS server that holds the registry (natsURL, else nats.url,
// else a running vigil's embedded server at nats.listen), or, when no
// vigil runs, by starting the embedded server on data_dir's store at
// nats.listen (so that a vigil started meanwhile fails on the port rather
// than sharing the store). Config streams not seeded yet are included: the
// next start creates them. It writes nothing.
func registeredSpecs(ctx context.Context, c *config.Config, natsURL string) ([]registry.Spec, string, error) {
	var cfgSpecs []registry.Spec
	for _, s := range c.Streams {
		cfgSpecs = append(cfgSpecs, c.Spec(s))
	}
	var token string
	if c.NATS.TokenFile != "" {
		t, err := config.ReadToken(c.NATS.TokenFile)
		if err != nil {
			return nil, "", cli.BadInput(fmt.Errorf("nats.token_file: %w", err))
		}
		token = t
	}
	connect := func(u string, timeout time.Duration) (*nats.Conn, error) {
		opts := []nats.Option{nats.Name("vigil shapes"), nats.Timeout(timeout), nats.NoReconnect()}
		if token != "" {
			opts = append(opts, nats.Token(token))
		}
		return nats.Connect(u, opts...)
	}
	if natsURL == "" {
		natsURL = c.NATS.URL
	}
	var nc *nats.Conn
	var from string
	var err error
	switch {
	case natsURL != "":
		if nc, err = connect(natsURL, 5*time.Second); err != nil {
			return nil, "", fmt.Errorf("reading the stream registry from NATS %s: %w", redact.URLs(natsURL), err)
		}
		from = "registry on NATS " + redact.URLs(natsURL)
	default:
		// Config validation refuses a nats.listen that is not
		// host:port; one built otherwise gets port "", is not reached, and
		// natsserver.Start below names the bad address.
		_, port, _ := net.SplitHostPort(c.NATS.Listen)
		if port != "0" {
			nc, err = connect("nats://"+c.NATS.Listen, 2*time.Second)
			switch {
			case err == nil:
				from = "registry on the running vigil's NATS at " + c.NATS.Listen
			case errors.Is(err, nats.ErrAuthorization):
				return nil, "", cli.BadInput(fmt.Errorf("the NATS server at %s refused the token (set nats.token_file as that vigil does): %w", c.NATS.Listen, err))
			default:
				nc = nil
			}
		}
		if nc == nil { // no vigil running: open its store here
			store := filepath.Join(c.DataDir, "jetstream")
			if _, err := os.Stat(store); err != nil {
				return sortSpecs(cfgSpecs), "config streams (no registry in " + c.DataDir + " yet)", nil
			}
			ns, err := natsserver.Start(c.NATS.Listen, store, token)
			if err != nil {
				return nil, "", fmt.Errorf("opening the stream registry in %s: %w", store, err)
			}
			defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
			if nc, err = connect(ns.ClientURL(), 5*time.Second); err != nil {
				return nil, "", err
			}
			from = "registry in " + store
		}
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	reg, err := registry.Lookup(rctx, nc, c.NATS.Bucket)
	if errors.Is(err, registry.ErrNoBucket) {
		return sortSpecs(cfgSpecs), from + " (empty: config streams only)", nil
	}
	if err != nil {
		return nil, "", err
	}
	ents, err := reg.List(rctx, nil)
	if err != nil {
		return nil, "", fmt.Errorf("listing the stream registry: %w", err)
	}
	specs, err := reg.Pending(rctx, cfgSpecs)
	if err != nil {
		return nil, "", fmt.Errorf("reading the stream registry: %w", err)
	}
	for _, e := range ents {
		specs = append(specs, e.Spec)
	}
	return sortSpecs(specs), from, nil
}

func sortSpecs(s []registry.Spec) []registry.Spec {
	sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID })
	return s
}

// probeStreams opens each stream (parallel at a time, each bounded by
// timeout) and reads its first frame's size. A stream whose URL sources
// (api.allowed_sources; nil: any) refuses is not opened: the registry may
// hold streams written before the list was tightened.
func probeStreams(ctx context.Context, specs []registry.Spec, sources *allowlist.List, timeout time.Duration, parallel int) []shapeStream {
	if parallel < 1 {
		parallel = 4
	}
	out := make([]shapeStream, len(specs))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, sp := range specs {
		out[i] = shapeStream{id: sp.ID, model: sp.Model}
		if err := sources.Check(sp.URL); err != nil {
			out[i].note = "not opened: " + err.Error()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			w, h, err := decode.ProbeSize(ctx, decode.Options{URL: sp.URL, StreamID: sp.ID, Transport: sp.Transport}, timeout)
			if err != nil {
				out[i].note = "probe: " + err.Error()
				return
			}
			out[i].w, out[i].h = w, h
		}()
	}
	wg.Wait()
	return out
}

// modelInfo is a model's inspected shape, or why it could not be read.
type modelInfo struct {
	m     infer.Model
	shape infer.Shape
	err   error
}

// shapeRows builds the rows: per stream its own model, then (allModels)
// every configured and built-in model whose file can be read.
func shapeRows(c *config.Config, streams []shapeStream, allModels bool, maxWaste float64) ([]Row, []string) {
	cache := map[string]*modelInfo{}
	inspect := func(ref string) *modelInfo {
		if mi, ok := cache[ref]; ok {
			return mi
		}
		mi := &modelInfo{}
		mi.m, mi.err = c.ResolveModel(ref)
		if mi.err == nil {
			mi.shape, mi.err = infer.Inspect(mi.m.File, mi.m.Spec)
		}
		cache[ref] = mi
		return mi
	}
	var extra []string // --all-models: names, configured first
	var skipped []string
	if allModels {
		seen := map[string]bool{}
		var names []string
		for _, m := range c.Models {
			names = append(names, m.Name)
		}
		names = append(names, infer.BuiltinNames()...)
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			if mi := inspect(n); errors.Is(mi.err, os.ErrNotExist) {
				skipped = append(skipped, fmt.Sprintf("%s: %s does not exist", n, mi.m.File))
				continue
			} else if mi.err != nil {
				skipped = append(skipped, fmt.Sprintf("%s: %v", n, mi.err))
				continue
			}
			extra = append(extra, n)
		}
	}
	var rows []Row
	for _, s := range streams {
		own := inspect(s.model)
		rows = append(rows, shapeRow(c, s, s.model, own, true, maxWaste))
		var others []Row
		for _, n := range extra {
			if mi := inspect(n); mi.m.File != own.m.File {
				others = append(others, shapeRow(c, s, n, mi, false, maxWaste))
			}
		}
		sort.Slice(others, func(i, j int) bool { return others[i].Model < others[j].Model })
		rows = append(rows, others...)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Stream < rows[j].Stream })
	return rows, skipped
}

func shapeRow(c *config.Config, s shapeStream, ref string, mi *modelInfo, inUse bool, maxWaste float64) Row {
	r := Row{Stream: s.id, SourceWidth: s.w, SourceHeight: s.h, Model: ref, InUse: inUse, Flags: []string{},
		BatchSizes: c.Infer.BatchSizes, Note: s.note}
	if mi.m.Name != "" {
		r.Model, r.ModelFile = mi.m.Name, mi.m.File
	}
	if mi.err != nil {
		r.Flags = append(r.Flags, FlagModel)
		r.Note = joinNotes(r.Note, mi.err.Error())
		if s.w == 0 {
			r.Flags = append(r.Flags, FlagUnknown)
		}
		return r
	}
	sh := mi.shape
	r.Adapter, r.InputWidth, r.InputHeight = sh.Adapter, sh.InW, sh.InH
	for _, n := range c.Infer.BatchSizes {
		if n == 1 {
			continue
		}
		if _, err := os.Stat(strings.TrimSuffix(mi.m.File, ".onnx") + ".b" + strconv.Itoa(n) + ".onnx"); err != nil {
			r.MissingBatchCopies = append(r.MissingBatchCopies, n)
		}
	}
	if s.w <= 0 || s.h <= 0 {
		r.Flags = append(r.Flags, FlagUnknown)
		return r
	}
	fit := FitShape(s.w, s.h, sh.InW, sh.InH)
	r.Fit = &fit
	if fit.WastePct > maxWaste {
		r.Flags = append(r.Flags, FlagWaste)
	}
	upscale := s.w < sh.InW && s.h < sh.InH
	if upscale {
		r.Flags = append(r.Flags, FlagUpscale)
	}
	if len(r.Flags) == 0 {
		return r
	}
	sw, sh2 := SuggestShape(s.w, s.h, sh.InW, sh.InH)
	sug := &Suggestion{Width: sw, Height: sh2, Fit: FitShape(s.w, s.h, sw, sh2)}
	switch {
	case sw == sh.InW && sh2 == sh.InH:
		sug.Note = "no closer shape at multiples of 32: this is the input already"
	case sh.Square:
		sug.Note = fmt.Sprintf("needs a model exported at %dx%d; the %s adapter takes square inputs only, so also another adapter", sw, sh2, sh.Adapter)
	default:
		sug.Note = fmt.Sprintf("needs a model exported at %dx%d (another engine; the %s adapter takes it)", sw, sh2, sh.Adapter)
	}
	if upscale {
		sug.Note += fmt.Sprintf("; the source is upscaled x%.2f, so a model with a smaller input would see the same detail for less work", fit.Scale)
	}
	r.Suggestion = sug
	return r
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func intsString(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// writeShapes prints the table, then the flags' meaning, suggestions and
// notes.
func writeShapes(w io.Writer, r Report, allModels bool) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tSOURCE\tMODEL\tINPUT\tBATCH\tSCALE\tCONTENT\tPAD R/B\tWASTE\tFLAG")
	flagged := false
	for _, row := range r.Rows {
		src, in, scale, content, pad, waste, flag := "?", "?", "-", "-", "-", "-", "ok"
		if row.SourceWidth > 0 {
			src = fmt.Sprintf("%dx%d", row.SourceWidth, row.SourceHeight)
		}
		if row.InputWidth > 0 {
			in = fmt.Sprintf("%dx%d", row.InputWidth, row.InputHeight)
		}
		if f := row.Fit; f != nil {
			scale = fmt.Sprintf("%.4f", f.Scale)
			content = fmt.Sprintf("%dx%d", f.ContentWidth, f.ContentHeight)
			pad = fmt.Sprintf("%d/%d", f.PadRight, f.PadBottom)
			waste = fmt.Sprintf("%.1f%%", f.WastePct)
		}
		if len(row.Flags) > 0 {
			flag, flagged = strings.Join(row.Flags, ","), true
		}
		model := row.Model
		if allModels && row.InUse {
			model += "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", row.Stream, src, model, in, intsString(row.BatchSizes), scale, content, pad, waste, flag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(w, "(no streams registered)")
	}
	var b strings.Builder
	if r.Source == "api" {
		fmt.Fprintf(&b, "Sources: each stream's last decoded frame, from the API at %s.\n", r.From)
	} else {
		fmt.Fprintf(&b, "Sources: each stream's first frame, opened here; streams from the %s.\n", r.From)
	}
	if allModels {
		b.WriteString("*: the model the stream runs; the other rows are the other configured and built-in models.\n")
	}
	if flagged {
		fmt.Fprintf(&b, "Flags: waste = padding over %g%% of the input; upscale = source smaller than the input in both dimensions; unknown = resolution not known; model = model not readable.\n", r.MaxWastePct)
	}
	var sug, notes []string
	for _, row := range r.Rows {
		if s := row.Suggestion; s != nil {
			sug = append(sug, fmt.Sprintf("  %s %dx%d on %s %dx%d: %dx%d, waste %.1f%% instead of %.1f%%; %s",
				row.Stream, row.SourceWidth, row.SourceHeight, row.Model, row.InputWidth, row.InputHeight,
				s.Width, s.Height, s.Fit.WastePct, row.Fit.WastePct, s.Note))
		}
		if row.Note != "" && row.InUse {
			notes = append(notes, fmt.Sprintf("  %s (%s): %s", row.Stream, row.Model, row.Note))
		}
		for _, n := range row.MissingBatchCopies {
			notes = append(notes, fmt.Sprintf("  %s: infer.batch_sizes has %d but %s.b%d.onnx is missing (make setup, or scripts/batch_models.py)",
				row.Model, n, strings.TrimSuffix(filepath.Base(row.ModelFile), ".onnx"), n))
		}
	}
	if len(sug) > 0 {
		b.WriteString("Suggestions (the source's aspect ratio, the larger side kept, the other rounded up to a multiple of 32):\n")
		b.WriteString(strings.Join(sug, "\n") + "\n")
	}
	for _, s := range r.Skipped {
		notes = append(notes, "  skipped model "+s)
	}
	notes = dedupe(notes)
	if len(notes) > 0 {
		b.WriteString("Notes:\n" + strings.Join(notes, "\n") + "\n")
	}
	_, err := fmt.Fprint(w, "\n"+b.String())
	return err
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
