// Package helm_test renders deploy/helm/vigil with Helm's Go SDK for
// several value sets, decodes every manifest strictly into the Kubernetes
// API types, parses the vigil.yaml it writes with vigil's own config
// loader, and lints the chart. It is a test-only package: Helm and the
// Kubernetes libraries are not linked into vigil.
package helm_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/config"
)

const chartDir = "vigil"

// serviceMonitor is the part of Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart writes; strict decoding refuses
// any field it does not name.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one release's objects, decoded.
type rendered struct {
	sts      *appsv1.StatefulSet
	deploy   *appsv1.Deployment
	services map[string]*corev1.Service
	cm       *corev1.ConfigMap
	secret   *corev1.Secret
	pdb      *policyv1.PodDisruptionBudget
	sm       *serviceMonitor
}

// pod returns the pod template of the workload, whichever kind it is.
func (r *rendered) pod() *corev1.PodTemplateSpec {
	if r.sts != nil {
		return &r.sts.Spec.Template
	}
	return &r.deploy.Spec.Template
}

// render renders the chart with vals over values.yaml as release "site" in
// namespace "video", and decodes each manifest strictly by its kind.
func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: "site", Namespace: "video", IsInstall: true, Revision: 1},
		chartutil.DefaultCapabilities)
	require.NoError(t, err)
	out, err := engine.Render(ch, rv)
	require.NoError(t, err)
	r := &rendered{services: map[string]*corev1.Service{}}
	for name, text := range out {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		for _, doc := range strings.Split(text, "\n---\n") {
			if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(doc), "---")) == "" {
				continue
			}
			var head struct{ APIVersion, Kind string }
			require.NoError(t, yaml.Unmarshal([]byte(doc), &head), name)
			strict := func(v any) {
				t.Helper()
				require.NoError(t, yaml.UnmarshalStrict([]byte(doc), v), "%s (%s):\n%s", name, head.Kind, doc)
			}
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 StatefulSet":
				r.sts = &appsv1.StatefulSet{}
				strict(r.sts)
			case "apps/v1 Deployment":
				r.deploy = &appsv1.Deployment{}
				strict(r.deploy)
			case "v1 Service":
				s := &corev1.Service{}
				strict(s)
				r.services[s.Name] = s
			case "v1 ConfigMap":
				r.cm = &corev1.ConfigMap{}
				strict(r.cm)
			case "v1 Secret":
				r.secret = &corev1.Secret{}
				strict(r.secret)
			case "policy/v1 PodDisruptionBudget":
				r.pdb = &policyv1.PodDisruptionBudget{}
				strict(r.pdb)
			case "monitoring.coreos.com/v1 ServiceMonitor":
				r.sm = &serviceMonitor{}
				strict(r.sm)
			default:
				t.Fatalf("%s: unexpected %s %s", name, head.APIVersion, head.Kind)
			}
		}
	}
	require.NotNil(t, r.cm, "a ConfigMap")
	require.True(t, (r.sts == nil) != (r.deploy == nil), "one workload, a StatefulSet or a Deployment")
	return r
}

// vigilConfig parses the rendered vigil.yaml with vigil's config loader,
// as a node named pod would: the Secret's token files are written where
// the chart mounts them (moved into a temporary directory).
func vigilConfig(t *testing.T, r *rendered, pod string) config.Config {
	t.Helper()
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	require.NoError(t, os.MkdirAll(secrets, 0o700))
	for _, k := range []string{"api-token", "nats-token"} {
		v := []byte("token-from-an-existing-secret")
		if r.secret != nil {
			v = r.secret.Data[k]
		}
		require.NotEmpty(t, v, k)
		require.NoError(t, os.WriteFile(filepath.Join(secrets, k), v, 0o600))
	}
	text := strings.ReplaceAll(r.cm.Data["vigil.yaml"], "/etc/vigil/secrets", secrets)
	text = strings.ReplaceAll(text, "/var/lib/vigil", filepath.Join(dir, "data"))
	t.Setenv("POD_NAME", pod)
	c, err := config.Parse([]byte(text), "vigil.yaml (rendered)")
	require.NoError(t, err, "the chart's vigil.yaml:\n%s", r.cm.Data["vigil.yaml"])
	return c
}

func container(t *testing.T, r *rendered) corev1.Container {
	t.Helper()
	cs := r.pod().Spec.Containers
	require.Len(t, cs, 1)
	return cs[0]
}

func mountPath(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

func volume(r *rendered, name string) *corev1.Volume {
	for i, v := range r.pod().Spec.Volumes {
		if v.Name == name {
			return &r.pod().Spec.Volumes[i]
		}
	}
	return nil
}

// The defaults: three nodes embedding a three-server NATS cluster, as a
// StatefulSet with stable names, routes to every pod through the headless
// service, an R3 registry, probes on /healthz and /readyz.
func TestChartEmbeddedCluster(t *testing.T) {
	r := render(t, nil)
	require.NotNil(t, r.sts)
	require.Equal(t, int32(3), *r.sts.Spec.Replicas)
	require.Equal(t, appsv1.ParallelPodManagement, r.sts.Spec.PodManagementPolicy)
	require.Equal(t, "site-vigil-cluster", r.sts.Spec.ServiceName)
	headless := r.services["site-vigil-cluster"]
	require.NotNil(t, headless)
	require.Equal(t, corev1.ClusterIPNone, headless.Spec.ClusterIP)
	require.True(t, headless.Spec.PublishNotReadyAddresses, "routes resolve before the pods are ready")
	require.Len(t, r.sts.Spec.VolumeClaimTemplates, 1)
	require.Equal(t, "10Gi", r.sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String())

	c := vigilConfig(t, r, "site-vigil-1")
	require.True(t, c.NATS.Clustered())
	require.Equal(t, "site-vigil-1", c.NATS.Cluster.ServerName)
	require.Equal(t, 3, c.NATS.Replicas)
	require.Equal(t, []string{"nats://site-vigil-0.site-vigil-cluster.video.svc:6222",
		"nats://site-vigil-1.site-vigil-cluster.video.svc:6222", "nats://site-vigil-2.site-vigil-cluster.video.svc:6222"},
		c.NATS.Cluster.Routes)
	require.Equal(t, "/var/cache/vigil/engines", c.Infer.TensorRT.EngineCacheDir)
	require.Equal(t, "json", c.Log.Format, "values.config is merged in")

	ctr := container(t, r)
	require.Equal(t, "registry.example.com/vigil:0.1.0-cpu", ctr.Image)
	require.Equal(t, "/healthz", ctr.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "metrics", ctr.LivenessProbe.HTTPGet.Port.String())
	require.Equal(t, api.ReadyPath, ctr.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "api", ctr.ReadinessProbe.HTTPGet.Port.String())
	require.Equal(t, "/dev/shm", mountPath(ctr, "dshm"))
	require.Equal(t, corev1.StorageMediumMemory, volume(r, "dshm").EmptyDir.Medium)
	require.Equal(t, "/var/cache/vigil", mountPath(ctr, "cache"))
	require.Equal(t, "/etc/vigil/secrets", mountPath(ctr, "secrets"))
	require.Nil(t, r.pod().Spec.RuntimeClassName)
	_, gpu := ctr.Resources.Limits["nvidia.com/gpu"]
	require.False(t, gpu)

	require.NotNil(t, r.pdb)
	require.Equal(t, "1", r.pdb.Spec.MaxUnavailable.String(), "one node down at a time keeps the NATS majority")
	require.Nil(t, r.sm)
	require.Len(t, r.secret.Data["api-token"], 40, "a generated token")
}

// nats.url: a Deployment on an external NATS cluster, GPUs, an existing
// Secret and claim, a ServiceMonitor.
func TestChartExternalNATSWithGPU(t *testing.T) {
	r := render(t, map[string]any{
		"replicas": 5,
		"nats":     map[string]any{"url": "nats://nats.nats.svc:4222", "replicas": 3},
		"gpu":      map[string]any{"enabled": true, "count": 2, "hostLibPath": "/usr/local/cuda/lib64"},
		"auth":     map[string]any{"existingSecret": "vigil-tokens"},
		"cache":    map[string]any{"existingClaim": "vigil-cache"},
		"config": map[string]any{"infer": map[string]any{"provider": "tensorrt"}, "decode": map[string]any{"hwaccel": "cuda"},
			"api": map[string]any{"listen": "127.0.0.1:1"}},
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
	})
	require.NotNil(t, r.deploy)
	require.Equal(t, int32(5), *r.deploy.Spec.Replicas)
	require.Nil(t, r.secret, "the existing Secret is used")
	require.NotContains(t, r.services, "site-vigil-cluster")
	c := vigilConfig(t, r, "site-vigil-abc12")
	require.Equal(t, "nats://nats.nats.svc:4222", c.NATS.URL)
	require.False(t, c.NATS.Clustered())
	require.Equal(t, 3, c.NATS.Replicas)
	require.Equal(t, "tensorrt", c.Infer.Provider)
	require.Equal(t, "0.0.0.0:8080", c.API.Listen, "the chart's listener wins over values.config")

	ctr := container(t, r)
	require.Equal(t, "registry.example.com/vigil:0.1.0-gpu", ctr.Image)
	q := ctr.Resources.Limits["nvidia.com/gpu"]
	require.Equal(t, "2", q.String())
	require.Equal(t, "nvidia", *r.pod().Spec.RuntimeClassName)
	require.Equal(t, "vigil-cache", volume(r, "cache").PersistentVolumeClaim.ClaimName)
	require.Equal(t, "vigil-tokens", volume(r, "secrets").Secret.SecretName)
	require.Equal(t, "/usr/local/cuda/lib64", volume(r, "cuda-libs").HostPath.Path)
	require.True(t, slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool {
		return e.Name == "LD_LIBRARY_PATH" && strings.Contains(e.Value, "/opt/cuda-libs")
	}))

	require.NotNil(t, r.sm)
	require.Equal(t, "kube-prometheus", r.sm.Metadata.Labels["release"])
	require.Equal(t, "metrics", r.sm.Spec.Endpoints[0].Port)
	require.Equal(t, r.services["site-vigil"].Spec.Selector, r.sm.Spec.Selector.MatchLabels)
}

// One embedded node: no routes, an R1 registry; tokens given in values.
func TestChartSingleNode(t *testing.T) {
	r := render(t, map[string]any{"replicas": 1, "auth": map[string]any{"apiToken": "a-token", "natsToken": "n-token"},
		"podDisruptionBudget": map[string]any{"enabled": false}, "nats": map[string]any{"syncInterval": "always"}})
	require.NotNil(t, r.sts)
	require.Nil(t, r.pdb)
	require.Equal(t, "a-token", string(r.secret.Data["api-token"]))
	require.Equal(t, "n-token", string(r.secret.Data["nats-token"]))
	c := vigilConfig(t, r, "site-vigil-0")
	require.False(t, c.NATS.Clustered())
	require.Equal(t, 1, c.NATS.Replicas)
	require.True(t, c.NATS.SyncAlways())
}

// helm lint (the SDK's lint package, as the helm CLI runs it): no error
// and no warning, with the default values and with a GPU value set.
func TestChartLint(t *testing.T) {
	for _, vals := range []map[string]any{nil, {"gpu": map[string]any{"enabled": true}, "nats": map[string]any{"url": "nats://n:4222"}}} {
		l := lint.All(chartDir, vals, "video", false)
		for _, m := range l.Messages {
			t.Logf("helm lint: %s", m)
			require.Less(t, m.Severity, support.WarningSev, "helm lint: %s", m)
		}
	}
}
