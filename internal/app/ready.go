package app

import "errors"

// ready is /readyz's hook (api.Options.Ready): a node is ready once its
// NATS connection is up and the registry watch has read every stream,
// so each stream it runs has been started (its supervisor launched;
// whether the camera answers is the stream's own status, not the
// node's), and it holds its leases or can take some (cluster.Node.Ready:
// its entry in the lease bucket is current and it is not draining).
func (s *service) ready() error {
	if st := s.sink.State(); !st.Connected {
		return errors.New("NATS unreachable")
	}
	if !s.synced.Load() {
		return errors.New("stream registry not read yet")
	}
	return s.node.Ready()
}
