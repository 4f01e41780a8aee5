package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/vigil-video/vigil/analytics"
	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/pipeline"
	"github.com/vigil-video/vigil/sinks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer runs the API over a real registry on an embedded NATS server
// with JetStream.
func newServer(t *testing.T, token string) (*httptest.Server, *registry.Registry) {
	t.Helper()
	return newServerOptions(t, api.Options{Token: token})
}

// newServerOptions is newServer with o (its Registry is set here).
func newServerOptions(t *testing.T, o api.Options) (*httptest.Server, *registry.Registry) {
	t.Helper()
	ns, err := natsserver.Start("127.0.0.1:0", t.TempDir(), "")
	require.NoError(t, err)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	reg, err := registry.Open(context.Background(), nc, "test_streams", 1)
	require.NoError(t, err)
	o.Registry = reg
	srv := httptest.NewUnstartedServer(api.New(o).Handler())
	t.Cleanup(func() {
		srv.Close()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return srv, reg
}

// The OpenAPI document describes exactly the routes the server handles.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))
	var documented, routed []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	for _, r := range api.Routes {
		routed = append(routed, r.Method+" "+r.Path)
	}
	sort.Strings(documented)
	sort.Strings(routed)
	require.Equal(t, routed, documented)

	// Every documented operation reaches a handler (no 404/405 from the
	// mux), and the served document is the embedded one.
	srv, _ := newServer(t, "")
	srv.Start()
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		req, _ := http.NewRequest(method, srv.URL+strings.ReplaceAll(path, "{id}", "nope"), strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NotEqual(t, http.StatusMethodNotAllowed, resp.StatusCode, op)
		if resp.StatusCode == http.StatusNotFound {
			require.Regexp(t, "stream not found|not part of a fleet|pictures are not served|event snapshots are off|not served by this vigil", string(b), "%s reached the handler", op)
		}
		if path == "/v1/openapi.json" {
			require.JSONEq(t, string(api.OpenAPI), string(b))
		}
	}
	resp, err := http.Get(srv.URL + "/v2/streams")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	// A known path with a method it does not serve is 405 with the
	// methods it does (RFC 9110, 15.5.6), as JSON like every error.
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/streams/cam1", "GET, PATCH, DELETE"},
		{"DELETE", "/v1/streams", "GET, POST"},
		{"GET", "/v1/nodes/n1/drain", "POST"},
		{"GET", "/v1/session", "POST, DELETE"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var e api.Error
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e), "%s %s", tc.method, tc.path)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"), "%s %s", tc.method, tc.path)
		require.Contains(t, e.Error, "method not allowed")
	}
}

// The Status schema documents exactly the members the API sends
// (pipeline.StatusSnapshot), and the spec schema exactly registry.Spec's,
// its analytics block included.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	for schema, typ := range map[string]reflect.Type{"Status": reflect.TypeOf(pipeline.StatusSnapshot{}), "StreamSpec": reflect.TypeOf(registry.Spec{}),
		"StreamList": reflect.TypeOf(api.StreamList{}), "NATSState": reflect.TypeOf(sinks.NATSState{}),
		"Analytics": reflect.TypeOf(analytics.Config{}), "Tracker": reflect.TypeOf(analytics.Tracker{}),
		"Zone": reflect.TypeOf(analytics.Zone{}), "Line": reflect.TypeOf(analytics.Line{})} {
		var fields, documented []string
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			fields = append(fields, name)
		}
		for p := range doc.Components.Schemas[schema].Properties {
			documented = append(documented, p)
		}
		sort.Strings(fields)
		sort.Strings(documented)
		require.Equal(t, fields, documented, schema)
	}
}

func TestBearerToken(t *testing.T) {
	srv, _ := newServer(t, "s3cret-token")
	srv.Start()
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", 401}, {"Bearer wrong", 401}, {"Basic czNjcmV0LXRva2Vu", 401}, {"Bearer s3cret-token", 200},
	} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/streams", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, tc.code, resp.StatusCode, tc.auth)
		if tc.code == 401 {
			require.Contains(t, string(b), `"field":"Authorization"`)
			require.NotContains(t, string(b), "s3cret")
		}
	}
}

func TestTLS(t *testing.T) {
	srv, _ := newServer(t, "")
	cert := selfSigned(t)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(srv.URL + "/v1/streams")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = http.Get(srv.URL + "/v1/streams") // default roots do not trust it
	require.Error(t, err)
}

func selfSigned(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vigil-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// PATCH is a JSON merge patch: given fields replace, null removes.
func TestPatchMerge(t *testing.T) {
	srv, reg := newServer(t, "")
	srv.Start()
	resp, err := http.Post(srv.URL+"/v1/streams", "application/json",
		strings.NewReader(`{"id":"p1","url":"/tmp/x.avi","labels":{"a":"1"},"priority":"low"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	req, _ := http.NewRequest("PATCH", srv.URL+"/v1/streams/p1", strings.NewReader(`{"priority":null,"fps_limit":5}`))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	e, err := reg.Get(context.Background(), "p1")
	require.NoError(t, err)
	require.Equal(t, "", e.Spec.Priority)
	require.Equal(t, 5.0, e.Spec.FPSLimit)
	require.Equal(t, "1", e.Spec.Labels["a"])
	require.Equal(t, "/tmp/x.avi", e.Spec.URL)

	// Objects merge recursively; null removes a member; merge-patch+json
	// is accepted; unknown members are refused even when null; a no-op
	// makes no new revision.
	patch := func(body, ct string) (int, string) {
		req, _ := http.NewRequest("PATCH", srv.URL+"/v1/streams/p1", strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	code, b := patch(`{"labels":{"a":null,"c":"d"}}`, "application/merge-patch+json")
	require.Equal(t, http.StatusOK, code, b)
	e2, err := reg.Get(context.Background(), "p1")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"c": "d"}, e2.Spec.Labels)
	code, b = patch(`{"status":null}`, "application/json")
	require.Equal(t, http.StatusBadRequest, code, b)
	require.Contains(t, b, `"field":"status"`)
	code, _ = patch(`null`, "application/json")
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = patch(`{"url":null}`, "application/json")
	require.Equal(t, http.StatusBadRequest, code, "url is required")
	code, _ = patch(`{"id":"p1"}`, "Application/JSON; charset=utf-8")
	require.Equal(t, http.StatusOK, code)
	e3, _ := reg.Get(context.Background(), "p1")
	require.Equal(t, e2.Revision, e3.Revision, "no-op: no new revision")
}

// A number its field cannot hold is a 400 naming the field, in words that
// say what to send: a fraction for a whole number ("want a number, got
// number 1.5" said nothing), one out of range (in a PATCH, 1e309 was "the
// body must be a JSON object", with no field).
func TestNumberErrorsNameTheField(t *testing.T) {
	srv, _ := newServer(t, "")
	srv.Start()
	do := func(method, path, body string) (int, api.Error) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var e api.Error
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	code, _ := do("POST", "/v1/streams", `{"id":"n1","url":"/tmp/x.avi"}`)
	require.Equal(t, http.StatusCreated, code)
	for _, tc := range []struct{ body, field, msg string }{
		{`{"queue_size":1.5}`, "queue_size", "queue_size: want a whole number, got 1.5"},
		{`{"queue_size":"4"}`, "queue_size", "queue_size: want a whole number, got string"},
		{`{"decode_threads":99999999999999999999}`, "decode_threads", "decode_threads: 99999999999999999999: out of range"},
		{`{"fps_limit":1e309}`, "fps_limit", "fps_limit: 1e309: out of range"},
		{`{"fps_limit":"5"}`, "fps_limit", "fps_limit: want a number, got string"},
	} {
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/streams", `{"id":"n2","url":"/tmp/x.avi",` + tc.body[1:]},
			{"PATCH", "/v1/streams/n1", tc.body},
		} {
			code, e := do(req.method, req.path, req.body)
			require.Equal(t, http.StatusBadRequest, code, "%s %s", req.method, tc.body)
			require.Equal(t, tc.field, e.Field, "%s %s: %s", req.method, tc.body, e.Error)
			require.Equal(t, tc.msg, e.Error, "%s %s", req.method, tc.body)
		}
	}
	// Still refused as before: a body that is not one JSON object.
	for _, body := range []string{`[1]`, `{} {}`, `{"fps_limit":`} {
		code, e := do("PATCH", "/v1/streams/n1", body)
		require.Equal(t, http.StatusBadRequest, code, body)
		require.Contains(t, e.Error, "the body must be a JSON object", body)
	}
}
