package decode

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/vigil-video/vigil/pipeline"
)

// FirstFrame decodes the first frame of an encoded picture or clip held in
// memory (a JPEG, for example) through FFmpeg on the CPU; the caller
// releases it. FFmpeg reads from a file, so the bytes go through a
// temporary one, removed before FirstFrame returns. Errors: a temporary
// file that cannot be written, FFmpeg's, or no frame in the input.
func FirstFrame(b []byte) (pipeline.Image, error) {
	f, err := os.CreateTemp("", "vigil-frame-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		return nil, err
	}
	s, err := New(Options{URL: f.Name()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var img pipeline.Image
	err = s.Run(ctx, func(fr *pipeline.Frame) {
		if img == nil {
			img = fr.Image
			cancel()
			return
		}
		fr.Image.Release()
	})
	if img == nil {
		return nil, fmt.Errorf("decoding an in-memory picture: no frame (%v)", err)
	}
	return img, nil
}
