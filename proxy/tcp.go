package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/proxyproto"
	"github.com/baton-proxy/baton/proxy/route"
	"go.uber.org/zap"
)

// tcpFrontend proxies raw TCP streams from one listener to a backend, or,
// with passthrough, each TLS connection to the backend of the route its
// ClientHello's server name picks.
type tcpFrontend struct {
	name string
	p    *Proxy
	// backend is every stream's, for a listener of the config's own
	// without passthrough; nil: each connection's route picks one.
	backend *backend
	tls     *tls.Config // terminate TLS when set
	// passthrough: route by the server name of each connection's
	// ClientHello (tls.mode passthrough), and pass the TLS through.
	passthrough bool
	// proxyProtocol: each connection starts with a PROXY header.
	proxyProtocol bool
	acc           acceptor
	streams       sync.WaitGroup // proxied streams
	// loop relays the listener's streams, when loopServes it; else each
	// has goroutines of its own.
	loop *streamLoop
	// gp runs the streams' goroutines, two a stream.
	gp *goPool
	// idle closes a stream silent both ways this long (0: never).
	idle time.Duration

	mu      sync.Mutex            // protects conns and closing
	conns   map[net.Conn]net.Conn // client to upstream (nil while dialing)
	closing bool                  // drain deadline passed: close, do not start
}

func newTCPFrontend(name string, p *Proxy, b *backend) *tcpFrontend {
	return &tcpFrontend{name: name, p: p, backend: b, conns: make(map[net.Conn]net.Conn), gp: newGoPool(maxIdleGoroutines)}
}

// loopServes says whether a streamLoop serves lc's streams: a tcp
// listener's that neither terminates TLS (crypto/tls reads and writes a
// net.Conn) nor reads a PROXY header.
func loopServes(lc *config.Listener) bool {
	return lc.Protocol == config.ProtocolTCP && (lc.TLS == nil || lc.TLS.Passthrough()) && !lc.ProxyProtocol
}

func (f *tcpFrontend) serve(lns []net.Listener) {
	if l := f.loop; l != nil {
		go l.run() // drain stops it, and waits
	}
	f.acc.start(f.p, f.name, lns, func(c net.Conn) {
		if bc, ok := c.(*bareConn); ok && f.loop != nil {
			f.streams.Add(1)
			f.loop.add(bc)
			return
		}
		f.mu.Lock()
		f.conns[c] = nil
		f.mu.Unlock()
		f.streams.Add(1)
		f.gp.Go(func() { f.proxy(c) })
	})
}

// keepAliveAfter is how long a TCP stream lives before TCP keep-alive is
// turned on for both of its connections (so that a peer gone without a
// word is noticed): a short stream (connect, a message, close) does not
// pay the eight system calls.
const keepAliveAfter = time.Second

// proxy copies one stream both ways, passing half-closes along, until both
// directions have ended. A PROXY header, when the listener wants one, is
// read first (within http.readHeaderTimeout), then TLS is terminated.
func (f *tcpFrontend) proxy(raw net.Conn) {
	// The access log's line for the stream, written when it ends: status
	// 200 for a stream proxied, 502 when no endpoint took it, 400 when the
	// client's PROXY header or TLS handshake failed (as nginx's stream
	// module logs them).
	var e *accessEntry
	if f.p.access != nil {
		e = &accessEntry{start: time.Now(), listener: f.name, proto: protoTCP, status: 400, upstream: -1, generation: f.p.Generation}
		if ta, ok := raw.RemoteAddr().(*net.TCPAddr); ok {
			e.client = ta.AddrPort().Addr().Unmap().AppendTo(nil)
		}
	}
	defer f.ended(raw, e)
	c := newSockConn(raw)
	if f.proxyProtocol {
		raw.SetReadDeadline(time.Now().Add(f.p.cfg.HTTP.ReadHeaderTimeout.Std()))
		// The header is checked and consumed, its source address kept for
		// the access log.
		h, err := proxyproto.Read(raw)
		if err != nil {
			f.p.badProxyHeader(f.name, raw, err)
			return
		}
		if e != nil && !h.Local {
			e.client = h.Source.Addr().Unmap().AppendTo(e.client[:0])
		}
		raw.SetReadDeadline(time.Time{})
	}
	if f.tls != nil {
		// Handshake before dialing: a failed one costs no upstream
		// connection, and is counted.
		tc := tls.Server(c, f.tls)
		ctx, cancel := context.WithTimeout(context.Background(), f.p.cfg.HTTP.ReadHeaderTimeout.Std())
		err := tc.HandshakeContext(ctx)
		cancel()
		f.p.listenerMetrics[f.name].handshake(err)
		if err != nil {
			f.p.stats.tlsHandshakeErrors.Add(1)
			f.p.log.Debug("tls handshake", zap.String("listener", f.name), zap.Stringer("client", raw.RemoteAddr()), zap.Error(err))
			return
		}
		c = tc
		if e != nil {
			st := tc.ConnectionState()
			e.tlsVersion, e.sni = tlsVersionName(st.Version), st.ServerName
		}
	}
	b, hello := f.backend, []byte(nil)
	if b == nil {
		var sni string
		var ok bool
		if f.passthrough {
			hello, sni, ok = f.p.readHello(f.name, c)
		} else if tc, terminated := c.(*tls.Conn); terminated {
			sni, ok = tc.ConnectionState().ServerName, true
		} else {
			ok = true
		}
		if ok {
			b, _ = f.p.pickStream(f.name, sni)
		}
		if b == nil {
			return // closed with nothing sent, as the Gateway API asks of a name no route takes
		}
		if e != nil {
			e.sni = sni
		}
	}
	f.p.stats.requests.Add(1)
	b.requests.Add(1)
	f.p.streamTo(f.name, c, b, hello, e, f.gp.Go, f.connected(raw), f.idle)
}

// ended accounts for the end of raw's stream, and logs it.
func (f *tcpFrontend) ended(raw net.Conn, e *accessEntry) {
	raw.Close()
	f.mu.Lock()
	delete(f.conns, raw)
	f.mu.Unlock()
	f.p.stats.conns.Add(-1)
	if e != nil {
		e.bodyOut = e.bytesOut
		f.p.access.log(e)
	}
	f.streams.Done()
}

// connected returns streamTo's connected for raw's stream: it records
// the upstream connection, for the drain.
func (f *tcpFrontend) connected(raw net.Conn) func(up net.Conn) bool {
	return func(up net.Conn) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.conns[raw] = up
		return !f.closing
	}
}

// relayFrom relays c, a stream the loop handed off (counted already), to
// b, hello first.
func (f *tcpFrontend) relayFrom(c net.Conn, b *backend, hello []byte, e *accessEntry) {
	defer f.ended(c, e)
	f.p.streamTo(f.name, c, b, hello, e, f.gp.Go, f.connected(c), f.idle)
}

// streamTo dials b and copies c to it and back, passing half-closes
// along, until both directions have ended; hello (the ClientHello read
// off c already, or nil) goes first. e, when set, is the stream's access
// log entry. connected learns the upstream connection before the copying
// starts, and says whether to go on (a drain may be closing the
// listener's streams). The caller counts the stream as a request, of
// the proxy's and of b's. A stream silent both ways for idle is closed
// (0: never).
func (p *Proxy) streamTo(listener string, c net.Conn, b *backend, hello []byte, e *accessEntry, spawn func(func()), connected func(up net.Conn) bool, idle time.Duration) {
	dialStart := time.Now()
	up, ep, err := b.dialStream(context.Background())
	if e != nil {
		e.backend, e.upstream, e.status = b.name, time.Since(dialStart), http.StatusBadGateway
	}
	if err != nil {
		p.stats.errors.Add(1)
		p.stats.failures.Add(1)
		b.errors.Add(1)
		p.log.Debug("tcp upstream", zap.String("listener", listener), zap.Error(err))
		return
	}
	defer up.Close()
	if len(hello) > 0 {
		// The ClientHello as it came, then the stream.
		up.SetWriteDeadline(time.Now().Add(clientWriteTimeout))
		_, err := up.Write(hello)
		up.SetWriteDeadline(time.Time{})
		if err != nil {
			p.log.Debug("tcp upstream", zap.String("listener", listener), zap.Error(err))
			return
		}
	}
	if e != nil {
		e.endpoint, e.status = ep.addr, http.StatusOK
	}
	if !connected(up) {
		return
	}
	ka := time.AfterFunc(keepAliveAfter, func() {
		keepAlive(c)
		keepAlive(up)
	})
	var cr, ur io.Reader = c, up
	if idle > 0 {
		w := watchIdle(idle, func() {
			c.Close()
			up.Close()
		})
		defer w.stop()
		cr, ur = w.reader(c), w.reader(up)
	}
	in, out := join(c, cr, up, ur, spawn)
	ka.Stop()
	if e != nil {
		e.bytesIn, e.bytesOut = in, out
	}
}

// readHello reads c's ClientHello (within http.readHeaderTimeout), and
// returns its records, for the backend, and its server name; ok is false
// when it is not one.
func (p *Proxy) readHello(listener string, c net.Conn) (hello []byte, sni string, ok bool) {
	c.SetReadDeadline(time.Now().Add(p.cfg.HTTP.ReadHeaderTimeout.Std()))
	hello, sni, err := readClientHello(c, maxClientHello)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		p.log.Debug("tls passthrough: no ClientHello", zap.String("listener", listener), zap.Stringer("client", c.RemoteAddr()), zap.Error(err))
		return nil, "", false
	}
	return hello, sni, true
}

// pickStream returns the backend of the route of listener that takes a
// connection whose server name is sni ("": none, or not TLS; the route
// without host takes it): the routes as they are now, a route
// provider's (TLSRoute, TCPRoute, Ingress ssl-passthrough) changing
// without a handoff. routed is false when no route takes it; b is nil
// when its rule has no backend to give.
func (p *Proxy) pickStream(listener, sni string) (b *backend, routed bool) {
	rule, _ := p.routes.Load().Match(listener, &route.Request{Host: []byte(sni), Path: []byte("/")})
	if rule == nil {
		p.log.Debug("tcp: no route", zap.String("listener", listener), zap.String("sni", sni))
		return nil, false
	}
	if b, ok := rule.Pick(); ok {
		return b, true
	}
	return nil, true
}

// drain lets the streams finish; at ctx's end it closes them.
func (f *tcpFrontend) drain(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		f.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		if f.loop != nil {
			f.loop.closeAll()
		}
		f.mu.Lock()
		f.closing = true
		for c, up := range f.conns {
			c.Close()
			if up != nil {
				up.Close()
			}
		}
		f.mu.Unlock()
		<-done
	}
	if f.loop != nil {
		f.loop.stop()
	}
	f.gp.close()
}

// idleWatch closes a stream of the goroutine relay once neither direction
// has read anything for its timeout (listeners[].idleTimeout, nginx's
// proxy_timeout): a timer that looks at the last read's time when it
// fires, and waits again for what is left of the timeout if there was one
// since.
type idleWatch struct {
	timeout time.Duration
	last    atomic.Int64 // the last read that got bytes, Unix nanoseconds
	stopped atomic.Bool
	t       *time.Timer
	close   func()
}

// watchIdle starts watching; close ends the stream.
func watchIdle(timeout time.Duration, close func()) *idleWatch {
	w := &idleWatch{timeout: timeout, close: close}
	w.last.Store(time.Now().UnixNano())
	w.t = time.AfterFunc(timeout, w.check)
	return w
}

func (w *idleWatch) check() {
	if w.stopped.Load() {
		return
	}
	quiet := time.Since(time.Unix(0, w.last.Load()))
	if quiet >= w.timeout {
		w.close()
		return
	}
	w.t.Reset(w.timeout - quiet)
}

// stop ends the watch: the stream ended.
func (w *idleWatch) stop() {
	w.stopped.Store(true)
	w.t.Stop()
}

// reader returns r, each read that gets bytes noted.
func (w *idleWatch) reader(r io.Reader) io.Reader { return idleReader{r, w} }

type idleReader struct {
	r io.Reader
	w *idleWatch
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.w.last.Store(time.Now().UnixNano())
	}
	return n, err
}
