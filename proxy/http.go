package proxy

import (
	"context"
	"crypto/tls"
	"github.com/baton-proxy/baton/proxy/route"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/h2"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// maxIdleGoroutines bounds the goroutines a frontend keeps waiting for
// the next connection or HTTP/2 stream (goPool).
const maxIdleGoroutines = 128

// drainPoll is how often a draining frontend looks whether its last
// connection has closed.
const drainPoll = 5 * time.Millisecond

// httpFrontend serves one http listener's sockets. Each connection is
// served by an h1conn, one goroutine each, proxying on pooled upstream
// connections without net/http. A connection that turns out to speak
// HTTP/2 (ALPN h2 over TLS, or the HTTP/2 preface in the clear) is served
// by package h2 in the same goroutine, each stream proxied to the same
// HTTP/1.1 upstreams (h2front.go).
type httpFrontend struct {
	name string
	// passName is route.PassthroughListener(name): the listener of the
	// rules of hosts whose TLS is passed through, made once, not per
	// connection.
	passName string
	p        *Proxy
	tls      *tls.Config // terminate TLS when set
	// proxyProtocol: each connection starts with a PROXY header.
	proxyProtocol bool
	metrics       *listenerMetrics
	acc           acceptor
	conns         sync.WaitGroup // h1conn goroutines
	// inflight counts upgraded tunnels.
	inflight sync.WaitGroup

	// gp runs the connections' goroutines, and the HTTP/2 streams'.
	gp *goPool
	// mirrors holds a token per mirrored request in flight (at most
	// maxMirrors); mirroring waits for their goroutines.
	mirrors   chan struct{}
	mirroring sync.WaitGroup
	mirrored  atomic.Uint64 // copies sent

	// idle holds the plain keep-alive connections idle longer than
	// parkAfter, with no goroutine (nil: none are parked).
	idle *idleSet

	mu       sync.Mutex // protects live, h2live and draining
	live     map[*h1conn]net.Conn
	h2live   map[*h2.Conn]struct{}
	draining bool
	pool     sync.Pool // of *h1conn, with their buffers
}

func newHTTPFrontend(name string, p *Proxy) *httpFrontend {
	return &httpFrontend{name: name, passName: route.PassthroughListener(name), p: p, live: make(map[*h1conn]net.Conn), h2live: make(map[*h2.Conn]struct{}), gp: newGoPool(maxIdleGoroutines),
		mirrors: make(chan struct{}, maxMirrors)}
}

// serve accepts on lns until the frontend stops accepting.
func (f *httpFrontend) serve(lns []net.Listener) {
	if f.tls == nil && !f.proxyProtocol { // plain connections park
		var err error
		if f.idle, err = newIdleSet(f); err != nil {
			f.p.log.Warn("idle connections keep their goroutines", zap.String("listener", f.name), zap.Error(err))
		}
	}
	f.acc.start(f.p, f.name, lns, func(c net.Conn) {
		hc := f.newConn(c)
		f.conns.Add(1)
		f.gp.Go(hc.serve)
	})
}

func (f *httpFrontend) newConn(c net.Conn) *h1conn {
	c = newSockConn(c)
	var tc *tls.Conn
	if f.tls != nil && !f.proxyProtocol {
		// The handshake happens in the connection's goroutine (after
		// the PROXY header, when there is one: see readProxyHeader).
		tc = tls.Server(c, f.tls)
		c = tc
	}
	hc := f.attach(c, tc)
	hc.closeAsked, hc.requests = false, 0
	return hc
}

// resume serves the connection whose socket fd the idle set held, from
// its next request on, in a goroutine of the pool.
func (f *httpFrontend) resume(fd int, rec *parkedConn) {
	sc, err := acceptedSock(fd, net.TCPAddrFromAddrPort(rec.remote), rec.ln)
	if err != nil {
		unix.Close(fd)
		f.closed()
		return
	}
	sc.lazyNoDelay, sc.wrote = !rec.noDelay, rec.wrote
	sc.Conn.(*acceptedConn).s.set = f.idle
	hc := f.attach(sc, nil)
	hc.closeAsked, hc.requests, hc.resumed = false, int(rec.requests), true
	defer hc.finish()
	hc.serveRequests(false)
}

// attach gives connection c (tc: c, when TLS) an h1conn, live.
func (f *httpFrontend) attach(c net.Conn, tc *tls.Conn) *h1conn {
	hc, _ := f.pool.Get().(*h1conn)
	if hc == nil {
		hc = &h1conn{f: f, rd: h1.NewReader(c, f.p.cfg.HTTP.MaxHeaderBytes)}
		hc.work.watcher = f.p.clients
	} else {
		hc.rd.Reset(c)
	}
	hc.c, hc.cw.c, hc.tls = c, c, tc
	hc.peer.reset(tc)
	hc.wdl = time.Time{}
	hc.resumed = false
	hc.state.Store(connActive)
	hc.setClient(c.RemoteAddr())
	f.mu.Lock()
	f.live[hc] = c
	f.mu.Unlock()
	return hc
}

// forget is called by a connection's goroutine as it ends.
func (f *httpFrontend) forget(hc *h1conn) {
	f.mu.Lock()
	delete(f.live, hc)
	f.mu.Unlock()
	f.recycle(hc)
	f.closed()
}

// closed counts a connection of the frontend's closed.
func (f *httpFrontend) closed() {
	f.p.stats.conns.Add(-1)
	f.conns.Done()
}

// recycle keeps hc, which serves no connection any more, for the next
// one, when its buffer is small.
func (f *httpFrontend) recycle(hc *h1conn) {
	if hc.rd.Small() { // keep only small buffers
		hc.c, hc.cw.c, hc.tls = nil, nil, nil
		hc.peer.reset(nil)
		hc.rd.Reset(nil)
		hc.releaseBuffers()
		f.pool.Put(hc)
	}
}

// park hands hc's connection, plain, accepted here and idle since
// hc.idleAt with nothing buffered, to the idle set, unless the frontend
// drains or the drain has marked hc closing. It reports whether the set
// took it: then hc serves it no more (finish recycles hc), and the
// connection's own descriptor is closed (the set holds a duplicate).
func (f *httpFrontend) park(hc *h1conn, sc *sockConn) bool {
	ac, ok := sc.Conn.(*acceptedConn)
	if f.idle == nil || !ok || sc.fd < 0 {
		return false
	}
	if sc.lazyNoDelay && sc.wrote {
		// It will write again once woken: TCP_NODELAY now, not on the
		// wake's path (nginx sets it as a connection enters keep-alive,
		// ngx_http_set_keepalive).
		setNoDelay(uintptr(sc.fd))
		sc.lazyNoDelay = false
	}
	rec := parkedConn{requests: int32(hc.requests), until: hc.idleAt.Add(f.p.cfg.HTTP.IdleTimeout.Std()).UnixNano(),
		remote: ac.remote.AddrPort(), ln: ac.ln, noDelay: !sc.lazyNoDelay, wrote: sc.wrote}
	f.mu.Lock()
	if f.draining || hc.state.Load() != connIdle {
		f.mu.Unlock()
		return false
	}
	// A connection that never waited in the runtime's poller (one woken
	// from the set and served at once) hands its descriptor itself to
	// the set; any other parks a duplicate, and closes its own.
	fd, own := ac.s.handOver()
	adopted := own && f.idle.adopt(fd, rec, ac.s.set == f.idle)
	if !own && !f.idle.park(int(sc.fd), rec) {
		f.mu.Unlock()
		return false
	}
	delete(f.live, hc)
	f.mu.Unlock()
	hc.parked = true
	switch {
	case !own:
		ac.closeDup() // not sc.Close: no FIN, the socket lives on
	case !adopted:
		// The set would not take it (closing, or epoll failed): the
		// connection was handed over all the same, so it ends as a
		// parked one the set closes.
		f.idle.end(woken{fd: fd, rec: rec})
	}
	return true
}

// failed logs an upstream failure once (rate-limited).
func (f *httpFrontend) failed(rt *routed, endpoint, stage, action string, err error) {
	f.p.fails.add(upstreamFailure{listener: f.name, route: rt, endpoint: endpoint, stage: stage, action: action, err: err})
}

// noEndpoint counts and logs a request answered 503: the route stays, its
// backend has nothing serving right now.
func (f *httpFrontend) noEndpoint(rt *routed) {
	rt.backend.errors.Add(1)
	f.failed(rt, "", "connect", "503", errNoEndpoint)
}

// drain finishes the frontend's connections. The proxy's draining flag is
// set: every response carries Connection: close. HTTP/2 connections get
// GOAWAY at once (package h2's graceful end) and close once their streams
// are done; keep-alive connections still idle after grace are closed (a
// request arriving at that instant is still served); in-flight requests
// and upgraded connections finish. At ctx's end whatever is left is
// closed.
func (f *httpFrontend) drain(ctx context.Context, grace time.Duration) {
	f.mu.Lock()
	f.draining = true
	h2conns := make([]*h2.Conn, 0, len(f.h2live))
	for sc := range f.h2live {
		h2conns = append(h2conns, sc)
	}
	f.mu.Unlock()
	// Each GOAWAY is a write, which a client that does not read may hold
	// up to the write timeout: one at a time would hold up the rest.
	var shut sync.WaitGroup
	for _, sc := range h2conns {
		shut.Go(sc.Shutdown)
	}
	end := time.Now().Add(grace)
	tick := time.NewTicker(drainPoll)
	for f.liveConns() > 0 && time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	tick.Stop()
	f.mu.Lock()
	for hc, c := range f.live {
		hc.wake(c)
	}
	f.mu.Unlock()
	if f.idle != nil {
		f.idle.closeAll() // and parks no more
	}

	done := make(chan struct{})
	go func() {
		f.conns.Wait()
		f.inflight.Wait()
		shut.Wait()
		f.mirroring.Wait()
		f.gp.close()
		if f.idle != nil {
			f.idle.stop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		f.mu.Lock()
		for _, c := range f.live {
			c.Close()
		}
		f.mu.Unlock()
		f.closeH2()
		// Upgraded connections may outlive this; the process exit closes
		// them, and the goroutine above ends with it.
	}
}

// closeH2 closes the HTTP/2 connections left.
func (f *httpFrontend) closeH2() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sc := range f.h2live {
		sc.Close()
	}
}

// liveConns counts the frontend's connections, parked ones included.
func (f *httpFrontend) liveConns() int {
	n := 0
	if f.idle != nil {
		n = f.idle.count()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return n + len(f.live)
}
