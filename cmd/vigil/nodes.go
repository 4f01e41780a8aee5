package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/client"
	"github.com/vigil-video/vigil/internal/redact"
)

const nodesUsage = `Usage: vigil nodes COMMAND [flags]

The vigil nodes sharing a registry (the fleet), through any node's REST API.

  vigil nodes ls [-o table|json]   list the nodes: streams, load, capacity, version, lease age
  vigil nodes drain ID             hand node ID's streams to the others; it takes no more
                                   until it restarts (SIGTERM drains too, then exits)

Common flags (before or after the command's own):
  --api URL          a vigil's API (default http://127.0.0.1:8080, or $VIGIL_API)
  --token-file FILE  bearer token, when vigil has api.token_file
  --ca FILE          PEM CA to trust for an https --api
`

func cmdNodes(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, nodesUsage)
		if len(args) == 0 {
			return &cli.BadInputError{Err: errors.New("a command is required: ls or drain")}
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	if sub != "ls" && sub != "drain" {
		fmt.Fprint(stderr, nodesUsage)
		return &cli.BadInputError{Err: fmt.Errorf("unknown command %q", sub)}
	}
	synopsis := map[string]string{"ls": "nodes ls [flags]", "drain": "nodes drain ID [flags]"}[sub]
	fs := newFlags("nodes "+sub, synopsis, stderr)
	apiURL := fs.String("api", envOr("VIGIL_API", "http://127.0.0.1:8080"), "vigil API base URL")
	tokenFile := fs.String("token-file", "", "file holding the bearer token")
	ca := fs.String("ca", "", "PEM CA file to trust for https")
	output := fs.String("o", "table", "output: table or json")
	var pos []string
	for len(rest) > 0 && len(rest[0]) > 0 && rest[0][0] != '-' {
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
	if want := map[string]int{"ls": 0, "drain": 1}[sub]; len(pos) != want {
		fs.Usage()
		return &cli.BadInputError{Err: fmt.Errorf("usage: vigil %s (%d arguments, got %d)", synopsis, want, len(pos))}
	}
	c, err := client.New(*apiURL, *tokenFile, *ca)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if sub == "ls" {
		var out client.NodeList
		if err := c.Do(ctx, http.MethodGet, "/v1/nodes", nil, &out); err != nil {
			return err
		}
		return client.PrintNodes(stdout, *output, out)
	}
	if err := c.Do(ctx, http.MethodPost, "/v1/nodes/"+url.PathEscape(pos[0])+"/drain", nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s is handing its streams over (vigil nodes ls shows it draining)\n", pos[0])
	return nil
}
