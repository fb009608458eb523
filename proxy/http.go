package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// drainPoll is how often a draining frontend looks whether its last
// connection has closed.
const drainPoll = 5 * time.Millisecond

// httpFrontend serves one http listener's sockets: HTTP/1.1 and h2c, through
// net/http and httputil.ReverseProxy. It is the seam behind which the HTTP
// path can change.
type httpFrontend struct {
	name     string
	p        *Proxy
	srv      *http.Server
	inflight sync.WaitGroup // handlers running, upgraded connections included
	serving  sync.WaitGroup // Serve loops running
	lns      []net.Listener
	open     atomic.Int64 // connections open (not hijacked)
}

func newHTTPFrontend(name string, p *Proxy) *httpFrontend {
	f := &httpFrontend{name: name, p: p}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	h := p.cfg.HTTP
	f.srv = &http.Server{
		Handler:           f,
		ReadHeaderTimeout: h.ReadHeaderTimeout.Std(),
		IdleTimeout:       h.IdleTimeout.Std(),
		MaxHeaderBytes:    h.MaxHeaderBytes,
		Protocols:         &protocols,
		ConnState:         f.connState,
		ErrorLog:          zap.NewStdLog(p.log.Named("http").WithOptions(zap.IncreaseLevel(zap.WarnLevel))),
	}
	return f
}

// newReverseProxy returns the reverse proxy in front of backend b.
func (p *Proxy) newReverseProxy(b *backend) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = b.name // RoundTrip puts an address here
			pr.Out.Host = pr.In.Host
			// Append the client to the chain it brought, as nginx's
			// $proxy_add_x_forwarded_for, HAProxy and Envoy do; the
			// backend decides how many hops it trusts.
			if prior, ok := pr.In.Header["X-Forwarded-For"]; ok {
				pr.Out.Header["X-Forwarded-For"] = prior
			}
			pr.SetXForwarded()
		},
		Transport:     b,
		FlushInterval: -1, // stream responses as they come (SSE, long polls)
		BufferPool:    &p.buffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.stats.errors.Add(1)
			p.closeIfDraining(w.Header(), r)
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			if r.Context().Err() == nil {
				p.log.Debug("upstream error", zap.String("backend", b.name), zap.Error(err))
			}
			http.Error(w, http.StatusText(status), status)
		},
		ModifyResponse: func(resp *http.Response) error {
			p.closeIfDraining(resp.Header, resp.Request)
			return nil
		},
	}
}

// ServeHTTP routes a request to its backend.
func (f *httpFrontend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.inflight.Add(1)
	defer f.inflight.Done()
	f.p.stats.requests.Add(1)
	rt := f.p.router.match(f.name, r.Host, r.URL.Path)
	if rt == nil {
		f.p.stats.errors.Add(1)
		f.p.closeIfDraining(w.Header(), r)
		http.Error(w, "baton: no route for this host and path", http.StatusNotFound)
		return
	}
	rt.backend.proxy.ServeHTTP(w, r)
}

// closeIfDraining asks an HTTP/1 client to close its connection after this
// response, once the worker drains. The client opens its next connection to
// the new generation; nothing it sent is lost.
func (p *Proxy) closeIfDraining(h http.Header, r *http.Request) {
	if p.draining.Load() && r != nil && r.ProtoMajor == 1 {
		h.Set("Connection", "close")
	}
}

func (f *httpFrontend) connState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		f.p.stats.accepted.Add(1)
		f.p.stats.conns.Add(1)
		f.open.Add(1)
	case http.StateClosed, http.StateHijacked:
		f.p.stats.conns.Add(-1)
		f.open.Add(-1)
	}
}

// serve accepts on lns until the frontend drains.
func (f *httpFrontend) serve(lns []net.Listener) {
	f.lns = lns
	for _, ln := range lns {
		f.serving.Add(1)
		go func() {
			defer f.serving.Done()
			err := f.srv.Serve(ln)
			if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				f.p.log.Error("serve", zap.String("listener", f.name), zap.Error(err))
			}
		}()
	}
}

// stopAccepting closes the frontend's listeners. The sockets stay open in
// the supervisor and the next generation; only this worker stops taking
// connections from them.
func (f *httpFrontend) stopAccepting() {
	for _, ln := range f.lns {
		ln.Close()
	}
	f.serving.Wait()
}

// drain finishes the frontend's connections: every request is answered with
// Connection: close (the proxy's draining flag is set); keep-alive
// connections still idle after grace are closed; HTTP/2 clients get GOAWAY;
// in-flight requests and upgraded connections finish. At ctx's end whatever
// is left is closed.
func (f *httpFrontend) drain(ctx context.Context, grace time.Duration) {
	// A client may be writing a request on an idle keep-alive connection at
	// this very moment; closing it now would lose that request. During the
	// grace every request is answered, with Connection: close.
	// The grace ends early once no connection is left.
	end := time.Now().Add(grace)
	tick := time.NewTicker(drainPoll)
	for f.open.Load() > 0 && time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	tick.Stop()
	if err := f.srv.Shutdown(ctx); err != nil {
		f.srv.Close()
	}
	done := make(chan struct{})
	go func() {
		f.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Upgraded connections outlived the drain; the process exit
		// closes them, and the goroutine above ends with it.
	}
}
