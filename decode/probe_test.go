package decode_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/decode"
	"github.com/vigil-video/vigil/internal/testenv"
)

// ProbeSize reads the first frame's size, and says why there is none: a
// file that is not video, a missing file.
func TestProbeSize(t *testing.T) {
	w, h, err := decode.ProbeSize(context.Background(), decode.Options{URL: testenv.Media(t, "Megamind.avi")}, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, []int{720, 528}, []int{w, h})

	junk := filepath.Join(t.TempDir(), "junk.mp4")
	require.NoError(t, os.WriteFile(junk, []byte("not a video"), 0o600))
	_, _, err = decode.ProbeSize(context.Background(), decode.Options{URL: junk}, 10*time.Second)
	require.Error(t, err)
	_, _, err = decode.ProbeSize(context.Background(), decode.Options{URL: "/nonexistent/clip.mp4"}, 10*time.Second)
	require.ErrorContains(t, err, "/nonexistent/clip.mp4")
}
