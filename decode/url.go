package decode

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vigil-video/vigil/internal/redact"
)

// ErrUnsupportedScheme is returned (wrapped) for a URL whose scheme vigil
// cannot read. Supported: rtsp, rtsps, http, https, file and plain paths.
var ErrUnsupportedScheme = errors.New("unsupported URL scheme")

// Kind is the transport family of an input.
type Kind int

// Input kinds.
const (
	KindFile Kind = iota // a local file (plain path or file://)
	KindRTSP             // rtsp:// or rtsps://, a live camera
	KindHTTP             // http:// or https://, treated as live
)

// ParseURL classifies raw and returns the string to hand to FFmpeg (file://
// is stripped to a path). It returns an error wrapping ErrUnsupportedScheme
// for any other scheme, and an error for an empty URL.
func ParseURL(raw string) (Kind, string, error) {
	if strings.TrimSpace(raw) == "" {
		return 0, "", errors.New("empty URL")
	}
	i := strings.Index(raw, "://")
	if i < 0 {
		return KindFile, raw, nil
	}
	switch scheme := strings.ToLower(raw[:i]); scheme {
	case "rtsp", "rtsps":
		return KindRTSP, raw, nil
	case "http", "https":
		return KindHTTP, raw, nil
	case "file":
		return KindFile, raw[i+3:], nil
	default:
		return 0, "", fmt.Errorf("%w %q in %s (want rtsp, rtsps, http, https, file or a path)", ErrUnsupportedScheme, scheme, RedactURL(raw))
	}
}

// RedactURL replaces the password of a URL's user info with "***"
// (rtsp://user:secret@cam/ becomes rtsp://user:***@cam/); see redact.URL.
func RedactURL(raw string) string { return redact.URL(raw) }
