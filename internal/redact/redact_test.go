package redact

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"rtsp://admin:s3cret@10.0.0.5:554/s1": "rtsp://admin:***@10.0.0.5:554/s1",
		"rtsp://cam/s1":                       "rtsp://cam/s1",
		"/a/b.avi":                            "/a/b.avi",
		"rtsp://admin@cam/s":                  "rtsp://admin@cam/s",
		"rtsp://admin:p%40ss%3Aw0rd%2Fx%25y@10.0.0.5/s":     "rtsp://admin:***@10.0.0.5/s",
		"rtsp://admin:p@ss:w0rd@10.0.0.5:554/s":             "rtsp://admin:***@10.0.0.5:554/s",
		"rtsp://admin:s3cr@t:xy/z@127.0.0.1:18554/cam":      "rtsp://admin:***@127.0.0.1:18554/cam",
		"rtsp://admin:w0%rd@10.0.0.5/s":                     "rtsp://admin:***@10.0.0.5/s",
		"rtsp://cam/s?user=admin&password=qsecret&ch=1":     "rtsp://cam/s?user=admin&password=***&ch=1",
		"http://cam/snap?Token=abc":                         "http://cam/snap?Token=***",
		"nats://bob:hunter2@h:4222":                         "nats://bob:***@h:4222",
		"rtsp://u:p@cam/s?pwd=1&PassWord=2&api%5Fkey=3&x=4": "rtsp://u:***@cam/s?pwd=***&PassWord=***&api%5Fkey=***&x=4",
		// A raw '#' or '?' in the password (issue 14, item 5): the user
		// info runs to the last '@', not to the first '#' or '?'.
		"rtsp://admin:pa#ss@cam/s":           "rtsp://admin:***@cam/s",
		"rtsp://admin:pa?ss@cam/s":           "rtsp://admin:***@cam/s",
		"rtsp://admin:a#b?c/d@cam:554/s?x=1": "rtsp://admin:***@cam:554/s?x=1",
		"rtsp://admin:12#34@cam/s":           "rtsp://admin:***@cam/s",
		"RTSP://admin:pa#ss@cam/s":           "RTSP://admin:***@cam/s",
		// No "scheme://": a typo, or no scheme at all.
		"rtsp:/admin:pass@cam/s":  "rtsp:***@cam/s",
		"rtsp:admin:pass@cam/s":   "rtsp:***@cam/s",
		"admin:pass@cam/s":        "admin:***@cam/s",
		" rtsp://admin:pass@cam/": " rtsp:***@cam/",
		// A raw '#' in a token is sent by FFmpeg, so it is masked too; a
		// '@' in the query does not hide a token from the mask.
		"http://cam/snap?token=ab#cd":                         "http://cam/snap?token=***",
		"http://cam/snap?token=abc@def":                       "http://cam/snap?token=***",
		"http://cam/snap?token=a&x=1#f":                       "http://cam/snap?token=***&x=1#f",
		"rtsp://cam:554/user=admin&password=123456&channel=1": "rtsp://cam:554/user=admin&password=***&channel=1",
		"rtsp://cam/s;auth=xyz":                               "rtsp://cam/s;auth=***",
		// Both rules at once: the masks merge.
		"rtsp://u:p?token=x@cam/s": "rtsp://u:***",
		"":                         "",
		"rtsp://:pw@cam/":          "rtsp://:***@cam/",
	} {
		// On failure only the expected output is shown: the input and a
		// wrong output may hold the password.
		if got := URL(in); got != want {
			t.Errorf("URL(...) is not %q", want)
		} else if again := URL(got); again != want {
			t.Errorf("masking %q again changes it", want)
		}
	}
}

func TestURLs(t *testing.T) {
	require.Equal(t, "nats://a:***@h1:4222,nats://h2:4222", URLs("nats://a:b@h1:4222, nats://h2:4222"))
	// A raw ',' in a password stays inside its URL.
	require.Equal(t, "nats://a:***@h1:4222,nats://h2:4222", URLs("nats://a:b,c@h1:4222,nats://h2:4222"))
	require.Equal(t, []string{"nats://a:b,c@h1", "tls://h2"}, SplitURLs("nats://a:b,c@h1 , tls://h2"))
	require.Equal(t, []string{""}, SplitURLs(""))
	// A user name alone is a NATS token (nats://TOKEN@host): masked whole,
	// where URL shows an RTSP user name.
	require.Equal(t, "nats://***@h1:4222,tls://***@h2,nats://h3", URLs("nats://s3cr3t@h1:4222,tls://s3cr3t@h2,nats://h3"))
	require.Equal(t, "nats://u:***@h1", URLs("nats://u:pw@h1"))
	require.Equal(t, "nats://***@h1", URLs(URLs("nats://tok@h1")), "masking again changes nothing")
}

func TestText(t *testing.T) {
	require.Equal(t, "Connection to tcp://u:***@cam:554?timeout=0 failed: refused; 'rtsp://v:***@x/s'",
		Text("Connection to tcp://u:p#q@cam:554?timeout=0 failed: refused; 'rtsp://v:w@x/s'"))
	require.Equal(t, "no URL here: a:b@c", Text("no URL here: a:b@c"))
}

// rfc3986 is every character RFC 3986 allows in a URI: unreserved,
// gen-delims, sub-delims and '%'.
const rfc3986 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~" + ":/?#[]@" + "!$&'()*+,;=" + "%"

// over maps arbitrary fuzz bytes onto set (bytes of set stay as they
// are), so that every input is used.
func over(set string, b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = c
		if strings.IndexByte(set, c) < 0 {
			out[i] = set[int(c)%len(set)]
		}
	}
	return string(out)
}

// pctEncode percent-encodes s: every byte when all is true, else every
// byte that is not unreserved.
func pctEncode(s string, all bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !all && strings.IndexByte(rfc3986[:66], c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// covered reports whether every byte of raw[from:to] lies in a masked span.
func covered(raw string, from, to int) bool {
	sp := spans(raw)
	for i := from; i < to; i++ {
		in := false
		for _, s := range sp {
			if s.from <= i && i < s.to {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
}

// noLeak fails the test when secret (which sits at [from, to) of in) is
// not wholly masked in URL(in), or when the output still holds it. The
// message never shows the secret: it is replaced by <SECRET>.
func noLeak(t *testing.T, in string, from, to int) {
	t.Helper()
	secret := in[from:to]
	if secret == "" {
		return
	}
	hide := func(s string) string { return strings.ReplaceAll(s, secret, "<SECRET>") }
	out := URL(in)
	if !covered(in, from, to) {
		t.Fatalf("part of the %d-byte secret at bytes %d-%d survives: URL(%q) = %q", len(secret), from, to, hide(in), hide(out))
	}
	// Black box: when the secret occurs nowhere else in the input, the
	// output (with each mask replaced by a byte no URL holds, so that
	// "***" cannot spell a secret of stars) does not hold it.
	if strings.Count(in, secret) == 1 && strings.Contains(strings.ReplaceAll(out, Mask, "\x00"), secret) {
		t.Fatalf("the output holds the secret: URL(%q) = %q", hide(in), hide(out))
	}
}

var (
	schemes = []string{"rtsp", "rtsps", "http", "https", "nats", "RTSP", "file"}
	users   = []string{"admin", "", "u-1._~", "a%3Ab"}
	hosts   = []string{"cam.example:554", "10.0.0.5", "[fd00::5]:8554", ""}
	names   = []string{"password", "pwd", "token", "api_key", "Signature", "X-Amz-Credential", "auth"}
)

// FuzzURL: for any password over the RFC 3986 character set, raw,
// percent-encoded where needed or percent-encoded whole, in the user info
// or as the value of a credential-like parameter, and for any text after
// the host (also over that set), no byte of the password survives URL.
// A parameter value cannot hold a raw '&': every URL parser, FFmpeg's and
// the cameras', ends the value there.
func FuzzURL(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzURL.
	f.Fuzz(func(t *testing.T, pw, rest []byte, enc, shape uint8) {
		secret := over(rfc3986, pw)
		inQuery := shape&0x80 != 0
		if inQuery {
			secret = strings.ReplaceAll(secret, "&", "~")
		}
		switch enc % 3 {
		case 1:
			secret = pctEncode(secret, false)
		case 2:
			secret = pctEncode(secret, true)
		}
		sch := schemes[int(shape)%len(schemes)]
		host := hosts[int(shape>>3)%len(hosts)]
		tail := over(rfc3986, rest)
		var head string
		if inQuery {
			head = sch + "://" + host + "/s?" + names[int(shape>>5)%len(names)] + "="
		} else {
			head = sch + "://" + users[int(shape>>5)%len(users)] + ":"
		}
		var in string
		if inQuery {
			// The value ends at the next '&' (none in the secret).
			in = head + secret + "&" + tail
		} else {
			in = head + secret + "@" + host + tail
		}
		noLeak(t, in, len(head), len(head)+len(secret))
	})
}

// FuzzURLs: in a comma-separated list, each URL's password is masked, also
// when it holds a raw ',' (unless it holds ",scheme://").
func FuzzURLs(f *testing.F) {
	// The seed corpus is in testdata/fuzz/FuzzURLs.
	f.Fuzz(func(t *testing.T, pw1, pw2 []byte) {
		s1, s2 := over(rfc3986, pw1), over(rfc3986, pw2)
		if listStart.MatchString(s1) || listStart.MatchString(s2) || strings.HasPrefix(s2, ",") {
			t.Skip("a raw ',scheme://' in a password cannot be told from the next URL")
		}
		u1, u2 := "nats://a:"+s1+"@h1:4222", "tls://b:"+s2+"@h2:4222"
		if got := SplitURLs(u1 + ", " + u2); len(got) != 2 || got[0] != u1 || got[1] != u2 {
			t.Fatalf("the list does not split where the URLs meet: %d parts", len(got))
		}
		noLeak(t, u1, 9, 9+len(s1))
		noLeak(t, u2, 8, 8+len(s2))
	})
}
