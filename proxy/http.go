package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/h2"
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
	p    *Proxy
	tls  *tls.Config // terminate TLS when set
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

	mu       sync.Mutex // protects live, h2live and draining
	live     map[*h1conn]net.Conn
	h2live   map[*h2.Conn]struct{}
	draining bool
	pool     sync.Pool // of *h1conn, with their buffers
}

func newHTTPFrontend(name string, p *Proxy) *httpFrontend {
	return &httpFrontend{name: name, p: p, live: make(map[*h1conn]net.Conn), h2live: make(map[*h2.Conn]struct{}), gp: newGoPool(maxIdleGoroutines),
		mirrors: make(chan struct{}, maxMirrors)}
}

// serve accepts on lns until the frontend stops accepting.
func (f *httpFrontend) serve(lns []net.Listener) {
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
	hc, _ := f.pool.Get().(*h1conn)
	if hc == nil {
		hc = &h1conn{f: f, rd: h1.NewReader(c, f.p.cfg.HTTP.MaxHeaderBytes)}
	} else {
		hc.rd.Reset(c)
	}
	hc.c, hc.cw.c, hc.tls = c, c, tc
	hc.peer.reset(tc)
	hc.wdl = time.Time{}
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
	f.p.stats.conns.Add(-1)
	if hc.rd.Small() { // keep only small buffers
		hc.c, hc.cw.c, hc.tls = nil, nil, nil
		hc.peer.reset(nil)
		hc.rd.Reset(nil)
		hc.releaseBuffers()
		f.pool.Put(hc)
	}
	f.conns.Done()
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

	done := make(chan struct{})
	go func() {
		f.conns.Wait()
		f.inflight.Wait()
		shut.Wait()
		f.mirroring.Wait()
		f.gp.close()
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

func (f *httpFrontend) liveConns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}
