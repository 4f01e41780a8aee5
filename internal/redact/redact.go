// Package redact hides credentials in URLs before they reach logs, API
// responses, events, errors or metric labels.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// secretParam matches query parameter names that carry credentials in
// camera URLs (…?user=admin&password=…, ?token=…, signed URLs).
var secretParam = regexp.MustCompile(`(?i)(pass|pwd|secret|token|key|auth|sig|credential)`)

// URL replaces credentials in raw with "***": the password of the user
// info (everything after the first ':' of the part before the last '@' of
// the authority-and-path, so a password with raw '@', ':' or '/' is masked
// whole), and the values of query parameters whose names look like
// credentials. rtsp://user:secret@cam/s?password=x becomes
// rtsp://user:***@cam/s?password=***. Strings without "://" are returned
// unchanged.
func URL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "?#")
	if end < 0 {
		end = len(rest)
	}
	head, tail := rest[:end], rest[end:]
	if at := strings.LastIndex(head, "@"); at >= 0 {
		user := head[:at]
		if c := strings.Index(user, ":"); c >= 0 {
			user = user[:c] + ":***"
		}
		head = user + head[at:]
	}
	if strings.HasPrefix(tail, "?") {
		q, frag, _ := strings.Cut(tail[1:], "#")
		parts := strings.Split(q, "&")
		for j, p := range parts {
			k, _, ok := strings.Cut(p, "=")
			name, err := url.QueryUnescape(k)
			if err != nil {
				name = k
			}
			if ok && secretParam.MatchString(name) {
				parts[j] = k + "=***"
			}
		}
		tail = "?" + strings.Join(parts, "&")
		if frag != "" || strings.Contains(rest[end:], "#") {
			tail += "#" + frag
		}
	}
	return raw[:i+3] + head + tail
}

// URLs redacts a comma-separated list of URLs (a NATS cluster).
func URLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = URL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}
