// Package redact hides credentials in URLs before they reach logs, API
// responses, events, errors, CLI output or metric labels. Every URL string
// vigil prints, valid or not, goes through URL (or URLs, or Text for free
// text such as FFmpeg's log lines).
//
// The rules are deliberately conservative: a URL that cannot be parsed the
// way its author meant (a password with a raw '#', '?', '/' or '@') is
// masked more widely rather than less, because the printed string only has
// to help an operator find the stream, never to reach it.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces every hidden part of a URL.
const Mask = "***"

// secretParam matches parameter names that carry credentials in camera
// URLs (…?user=admin&password=…, ?token=…, signed URLs, and the path
// parameters of some cameras: /user=admin&password=…&channel=1).
var secretParam = regexp.MustCompile(`(?i)(pass|pwd|secret|token|key|auth|sig|credential)`)

// scheme matches an RFC 3986 scheme and "://" at the start of a URL.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)

// URL returns raw with its credentials replaced by Mask:
//
//   - the password of the user info: everything after the first ':' of
//     the text between "scheme://" and the last '@' of the whole string
//     (so a password holding raw '@', ':', '/', '?' or '#' is masked whole;
//     a '@' further on, in a path or query, only widens the mask). Without
//     a "scheme://" prefix ("rtsp:/u:p@cam", "u:p@cam", a typo) the text
//     from the start of the string to the last '@' counts as user info;
//   - the value of every parameter whose name looks like a credential
//     (pass, pwd, secret, token, key, auth, sig, credential, in any case
//     and percent-encoded or not), after a '?', '&', ';' or '/', up to the
//     next '&' or the end of the string: a raw '#' does not end it, since
//     FFmpeg sends everything after the authority, fragment included.
//
// rtsp://user:s3cret@cam/s?password=x becomes rtsp://user:***@cam/s?password=***.
// A user name alone (rtsp://admin@cam/) is shown. Strings with neither '@'
// nor a credential-like parameter are returned unchanged.
func URL(raw string) string {
	return apply(raw, spans(raw))
}

// span is a byte range [from, to) of a string to mask.
type span struct{ from, to int }

// spans returns the ranges of raw that URL masks, in no particular order.
func spans(raw string) []span {
	start := 0
	if m := scheme.FindStringIndex(raw); m != nil {
		start = m[1]
	}
	var out []span
	rest := raw[start:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if c := strings.IndexByte(rest[:at], ':'); c >= 0 {
			out = append(out, span{start + c + 1, start + at})
		}
	}
	for i := start + 1; i < len(raw); i++ {
		if !strings.ContainsRune("?&;/", rune(raw[i-1])) {
			continue
		}
		j := i
		for j < len(raw) && isNameByte(raw[j]) {
			j++
		}
		if j == i || j == len(raw) || raw[j] != '=' {
			continue
		}
		name, err := url.QueryUnescape(raw[i:j])
		if err != nil {
			name = raw[i:j]
		}
		if !secretParam.MatchString(name) {
			continue
		}
		end := len(raw)
		if k := strings.IndexByte(raw[j+1:], '&'); k >= 0 {
			end = j + 1 + k
		}
		if end > j+1 {
			out = append(out, span{j + 1, end})
		}
	}
	return out
}

// isNameByte reports whether b can be part of a (percent-encoded)
// parameter name.
func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("_.-+%", b) >= 0
}

// apply replaces the union of sp in s by one Mask per connected range.
func apply(s string, sp []span) string {
	if len(sp) == 0 {
		return s
	}
	slices.SortFunc(sp, func(a, b span) int { return a.from - b.from })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(sp); {
		from, to := sp[i].from, sp[i].to
		for i++; i < len(sp) && sp[i].from <= to; i++ {
			to = max(to, sp[i].to)
		}
		b.WriteString(s[pos:from])
		b.WriteString(Mask)
		pos = to
	}
	b.WriteString(s[pos:])
	return b.String()
}

// listStart matches a comma, optional spaces and a scheme "://": where
// the next URL of a comma-separated list begins.
var listStart = regexp.MustCompile(`,\s*[A-Za-z][A-Za-z0-9+.-]*://`)

// SplitURLs splits a comma-separated list of URLs (a NATS cluster) at each
// comma that is followed by a "scheme://", so that a raw ',' inside a
// password stays inside its URL (nats.go itself splits at every comma; a
// password with a ',' must be written %2C). Each element is trimmed of
// surrounding spaces.
func SplitURLs(list string) []string {
	var out []string
	prev := 0
	for _, m := range listStart.FindAllStringIndex(list, -1) {
		out = append(out, strings.TrimSpace(list[prev:m[0]]))
		prev = m[0] + 1
	}
	return append(out, strings.TrimSpace(list[prev:]))
}

// URLs redacts a comma-separated list of URLs (a NATS cluster): each
// element of SplitURLs through URL, joined with ",". A password holding
// ",scheme://" raw would be cut in two; no NATS client can use one.
//
// A NATS URL's user name alone is a token (nats://TOKEN@host: nats.go
// sends it as the connection's auth_token), so unlike URL, URLs masks the
// user info whole when it has no ':' (nats://***@host).
func URLs(list string) string {
	parts := SplitURLs(list)
	for i, p := range parts {
		parts[i] = maskToken(URL(p))
	}
	return strings.Join(parts, ",")
}

// maskToken replaces a user info without ':' (after URL has masked any
// password, a user info with one already holds Mask) by Mask.
func maskToken(u string) string {
	m := scheme.FindStringIndex(u)
	if m == nil {
		return u
	}
	rest := u[m[1]:]
	at := strings.LastIndexByte(rest, '@')
	if at <= 0 || strings.IndexByte(rest[:at], ':') >= 0 {
		return u
	}
	return u[:m[1]] + Mask + rest[at:]
}

// urlInText matches a URL in free text: a scheme, "://" and everything up
// to the next white space.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://\S*`)

// Text redacts every URL in free text (FFmpeg's log lines, a third-party
// error): each "scheme://" up to the next white space goes through URL.
// vigil refuses URLs with white space, so none reaches a library.
func Text(s string) string {
	return urlInText.ReplaceAllStringFunc(s, URL)
}
