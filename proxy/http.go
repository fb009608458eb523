package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
	"go.uber.org/zap"
)

// drainPoll is how often a draining frontend looks whether its last
// connection has closed.
const drainPoll = 5 * time.Millisecond

// httpFrontend serves one http listener's sockets. HTTP/1.x connections are
// served by h1conn, one goroutine each, proxying on pooled upstream
// connections without net/http (the hot path). Connections that open with
// the HTTP/2 preface (h2c) are handed to a net/http server whose handler is
// an httputil.ReverseProxy.
type httpFrontend struct {
	name string
	p    *Proxy
	tls  *tls.Config // terminate TLS when set
	// proxyProtocol: each connection starts with a PROXY header.
	proxyProtocol bool
	metrics       *listenerMetrics
	acc           acceptor
	conns         sync.WaitGroup // h1conn goroutines
	// inflight counts HTTP/2 requests and upgraded tunnels.
	inflight sync.WaitGroup
	h2       *h2Server

	mu   sync.Mutex // protects live
	live map[*h1conn]net.Conn
	pool sync.Pool // of *h1conn, with their buffers
}

func newHTTPFrontend(name string, p *Proxy) *httpFrontend {
	f := &httpFrontend{name: name, p: p, live: make(map[*h1conn]net.Conn)}
	f.h2 = newH2Server(f)
	return f
}

// serve accepts on lns until the frontend stops accepting.
func (f *httpFrontend) serve(lns []net.Listener) {
	f.acc.start(f.p, f.name, lns, func(c net.Conn) {
		hc := f.newConn(c)
		f.conns.Add(1)
		go hc.serve()
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
		hc.bw = bufio.NewWriterSize(&hc.cw, writeBufSize)
	} else {
		hc.rd.Reset(c)
		hc.bw.Reset(&hc.cw)
	}
	hc.c, hc.cw.c, hc.tls = c, c, tc
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
		hc.rd.Reset(nil)
		hc.bw.Reset(&hc.cw)
		f.pool.Put(hc)
	}
	f.conns.Done()
}

// stopAccepting closes the frontend's listeners.
func (f *httpFrontend) stopAccepting() { f.acc.stop() }

// drain finishes the frontend's connections. The proxy's draining flag is
// set: every response carries Connection: close. Keep-alive connections
// still idle after grace are closed (a request arriving at that instant is
// still served); HTTP/2 clients get GOAWAY; in-flight requests and
// upgraded connections finish. At ctx's end whatever is left is closed.
func (f *httpFrontend) drain(ctx context.Context, grace time.Duration) {
	h2done := make(chan struct{})
	go func() {
		f.h2.shutdown(ctx)
		close(h2done)
	}()
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
		<-h2done
		f.inflight.Wait()
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
		// Upgraded connections may outlive this; the process exit closes
		// them, and the goroutine above ends with it.
	}
}

func (f *httpFrontend) liveConns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// h2Server serves the h2c connections h1conn hands over, with net/http's
// HTTP/2 server and a ReverseProxy per backend.
type h2Server struct {
	f   *httpFrontend
	srv *http.Server
	ln  *chanListener
	wg  sync.WaitGroup
}

func newH2Server(f *httpFrontend) *h2Server {
	s := &h2Server{f: f, ln: newChanListener()}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP2(true) // over TLS, when ALPN chose h2
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: f.p.cfg.HTTP.ReadHeaderTimeout.Std(),
		IdleTimeout:       f.p.cfg.HTTP.IdleTimeout.Std(),
		MaxHeaderBytes:    f.p.cfg.HTTP.MaxHeaderBytes,
		Protocols:         &protocols,
		ErrorLog:          zap.NewStdLog(f.p.log.Named("http2").WithOptions(zap.IncreaseLevel(zap.WarnLevel))),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				f.p.stats.conns.Add(-1)
			}
		},
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.srv.Serve(s.ln)
	}()
	return s
}

// hand gives the server a connection that opened with the HTTP/2 preface.
func (s *h2Server) hand(c net.Conn) bool {
	s.f.p.stats.conns.Add(1) // the h1conn's count ends with it; this one with the h2 connection
	if !s.ln.push(c) {
		s.f.p.stats.conns.Add(-1)
		return false
	}
	return true
}

// shutdown sends GOAWAY on every connection and waits for their streams.
func (s *h2Server) shutdown(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	s.wg.Wait()
}

// ServeHTTP routes an HTTP/2 request to its backend's ReverseProxy.
func (s *h2Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := s.f
	f.inflight.Add(1)
	defer f.inflight.Done()
	start := time.Now()
	lw := &loggingWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() { f.metrics.request(lw.backend, lw.status, time.Since(start)) }()
	w = lw
	if al := f.p.access; al != nil {
		e := accessEntry{start: start, listener: f.name, method: []byte(r.Method), host: []byte(r.Host), target: []byte(r.RequestURI),
			proto: r.Proto, upstream: -1, generation: f.p.Generation, bytesIn: max(r.ContentLength, 0),
			referer: []byte(r.Referer()), userAgent: []byte(r.UserAgent())}
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			e.client = ap.Addr().Unmap().AppendTo(nil)
		}
		if r.TLS != nil {
			e.tlsVersion, e.sni = tlsVersionName(r.TLS.Version), r.TLS.ServerName
		}
		defer func() {
			e.status, e.bytesOut, e.bodyOut, e.backend = lw.status, lw.written, lw.written, lw.backend
			al.log(&e)
		}()
	}
	f.p.stats.requests.Add(1)
	// The same path rules as HTTP/1.1 (docs/security.md): routes match the
	// normalised path, and the backend receives it.
	path, _, _ := strings.Cut(r.RequestURI, "?")
	if !strings.HasPrefix(path, "/") {
		f.p.stats.errors.Add(1)
		http.Error(w, "baton: Bad Request", http.StatusBadRequest)
		return
	}
	norm, err := h1.NormalizePath(nil, []byte(path))
	if err != nil {
		f.p.stats.errors.Add(1)
		http.Error(w, "baton: Bad Request", http.StatusBadRequest)
		return
	}
	if string(norm) != path {
		u := *r.URL
		u.RawPath = string(norm)
		if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
			http.Error(w, "baton: Bad Request", http.StatusBadRequest)
			return
		}
		r.URL = &u
	}
	rt := f.p.router.match(f.name, r.Host, string(norm))
	if rt == nil {
		f.p.stats.errors.Add(1)
		http.Error(w, "baton: Not Found", http.StatusNotFound)
		return
	}
	if rt.maxBody > 0 {
		if r.ContentLength > rt.maxBody {
			f.p.stats.errors.Add(1)
			http.Error(w, "baton: Content Too Large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, rt.maxBody)
	}
	rt.backend.requests.Add(1)
	lw.backend = rt.backend.name
	rt.backend.proxy.ServeHTTP(w, r)
}

// loggingWriter notes, for the metrics and the access log, the status and
// body bytes of an HTTP/2 response.
type loggingWriter struct {
	http.ResponseWriter
	status  int
	written int64
	wrote   bool
	backend string
}

func (w *loggingWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *loggingWriter) Write(p []byte) (int, error) {
	w.wrote = true
	n, err := w.ResponseWriter.Write(p)
	w.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the real writer (Flush).
func (w *loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// newReverseProxy returns the HTTP/2 frontend's reverse proxy in front of b.
func (p *Proxy) newReverseProxy(b *backend) *httputil.ReverseProxy {
	scheme := "http"
	if b.tlsConf != nil {
		scheme = "https" // the transport's TLSClientConfig is the backend's
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = b.name // RoundTrip puts an address here
			pr.Out.Host = pr.In.Host
			// A trusted proxy's chain is kept and the client appended
			// (nginx's $proxy_add_x_forwarded_for), with its proto and
			// host; anyone else's is replaced.
			trusted := false
			if ap, err := netip.ParseAddrPort(pr.In.RemoteAddr); err == nil {
				trusted = p.isTrusted(ap.Addr())
			}
			if prior, ok := pr.In.Header["X-Forwarded-For"]; ok && trusted {
				pr.Out.Header["X-Forwarded-For"] = prior
			}
			pr.SetXForwarded()
			if trusted {
				for _, k := range []string{"X-Forwarded-Proto", "X-Forwarded-Host"} {
					if v := pr.In.Header.Get(k); v != "" {
						pr.Out.Header.Set(k, v)
					}
				}
			}
		},
		Transport:     b,
		FlushInterval: -1, // stream responses as they come (SSE, long polls)
		BufferPool:    &p.buffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.stats.errors.Add(1)
			b.errors.Add(1)
			status := http.StatusBadGateway
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				status = http.StatusGatewayTimeout
			case errors.Is(err, errNoEndpoint):
				status = http.StatusServiceUnavailable
			case errors.As(err, new(*http.MaxBytesError)):
				status = http.StatusRequestEntityTooLarge
			}
			if r.Context().Err() == nil {
				p.log.Debug("upstream error", zap.String("backend", b.name), zap.Error(err))
			}
			http.Error(w, http.StatusText(status), status)
		},
	}
}

// chanListener is a net.Listener fed by push.
type chanListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }
