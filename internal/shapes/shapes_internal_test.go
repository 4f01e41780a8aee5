package shapes

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vigil-video/vigil/infer"
	"github.com/vigil-video/vigil/internal/cli"
	"github.com/vigil-video/vigil/internal/config"
	"github.com/vigil-video/vigil/internal/natsserver"
	"github.com/vigil-video/vigil/internal/registry"
)

// Which rows are flagged, and what the suggestion says.
func TestShapeRowFlags(t *testing.T) {
	c := config.Default()
	c.Infer.BatchSizes = []int{1, 8}
	yolox := &modelInfo{m: infer.Model{Name: "yolox-nano", File: "/nonexistent/yolox_nano.onnx"}, shape: infer.Shape{Adapter: "yolox", InW: 416, InH: 416, Batch: 1}}
	blaze := &modelInfo{m: infer.Model{Name: "blazeface", File: "/nonexistent/face.onnx"}, shape: infer.Shape{Adapter: "blazeface", InW: 128, InH: 128, Batch: 1, Square: true}}
	for _, tc := range []struct {
		name     string
		s        shapeStream
		mi       *modelInfo
		maxWaste float64
		flags    []string
		sug      string // suggested WxH, "" for none
		note     string
	}{
		{"1080p wastes", shapeStream{id: "a", w: 1920, h: 1080}, yolox, 25, []string{FlagWaste}, "416x256", "needs a model exported at 416x256 (another engine; the yolox adapter"},
		{"1080p under a higher limit", shapeStream{id: "a", w: 1920, h: 1080}, yolox, 50, []string{}, "", ""},
		{"4:3 fits", shapeStream{id: "a", w: 640, h: 480}, yolox, 25, []string{}, "", ""},
		{"upscaled", shapeStream{id: "a", w: 320, h: 240}, yolox, 25, []string{FlagUpscale}, "416x320", "upscaled x1.30"},
		{"upscaled square", shapeStream{id: "a", w: 100, h: 100}, yolox, 25, []string{FlagUpscale}, "416x416", "no closer shape"},
		{"square-only adapter", shapeStream{id: "a", w: 720, h: 528}, blaze, 25, []string{FlagWaste}, "128x96", "square inputs only"},
		{"unknown", shapeStream{id: "a", note: "no frame yet"}, yolox, 25, []string{FlagUnknown}, "", ""},
		{"unreadable model", shapeStream{id: "a", w: 640, h: 480}, &modelInfo{m: infer.Model{Name: "m"}, err: errBoom}, 25, []string{FlagModel}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := shapeRow(&c, tc.s, "ref", tc.mi, true, tc.maxWaste)
			require.Equal(t, tc.flags, r.Flags)
			require.Equal(t, []int{1, 8}, r.BatchSizes)
			if tc.mi.err == nil {
				require.Equal(t, []int{8}, r.MissingBatchCopies, "no .b8 copy beside the model")
			}
			if tc.sug == "" {
				require.Nil(t, r.Suggestion)
				return
			}
			require.NotNil(t, r.Suggestion)
			require.Equal(t, tc.sug, itoa(r.Suggestion.Width)+"x"+itoa(r.Suggestion.Height))
			require.Contains(t, r.Suggestion.Note, tc.note)
		})
	}
}

var errBoom = errors.New("model m: unreadable")

func itoa(n int) string { return intsString([]int{n}) }

// A camera that accepts the connection and never answers is given up on
// at the probe's timeout, with a line that says so.
func TestProbeTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	out := probeStreams(context.Background(), []registry.Spec{{ID: "silent", URL: "rtsp://" + ln.Addr().String() + "/x"}}, nil, time.Second, 4)
	require.Less(t, time.Since(start), 5*time.Second)
	require.Zero(t, out[0].w)
	require.Contains(t, out[0].note, "probe: ")
	require.Contains(t, out[0].note, "timed out")
}

// --probe reads the registry from the vigil answering at nats.listen; a
// vigil whose server wants a token this config does not have refuses the
// connection, which is bad input that says so, not a silent fallback to
// opening the store (that vigil holds it); with the token, its registry
// is read.
func TestRegisteredSpecsToken(t *testing.T) {
	ns, err := natsserver.Start("127.0.0.1:0", t.TempDir(), "s3cret")
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	c := config.Default()
	c.DataDir = t.TempDir()
	c.NATS.Listen = ns.Addr().String()
	_, _, err = registeredSpecs(context.Background(), &c, "")
	require.True(t, cli.IsBadInput(err), "%v", err)
	require.ErrorContains(t, err, "the NATS server at "+c.NATS.Listen+" refused the token (set nats.token_file as that vigil does)")

	c.NATS.TokenFile = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(c.NATS.TokenFile, []byte("s3cret\n"), 0o600))
	specs, from, err := registeredSpecs(context.Background(), &c, "")
	require.NoError(t, err)
	require.Empty(t, specs)
	require.Equal(t, "registry on the running vigil's NATS at "+c.NATS.Listen+" (empty: config streams only)", from)
}
