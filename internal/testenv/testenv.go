// Package testenv finds the test assets that scripts/setup.sh installs (and
// the optional ../shared/testdata files) for tests in every package.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vigil-video/vigil/internal/assets"
	"github.com/vigil-video/vigil/internal/cuda"
)

// SkipIfGPU skips a test of the no-driver fallbacks on a machine that has
// an NVIDIA driver (cuda.Init succeeds); CI machines have none.
func SkipIfGPU(t testing.TB) {
	t.Helper()
	if cuda.Init() == nil {
		t.Skip("this machine has an NVIDIA driver; the fallback is tested on CPU-only machines")
	}
}

// Media returns the path of a sample file in the asset cache, failing the
// test with a hint when setup has not been run.
func Media(t testing.TB, name string) string {
	t.Helper()
	return mustExist(t, filepath.Join(assets.MediaDir(), name))
}

// Model returns the path of a model file in the asset cache.
func Model(t testing.TB, name string) string {
	t.Helper()
	return mustExist(t, filepath.Join(assets.ModelsDir(), name))
}

// ORTLibrary returns the ONNX Runtime library path.
func ORTLibrary(t testing.TB) string {
	t.Helper()
	return mustExist(t, assets.ORTLibrary())
}

// Shared returns ../shared/testdata/<rel> relative to the repository root,
// skipping the test with a clear message when it is absent: the project must
// pass without ../shared.
func Shared(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(), "..", "shared", "testdata", rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("optional test data %s is absent (%v); this test needs ../shared/testdata", rel, err)
	}
	return p
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func mustExist(t testing.TB, p string) string {
	t.Helper()
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make setup` (scripts/setup.sh) first: %v", p, err)
	}
	return p
}

// Eventually polls cond every `every` until it returns true, and fails t
// with the message format, args (fmt.Sprintf) if it has not within
// `within`. Unlike testify's require.Eventually, cond runs
// on the calling goroutine, the test's own, so it may itself call require
// or t.Fatal: testing.T.FailNow must only be called from the goroutine
// running the test (its documentation), and require.Eventually runs cond on
// a goroutine of its own. cond is called at least once, even when it takes
// longer than within.
func Eventually(t testing.TB, cond func() bool, within, every time.Duration, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s (waited %s)", fmt.Sprintf(format, args...), within)
		}
		time.Sleep(every)
	}
}

// NoSecret fails the test when out (named what) holds secret. The failure
// message shows out with every occurrence of the secret replaced by
// <SECRET>, so that a test of redaction never prints the secret itself.
func NoSecret(t testing.TB, what, out, secret string) {
	t.Helper()
	if secret == "" {
		t.Fatal("NoSecret: empty secret")
	}
	if n := strings.Count(out, secret); n > 0 {
		t.Fatalf("%s shows the password %d time(s):\n%s", what, n, strings.ReplaceAll(out, secret, "<SECRET>"))
	}
}
