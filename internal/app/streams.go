package app

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
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/redact"
)

// Client calls a running vigil's REST API (the `vigil streams` commands).
type Client struct {
	Base  string // e.g. http://127.0.0.1:8080
	Token string
	HTTP  *http.Client
}

// NewClient builds a client; caFile, when set, is a PEM file of CAs to
// trust for an https:// base (a self-signed api.tls_cert, for example).
func NewClient(base, tokenFile, caFile string) (*Client, error) {
	c := &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{Timeout: 30 * time.Second}}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, badInput(fmt.Errorf("--token-file: %w", err))
		}
		c.Token = strings.TrimSpace(string(b))
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, badInput(fmt.Errorf("--ca: %w", err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, badInput(fmt.Errorf("--ca %s: no PEM certificate in it", caFile))
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
		return badInput(fmt.Errorf("--api %s: %w", redact.URL(c.Base), err))
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
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Status: resp.StatusCode}
		if json.Unmarshal(b, &ae.Body) != nil || ae.Body.Error == "" {
			ae.Body.Error = strings.TrimSpace(string(b))
		}
		if resp.StatusCode/100 == 4 {
			return badInput(ae)
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
// single object).
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
	fmt.Fprintln(tw, "ID\tSTATE\tFPS IN\tFPS OUT\tRESOLUTION\tCODEC\tRECONNECTS\tMODEL\tURL\tLAST ERROR")
	for _, s := range streams {
		st := s.Status
		state, res, codec, fin, fout, rc, lastErr := "-", "-", "-", "-", "-", "-", ""
		if !s.IsEnabled() {
			state = "disabled"
		}
		if st != nil {
			state = string(st.State)
			if st.Width > 0 {
				res = fmt.Sprintf("%dx%d", st.Width, st.Height)
			}
			if st.Codec != "" {
				codec = st.Codec
			}
			fin, fout, rc = fmt.Sprintf("%.1f", st.FPSIn), fmt.Sprintf("%.1f", st.FPSOut), fmt.Sprint(st.Reconnects)
			lastErr = st.LastError
			if len(lastErr) > 60 {
				lastErr = lastErr[:57] + "..."
			}
		}
		model := s.Model
		if model == "" {
			model = "(default)"
		}
		// The API redacts the URL already; a server of another version
		// might not.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, state, fin, fout, res, codec, rc, model, redact.URL(s.URL), lastErr)
	}
	return tw.Flush()
}
