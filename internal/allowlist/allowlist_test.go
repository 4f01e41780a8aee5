package allowlist_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/allowlist"
	"github.com/vigil-video/vigil/internal/testenv"
)

func TestNoListAllowsEverything(t *testing.T) {
	l, errs := allowlist.Parse(nil)
	require.Empty(t, errs)
	require.Nil(t, l)
	require.NoError(t, l.Check("rtsp://169.254.169.254/latest"))
	require.NoError(t, l.Check("/etc/shadow"))
}

func TestBadEntries(t *testing.T) {
	_, errs := allowlist.Parse([]string{
		"rtsp://10.0.0.0/8", // fine
		"10.0.0.0/8",
		"ftp://files.local",
		"file://srv/video",
		"rtsp://cam.local:554",
		"rtsp://admin:pw@cam.local",
		"rtsp://cam.local/stream1",
		"rtsp://cam?.local",
		"http://10.0.0.0/33",
	})
	require.Len(t, errs, 8)
	for i, want := range []string{
		`"10.0.0.0/8": want scheme://host`,
		`"ftp://files.local": scheme "ftp"`,
		`"file://srv/video": a file entry names an absolute directory`,
		`"rtsp://cam.local:554": an entry has no port`,
		`"rtsp://admin:***@cam.local": an entry has no user info`,
		`"rtsp://cam.local/stream1": not a CIDR`,
		`"rtsp://cam?.local": an entry has no user info, query or fragment`,
		`"http://10.0.0.0/33": not a CIDR`,
	} {
		require.Equal(t, i+1, errs[i].Index)
		require.Contains(t, errs[i].Error(), want)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	wd, err := os.Getwd()
	require.NoError(t, err)
	l, errs := allowlist.Parse([]string{
		"rtsp://10.0.0.0/8",
		"rtsp://[fd00::]/8",
		"rtsps://192.0.2.10",
		"rtsp://cam-*.site.local",
		"http://*",
		"file://" + dir + "/",
		"file://" + wd,
	})
	require.Empty(t, errs)
	for _, tc := range []struct {
		url, why string // why is empty when the URL is allowed
	}{
		{"rtsp://10.1.2.3/s", ""},
		{"RTSP://admin:p%23w@10.1.2.3:8554/s?x=1", ""},
		{"rtsp://[fd00::5]:554/s", ""},
		{"rtsp://[::ffff:10.1.2.3]/s", ""},
		{"rtsps://192.0.2.10/s", ""},
		{"rtsp://cam-7.site.local/s", ""},
		{"rtsp://CAM-7.Site.Local./s", ""},
		{"http://anything.example/x.mp4", ""},
		{"http://127.0.0.1:9/x", ""},
		{dir + "/a/b.mp4", ""},
		{"file://" + dir + "/b.mp4", ""},
		{"clip.mp4", ""}, // relative to the working directory
		{"rtsp://11.0.0.1/s", "host 11.0.0.1 matches no rtsp:// entry"},
		{"rtsps://10.1.2.3/s", "host 10.1.2.3 matches no rtsps:// entry"},
		{"rtsp://192.0.2.10/s", "matches no rtsp:// entry"},
		{"rtsp://cam-7.evil.site.local/s", "matches no rtsp:// entry"},
		{"rtsp://cam-7.site.local.evil.com/s", "matches no rtsp:// entry"},
		{"rtsp://x.cam-7.site.local/s", "matches no rtsp:// entry"},
		// A CIDR entry never matches a name: names are not resolved.
		{"rtsp://localhost/s", "host localhost matches no rtsp:// entry"},
		// User info that looks like an allowed host.
		{"rtsp://cam-1.site.local@evil.com/s", "host evil.com matches no rtsp:// entry"},
		{"rtsp://10.0.0.1:pw@evil.com/s", "host evil.com"},
		// Numbers the C resolver reads as addresses (127.0.0.1 here).
		{"rtsp://127.1/s", "a number the resolver reads as an IPv4 address"},
		{"rtsp://0x7f.0.0.1/s", "a number the resolver reads"},
		{"rtsp://2130706433/s", "a number the resolver reads"},
		{"rtsp://012.0.0.1/s", "a number the resolver reads"},
		// Hosts that net/url and FFmpeg read differently.
		{"rtsp://cam-1%2esite.local/s", "cannot be read unambiguously"},
		{"rtsp://[fd00::5%25eth0]/s", "cannot be read unambiguously"},
		{"/etc/passwd", "the file /etc/passwd is under no file:// entry"},
		{dir + "/../" + filepath.Base(dir) + "x/a.mp4", "is under no file:// entry"},
		{dir + "/../../etc/passwd", "is under no file:// entry"},
		{"file:///etc/passwd", "is under no file:// entry"},
	} {
		err := l.Check(tc.url)
		if tc.why == "" {
			require.NoError(t, err, tc.url)
			continue
		}
		require.Error(t, err, tc.url)
		require.True(t, errors.Is(err, allowlist.ErrNotAllowed))
		require.Contains(t, err.Error(), tc.why, tc.url)
		require.Contains(t, err.Error(), "not allowed by api.allowed_sources")
	}
	err = l.Check("rtsp://admin:s3cr#t@11.0.0.1/s")
	testenv.NoSecret(t, "the refusal", err.Error(), "s3cr#t")
	require.True(t, strings.HasPrefix(err.Error(), "rtsp://admin:***@11.0.0.1/s: "))
}
