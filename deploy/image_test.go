package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
)

// ociConfig is what the test reads of an image's config blob.
type ociConfig struct {
	Config struct {
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
		Env        []string `json:"Env"`
		User       string   `json:"User"`
	} `json:"config"`
}

// blob reads the blob of digest ("sha256:...") in the OCI layout dir.
func blob(t *testing.T, layout, digest string) []byte {
	t.Helper()
	algo, hex, ok := strings.Cut(digest, ":")
	require.True(t, ok, digest)
	b, err := os.ReadFile(filepath.Join(layout, "blobs", algo, hex))
	require.NoError(t, err)
	return b
}

// TestImageCPU builds the CPU image as `make image` does (scripts/image.sh
// with a freshly built vigil), unpacks its root filesystem from the
// archive by reading the OCI layout itself (index, manifest, layers), and
// runs `vigil version` and `vigil detect` on the sample clip inside it
// with chroot as the image's user, with the image's environment: the
// root filesystem holds no library of this machine, so every library
// vigil and ONNX Runtime load must be in the image. Not root, it runs
// chroot in a user namespace (unshare -r).
func TestImageCPU(t *testing.T) {
	for _, tool := range []string{"umoci", "dpkg-query", "ldconfig"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: the image is assembled from Debian packages with Debian's umoci (make setup installs it)", tool)
		}
	}
	clip := testenv.Media(t, "Megamind.avi")
	dir := t.TempDir()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	bin := filepath.Join(dir, "vigil")
	run(t, "..", nil, goBin, "build", "-trimpath", "-ldflags", "-X main.version=imagetest", "-o", bin, "./cmd/vigil")
	run(t, "..", []string{"VIGIL_BIN=" + bin}, "bash", "scripts/image.sh", "cpu", dir)

	layout, rootfs := filepath.Join(dir, "layout"), filepath.Join(dir, "rootfs")
	require.NoError(t, os.MkdirAll(layout, 0o755))
	require.NoError(t, os.MkdirAll(rootfs, 0o755))
	run(t, dir, nil, "tar", "-xf", filepath.Join(dir, "vigil-cpu.oci.tar"), "-C", layout)
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	require.NoError(t, json.Unmarshal(readFile(t, filepath.Join(layout, "index.json")), &index))
	require.Len(t, index.Manifests, 1)
	require.Equal(t, "imagetest-cpu", index.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	var manifest struct {
		Config struct{ Digest string }              `json:"config"`
		Layers []struct{ Digest, MediaType string } `json:"layers"`
	}
	require.NoError(t, json.Unmarshal(blob(t, layout, index.Manifests[0].Digest), &manifest))
	var cfg ociConfig
	require.NoError(t, json.Unmarshal(blob(t, layout, manifest.Config.Digest), &cfg))
	require.Equal(t, []string{"/usr/bin/vigil"}, cfg.Config.Entrypoint)
	require.Equal(t, "65532:65532", cfg.Config.User)
	require.NotEmpty(t, manifest.Layers)
	for _, l := range manifest.Layers {
		require.Equal(t, "application/vnd.oci.image.layer.v1.tar+gzip", l.MediaType)
		algo, hex, _ := strings.Cut(l.Digest, ":")
		run(t, dir, nil, "tar", "-xzf", filepath.Join(layout, "blobs", algo, hex), "-C", rootfs)
	}
	require.NoError(t, os.WriteFile(filepath.Join(rootfs, "tmp", "clip.avi"), readFile(t, clip), 0o644))

	// chroot inside the image: as its user when root (chroot needs
	// CAP_SYS_CHROOT), else as root of a user namespace of our own.
	chroot := func(args ...string) string {
		t.Helper()
		cmd := append([]string{"/usr/sbin/chroot", "--userspec=" + cfg.Config.User, rootfs}, args...)
		if os.Geteuid() != 0 {
			cmd = append([]string{"unshare", "-r", "/usr/sbin/chroot", rootfs}, args...)
		}
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Env = append([]string{"HOME=/var/lib/vigil"}, cfg.Config.Env...) // the image's, nothing of this machine's
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", strings.Join(cmd, " "), out)
		return string(out)
	}
	out := chroot("/usr/bin/vigil", "version")
	require.Contains(t, out, "vigil imagetest")
	require.Contains(t, out, "onnxruntime library: /usr/lib/vigil/libonnxruntime.so.1")

	out = chroot("/usr/bin/vigil", "detect", "--max-frames", "30", "/tmp/clip.avi")
	frames, faces := 0, 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Detections []json.RawMessage `json:"detections"`
		}
		if !bytes.HasPrefix(sc.Bytes(), []byte("{")) || json.Unmarshal(sc.Bytes(), &m) != nil {
			continue // a log line
		}
		frames++
		if len(m.Detections) > 0 {
			faces++
		}
	}
	require.Equal(t, 30, frames, "vigil detect in the image:\n%s", out)
	// Frame 0 is black; the others show a face (TestRunEndToEnd).
	require.GreaterOrEqual(t, faces, 25, "frames with a face of 30")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// run runs name with args in dir, with env added to the environment, and
// returns stdout and stderr together; it fails t with the output if the
// command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	return string(out)
}
