// Package allowlist restricts where streams may point (api.allowed_sources):
// which schemes and hosts vigil connects to, and which directories it reads
// files from. Whoever can register a stream can otherwise make vigil open
// any URL reachable from its host, inside the network too (a server-side
// request forgery path), or any file it can read.
//
// Entries are URLs without user info, path, query or port:
//
//	rtsp://10.0.0.0/8          a scheme and an IPv4 or IPv6 CIDR ([fd00::]/8)
//	rtsp://192.0.2.10          a scheme and one address ([fd00::5] for IPv6)
//	rtsps://cam-*.site.local   a scheme and a host name; '*' matches within one label
//	http://*                   a scheme and any host
//	file:///srv/video/         files under a directory (plain paths are files too)
//
// Host names are not resolved: a name entry matches the name in the URL,
// and an address or CIDR entry matches only an address written in the
// URL. Resolving at check time would not bind FFmpeg, which resolves again
// when it connects and may get another answer (DNS rebinding); a name entry
// trusts whoever controls that name's DNS. The host is read the way
// FFmpeg's av_url_split reads it, and a URL that Go's net/url reads
// differently, or whose host is a number that the C resolver would take
// for an address (127.1, 0x7f.0.0.1, 2130706433), is refused.
package allowlist

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/vigil-video/vigil/internal/redact"
)

// ErrNotAllowed is wrapped by every error of List.Check.
var ErrNotAllowed = errors.New("not allowed by api.allowed_sources")

// List is a parsed allow-list. A nil *List allows everything (no
// api.allowed_sources configured).
type List struct {
	entries []entry
}

// entry is one parsed entry: a scheme with one host rule, or (scheme
// "file") a directory.
type entry struct {
	scheme string
	any    bool         // any host
	prefix netip.Prefix // an address or CIDR (valid when IsValid)
	glob   []string     // host name labels, lower case, '*' within a label
	dir    string       // file: a cleaned absolute directory ("/" for every file)
}

// networkSchemes are the schemes an entry may name besides file.
var networkSchemes = map[string]bool{"rtsp": true, "rtsps": true, "http": true, "https": true}

var (
	entryScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$`)
	globLabel   = regexp.MustCompile(`^[a-z0-9_*-]+$`)
	nameLabel   = regexp.MustCompile(`^[a-z0-9_-]+$`)
	numberLabel = regexp.MustCompile(`^(0x[0-9a-f]*|[0-9]+)$`)
)

// EntryError is a bad entry: its index in the list, the entry and what is
// wrong with it.
type EntryError struct {
	Index int
	Entry string
	Err   error
}

// Error is the entry (redacted, in case it holds user info) and the problem.
func (e *EntryError) Error() string { return fmt.Sprintf("%q: %v", redact.URL(e.Entry), e.Err) }

// Unwrap returns the problem.
func (e *EntryError) Unwrap() error { return e.Err }

// Parse parses entries. It returns nil (allow everything) for no entries,
// and one *EntryError per bad entry. The list it returns holds the good
// entries only, so use it only when there are no errors.
func Parse(entries []string) (*List, []*EntryError) {
	if len(entries) == 0 {
		return nil, nil
	}
	l := &List{}
	var errs []*EntryError
	for i, s := range entries {
		e, err := parseEntry(s)
		if err != nil {
			errs = append(errs, &EntryError{Index: i, Entry: s, Err: err})
			continue
		}
		l.entries = append(l.entries, e)
	}
	return l, errs
}

func parseEntry(s string) (entry, error) {
	m := entryScheme.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return entry{}, errors.New("want scheme://host, scheme://CIDR or file:///directory/")
	}
	e := entry{scheme: strings.ToLower(m[1])}
	rest := m[2]
	if e.scheme == "file" {
		if !strings.HasPrefix(rest, "/") {
			return entry{}, errors.New("a file entry names an absolute directory: file:///srv/video/")
		}
		e.dir = path.Clean(rest)
		return e, nil
	}
	if !networkSchemes[e.scheme] {
		return entry{}, fmt.Errorf("scheme %q: want rtsp, rtsps, http, https or file", e.scheme)
	}
	if strings.ContainsAny(rest, "@?#") {
		return entry{}, errors.New("an entry has no user info, query or fragment")
	}
	if p, err := netip.ParsePrefix(strings.NewReplacer("[", "", "]", "").Replace(rest)); err == nil {
		e.prefix = p.Masked()
		return e, nil
	}
	host := strings.TrimSuffix(rest, "/")
	if strings.Contains(host, "/") {
		return entry{}, errors.New("not a CIDR (10.0.0.0/8, [fd00::]/8), and an entry has no path")
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
		e.prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return e, nil
	}
	if strings.Contains(host, ":") {
		return entry{}, errors.New("an entry has no port (every port of an allowed host is allowed)")
	}
	if host == "*" {
		e.any = true
		return e, nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	labels := strings.Split(host, ".")
	for _, lb := range labels {
		if !globLabel.MatchString(lb) {
			return entry{}, fmt.Errorf("host %q: want a name of letters, digits, '-' and '_' with '*' inside a label, an address, a CIDR or *", host)
		}
	}
	e.glob = labels
	return e, nil
}

// Check returns nil when raw (a stream URL that decode.ParseURL accepts)
// is allowed, and otherwise an error wrapping ErrNotAllowed that names the
// URL (redacted) and what did not match. A nil l allows everything.
// Relative file paths are taken from vigil's working directory.
func (l *List) Check(raw string) error {
	if l == nil {
		return nil
	}
	shown := redact.URL(raw)
	scheme, rest, network := "file", raw, false
	if m := entryScheme.FindStringSubmatch(raw); m != nil {
		scheme, rest = strings.ToLower(m[1]), m[2]
		network = scheme != "file"
	}
	if !network {
		p, err := filepath.Abs(rest)
		if err != nil {
			return fmt.Errorf("%s: %w: %v", shown, ErrNotAllowed, err)
		}
		for _, e := range l.entries {
			if e.scheme == "file" && (e.dir == "/" || p == e.dir || strings.HasPrefix(p, e.dir+"/")) {
				return nil
			}
		}
		return fmt.Errorf("%s: %w: the file %s is under no file:// entry", shown, ErrNotAllowed, p)
	}
	host, err := hostOf(raw, rest)
	if err != nil {
		return fmt.Errorf("%s: %w: %v", shown, ErrNotAllowed, err)
	}
	addr, isAddr := parseAddr(host)
	if !isAddr {
		if err := checkName(host); err != nil {
			return fmt.Errorf("%s: %w: %v", shown, ErrNotAllowed, err)
		}
	}
	for _, e := range l.entries {
		if e.scheme != scheme {
			continue
		}
		switch {
		case e.any,
			isAddr && e.prefix.IsValid() && e.prefix.Contains(addr),
			!isAddr && e.glob != nil && matchName(e.glob, host):
			return nil
		}
	}
	return fmt.Errorf("%s: %w: host %s matches no %s:// entry", shown, ErrNotAllowed, host, scheme)
}

// hostOf returns the host of a network URL as FFmpeg's av_url_split reads
// it (the authority ends at the first '/', '?' or '#'; the user info at its
// last '@'; a port after ':' or "]:"), lower case and without one trailing
// dot, after checking that Go's net/url reads the same host.
func hostOf(raw, rest string) (string, error) {
	auth := rest
	if i := strings.IndexAny(auth, "/?#"); i >= 0 {
		auth = auth[:i]
	}
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		auth = auth[i+1:]
	}
	host := auth
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 {
			return "", errors.New("an IPv6 host without ']'")
		}
		host = auth[1:end]
	} else if i := strings.IndexByte(auth, ':'); i >= 0 {
		host = auth[:i]
	}
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() != host {
		return "", errors.New("the host cannot be read unambiguously")
	}
	if host == "" {
		return "", errors.New("no host")
	}
	return strings.TrimSuffix(strings.ToLower(host), "."), nil
}

// parseAddr parses an IP address host (IPv4-mapped IPv6 addresses as IPv4).
func parseAddr(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// checkName refuses a host that is not an address and not a plain DNS
// name: percent signs (IPv6 zones, escapes), odd characters, and numbers
// that inet_aton, and so FFmpeg's resolver, reads as IPv4 addresses.
func checkName(host string) error {
	labels := strings.Split(host, ".")
	numeric := true
	for _, lb := range labels {
		if !nameLabel.MatchString(lb) {
			return fmt.Errorf("host %q is neither an address nor a DNS name", host)
		}
		numeric = numeric && numberLabel.MatchString(lb)
	}
	if numeric {
		return fmt.Errorf("host %q is a number the resolver reads as an IPv4 address; write the address as a.b.c.d", host)
	}
	return nil
}

// matchName matches a host name against a glob's labels, label by label.
func matchName(glob []string, host string) bool {
	labels := strings.Split(host, ".")
	if len(labels) != len(glob) {
		return false
	}
	for i, g := range glob {
		if ok, _ := path.Match(g, labels[i]); !ok {
			return false
		}
	}
	return true
}
