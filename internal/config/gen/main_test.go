package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/vigil-video/vigil/internal/config"
)

// The config reference (docs/config.md's table, configs/example.yaml) is
// what the generator writes from the config structs today: a key added,
// renamed or re-documented without `go generate ./internal/config` fails
// here.
func TestReferenceUpToDate(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	files, err := render(root)
	require.NoError(t, err)
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		if string(got) != want {
			t.Errorf("%s is out of date: run go generate ./internal/config\n%s", rel, firstDifference(string(got), want))
		}
	}
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n  file:      " + gl + "\n  generated: " + wl
		}
	}
	return ""
}

// Every key of the file has a row of the table and a line of the example,
// so a field with a doc comment needs nothing else to be documented.
func TestEveryKeyDocumented(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	files, err := render(root)
	require.NoError(t, err)
	rows := map[string]int{} // key path -> rows whose key column names it
	for _, l := range strings.Split(files[docPath], "\n") {
		if cells := strings.Split(l, " | "); strings.HasPrefix(l, "| `") && len(cells) >= 3 {
			for _, k := range strings.Split(strings.TrimPrefix(cells[0], "| "), ", ") {
				rows[strings.Trim(k, "`")]++
			}
		}
	}
	for _, k := range config.Keys() {
		if k.Section && k.Field.Type.Kind() != reflect.Slice { // api, infer.tensorrt: their keys have the rows
			continue
		}
		require.Equal(t, 1, rows[k.Path], "%s: rows in the table", k.Path)
		require.Regexp(t, `(?m)^ *(- )?`+regexp.QuoteMeta(k.Name)+`:`, files[examplePath], "%s in the example", k.Path)
	}
}

// The example is a valid config, and every key in it is at its default
// (lists aside, which show an example entry).
func TestExampleIsTheDefaults(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	files, err := render(root)
	require.NoError(t, err)
	// The defaults that depend on the environment, as the example's
	// variables expand here.
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("VIGIL_ORT_LIBRARY", "")
	c, err := config.Parse([]byte(files[examplePath]), examplePath)
	require.NoError(t, err)
	c.Models, c.Streams = nil, nil
	// As YAML, where an empty list and none read the same.
	got, err := yaml.Marshal(c)
	require.NoError(t, err)
	def := config.Default()
	def.Node.ID = config.DefaultNodeID() // Parse fills it from the host name
	want, err := yaml.Marshal(def)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}
