package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// parked counts the connections p's idle sets hold.
func parked(p *Proxy) int {
	n := 0
	for _, f := range p.https {
		if f.idle != nil {
			n += f.idle.count()
		}
	}
	return n
}

// parkedFDs lists the descriptors p's idle sets hold parked.
func parkedFDs(p *Proxy) []int {
	var fds []int
	for _, f := range p.https {
		if s := f.idle; s != nil {
			s.mu.Lock()
			for fd, rec := range s.byFD {
				if rec.seq != 0 {
					fds = append(fds, fd)
				}
			}
			s.mu.Unlock()
		}
	}
	return fds
}

func okBackend(t *testing.T) *httptest.Server {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(be.Close)
	return be
}

// A keep-alive connection idle longer than parkAfter waits in its
// frontend's idle set, with no goroutine (issue 23: an idle connection
// costs what it costs nginx); its next request is served as any, and it
// parks again after it. A connection keeps its request count across
// parks (http.maxRequestsPerConnection, nginx's keepalive_requests).
func TestIdleConnectionsPark(t *testing.T) {
	const n = 20
	cfg := strings.Replace(webConfig(hostOf(okBackend(t))), "http:\n", "http:\n  maxRequestsPerConnection: 3\n", 1)
	p, web, _ := startProxy(t, cfg)
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	var cs []client
	for range n {
		c, br := dialWeb(t, web)
		if resp := rawGet(t, c, br); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("first request: %d, close %v", resp.StatusCode, resp.Close)
		}
		cs = append(cs, client{c, br})
	}
	waitUntil(t, "every idle connection parked", func() bool { return parked(p) == n })
	f := p.https[0]
	f.mu.Lock()
	live := len(f.live)
	f.mu.Unlock()
	if live != 0 {
		t.Errorf("%d connections still served by an h1conn (a goroutine) once parked", live)
	}
	if got := p.stats.conns.Load(); got != n {
		t.Errorf("connections counted: %d, want %d (parked ones are connections)", got, n)
	}
	for round := 2; round <= 3; round++ {
		for i, cl := range cs {
			resp := rawGet(t, cl.c, cl.br)
			if resp.StatusCode != 200 || resp.Close != (round == 3) {
				t.Fatalf("connection %d, request %d after a park: %d, close %v", i, round, resp.StatusCode, resp.Close)
			}
		}
		if round == 2 {
			waitUntil(t, "parked again", func() bool { return parked(p) == n })
		}
	}
	for i, cl := range cs {
		if _, err := cl.br.ReadByte(); err != io.EOF {
			t.Fatalf("connection %d after its last request: %v, want EOF", i, err)
		}
	}
	waitUntil(t, "the connections gone", func() bool { return parked(p) == 0 && p.stats.conns.Load() == 0 })
}

// A parked connection has TCP_NODELAY set already: it is set as the
// connection parks, as nginx sets it when a connection enters keep-alive
// (ngx_http_set_keepalive), so the request that wakes it makes one system
// call less before its answer (docs/design.md, "What waking a parked
// connection costs").
func TestParkedConnectionHasNoDelay(t *testing.T) {
	p, web, _ := startProxy(t, webConfig(hostOf(okBackend(t))))
	c, br := dialWeb(t, web)
	if resp := rawGet(t, c, br); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	waitUntil(t, "the connection parked", func() bool { return parked(p) == 1 })
	for _, fd := range parkedFDs(p) {
		on, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
		if err != nil || on == 0 {
			t.Errorf("parked socket %d: TCP_NODELAY %d (%v), want set", fd, on, err)
		}
		if !slot(p.https[0].idle, fd).noDelay {
			t.Errorf("parked socket %d: its record says TCP_NODELAY is not set", fd)
		}
	}
	if resp := rawGet(t, c, br); resp.StatusCode != 200 {
		t.Fatalf("request after the park: %d", resp.StatusCode)
	}
}

// A connection served out of the idle set goes back to it as soon as it
// waits, not after parkAfter: its wait in the runtime's poller (os.File,
// registration, a close told to the scheduler) doubled the CPU of a
// request on an idle connection and made its p50 50% slower than nginx's
// (docs/design.md, "What waking a parked connection costs"). Its
// requests are served all the same, pipelined ones too, and during a
// drain one is answered with Connection: close.
func TestResumedConnectionParksAtOnce(t *testing.T) {
	p, web, _ := startProxy(t, webConfig(hostOf(okBackend(t))))
	c, br := dialWeb(t, web)
	if resp := rawGet(t, c, br); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	waitUntil(t, "the connection parked", func() bool { return parked(p) == 1 })
	// From now on only a connection that comes out of the set parks
	// within the test's time.
	p.https[0].idle.after.Store(int64(time.Hour))
	first := parkedFDs(p)
	for i := range 3 {
		if resp := rawGet(t, c, br); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d after the park: %d, close %v", i, resp.StatusCode, resp.Close)
		}
		waitUntil(t, "the connection back in the idle set", func() bool { return parked(p) == 1 })
		// It comes back on its own descriptor, still in the set's
		// epoll instance (adopt), not as a duplicate of it: a park then
		// costs no system call, not a dup, an add, a close and the
		// wake-up's delete.
		if fds := parkedFDs(p); len(fds) != 1 || fds[0] != first[0] {
			t.Fatalf("request %d: parked again on descriptor %v, want %v, the one it was woken on", i, fds, first)
		}
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("pipelined request %d: %v %v", i, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	waitUntil(t, "back in the idle set after the pipelined requests", func() bool { return parked(p) == 1 })

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Drain(ctx, false)
	}()
	// The drain's grace (300ms here) holds the parked connection open: a
	// request now is answered, with Connection: close.
	waitDraining(t, p)
	if resp := rawGet(t, c, br); resp.StatusCode != 200 || !resp.Close {
		t.Errorf("request during the drain: %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: %v, want EOF", err)
	}
	<-drained
}

// slot returns the idle set's record for fd.
func slot(s *idleSet, fd int) parkedConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fd >= len(s.byFD) {
		return parkedConn{}
	}
	return s.byFD[fd]
}

// A connection woken from the idle set stays in its epoll instance while
// it is served, so that parking it again costs no system call. A request
// that arrives meanwhile (here, while the backend holds the first one's
// response) wakes the set, which finds nothing parked: the park must
// look for it, or it waits unanswered until the idle timeout (a lost
// wake-up: epoll's edge-triggered events say input came, once).
func TestInputWhileServedIsNotLost(t *testing.T) {
	got, release := make(chan struct{}, 1), make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			got <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(be.Close)
	p, web, _ := startProxy(t, webConfig(hostOf(be)))
	c, br := dialWeb(t, web)
	rawGet(t, c, br)
	waitUntil(t, "the connection parked", func() bool { return parked(p) == 1 })
	set := p.https[0].idle
	set.after.Store(int64(time.Hour)) // only a woken connection parks now
	fd := parkedFDs(p)[0]

	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-got
	io.WriteString(c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	waitUntil(t, "the set told of the request while the first is served", func() bool { return slot(set, fd).pending })
	close(release)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, path := range []string{"/slow", "/next"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v (a request that came while the connection was served was not answered)", path, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	waitUntil(t, "parked again on its descriptor", func() bool { r := slot(set, fd); return r.seq != 0 && !r.pending })

	// One that has to wait for its body in the runtime's poller leaves
	// the set's epoll instance first: each segment of a body (or of an
	// upgraded connection) would otherwise wake the set for nothing.
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n")
	waitUntil(t, "out of the set while it waits for the body", func() bool { r := slot(set, fd); return !r.held && r.seq == 0 })
	io.WriteString(c, "body")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST after leaving the set: %v %v", resp, err)
	}
}

// Once a set has stopped, its epoll descriptor's number is free for the
// next descriptor the worker opens, perhaps another epoll instance: a
// connection that was woken from the set and leaves it afterwards
// (leave) must not make its epoll_ctl on that number, or it would take
// the socket out of someone else's instance.
func TestStoppedSetTouchesNoEpoll(t *testing.T) {
	s, err := newIdleSet(&httpFrontend{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	fd := pair[0]
	s.mu.Lock()
	s.watch(fd, parkedConn{until: time.Now().Add(time.Hour).UnixNano()})
	s.take(fd, 0) // woken: held, still in the set's epoll instance
	s.mu.Unlock()
	s.stop()

	// Another epoll instance on the number the set's had.
	other, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if other != s.epfd {
		if _, err := unix.FcntlInt(uintptr(s.epfd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Fatalf("descriptor %d of the stopped set is open again (%v): cannot place the other instance", s.epfd, err)
		}
		if err := unix.Dup3(other, s.epfd, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(other)
		other = s.epfd
	}
	defer unix.Close(other)
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(other, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		t.Fatal(err)
	}
	s.leave(fd)
	if err := unix.EpollCtl(other, unix.EPOLL_CTL_ADD, fd, &ev); err != unix.EEXIST {
		t.Fatalf("adding the socket again to the other instance: %v, want EEXIST (the stopped set took it out)", err)
	}
}

// A connection woken from the set leaves its record held when it closes
// its descriptor, and the number comes back with the next socket the
// worker opens. A connection on that number that was not woken from the
// set, parking by adopt, is added to the epoll instance all the same:
// recorded alone, it would be parked and never woken, its next request
// unanswered until its idle timeout.
func TestAdoptTrustsOnlyItsOwnHold(t *testing.T) {
	s, err := newIdleSet(&httpFrontend{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	socketpair := func() [2]int {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		return [2]int(pair)
	}
	until := time.Now().Add(time.Hour).UnixNano()
	old := socketpair()
	s.mu.Lock()
	s.watch(old[0], parkedConn{until: until})
	s.take(old[0], 0) // woken: held
	s.mu.Unlock()
	unix.Close(old[0]) // the woken connection closes
	defer unix.Close(old[1])

	next := socketpair()
	defer unix.Close(next[0])
	defer unix.Close(next[1])
	if next[0] != old[0] {
		t.Fatalf("the next socket has descriptor %d, not the closed one's %d", next[0], old[0])
	}
	if !slot(s, next[0]).held {
		t.Fatal("the closed connection's record is not held: the case is not set up")
	}
	if !s.adopt(next[0], parkedConn{until: until}, false) {
		t.Fatal("adopt refused")
	}
	defer func() {
		s.mu.Lock()
		s.take(next[0], 0) // the set's stop would end it through a frontend this test has not
		s.mu.Unlock()
	}()
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(next[0])}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, next[0], &ev); err != unix.EEXIST {
		t.Fatalf("adding the adopted socket to the set's epoll instance: %v, want EEXIST (adopt added it)", err)
	}
}

// A parked connection whose client closes is closed, and no longer
// counted; one whose request arrives in pieces is served once the head is
// whole; pipelined requests that wake it are all answered.
func TestParkedConnectionInput(t *testing.T) {
	p, web, _ := startProxy(t, webConfig(hostOf(okBackend(t))))
	gone, gbr := dialWeb(t, web)
	pieces, pbr := dialWeb(t, web)
	piped, qbr := dialWeb(t, web)
	for _, c := range []struct {
		c  net.Conn
		br *bufio.Reader
	}{{gone, gbr}, {pieces, pbr}, {piped, qbr}} {
		rawGet(t, c.c, c.br)
	}
	waitUntil(t, "three parked", func() bool { return parked(p) == 3 })
	gone.Close()
	waitUntil(t, "the closed one gone", func() bool { return parked(p) == 2 && p.stats.conns.Load() == 2 })

	io.WriteString(pieces, "GET / HTTP/1.1\r\n")
	waitUntil(t, "woken by a piece of a head", func() bool { return parked(p) == 1 })
	io.WriteString(pieces, "Host: x\r\n\r\n")
	if resp, err := http.ReadResponse(pbr, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a head in pieces after a park: %v %v", resp, err)
	}
	io.WriteString(piped, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := range 2 {
		resp, err := http.ReadResponse(qbr, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("pipelined request %d after a park: %v %v", i, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
}

// A parked connection is closed at its idle timeout (http.idleTimeout,
// nginx's keepalive_timeout), as one that waits in its goroutine is.
func TestParkedConnectionTimesOut(t *testing.T) {
	cfg := strings.Replace(webConfig(hostOf(okBackend(t))), "http:\n", "http:\n  idleTimeout: 2s\n", 1)
	p, web, _ := startProxy(t, cfg)
	c, br := dialWeb(t, web)
	rawGet(t, c, br)
	start := time.Now()
	waitUntil(t, "parked", func() bool { return parked(p) == 1 })
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("a parked connection at its idle timeout: %v, want EOF", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("closed %s after its request, before its idle timeout (2s)", d)
	}
	waitUntil(t, "not counted", func() bool { return parked(p) == 0 && p.stats.conns.Load() == 0 })
}

// The idle timeout holds while other parked connections wake all the time:
// the set's look at the timeouts is not put off by its wake-ups.
func TestParkedConnectionTimesOutBesideBusyOnes(t *testing.T) {
	cfg := strings.Replace(webConfig(hostOf(okBackend(t))), "http:\n", "http:\n  idleTimeout: 2s\n", 1)
	p, web, _ := startProxy(t, cfg)
	quiet, qbr := dialWeb(t, web)
	busy, bbr := dialWeb(t, web)
	rawGet(t, quiet, qbr)
	rawGet(t, busy, bbr)
	waitUntil(t, "both parked", func() bool { return parked(p) == 2 })
	closed := make(chan error, 1)
	go func() {
		_, err := qbr.ReadByte()
		closed <- err
	}()
	// The busy one parks and wakes every 150 ms (parkAfter is 100).
	deadline := time.After(6 * time.Second)
	for {
		select {
		case err := <-closed:
			if err != io.EOF {
				t.Fatalf("the quiet connection: %v, want EOF at its idle timeout", err)
			}
			return
		case <-deadline:
			t.Fatal("the quiet connection outlived its idle timeout (2s) by 4s while another woke every 150ms")
		case <-time.After(150 * time.Millisecond):
			rawGet(t, busy, bbr)
		}
	}
}

// A drain closes parked connections after its grace, as it closes idle
// ones (TestDrainClosesKeepAliveConnectionsSafely); a request on a parked
// connection during the grace is answered, with Connection: close.
func TestDrainClosesParkedConnections(t *testing.T) {
	p, web, _ := startProxy(t, webConfig(hostOf(okBackend(t))))
	idle, ibr := dialWeb(t, web)
	asks, abr := dialWeb(t, web)
	rawGet(t, idle, ibr)
	rawGet(t, asks, abr)
	waitUntil(t, "both parked", func() bool { return parked(p) == 2 })

	drained := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Drain(ctx, false)
		close(drained)
	}()
	waitDraining(t, p)
	if resp := rawGet(t, asks, abr); resp.StatusCode != 200 || !resp.Close {
		t.Errorf("a parked connection's request while draining: %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	for name, br := range map[string]*bufio.Reader{"idle": ibr, "asked": abr} {
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("the %s connection: %v, want EOF", name, err)
		}
	}
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return once the parked connections were gone")
	}
}

// Many connections park and wake at once: each request is answered on
// its own connection (no connection answers for another's client).
func TestParkedConnectionsAnswerTheirOwn(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }))
	t.Cleanup(be.Close)
	p, web, _ := startProxy(t, webConfig(hostOf(be)))
	const n = 200
	conns := make([]net.Conn, n)
	brs := make([]*bufio.Reader, n)
	for i := range n {
		conns[i], brs[i] = dialWeb(t, web)
		rawGet(t, conns[i], brs[i])
	}
	waitUntil(t, "all parked", func() bool { return parked(p) == n })
	for i := range n {
		fmt.Fprintf(conns[i], "GET /c%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	for i := range n {
		resp, err := http.ReadResponse(brs[i], nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if want := fmt.Sprintf("/c%d", i); string(b) != want {
			t.Fatalf("connection %d got %q, want %q", i, b, want)
		}
	}
}

// Parked connections count toward http.maxConnections: with two parked,
// a third is closed at accept, counted, and the parked ones serve on.
func TestParkedConnectionsCountTowardTheLimit(t *testing.T) {
	cfg := strings.Replace(webConfig(hostOf(okBackend(t))), "http:\n", "http:\n  maxConnections: 2\n", 1)
	p, web, _ := startProxy(t, cfg)
	a, abr := dialWeb(t, web)
	b, bbr := dialWeb(t, web)
	rawGet(t, a, abr)
	rawGet(t, b, bbr)
	waitUntil(t, "both parked", func() bool { return parked(p) == 2 })
	c, cbr := dialWeb(t, web)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(cbr, nil); err == nil {
		t.Fatalf("a third connection over maxConnections 2: %d", resp.StatusCode)
	}
	if n := p.stats.refused.Load(); n != 1 {
		t.Errorf("refused: %d, want 1", n)
	}
	if resp := rawGet(t, a, abr); resp.StatusCode != 200 {
		t.Errorf("a parked connection after the refusal: %d", resp.StatusCode)
	}
}

// A keep-alive connection that the idle set does not take (the frontend
// drains, or its descriptor could not be duplicated) waits on in its
// goroutine until its idle timeout. Its first wait's deadline, the park's
// (parkAfter), has passed by then, and the runtime's RawConn.Read fails at
// once on a passed deadline without looking at the socket: the wait must
// move it first, or the connection is closed after parkAfter under a
// request its client is sending (an "EOF on a reused connection" at every
// drain in TestHandoffsUnderLoad, for a client slower than parkAfter/2).
func TestRefusedParkWaitsOn(t *testing.T) {
	p, web, _ := startProxy(t, webConfig(hostOf(okBackend(t))))
	f := p.https[0]
	f.mu.Lock()
	f.draining = true // what refuses a park; the proxy itself answers as usual
	f.mu.Unlock()
	c, br := dialWeb(t, web)
	for i := range 2 {
		if i == 1 {
			time.Sleep(3 * parkAfter) // an idle client: past the wait that ends in a park
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d, on a connection idle %v that could not park: %v", i+1, 3*parkAfter, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d: %d, close %v; want 200, kept alive", i+1, resp.StatusCode, resp.Close)
		}
	}
	if n := parked(p); n != 0 {
		t.Errorf("%d connections parked while the frontend refuses parks", n)
	}
}
