package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/vigil-video/vigil/analytics"
)

// analyticsFile is the layout of a file of LoadAnalytics: one analytics
// block, as under a stream of the config file.
type analyticsFile struct {
	Analytics *analytics.Config `yaml:"analytics"`
}

// LoadAnalytics reads a file holding one `analytics:` block (what a
// stream's analytics key holds: tracker, zones, lines), for `vigil detect
// --analytics` and `vigil streams add|set --analytics`. Errors name the
// file and the line, or every problem's field from "analytics." on
// ("analytics.zones[1].polygon: ..."), joined with "; ". The classes are
// not checked here: they need the model (engines.Labels).
func LoadAnalytics(path string) (*analytics.Config, error) {
	data, err := os.ReadFile(path)
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		// "PATH: no such file or directory", as the file's other errors
		// read, rather than "open PATH: ..." after the caller's flag name.
		return nil, fmt.Errorf("%s: %w", path, pe.Err)
	}
	if err != nil {
		return nil, err
	}
	var f analyticsFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		msg, _ := yamlError(err)
		// The sections are named as in the config file, under streams[].
		msg = strings.NewReplacer("streams[].analytics", "analytics", "config.analyticsFile", "the file (it holds one analytics: block)").Replace(msg)
		return nil, fmt.Errorf("%s: %s", path, msg)
	}
	if f.Analytics == nil {
		return nil, fmt.Errorf("%s: no analytics: block (want analytics: {zones: [...], lines: [...]}, as under a stream of the config file)", path)
	}
	var p problems
	for _, fe := range f.Analytics.Problems() {
		p.add("analytics."+fe.Field, "%s", fe.Msg)
	}
	if err := p.err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f.Analytics, nil
}
