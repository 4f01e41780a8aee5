package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/internal/api"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/engines"
	"github.com/vigil-video/vigil/internal/registry"
	"github.com/vigil-video/vigil/internal/testenv"
)

// A stream's analytics block is validated at registration: a
// self-intersecting polygon, a line whose ends are one point, a class the
// model does not have, a zone name that is not a subject token, a
// misspelt member and a bad duration are each answered 400 naming the
// field, on POST (nothing stored) and on PATCH (the stored spec and its
// revision unchanged). The classes are the model's own, read from its
// file (BlazeFace: face) as vigil run does.
func TestAnalyticsValidation(t *testing.T) {
	testenv.Model(t, "face_detection_front_128x128_barracuda.onnx")
	c := config.Default()
	srv, reg := newServerOptions(t, api.Options{Labels: func(m string) ([]string, error) { return engines.Labels(&c, m) }})
	srv.Start()
	call := func(method, path, body string) (int, api.Error) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e api.Error
		_ = json.Unmarshal(b, &e)
		return resp.StatusCode, e
	}
	const good = `{"zones":[{"name":"door","polygon":[[0,0],[100,0],[100,100]],"classes":["face"]}],` +
		`"lines":[{"name":"gate","a":[50,0],"b":[50,100],"classes":["face"]}],"tracker":{"lost_after":"3s"}}`
	code, e := call("POST", "/v1/streams", `{"id":"ok","url":"/tmp/x.avi","analytics":`+good+`}`)
	require.Equal(t, http.StatusCreated, code, e.Error)
	stored, err := reg.Get(context.Background(), "ok")
	require.NoError(t, err)
	require.Equal(t, "door", stored.Spec.Analytics.Zones[0].Name)

	for _, tc := range []struct {
		name, analytics, field, msg string
	}{
		{"self-intersecting polygon", `{"zones":[{"name":"bow","polygon":[[0,0],[100,100],[100,0],[0,100]]}]}`,
			"analytics.zones[0].polygon", "cross or touch"},
		{"a line with a == b", `{"lines":[{"name":"gate","a":[50,50],"b":[50,50]}]}`,
			"analytics.lines[0].b", "the same point as a"},
		{"an unknown class", `{"zones":[{"name":"door","polygon":[[0,0],[100,0],[100,100]],"classes":["face"]}],` +
			`"lines":[{"name":"gate","a":[50,0],"b":[50,100],"classes":["person"]}]}`,
			"analytics.lines[0].classes[0]", `"person": not a class of the model`},
		{"a zone name that is not a subject token", `{"zones":[{"name":"front.door","polygon":[[0,0],[100,0],[100,100]]}]}`,
			"analytics.zones[0].name", "want 1-64 characters"},
		{"a misspelt member", `{"zones":[{"name":"door","polygn":[[0,0],[100,0],[100,100]]}]}`,
			"analytics", `unknown field "polygn"`},
		{"a bad duration", `{"tracker":{"lost_after":"soon"}}`, "analytics", "is not a duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, e := call("POST", "/v1/streams", `{"id":"new","url":"/tmp/x.avi","analytics":`+tc.analytics+`}`)
			require.Equal(t, http.StatusBadRequest, code, e.Error)
			require.Equal(t, tc.field, e.Field)
			require.Contains(t, e.Error, tc.msg)
			_, err := reg.Get(context.Background(), "new")
			require.ErrorIs(t, err, registry.ErrNotFound, "nothing stored")

			code, e = call("PATCH", "/v1/streams/ok", `{"analytics":`+tc.analytics+`}`)
			require.Equal(t, http.StatusBadRequest, code, e.Error)
			require.Equal(t, tc.field, e.Field)
			now, err := reg.Get(context.Background(), "ok")
			require.NoError(t, err)
			require.Equal(t, stored.Revision, now.Revision, "the registry is unchanged")
			require.Equal(t, stored.Spec, now.Spec)
		})
	}

	// A merge patch replaces the lists it names and keeps the rest; null
	// removes the block.
	code, e = call("PATCH", "/v1/streams/ok", `{"analytics":{"lines":null}}`)
	require.Equal(t, http.StatusOK, code, e.Error)
	now, err := reg.Get(context.Background(), "ok")
	require.NoError(t, err)
	require.Empty(t, now.Spec.Analytics.Lines)
	require.Len(t, now.Spec.Analytics.Zones, 1)
	code, e = call("PATCH", "/v1/streams/ok", `{"analytics":null}`)
	require.Equal(t, http.StatusOK, code, e.Error)
	now, err = reg.Get(context.Background(), "ok")
	require.NoError(t, err)
	require.Nil(t, now.Spec.Analytics)
}
