package decode

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
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

// ParseURL classifies raw and returns the string to hand to FFmpeg. File
// inputs (plain paths and file://) come back as "file:<path>", so that
// FFmpeg never reads a path as one of its protocol prefixes (concat:, pipe:
// and so on). It returns an error wrapping ErrUnsupportedScheme for any
// other scheme or protocol prefix, and a plain error, with credentials
// redacted (RedactURL), for an empty URL or path, a network URL without a
// host, a bad port, whitespace or control characters, user info with a raw
// '/', or a '@' after the first '?' or '#' (a password must be
// percent-encoded: %2F for '/', %3F for '?', %23 for '#', %40 for '@').
func ParseURL(raw string) (Kind, string, error) {
	if strings.TrimSpace(raw) == "" {
		return 0, "", errors.New("empty URL")
	}
	if strings.IndexFunc(raw, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return 0, "", fmt.Errorf("%q: URL contains whitespace or control characters", RedactURL(raw))
	}
	i := strings.Index(raw, "://")
	if i < 0 {
		if protoPrefix.MatchString(raw) {
			return 0, "", fmt.Errorf("%w %q in %s (want rtsp, rtsps, http, https, file or a path)",
				ErrUnsupportedScheme, raw[:strings.IndexByte(raw, ':')], RedactURL(raw))
		}
		return KindFile, "file:" + raw, nil
	}
	var kind Kind
	switch scheme := strings.ToLower(raw[:i]); scheme {
	case "rtsp", "rtsps":
		kind = KindRTSP
	case "http", "https":
		kind = KindHTTP
	case "file":
		p := raw[i+3:]
		if p == "" {
			return 0, "", errors.New("file:// URL with an empty path")
		}
		return KindFile, "file:" + p, nil
	default:
		return 0, "", fmt.Errorf("%w %q in %s (want rtsp, rtsps, http, https, file or a path)", ErrUnsupportedScheme, scheme, RedactURL(raw))
	}
	rest := raw[i+3:]
	if end := strings.IndexAny(rest, "?#"); end >= 0 {
		if strings.Contains(rest[end:], "@") {
			// FFmpeg, like Go, ends the host at the first '?' or '#': a
			// password with a raw '?' or '#' would make its first part the
			// host (looked up in DNS) and send the rest as the path.
			return 0, "", fmt.Errorf("%s: a '@' after '?' or '#'; percent-encode the password (%%3F for '?', %%23 for '#', %%2F for '/', %%40 for '@')", RedactURL(raw))
		}
		rest = rest[:end]
	}
	if slash := strings.IndexByte(rest, '/'); slash >= 0 && strings.Contains(rest[slash:], "@") {
		return 0, "", fmt.Errorf("%s: the user info holds a raw '/'; percent-encode the password (%%2F for '/', %%40 for '@')", RedactURL(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return 0, "", fmt.Errorf("%s: not a valid URL", RedactURL(raw))
	}
	if u.Hostname() == "" {
		return 0, "", fmt.Errorf("%s: no host", RedactURL(raw))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return 0, "", fmt.Errorf("%s: port %s is not 1-65535", RedactURL(raw), p)
		}
	}
	return kind, raw, nil
}

// protoPrefix matches an FFmpeg protocol prefix such as "concat:" or
// "pipe:" at the start of a string without "://".
var protoPrefix = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]+:`)

// RedactURL replaces the password of a URL's user info, and the values of
// credential-like parameters, with "***" (rtsp://user:secret@cam/ becomes
// rtsp://user:***@cam/), for any string, valid URL or not; see redact.URL.
func RedactURL(raw string) string { return redact.URL(raw) }

// LocalPath returns the local file raw names, a plain path or a file://
// URL's path (ParseURL's KindFile without its "file:" prefix); false for a
// network URL or one ParseURL refuses (the caller reports those when it
// opens them). Tools use it to refuse a missing file before they start.
func LocalPath(raw string) (string, bool) {
	kind, ff, err := ParseURL(raw)
	if err != nil || kind != KindFile {
		return "", false
	}
	return strings.TrimPrefix(ff, "file:"), true
}
