package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// queued returns how many connections wait in ln's accept queue: a
// listening socket's TCP_INFO says so in tcpi_unacked.
func queued(t *testing.T, ln *net.TCPListener) int {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var gerr error
	rc.Control(func(fd uintptr) {
		var info *unix.TCPInfo
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if gerr == nil {
			n = int(info.Unacked)
		}
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return n
}

// until polls cond every millisecond for up to 5 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// stopWithQueue starts an acceptor on a gated rawListener, holds its
// accept loop in the handler of a first connection while three more wait
// in the kernel's queue, and stops it with sweep. It returns the clients
// of the queued connections and what the acceptor handed over after the
// first.
func stopWithQueue(t *testing.T, paused, sweep bool) (clients []net.Conn, handled []net.Conn, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	tl := ln.(*net.TCPListener)
	g := newGatedListener(newRawListener(ln), false)
	var (
		mu      sync.Mutex
		first   = make(chan struct{})
		release = make(chan struct{})
	)
	var acc acceptor
	acc.start(&Proxy{log: zap.NewNop()}, "web", []net.Listener{g}, func(c net.Conn) {
		t.Cleanup(func() { c.Close() })
		mu.Lock()
		n := len(handled)
		handled = append(handled, c)
		mu.Unlock()
		if n == 0 {
			close(first)
			<-release
		}
	})
	dial := func() net.Conn {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	<-first
	for range 3 {
		clients = append(clients, dial())
	}
	until(t, "three connections queued", func() bool { return queued(t, tl) == 3 })
	if paused {
		g.setPaused(true)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		acc.stop(sweep)
	}()
	// The accept loop is held in the first handler: release it only once
	// the stop has begun, so that it cannot take the queued ones itself.
	until(t, "the stop to begin", func() bool {
		select {
		case <-g.closed:
			return true
		default:
			return false
		}
	})
	close(release)
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	return clients, handled[1:], addr
}

// A final stop (baton stops: the listening socket closes for good) takes
// the connections the kernel has already queued and hands them over
// before the close; the close alone would reset them, which a client sees
// as a connection accepted and then dropped. After it a connection is
// refused, which a client or a load balancer can act on.
func TestAcceptorSweepsTheQueueAtAFinalStop(t *testing.T) {
	clients, handled, addr := stopWithQueue(t, false, true)
	if len(handled) != 3 {
		t.Fatalf("handed over %d queued connections, want 3", len(handled))
	}
	for i, c := range clients {
		if _, err := io.WriteString(c, "x"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		handled[i].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(handled[i], buf); err != nil {
			t.Errorf("queued connection %d: %v", i, err)
		}
	}
	if _, err := net.Dial("tcp4", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after the stop: %v, want connection refused", err)
	}
}

// Without the sweep (a handoff: the sockets stay open for the next
// generation) nothing queued is taken; here, where this was the socket's
// last holder, the kernel resets them: what the sweep exists for. A paused
// socket is not swept either: its queue is another generation's.
func TestAcceptorLeavesTheQueueWithoutSweep(t *testing.T) {
	for _, tc := range []struct {
		name          string
		paused, sweep bool
	}{{"handoff", false, false}, {"paused", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			clients, handled, _ := stopWithQueue(t, tc.paused, tc.sweep)
			if len(handled) != 0 {
				t.Fatalf("handed over %d queued connections, want none", len(handled))
			}
			c := clients[0]
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("queued connection after the close: %v, want connection reset", err)
			}
		})
	}
}
