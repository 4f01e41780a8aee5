package app

import (
	"context"
	"regexp"
	"strings"

	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/registry"
)

// logDrift warns about each config stream that the registry holds
// otherwise than the file says, with the fields that differ and the exact
// command that applies the file's version. The registry wins at start
// (changes made through the API outlive restarts); this makes a file edit
// that had no effect visible instead of silent.
func logDrift(ctx context.Context, log *zap.Logger, reg *registry.Registry, c *config.Config, seed []registry.Spec, api string) {
	drift, err := reg.Drift(ctx, seed)
	if err != nil {
		log.Warn("comparing the config's streams with the registry", zap.Error(err))
		return
	}
	for _, d := range drift {
		fields := []zap.Field{zap.String("stream", d.ID)}
		if d.Removed {
			fields = append(fields, applyField(c, api, d.ID))
			log.Warn("config stream was deleted through the API, so it is not run; remove it from the config file, or restore it with the apply command", fields...)
			continue
		}
		diffs := make([]string, len(d.Differences))
		for i, x := range d.Differences {
			diffs[i] = x.String()
		}
		fields = append(fields, zap.Strings("differences", diffs), applyField(c, api, d.ID))
		log.Warn("config stream differs from the registry, whose version runs (changes made through the API outlive restarts); the apply command makes the registry match the file", fields...)
	}
}

// applyField is the "apply" log field: `vigil streams apply` for one
// stream, with the flags that reach this vigil's API. With the API off
// there is no command: it says so.
func applyField(c *config.Config, api, id string) zap.Field {
	if api == "" {
		return zap.String("apply", "none while api.listen is off: turn the API on, then vigil streams apply --config FILE "+id)
	}
	return zap.String("apply", applyCommand(c, api, id))
}

// applyCommand returns the shell command that makes the registry hold
// stream id as config file c.Source says, through the API at api (a base
// URL such as http://127.0.0.1:8080): `vigil streams apply --config FILE
// --api URL [--token-file FILE] [--ca FILE] ID`. --api is always given,
// so $VIGIL_API cannot send it elsewhere. It names files, never a secret.
func applyCommand(c *config.Config, api, id string) string {
	src := c.Source
	if src == "" {
		src = "FILE"
	}
	args := []string{"vigil", "streams", "apply", "--config", src, "--api", api}
	if c.API.TokenFile != "" {
		args = append(args, "--token-file", c.API.TokenFile)
	}
	if c.API.TLSCert != "" && strings.HasPrefix(api, "https://") {
		// The serving certificate is its own trust anchor when it is
		// self-signed, and still verifies when a CA signed it.
		args = append(args, "--ca", c.API.TLSCert)
	}
	args = append(args, id)
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote quotes s for a POSIX shell where it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
