package proxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rawPair listens on network's loopback with a rawListener, dials it and
// returns the accepted sockConn and the client's end.
func rawPair(t *testing.T, network, addr string) (*sockConn, net.Conn, *rawListener) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	rl, ok := newRawListener(ln).(*rawListener)
	if !ok {
		t.Fatal("newRawListener did not wrap a TCP listener")
	}
	t.Cleanup(func() { rl.Close() })
	client, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := rl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*sockConn), client, rl
}

func sockoptInt(t *testing.T, c syscall.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// The accepted connection carries the client's address, reads and writes
// both ways, half-closes, and says where it was accepted.
func TestRawListenerAccept(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tc.network, func(t *testing.T) {
			c, client, rl := rawPair(t, tc.network, tc.addr)
			if got, want := c.RemoteAddr().String(), client.LocalAddr().String(); got != want {
				t.Errorf("RemoteAddr = %s, want the client's %s", got, want)
			}
			if got, want := c.LocalAddr().String(), rl.Addr().String(); got != want {
				t.Errorf("LocalAddr = %s, want %s", got, want)
			}
			client.Write([]byte("ping"))
			buf := make([]byte, 8)
			if n, err := c.Read(buf); err != nil || string(buf[:n]) != "ping" {
				t.Fatalf("Read = %q, %v", buf[:n], err)
			}
			if _, err := c.Write([]byte("pong")); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(client); err != nil || string(b) != "pong" {
				t.Fatalf("client read %q, %v; want pong then EOF", b, err)
			}
		})
	}
}

// Closing the listener ends a waiting Accept with net.ErrClosed, which ends
// accept loops; a deadline ends it with os.ErrDeadlineExceeded, which the
// canary's pause relies on.
func TestRawListenerCloseAndDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := newRawListener(ln).(*rawListener)
	rl.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := rl.Accept(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Accept past the deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	rl.SetDeadline(time.Time{})
	done := make(chan error)
	go func() {
		_, err := rl.Accept()
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Accept wait (a close before it is the same result)
	rl.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still waits after Close")
	}
}

// TCP_NODELAY is off for a connection's first write and on from its
// second; keep-alive is off at accept, and keepAlive turns it on (a TCP
// stream's after keepAliveAfter, a tunnel's as it starts).
func TestRawListenerSocketOptions(t *testing.T) {
	c, client, _ := rawPair(t, "tcp", "127.0.0.1:0")
	if sockoptInt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY) != 0 {
		t.Fatal("TCP_NODELAY set at accept")
	}
	if sockoptInt(t, c, unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 0 {
		t.Fatal("keep-alive set at accept")
	}
	go io.Copy(io.Discard, client)
	c.Write([]byte("one"))
	if sockoptInt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY) != 0 {
		t.Fatal("TCP_NODELAY set after one write")
	}
	c.Write([]byte("two"))
	if sockoptInt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY) == 0 {
		t.Fatal("TCP_NODELAY not set by the second write")
	}

	keepAlive(c)
	if sockoptInt(t, c, unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 1 || sockoptInt(t, c, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE) != 15 {
		t.Fatal("keepAlive did not turn keep-alive on (15 s)")
	}
}

// With deferAccept, a connection is handed over once its first bytes came:
// Accept does not return for a silent one, and the request is there at
// the first read.
func TestDeferAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deferAccept(ln, true)
	if sockoptInt(t, ln.(*net.TCPListener), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT) == 0 {
		t.Fatal("TCP_DEFER_ACCEPT not set")
	}
	rl := newRawListener(ln).(*rawListener)
	defer rl.Close()
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	rl.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if c, err := rl.Accept(); err == nil {
		c.Close()
		t.Fatal("a connection that sent nothing was accepted at once")
	}
	rl.SetDeadline(time.Time{})
	talker, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer talker.Close()
	talker.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	var c net.Conn
	for c == nil {
		a, err := rl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		// The silent one comes too once its second is over (on a slow
		// machine, maybe first): only the one that spoke matters here.
		if a.RemoteAddr().String() == talker.LocalAddr().String() {
			c = a
		}
	}
	if !pendingInput(c) {
		t.Fatal("the accepted connection's request is not there yet")
	}
	deferAccept(ln, false)
	if sockoptInt(t, ln.(*net.TCPListener), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT) != 0 {
		t.Fatal("TCP_DEFER_ACCEPT not cleared")
	}
}

// dialRaw connects as net.Dialer does, to IPv4 and IPv6 addresses, with
// TCP_NODELAY left for the second write and the addresses known; a port
// nobody listens on is a connect error (ECONNREFUSED), and a name is left
// to the caller.
func TestDialRaw(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := map[string]string{"tcp4": "127.0.0.1:0", "tcp6": "[::1]:0"}[network]
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Skipf("listen %s: %v", network, err)
		}
		defer ln.Close()
		c, ok, err := dialRaw(netip.MustParseAddrPort(ln.Addr().String()), 5*time.Second)
		if !ok || err != nil {
			t.Fatalf("%s: dialRaw %v %v", network, ok, err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if c.RemoteAddr().String() != ln.Addr().String() || c.LocalAddr().String() != s.RemoteAddr().String() {
			t.Errorf("%s: addresses %s -> %s, the server saw %s -> %s", network, c.LocalAddr(), c.RemoteAddr(), s.RemoteAddr(), ln.Addr())
		}
		if sockoptInt(t, c, unix.IPPROTO_TCP, unix.TCP_NODELAY) != 0 || sockoptInt(t, c, unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 0 {
			t.Errorf("%s: TCP_NODELAY or keep-alive set at connect", network)
		}
		go s.Write([]byte("hello"))
		buf := make([]byte, 5)
		c.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
			t.Errorf("%s: read %q %v", network, buf, err)
		}
	}
	ln, _ := net.Listen("tcp4", "127.0.0.1:0")
	free := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	if _, ok, err := dialRaw(free, 5*time.Second); !ok || !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("a closed port: %v %v, want ECONNREFUSED", ok, err)
	}
	if _, ok, _ := dialRaw(netip.AddrPort{}, time.Second); ok { // "localhost:80" parses to none
		t.Error("a name was dialled: the caller resolves names")
	}
}

// A socket the worker helps with (ipc.ListenerInfo.Helps) is its owner's
// first: the helper takes one connection a wake-up, so that it takes what
// would wait for a busy or stopped owner without taking a whole burst,
// none while it lacks room, and all of them at the final sweep.
func TestRawListenerHelps(t *testing.T) {
	var room atomic.Bool
	rl, dial := helpedListener(t, &room, time.Hour) // no look: TestRawListenerHelperLooksAgain
	// takeAll accepts until the wait passes its deadline.
	takeAll := func() int {
		t.Helper()
		rl.SetDeadline(time.Now().Add(200 * time.Millisecond))
		defer rl.SetDeadline(time.Time{})
		for n := 0; ; n++ {
			c, err := rl.Accept()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}
	const queued = 4
	for range queued {
		dial()
	}
	// The four arrived before the first wait: one wake-up (the socket's
	// readiness when it joined the poller), so at most two are taken, the
	// one before the wait and the one after it.
	taken := takeAll()
	if taken < 1 || taken > 2 {
		t.Fatalf("helper took %d of %d queued connections with no new arrival, want 1 or 2", taken, queued)
	}
	dial() // a new arrival wakes the helper: it takes one more
	if n := takeAll(); n != 1 {
		t.Fatalf("helper took %d connections after one arrival, want 1", n)
	}
	room.Store(false) // past half of http.maxConnections: none
	dial()
	if n := takeAll(); n != 0 {
		t.Fatalf("helper without room took %d connections, want 0", n)
	}
	// The sweep (the socket closes for good) takes everything left.
	rl.stopWaiting()
	swept := 0
	rl.sweep(func(c net.Conn) { swept++; c.Close() })
	if left := queued + 2 - taken - 1; swept != left {
		t.Errorf("sweep took %d connections, want the %d left", swept, left)
	}
}

// A helper looks at a helped socket's queue again a while after it took a
// connection from it, arrival or not, and takes what the owner left there:
// an owner that is stopped (SIGSTOP, a debugger) or stuck would otherwise
// hold the connections queued when arrivals stopped.
func TestRawListenerHelperLooksAgain(t *testing.T) {
	var room atomic.Bool
	rl, dial := helpedListener(t, &room, 10*time.Millisecond)
	const queued = 4
	for range queued {
		dial()
	}
	rl.SetDeadline(time.Now().Add(10 * time.Second))
	for n := range queued {
		c, err := rl.Accept()
		if err != nil {
			t.Fatalf("helper took %d of %d connections left queued with no arrival: %v", n, queued, err)
		}
		c.Close()
	}
	// Without room the look takes nothing, and the wait ends at the
	// deadline SetDeadline set, not at the look's.
	room.Store(false)
	dial()
	rl.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if c, err := rl.Accept(); !errors.Is(err, os.ErrDeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("helper without room: Accept = %v, want the deadline exceeded", err)
	}
}

// helpedListener returns a rawListener on a new loopback socket that
// helps (room says whether the worker has room, and starts true), looking
// again lookAfter after each connection it takes, and a dial that makes
// a connection to it, closed when the test ends.
func helpedListener(t *testing.T, room *atomic.Bool, lookAfter time.Duration) (*rawListener, func()) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := newRawListener(ln).(*rawListener)
	t.Cleanup(func() { rl.Close() })
	room.Store(true)
	rl.helping, rl.lookAfter = room.Load, lookAfter
	return rl, func() {
		t.Helper()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
}
