package decode

import (
	"strings"

	"github.com/asticode/go-astiav"
	"go.uber.org/zap"

	"github.com/vigil-video/vigil/internal/redact"
)

// SetLogger routes FFmpeg's log (av_log, process-wide) into l, named
// "ffmpeg": FFmpeg errors become zap warnings and FFmpeg warnings zap debug
// lines, because FFmpeg warns about recoverable stream quirks (packed
// B-frames, a corrupt packet) on every open of a looping file. Messages
// below AV_LOG_WARNING are not produced at all. A nil l silences FFmpeg.
// Call it once at start-up, before opening sources.
func SetLogger(l *zap.Logger) {
	if l == nil {
		astiav.SetLogLevel(astiav.LogLevelQuiet)
		return
	}
	l = l.Named("ffmpeg")
	astiav.SetLogLevel(astiav.LogLevelWarning)
	astiav.SetLogCallback(func(_ astiav.Classer, lvl astiav.LogLevel, _, msg string) {
		// FFmpeg names URLs in some messages; they go through the same
		// redaction as everything else vigil prints.
		msg = redact.Text(strings.TrimSpace(msg))
		if msg == "" {
			return
		}
		if lvl <= astiav.LogLevelError {
			l.Warn(msg)
		} else {
			l.Debug(msg)
		}
	})
}
