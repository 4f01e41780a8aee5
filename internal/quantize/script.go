package quantize

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // quantize_model.py
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// script is quantize_model.py: the ONNX graph edits (exposing the
// activations, inserting the QDQ nodes), run with Debian's python3-onnx.
//
//go:embed quantize_model.py
var script []byte

// scriptHash is part of every cache key: a changed script makes new copies.
func scriptHash() string {
	h := sha256.Sum256(script)
	return hex.EncodeToString(h[:8])
}

// ErrNoPython is returned (wrapped) when no python3 can import onnx and
// numpy.
var ErrNoPython = errors.New("vigil model quantize needs python3 with Debian's python3-onnx and python3-numpy (make setup installs them; or set VIGIL_PYTHON)")

// python returns the interpreter: $VIGIL_PYTHON, else /usr/bin/python3
// (Debian's, which has python3-onnx), else python3 from PATH.
func python(ctx context.Context) (string, error) {
	cands := []string{"/usr/bin/python3", "python3"}
	if p := os.Getenv("VIGIL_PYTHON"); p != "" {
		cands = []string{p}
	}
	var why []string
	for _, c := range cands {
		out, err := exec.CommandContext(ctx, c, "-c", "import onnx, numpy").CombinedOutput()
		if err == nil {
			return c, nil
		}
		why = append(why, fmt.Sprintf("%s: %s", c, lastLine(string(out), err)))
	}
	return "", fmt.Errorf("%w (%s)", ErrNoPython, strings.Join(why, "; "))
}

// runScript runs quantize_model.py with args and decodes the JSON object
// it prints into out. Errors carry the script's last line.
func runScript(ctx context.Context, out any, args ...string) error {
	py, err := python(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, py, append([]string{"-"}, args...)...)
	cmd.Stdin = bytes.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("quantize_model.py %s: %s", args[0], lastLine(stderr.String(), err))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("quantize_model.py %s: reading its output: %w", args[0], err)
	}
	return nil
}

// lastLine is the last non-empty line of out, or err's text.
func lastLine(out string, err error) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return l
	}
	return err.Error()
}
