package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
)

// sockPair returns a sockConn and its peer, a plain TCP connection, on
// loopback.
func sockPair(t *testing.T) (*sockConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	sc, ok := newSockConn(c).(*sockConn)
	if !ok {
		t.Fatal("newSockConn did not wrap a TCP connection")
	}
	return sc, peer
}

func TestSockConnReadWrite(t *testing.T) {
	sc, peer := sockPair(t)
	// Reads wait for data, and return what came.
	go peer.Write([]byte("hello"))
	buf := make([]byte, 16)
	n, err := sc.Read(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read = %q, %v; want hello", buf[:n], err)
	}
	// A write larger than the socket buffers waits for room: the peer
	// receives every byte, in order.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
		got <- b
	}()
	if n, err := sc.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(big))
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("peer got %d bytes, not the %d written", len(b), len(big))
	}
	// The peer's close is EOF.
	peer.Close()
	if n, err := sc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed = %d, %v; want 0, EOF", n, err)
	}
}

func TestSockConnDeadlineAndClose(t *testing.T) {
	sc, _ := sockPair(t)
	sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := sc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v; want a timeout", err)
	}
	readWakes(t, sc, func(err error) bool { return errors.Is(err, net.ErrClosed) })
}

// readWakes checks that a deadline in the past interrupts a read of sc
// under way (the drain's wake-up), and that a close interrupts one too,
// with an error closed accepts.
func readWakes(t *testing.T, sc *sockConn, closed func(error) bool) {
	t.Helper()
	sc.SetReadDeadline(time.Time{})
	errc := make(chan error)
	go func() {
		_, err := sc.Read(make([]byte, 1))
		errc <- err
	}()
	time.AfterFunc(10*time.Millisecond, func() { sc.SetReadDeadline(time.Unix(1, 0)) })
	if err := <-errc; !isTimeout(err) {
		t.Fatalf("Read woken by a past deadline: %v; want a timeout", err)
	}
	sc.SetReadDeadline(time.Time{})
	go func() {
		_, err := sc.Read(make([]byte, 1))
		errc <- err
	}()
	time.AfterFunc(10*time.Millisecond, func() { sc.Close() })
	if err := <-errc; !closed(err) {
		t.Fatalf("Read of a closed connection: %v", err)
	}
}

// The held write goes out when the next Read starts, and that Read returns
// the answer: the request's last bytes are sent from inside the wait.
func TestSockConnHoldNext(t *testing.T) {
	sc, peer := sockPair(t)
	go func() {
		b := make([]byte, 7)
		if _, err := io.ReadFull(peer, b); err == nil && string(b) == "request" {
			peer.Write([]byte("response"))
		}
	}()
	sc.holdNext()
	if n, err := sc.Write([]byte("request")); n != 7 || err != nil {
		t.Fatalf("held Write = %d, %v", n, err)
	}
	buf := make([]byte, 16)
	sc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := sc.Read(buf)
	if err != nil || string(buf[:n]) != "response" {
		t.Fatalf("Read after a held write = %q, %v; want response", buf[:n], err)
	}
	// unhold without a Write leaves the next Write a normal one.
	sc.holdNext()
	sc.unhold()
	if _, err := sc.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(peer, buf[:1]); err != nil || buf[0] != 'x' {
		t.Fatalf("peer read %q, %v; want x", buf[:1], err)
	}
}

// Held bytes that do not fit the socket's buffers still all go out (the
// wait for room), then the answer is read.
func TestSockConnHoldNextLarge(t *testing.T) {
	sc, peer := sockPair(t)
	big := bytes.Repeat([]byte("z"), 8<<20)
	go func() {
		if _, err := io.CopyN(io.Discard, peer, int64(len(big))); err == nil {
			peer.Write([]byte("done"))
		}
	}()
	sc.holdNext()
	sc.Write(big)
	buf := make([]byte, 16)
	sc.SetDeadline(time.Now().Add(20 * time.Second))
	n, err := sc.Read(buf)
	if err != nil || string(buf[:n]) != "done" {
		t.Fatalf("Read after a large held write = %q, %v; want done", buf[:n], err)
	}
}

// Reads and writes run at the same time, as in a tunnel.
func TestSockConnConcurrent(t *testing.T) {
	sc, peer := sockPair(t)
	const size = 4 << 20
	echoed := make(chan error, 1)
	go func() { _, err := io.CopyN(peer, peer, size); echoed <- err }()
	done := make(chan error, 1)
	go func() {
		_, err := sc.Write(bytes.Repeat([]byte("e"), size))
		done <- err
	}()
	n, err := io.CopyN(io.Discard, sc, size)
	if n != size || err != nil {
		t.Fatalf("read back %d, %v; want %d", n, err, size)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
}

// Closing with unread input resets the connection under the last
// response, so finish lingers when input may be waiting. It asks the
// socket (a peek) unless the reads have said: after EOF nothing can
// follow; after a bodyless request that said close, read by a read that
// left the socket empty, nothing may (RFC 9112 §9.6), and bytes sent
// anyway are the client's own breach. Otherwise the peek decides.
func TestUnreadInput(t *testing.T) {
	read := func(t *testing.T, c *sockConn, n int) {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("eof", func(t *testing.T) {
		c, client, _ := rawPair(t, "tcp4", "127.0.0.1:0")
		io.WriteString(client, "abc")
		client.(*net.TCPConn).CloseWrite()
		read(t, c, 3)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 8)); err != io.EOF {
			t.Fatalf("read after the client's end: %v, want EOF", err)
		}
		if (&h1conn{c: c, rd: h1.NewReader(c, 1024)}).unreadInput() {
			t.Error("input may wait after EOF")
		}
	})
	t.Run("close asked", func(t *testing.T) {
		c, client, _ := rawPair(t, "tcp4", "127.0.0.1:0")
		io.WriteString(client, "abc")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 64)); err != nil || n != 3 {
			t.Fatalf("read %d, %v", n, err)
		}
		io.WriteString(client, "more") // after its close: not looked for
		hc := &h1conn{c: c, rd: h1.NewReader(c, 1024), closeAsked: true}
		if hc.unreadInput() {
			t.Error("a request that said close: input looked for")
		}
		hc.closeAsked = false
		until(t, "the bytes after to arrive", hc.unreadInput)
	})
	t.Run("full read", func(t *testing.T) {
		c, client, _ := rawPair(t, "tcp4", "127.0.0.1:0")
		io.WriteString(client, "abcmore")
		until(t, "the bytes to arrive", func() bool { return pendingInput(c) })
		read(t, c, 3) // a read that filled its buffer: more may wait
		if !(&h1conn{c: c, rd: h1.NewReader(c, 1024), closeAsked: true}).unreadInput() {
			t.Error("a read that filled its buffer, then bytes waiting: not seen")
		}
	})
}
