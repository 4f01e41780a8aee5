package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/config"
)

// loadCompose loads compose.yaml with the compose-spec loader (what Docker
// Compose uses) and env as the environment.
func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{WorkingDir: wd,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(wd, "compose.yaml")}}, Environment: env},
		func(o *loader.Options) { o.SetProjectName("vigil", true) })
}

// deploy/compose.yaml: three clustered NATS servers and two vigil nodes.
// It loads with the compose-spec loader; the NATS configuration it holds
// loads with nats-server's own parser, and vigil's with config.Parse.
func TestCompose(t *testing.T) {
	_, err := loadCompose(t, map[string]string{"VIGIL_API_TOKEN": "a"})
	require.ErrorContains(t, err, "set NATS_TOKEN", "the NATS token is required")

	p, err := loadCompose(t, map[string]string{"NATS_TOKEN": "n-token", "VIGIL_API_TOKEN": "a-token"})
	require.NoError(t, err)
	names := p.ServiceNames()
	slices.Sort(names)
	require.Equal(t, []string{"nats-1", "nats-2", "nats-3", "vigil-1", "vigil-2"}, names)
	for _, n := range []string{"vigil-1", "vigil-2"} {
		s := p.Services[n]
		require.Equal(t, n, s.Hostname, "node.id is the host name")
		for _, dep := range []string{"nats-1", "nats-2", "nats-3"} {
			require.Contains(t, s.DependsOn, dep)
		}
		var secrets []string
		for _, sec := range s.Secrets {
			secrets = append(secrets, sec.Source)
		}
		require.ElementsMatch(t, []string{"nats-token", "api-token"}, secrets)
		require.EqualValues(t, 1<<30, s.ShmSize)
	}
	require.Equal(t, "NATS_TOKEN", p.Secrets["nats-token"].Environment)

	// nats-server reads its configuration as the container would, with
	// NATS_TOKEN and HOSTNAME from its environment.
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(p.Configs["nats-conf"].Content), 0o600))
	t.Setenv("NATS_TOKEN", "n-token")
	t.Setenv("HOSTNAME", "nats-2")
	o, err := server.ProcessConfigFile(conf)
	require.NoError(t, err, "nats.conf:\n%s", p.Configs["nats-conf"].Content)
	require.Equal(t, "nats-2", o.ServerName)
	require.Equal(t, "n-token", o.Authorization)
	require.True(t, o.JetStream)
	require.True(t, o.SyncAlways)
	require.Equal(t, "vigil", o.Cluster.Name)
	require.Equal(t, 6222, o.Cluster.Port)
	require.Len(t, o.Routes, 3)
	for _, r := range o.Routes {
		pw, _ := r.User.Password()
		require.Equal(t, o.Cluster.Username+":"+o.Cluster.Password, r.User.Username()+":"+pw, "routes authenticate")
	}

	// vigil's configuration, with its secret files where compose mounts them.
	for k, v := range map[string]string{"nats-token": "n-token", "api-token": "a-token"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600))
	}
	text := strings.ReplaceAll(p.Configs["vigil-yaml"].Content, "/run/secrets", dir)
	text = strings.ReplaceAll(text, "/var/lib/vigil", filepath.Join(dir, "data"))
	c, err := config.Parse([]byte(text), "compose vigil.yaml")
	require.NoError(t, err)
	require.Len(t, strings.Split(c.NATS.URL, ","), 3)
	require.Equal(t, 3, c.NATS.Replicas)
}
