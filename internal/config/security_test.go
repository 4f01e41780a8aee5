package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/testenv"
)

// nats.url errors show each URL of the list redacted, also when a password
// holds a raw ',' (the list used to be split there, showing the part after
// it on its own) or '#'.
func TestNATSURLErrorsHidePassword(t *testing.T) {
	for _, tc := range []struct{ url, secret, want string }{
		{"nats://bob:pa,ss@h1:4222", "ss@h1", "a ',' inside one URL"},
		{"nats://bob:pa,ss@h1:4222,nats://h2:4222", "pa,ss", "a ',' inside one URL"},
		{"ftp://bob:pa#ss@h1:4222", "pa#ss", "want nats://"},
		{"bob:pa#ss@h1:4222", "pa#ss", "want nats://"},
	} {
		_, err := Parse([]byte("nats: {url: \""+tc.url+"\"}\n"), "x.yaml")
		require.Error(t, err)
		testenv.NoSecret(t, "the nats.url error", err.Error(), tc.secret)
		require.Contains(t, err.Error(), tc.want)
		require.Contains(t, err.Error(), "***")
	}
}
