package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// acceptedPair returns a connection as rawListener accepts it (its socket
// a lazySock) and its client.
func acceptedPair(t *testing.T) (*sockConn, *lazySock, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := newRawListener(ln)
	defer rl.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := rl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	sc := c.(*sockConn)
	return sc, sc.Conn.(*acceptedConn).s, client
}

// fdOpen reports whether the descriptor fd is open.
func fdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// A connection whose input is there when it reads and whose output fits
// the socket never joins the runtime's poller: that is what a new
// connection saves (no os.NewFile, no epoll_ctl, no announced close).
func TestLazySockJoinsThePollerOnlyToWait(t *testing.T) {
	sc, s, client := acceptedPair(t)
	if _, err := client.Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	waitUntil(t, "readable", func() bool { return fdPending(s.fd) })
	if n, err := sc.Read(buf); err != nil || string(buf[:n]) != "GET" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if _, err := sc.Write([]byte("200")); err != nil {
		t.Fatal(err)
	}
	if s.polled.Load() != nil {
		t.Fatal("the socket joined the poller without waiting")
	}
	// Nothing to read: the read waits, in the poller, for what comes.
	go func() {
		time.Sleep(20 * time.Millisecond)
		client.Write([]byte("next"))
	}()
	if n, err := sc.Read(buf); err != nil || string(buf[:n]) != "next" {
		t.Fatalf("Read after a wait = %q, %v", buf[:n], err)
	}
	if s.polled.Load() == nil {
		t.Fatal("a read waited outside the poller")
	}
	// The peer's close is EOF, and the close sends a FIN.
	client.(*net.TCPConn).CloseWrite()
	if _, err := sc.Read(buf); err != io.EOF {
		t.Fatalf("Read after the client's FIN: %v; want EOF", err)
	}
	fd := s.fd
	if err := sc.Close(); err != nil {
		t.Fatal(err)
	}
	if fdOpen(fd) {
		t.Fatal("Close left the descriptor open")
	}
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(client); string(b) != "200" || err != nil {
		t.Fatalf("client read %q, %v; want the answer, then EOF", b, err)
	}
}

// A deadline set before the socket joins the poller holds: at once when
// it has passed, and for the wait that makes it join.
func TestLazySockDeadlines(t *testing.T) {
	sc, s, _ := acceptedPair(t)
	sc.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := sc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v; want a timeout", err)
	}
	if s.polled.Load() != nil {
		t.Fatal("a read past its deadline joined the poller")
	}
	sc.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := sc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read that waits past its deadline: %v; want a timeout", err)
	}
	// Once in the poller, a deadline in the past wakes a waiting read
	// (the drain's wake-up), and a close interrupts one.
	readWakes(t, sc, func(err error) bool { return err != nil })
}

// A Close that comes while the descriptor is in use (the drain closing a
// connection its goroutine is reading) closes it when that use ends, never
// under it: the number could go to another connection meanwhile.
func TestLazySockCloseWaitsForTheUse(t *testing.T) {
	for _, polled := range []bool{false, true} {
		_, s, _ := acceptedPair(t)
		if polled {
			if _, err := s.poll(); err != nil {
				t.Fatal(err)
			}
		}
		if !s.hold() {
			t.Fatal("hold failed on an open socket")
		}
		if err := s.close(true); err != nil {
			t.Fatal(err)
		}
		if !fdOpen(s.fd) {
			t.Fatalf("polled=%v: the close did not wait for the use under way", polled)
		}
		if s.hold() {
			t.Fatalf("polled=%v: a use began after the close", polled)
		}
		if err := s.Control(func(uintptr) {}); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Control after the close: %v; want net.ErrClosed", err)
		}
		s.release()
		if fdOpen(s.fd) {
			t.Fatalf("polled=%v: the last use left the descriptor open", polled)
		}
		if err := s.close(true); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a second close: %v; want net.ErrClosed", err)
		}
	}
}

// Reads, writes and closes from several goroutines at once (a tunnel's two
// directions and the drain): run with -race.
func TestLazySockConcurrentClose(t *testing.T) {
	for range 50 {
		sc, _, client := acceptedPair(t)
		var wg sync.WaitGroup
		wg.Go(func() {
			buf := make([]byte, 64)
			for {
				if _, err := sc.Read(buf); err != nil {
					return
				}
			}
		})
		wg.Go(func() { io.Copy(io.Discard, client) })
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				client.Write([]byte("x"))
				if _, err := sc.Conn.Write([]byte("y")); err != nil {
					return
				}
			}
		})
		wg.Go(func() { sc.Close() })
		wg.Go(func() { sc.SetDeadline(time.Now().Add(time.Second)) })
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a use of the socket outlived its close")
		}
		client.Close()
	}
}
