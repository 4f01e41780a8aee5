// Package redact hides credentials in URLs before they reach logs, API
// responses, events, errors or metric labels.
package redact

import (
	"net/url"
	"strings"
)

// URL replaces the password of a URL's user info with "***", so that
// rtsp://user:secret@cam/ becomes rtsp://user:***@cam/. Strings that do not
// parse as URLs are returned unchanged when they hold no "@", and with
// everything before the last "@" of the authority masked otherwise.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "***")
			return strings.Replace(u.String(), "%2A%2A%2A", "***", 1)
		}
		return raw
	}
	if err != nil {
		if i := strings.Index(raw, "://"); i >= 0 {
			rest := raw[i+3:]
			end := strings.IndexAny(rest, "/?#")
			if end < 0 {
				end = len(rest)
			}
			if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
				return raw[:i+3] + "***" + rest[at:]
			}
		}
	}
	return raw
}

// URLs redacts a comma-separated list of URLs (a NATS cluster).
func URLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = URL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}
