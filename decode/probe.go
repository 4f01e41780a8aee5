package decode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/vigil-video/vigil/pipeline"
)

// ProbeSize opens the source o names and returns its first decoded frame's
// width and height in pixels, giving up after timeout (o's open and stall
// timeouts; a context deadline 2 s later is the backstop). Errors: o's
// (New's), the open's or the decode's, an input that ends before its first
// video frame, or no frame within timeout. `vigil shapes --probe` reads
// registered streams' resolutions with it and `vigil bench --streams`
// checks that its --source is video FFmpeg decodes.
func ProbeSize(ctx context.Context, o Options, timeout time.Duration) (w, h int, err error) {
	o.OpenTimeout, o.StallTimeout = timeout, timeout
	src, err := New(o)
	if err != nil {
		return 0, 0, err
	}
	// The source's own open timeout fires first, with a message naming
	// the step; this one is the backstop.
	ctx, cancel := context.WithTimeout(ctx, timeout+2*time.Second)
	defer cancel()
	err = src.Run(ctx, func(f *pipeline.Frame) {
		if w == 0 {
			w, h = f.Image.Width(), f.Image.Height()
			cancel()
		}
		f.Image.Release()
	})
	switch {
	case w > 0:
		return w, h, nil
	case errors.Is(err, io.EOF):
		return 0, 0, errors.New("no video frame before the end of the input")
	case errors.Is(err, context.DeadlineExceeded):
		return 0, 0, fmt.Errorf("no frame within %s", timeout)
	}
	return 0, 0, err
}
