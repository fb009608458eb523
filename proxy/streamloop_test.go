package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// echoServer serves TCP echo (until the client's EOF, then EOF back) and
// returns its address.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveConns(t, ln, func(c net.Conn) {
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	})
}

// refusedAddr returns a loopback address nothing listens on: a connect
// to it is refused.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func tcpConfig(backends ...string) string {
	return fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: echo
    address: @TCP@
    protocol: tcp
backends:
  - name: echo
    static: [%s]
routes:
  - listener: echo
    backend: echo
`, `"`+strings.Join(backends, `", "`)+`"`)
}

// echoes sends msg through a stream to tcp and reads it back to the
// stream's end.
func echoes(t *testing.T, tcp string, msg []byte) ([]byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		c.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if werr := <-errc; err == nil {
		err = werr
	}
	return got, err
}

// Megabytes both ways at once through one stream arrive whole and in
// order: the loop holds what a full socket does not take (EAGAIN) and
// stops reading that side until it drains, in both directions.
func TestStreamLoopRelaysBothWaysUnderBackpressure(t *testing.T) {
	p, _, tcp := startProxy(t, tcpConfig(echoServer(t)))
	if p.tcps[0].loop == nil {
		t.Fatal("a plain tcp listener without a stream loop")
	}
	msg := make([]byte, 8<<20)
	for i := range msg {
		msg[i] = byte(rand.Uint32())
	}
	got, err := echoes(t, tcp, msg)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("8 MiB echoed through the loop: %d bytes back (equal %t), %v", len(got), bytes.Equal(got, msg), err)
	}
}

// A connect that fails moves on to the backend's next endpoint, as
// nginx's stream module does (proxy_next_upstream, on by default,
// https://nginx.org/en/docs/stream/ngx_stream_proxy_module.html#proxy_next_upstream);
// the failure is counted. When no endpoint takes the stream the client's
// connection is closed with nothing sent, counted as a failure.
func TestStreamLoopNextEndpoint(t *testing.T) {
	refused, echo := refusedAddr(t), echoServer(t)
	p, _, tcp := startProxy(t, tcpConfig(refused, echo))
	for i := range 20 {
		msg := []byte(fmt.Sprintf("stream %d", i))
		if got, err := echoes(t, tcp, msg); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("stream %d: %q, %v", i, got, err)
		}
	}
	if n := p.backends["echo"].connectFailures.Load(); n == 0 {
		t.Error("no connect failure counted, with one endpoint refusing")
	}

	p, _, tcp = startProxy(t, tcpConfig(refused))
	got, err := echoes(t, tcp, []byte("hello"))
	if len(got) != 0 {
		t.Errorf("no endpoint: the client got %q (%v), want its connection closed", got, err)
	}
	waitUntil(t, "the failed stream counted", func() bool { return p.stats.failures.Load() == 1 && p.stats.conns.Load() == 0 })
}

// A backend the loop cannot reach itself (a host name to resolve) gets
// its streams through the goroutine relay, whole.
func TestStreamLoopHandsOffHostNames(t *testing.T) {
	echo := echoServer(t)
	_, port, _ := net.SplitHostPort(echo)
	p, _, tcp := startProxy(t, tcpConfig("localhost:"+port))
	msg := []byte(strings.Repeat("by name ", 5000))
	if got, err := echoes(t, tcp, msg); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo by host name: %d bytes, %v", len(got), err)
	}
	waitUntil(t, "the stream's end counted", func() bool { return p.stats.conns.Load() == 0 })
}

// The drain lets streams finish; at its deadline it closes those left,
// and returns (the handoff's drainTimeout).
func TestStreamLoopDrainClosesAtDeadline(t *testing.T) {
	p, _, tcp := startProxy(t, tcpConfig(echoServer(t)))
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		p.Drain(ctx, false)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return after its deadline")
	}
	if ctx.Err() == nil {
		t.Error("Drain returned before its deadline with a stream open")
	}
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("the stream after the drain's deadline: read %d bytes, want it closed", n)
	}
}

// A passthrough connection whose ClientHello comes in pieces is routed
// once it is whole: a handshake message may span records (RFC 8446
// §5.1), and TCP may split records anywhere. One that sends nothing is
// closed at http.readHeaderTimeout (slowloris).
func TestStreamLoopHelloInPiecesAndTimeout(t *testing.T) {
	// The hello in records of 100 bytes, sent a few bytes at a time.
	hello := reframe(clientHello(t, &tls.Config{ServerName: "a.example", InsecureSkipVerify: true}), 100)
	backend := tlsEcho(t, "a.example")
	p, _, tcp := startProxy(t, passthroughA("500ms", backend))
	if p.tcps[0].loop == nil {
		t.Fatal("a passthrough listener without a stream loop")
	}
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, piece := range [][]byte{hello[:1], hello[1:5], hello[5:40], hello[40:]} {
		if _, err := c.Write(piece); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a segment of its own; the loop has read it before the next
	}
	rec := make([]byte, 5)
	if _, err := io.ReadFull(c, rec); err != nil || rec[0] != 22 {
		t.Fatalf("the backend's answer to a hello in pieces: % x, %v (want a handshake record)", rec, err)
	}

	if d, err := silentFor(t, tcp); d < 400*time.Millisecond {
		t.Errorf("a silent connection closed after %s, before readHeaderTimeout (500ms): %v", d, err)
	}
}

// passthroughA is a config of one passthrough listener, echo, whose one
// route sends a.example to backend, with the hello's deadline given.
func passthroughA(readHeaderTimeout, backend string) string {
	return fmt.Sprintf(`
controlSocket: /tmp/unused.sock
http: {readHeaderTimeout: %s}
listeners:
  - name: echo
    address: @TCP@
    protocol: tcp
    tls: {mode: passthrough}
backends:
  - {name: a, static: [%q]}
routes:
  - {listener: echo, host: a.example, backend: a}
`, readHeaderTimeout, backend)
}

// silentFor connects to addr, sends nothing, and returns how long the
// connection lasted (at most 10 s) and how its read ended. Bytes received
// fail the test.
func silentFor(t *testing.T, addr string) (time.Duration, error) {
	t.Helper()
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetDeadline(start.Add(10 * time.Second))
	n, err := silent.Read(make([]byte, 1))
	if err == nil {
		t.Fatalf("a silent connection got %d bytes", n)
	}
	return time.Since(start), err
}

// One direction moves at most loopTurn before the loop turns to its
// other streams, and the stream is queued to go on after them: a stream
// whose two ends keep up with each other never holds the loop (nginx's
// event loop likewise bounds a connection's turn; without a bound one
// fast pair delays every other stream of the worker).
func TestStreamLoopTurnIsBounded(t *testing.T) {
	pair := func() (ours, theirs int) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
		for _, fd := range fds {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 1<<20)
		}
		return fds[0], fds[1]
	}
	client, clientPeer := pair()
	up, _ := pair()
	queued := make([]byte, 3*loopTurn)
	for off := 0; off < len(queued); {
		n, err := unix.Write(clientPeer, queued[off:])
		if err != nil {
			t.Fatalf("filling the client's socket: %d of %d bytes, %v", off, len(queued), err)
		}
		off += n
	}
	l := &streamLoop{}
	st := &loopStream{state: stateRelay}
	st.a = loopSide{fd: client, st: st, readable: true, writable: true}
	st.b = loopSide{fd: up, st: st, readable: false, writable: true}
	st.a.peer, st.b.peer = &st.b, &st.a
	if !l.relay(&st.a) {
		t.Fatal("relay failed")
	}
	if st.a.moved != loopTurn || !st.a.readable || len(l.again) != 1 || l.again[0] != st {
		t.Fatalf("one turn moved %d bytes (want %d), readable %t, queued %d", st.a.moved, loopTurn, st.a.readable, len(l.again))
	}
}

// The loop parses a ClientHello once, when its records are whole: a
// hello that comes a byte at a time is looked at in O(its size) overall,
// not parsed again at every byte (a CPU cost the square of 80 KiB per
// connection otherwise, for a client sending it slowly). Bytes that are
// no hello's are handed to the parser at once, which refuses them.
func TestHelloScanFindsTheEnd(t *testing.T) {
	hello := reframe(clientHello(t, &tls.Config{ServerName: "a.example", InsecureSkipVerify: true}), 50)
	var h helloScan
	for i := 1; i <= len(hello); i++ {
		if got := h.whole(hello[:i]); got != (i == len(hello)) {
			t.Fatalf("after %d of %d bytes: whole %t", i, len(hello), got)
		}
	}
	if _, sni, err := readClientHello(bytes.NewReader(hello), maxClientHello); err != nil || sni != "a.example" {
		t.Fatalf("the hello whole: %q, %v", sni, err)
	}
	var other helloScan
	if !other.whole([]byte("GET / HTTP/1.1\r\n")) {
		t.Error("an HTTP request is not sent on to the parser")
	}
}

// What a passthrough client sends before its ClientHello is whole is
// read up to the hello's bound (maxClientHello, and one buffer), never
// all the socket holds: a client streaming records that never make a
// hello costs a bounded buffer, then its connection.
func TestStreamLoopHelloIsBounded(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	// Handshake records of one byte each: their handshake message never
	// ends within the bound.
	rec := []byte{22, 3, 1, 0, 1, 1}
	junk := bytes.Repeat(rec, 64<<10)
	queued := 0
	for queued < len(junk) {
		n, err := unix.Write(fds[1], junk[queued:])
		if err != nil {
			break // the socket is full
		}
		queued += n
	}
	if queued < maxClientHello+2*loopBufSize {
		t.Fatalf("the socket pair holds %d bytes, too few to show the bound", queued)
	}
	l, st := helloStream(fds[0])
	l.readHello(st)
	if len(st.hello) > maxClientHello+loopBufSize {
		t.Errorf("read %d bytes of a hello that never ends (%d queued), past its bound %d", len(st.hello), queued, maxClientHello+loopBufSize)
	}
	if !st.ended {
		t.Error("a hello past its bound did not end the stream")
	}
}

// helloStream returns a passthrough listener's loop, with nothing but a
// logger behind it, and a stream of it waiting for the ClientHello on
// the socket fd, readable: for readHello alone.
func helloStream(fd int) (*streamLoop, *loopStream) {
	f := &tcpFrontend{p: &Proxy{log: zap.NewNop()}, name: "pass", passthrough: true}
	f.streams.Add(1)
	l := &streamLoop{f: f}
	st := &loopStream{state: stateHello}
	st.a = loopSide{fd: fd, st: st, readable: true, writable: true}
	st.b = loopSide{fd: -1, st: st}
	st.a.peer, st.b.peer = &st.b, &st.a
	return l, st
}

// A ClientHello that has not all come is held in memory of its size
// while the client takes its time, not in a 16 KiB relay buffer: tens of
// thousands of clients that send a few bytes of a hello and stop (a
// slowloris on passthrough) cost what they sent, until
// http.readHeaderTimeout closes them.
func TestStreamLoopPartialHelloHoldsNoBuffer(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	hello := clientHello(t, &tls.Config{ServerName: "a.example", InsecureSkipVerify: true})
	if _, err := unix.Write(fds[1], hello[:40]); err != nil {
		t.Fatal(err)
	}
	l, st := helloStream(fds[0])
	defer l.end(st)
	l.readHello(st)
	if st.ended || !bytes.Equal(st.hello, hello[:40]) {
		t.Fatalf("after 40 bytes of a hello: ended %t, holding % x", st.ended, st.hello)
	}
	if st.a.buf != nil || cap(st.hello) >= loopBufSize {
		t.Errorf("40 bytes of a hello held in %d bytes (a relay buffer: %t)", cap(st.hello), st.a.buf != nil)
	}
	if len(l.free) != 1 {
		t.Errorf("%d relay buffers back in the loop's pool, want the one read into", len(l.free))
	}
}

// A stream silent both ways for its listener's idleTimeout is closed
// (nginx's proxy_timeout, 10 minutes by default:
// https://nginx.org/en/docs/stream/ngx_stream_proxy_module.html#proxy_timeout),
// so that a peer that connects and says nothing does not hold a client
// and a backend descriptor for ever; one that keeps talking, longer than
// the timeout in all, is not. Both relays: the stream loop (plain tcp) and
// the goroutine relay (here behind a PROXY header).
func TestStreamIdleTimeout(t *testing.T) {
	for _, proxyProtocol := range []bool{false, true} {
		cfg := strings.Replace(tcpConfig(echoServer(t)), "protocol: tcp\n", "protocol: tcp\n    idleTimeout: 400ms\n", 1)
		if proxyProtocol {
			cfg = strings.Replace(cfg, "protocol: tcp\n", "protocol: tcp\n    proxyProtocol: true\n", 1)
		}
		p, _, tcp := startProxy(t, cfg)
		if got := p.tcps[0].loop != nil; got == proxyProtocol {
			t.Fatalf("proxyProtocol %v: stream loop %v", proxyProtocol, got)
		}
		c, err := net.Dial("tcp", tcp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if proxyProtocol {
			io.WriteString(c, "PROXY TCP4 192.0.2.1 192.0.2.2 1234 80\r\n")
		}
		buf := make([]byte, 1)
		start := time.Now()
		for time.Since(start) < 1500*time.Millisecond { // past the timeout, in all
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatalf("proxyProtocol %v: write on a live stream after %v: %v", proxyProtocol, time.Since(start), err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatalf("proxyProtocol %v: echo on a live stream after %v: %v", proxyProtocol, time.Since(start), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Silent now: closed, the client reads its end.
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(buf); err == nil {
			t.Fatalf("proxyProtocol %v: a silent stream read %d bytes, not its end", proxyProtocol, n)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("proxyProtocol %v: a stream silent for 5s past a 400ms idleTimeout is still open", proxyProtocol)
		}
	}
}

// A loop with no stream waits without a deadline (an idle worker is not
// woken four times a second to sweep nothing), and the first stream added
// to it gets its deadlines all the same: a silent passthrough connection
// is closed at readHeaderTimeout, then the loop sleeps again.
func TestStreamLoopSleepsWhileIdle(t *testing.T) {
	p, _, tcp := startProxy(t, passthroughA("300ms", "127.0.0.1:1"))
	l := p.tcps[0].loop
	asleep := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.asleep
	}
	waitUntil(t, "the loop asleep with no stream", asleep)
	if d, err := silentFor(t, tcp); d > 5*time.Second {
		t.Fatalf("a silent connection to an idle loop closed after %s, readHeaderTimeout 300ms: %v", d, err)
	}
	waitUntil(t, "the loop asleep again", asleep)
}
