// Package natsserver starts the embedded NATS server (nats-server/v2) that
// vigil uses when no external nats.url is configured.
package natsserver

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs an in-process NATS server listening on listen ("host:port";
// port 0 picks a free port) and waits up to 10 s for it to accept clients.
// When storeDir is not empty, JetStream is enabled with file storage there
// (the stream registry's key-value bucket lives in it). Shut it down with
// Shutdown and WaitForShutdown. When token is not empty every client must
// present it (nats.Token); otherwise the server accepts anyone who can
// reach listen, which is why the default address is loopback. Errors name
// the address or directory.
func Start(listen, storeDir, token string) (*server.Server, error) {
	host, portS, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS listen address %q: bad port: %w", listen, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	} else {
		// Fail at once on a port in use, rather than after the 10 s wait.
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, fmt.Errorf("embedded NATS cannot listen on %s: %w (is another vigil or NATS server running? set nats.listen)", listen, err)
		}
		ln.Close()
	}
	opts := &server.Options{
		ServerName: "vigil-embedded", Host: host, Port: port,
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20, Authorization: token,
	}
	if storeDir != "" {
		if err := os.MkdirAll(storeDir, 0o750); err != nil {
			return nil, fmt.Errorf("embedded NATS store directory: %w", err)
		}
		opts.JetStream, opts.StoreDir = true, storeDir
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("embedded NATS did not start listening on %s within 10 s (port in use?)", listen)
	}
	return s, nil
}
