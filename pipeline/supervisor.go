package pipeline

import (
	"context"
	"errors"
	"sort"
	"sync"
)

// Supervisor runs a changing set of streams: it starts what is added, stops
// what is removed, restarts a stream only when its version changes, and
// never touches the others. Each stream runs in its own goroutine under
// its own context, so a stream that fails (or panics) stops alone.
type Supervisor struct {
	ctx     context.Context
	mu      sync.Mutex
	streams map[string]*supervised
	wg      sync.WaitGroup
}

type supervised struct {
	version string
	status  *Status
	cancel  context.CancelCauseFunc
	done    chan struct{} // closed when RunStream returned; nil if not running
}

// Reasons a supervised stream stops, given as the cancel cause and shown
// as the reason of its stopped event.
var (
	ErrRemoved     = errors.New("removed")
	ErrDisabled    = errors.New("disabled")
	ErrReconfigure = errors.New("restarting with a new configuration")
	// ErrHandedOver: the node gave up the stream's lease (a drain, a
	// shutdown, the placer moving it) or lost it; the stream stays in the
	// registry and runs, or will run, on another node.
	ErrHandedOver = errors.New("handed over")
)

// NewSupervisor returns a supervisor whose streams all stop when ctx ends.
func NewSupervisor(ctx context.Context) *Supervisor {
	return &Supervisor{ctx: ctx, streams: map[string]*supervised{}}
}

// Apply makes stream id run the configuration that build returns, tagged
// with version (any string that changes when the configuration does). If
// the stream already runs that version, nothing happens. Otherwise the old
// instance is stopped (and waited for) and build is called with the
// stream's Status; a build error marks the stream failed with that reason
// without running it. A nil build stores the stream as stopped (disabled).
// Apply returns whether it (re)started or reconfigured the stream.
func (s *Supervisor) Apply(id, version string, build func(*Status) (StreamConfig, error)) bool {
	s.mu.Lock()
	old := s.streams[id]
	if old != nil && old.version == version {
		s.mu.Unlock()
		return false
	}
	s.mu.Unlock()
	if old != nil {
		cause := ErrReconfigure
		if build == nil {
			cause = ErrDisabled
		}
		old.stop(cause)
	}
	sv := &supervised{version: version, status: NewStatus(StateStarting)}
	if build == nil {
		sv.status.set(StateStopped, "disabled")
	} else if cfg, err := build(sv.status); err != nil {
		sv.status.Fail(err.Error())
	} else if s.ctx.Err() == nil {
		cfg.Status = sv.status
		ctx, cancel := context.WithCancelCause(s.ctx)
		sv.cancel, sv.done = cancel, make(chan struct{})
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer close(sv.done)
			_ = RunStream(ctx, cfg) // the outcome is in sv.status
		}()
	}
	s.mu.Lock()
	s.streams[id] = sv
	s.mu.Unlock()
	return true
}

// Remove stops stream id, waits for it, and forgets it. It reports whether
// the stream was known. Its stopped event's reason is ErrRemoved.
func (s *Supervisor) Remove(id string) bool {
	return s.RemoveFor(id, ErrRemoved)
}

// RemoveFor is Remove with cause as the reason of the stream's stopped
// event (ErrHandedOver when the stream leaves this node but not the
// registry).
func (s *Supervisor) RemoveFor(id string, cause error) bool {
	s.mu.Lock()
	sv := s.streams[id]
	delete(s.streams, id)
	s.mu.Unlock()
	if sv == nil {
		return false
	}
	sv.stop(cause)
	return true
}

func (sv *supervised) stop(cause error) {
	if sv.cancel != nil {
		sv.cancel(cause)
		<-sv.done
	}
}

// Status returns a stream's status; false if the stream is unknown.
func (s *Supervisor) Status(id string) (StatusSnapshot, bool) {
	s.mu.Lock()
	sv := s.streams[id]
	s.mu.Unlock()
	if sv == nil {
		return StatusSnapshot{}, false
	}
	return sv.status.Snapshot(), true
}

// TakeAlert returns and resets stream id's drops and budget misses not yet
// alerted (see Status.TakeAlert); zero for an unknown stream.
func (s *Supervisor) TakeAlert(id string) (map[DropReason]int, int) {
	s.mu.Lock()
	sv := s.streams[id]
	s.mu.Unlock()
	if sv == nil {
		return nil, 0
	}
	return sv.status.TakeAlert()
}

// SetDegraded switches stream id to (or back from) its degraded frame rate;
// it reports whether that changed anything.
func (s *Supervisor) SetDegraded(id string, on bool) bool {
	s.mu.Lock()
	sv := s.streams[id]
	s.mu.Unlock()
	return sv != nil && sv.status.degraded.Swap(on) != on
}

// SetLight switches stream id to (or back from) its lighter model
// (StreamConfig.Light; without one the flag is kept but changes nothing);
// it reports whether that changed anything.
func (s *Supervisor) SetLight(id string, on bool) bool {
	s.mu.Lock()
	sv := s.streams[id]
	s.mu.Unlock()
	return sv != nil && sv.status.SetLight(on)
}

// QueueDepth returns the frames waiting in every stream's queue.
func (s *Supervisor) QueueDepth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sv := range s.streams {
		n += int(sv.status.queueDepth.Load())
	}
	return n
}

// IDs returns the supervised stream ids, sorted.
func (s *Supervisor) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.streams))
	for id := range s.streams {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Wait blocks until every stream goroutine has returned (after the
// supervisor's context ended, or after Remove of each).
func (s *Supervisor) Wait() { s.wg.Wait() }
