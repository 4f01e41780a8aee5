package pipeline

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"
)

// Stats keeps the per-stream numbers behind the progress line: frames in
// (decoded) and out (published), drops (faults), skips (policy), detections
// and end-to-end latency samples, reset at every Snapshot. It is safe for concurrent use.
type Stats struct {
	mu      sync.Mutex
	streams map[string]*streamStats
	last    time.Time
}

type streamStats struct {
	in, out, dropped, skipped, dets int
	buffered                        int             // of out: held by the sink (Result.Buffered)
	lat                             []time.Duration // Total latencies since the last snapshot
}

// maxLatencySamples bounds memory per stream between two snapshots; at
// 30 fps and a 5 s interval 150 samples are taken, so the bound only bites
// at very high rates, where a uniform prefix still estimates P99 well.
const maxLatencySamples = 8192

// NewStats returns empty statistics whose first interval starts now.
func NewStats() *Stats {
	return &Stats{streams: map[string]*streamStats{}, last: time.Now()}
}

func (s *Stats) get(id string) *streamStats {
	st := s.streams[id]
	if st == nil {
		st = &streamStats{}
		s.streams[id] = st
	}
	return st
}

func (s *Stats) addIn(id string) {
	s.mu.Lock()
	s.get(id).in++
	s.mu.Unlock()
}

func (s *Stats) addDrop(id string) {
	s.mu.Lock()
	s.get(id).dropped++
	s.mu.Unlock()
}

func (s *Stats) addSkip(id string) {
	s.mu.Lock()
	s.get(id).skipped++
	s.mu.Unlock()
}

func (s *Stats) addOut(id string, total time.Duration, dets int, buffered bool) {
	s.mu.Lock()
	st := s.get(id)
	st.out++
	if buffered {
		st.buffered++
	}
	st.dets += dets
	if len(st.lat) < maxLatencySamples {
		st.lat = append(st.lat, total)
	}
	s.mu.Unlock()
}

// Register makes a stream appear in snapshots (with zeros) before its
// first frame, so a camera that never delivers shows as 0 fps.
func (s *Stats) Register(id string) {
	s.mu.Lock()
	s.get(id)
	s.mu.Unlock()
}

// Remove forgets a stream (it was removed or disabled).
func (s *Stats) Remove(id string) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

// StreamSnapshot is one stream's numbers over one interval.
type StreamSnapshot struct {
	ID string
	// FPSIn and FPSOut are decoded and published frames per second;
	// FPSBuffered is the part of FPSOut the sink held without sending
	// (Result.Buffered: NATS disconnected).
	FPSIn, FPSOut, FPSBuffered float64
	// P50 and P99 are end-to-end latency percentiles (arrival to publish),
	// nearest-rank over the interval's samples; zero without samples.
	P50, P99 time.Duration
	// DetsPerSec is detections published per second.
	DetsPerSec float64
	// In, Out, Dropped and Skipped count decoded, published, lost
	// (DropReason) and skipped (SkipReason) frames in the interval;
	// Buffered counts the published ones the sink held.
	In, Out, Dropped, Skipped, Buffered int
}

// Snapshot returns every stream's numbers since the previous Snapshot (or
// NewStats), sorted by id, and starts a new interval.
func (s *Stats) Snapshot() []StreamSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	secs := now.Sub(s.last).Seconds()
	s.last = now
	if secs <= 0 {
		secs = 1e-9
	}
	out := make([]StreamSnapshot, 0, len(s.streams))
	for id, st := range s.streams {
		snap := StreamSnapshot{
			ID: id, FPSIn: float64(st.in) / secs, FPSOut: float64(st.out) / secs, FPSBuffered: float64(st.buffered) / secs,
			DetsPerSec: float64(st.dets) / secs, In: st.in, Out: st.out, Dropped: st.dropped, Skipped: st.skipped, Buffered: st.buffered,
		}
		snap.P50, snap.P99 = Percentile(st.lat, 50), Percentile(st.lat, 99)
		out = append(out, snap)
		*st = streamStats{lat: st.lat[:0]}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of d,
// or 0 for an empty slice. It sorts a copy; d is not modified.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	c := slices.Clone(d)
	slices.Sort(c)
	rank := int(p/100*float64(len(c)) + 0.999999) // ceil
	rank = min(max(rank, 1), len(c))
	return c[rank-1]
}

// WriteProgress writes one line per stream, e.g.
//
//	cam1  in 24.0 fps  out 24.0 fps  p50 12.1 ms  p99 19.8 ms  1.0 det/s  dropped 0
//
// A stream whose sink held results without sending them (Buffered) says so
// after its out rate, with held, the reason the sink gives (e.g. "NATS down
// 12 s"; may be empty):
//
//	cam1  in 24.0 fps  out 24.0 fps (24.0 buffered, NATS down 12 s)  p50 ...
//
// A stream that skipped frames by policy in the interval (fps_limit,
// degraded rate, connect catch-up) ends its line with "skipped N": those are not lost.
// A stream that published nothing in the interval (down, reconnecting,
// or not started) has no latency to show: its p50 and p99 read "–", not a
// 0.0 ms that would look healthy.
func WriteProgress(w io.Writer, snaps []StreamSnapshot, held string) {
	for _, s := range snaps {
		out := ""
		if s.Buffered > 0 {
			out = fmt.Sprintf(" (%.1f buffered", s.FPSBuffered)
			if held != "" {
				out += ", " + held
			}
			out += ")"
		}
		p50, p99 := fmt.Sprintf("%6.1f", ms(s.P50)), fmt.Sprintf("%6.1f", ms(s.P99))
		if s.Out == 0 {
			p50, p99 = "     –", "     –"
		}
		fmt.Fprintf(w, "%-16s in %5.1f fps  out %5.1f fps%s  p50 %s ms  p99 %s ms  %5.1f det/s  dropped %d",
			s.ID, s.FPSIn, s.FPSOut, out, p50, p99, s.DetsPerSec, s.Dropped)
		if s.Skipped > 0 {
			fmt.Fprintf(w, "  skipped %d", s.Skipped)
		}
		fmt.Fprintln(w)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
