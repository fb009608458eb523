package accept

import (
	"net"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// flakyListener fails its first accepts with EMFILE, then accepts, then
// reports itself closed.
type flakyListener struct {
	net.Listener
	mu       sync.Mutex
	failures int
	conns    int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.failures > 0:
		l.failures--
		return nil, &net.OpError{Op: "accept", Err: syscall.EMFILE}
	case l.conns > 0:
		l.conns--
		a, b := net.Pipe()
		b.Close()
		return a, nil
	}
	return nil, net.ErrClosed
}

func TestLoopOutlivesEMFILE(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ln := &flakyListener{failures: 6, conns: 3}
	handled := 0
	Loop(ln, zap.New(core), "web", func(c net.Conn) { handled++; c.Close() })
	if handled != 3 {
		t.Fatalf("handled %d connections after 6 EMFILEs, want 3", handled)
	}
	if n := logs.FilterMessage("accept failing; retrying").Len(); n != 1 {
		t.Errorf("%d failure logs for a burst of 6 within a second, want 1 (rate-limited)", n)
	}
	rec := logs.FilterMessage("accept recovered").All()
	if len(rec) != 1 || rec[0].ContextMap()["failedSinceLastLog"] != int64(5) {
		t.Errorf("recovery log: %v", rec)
	}
}
