package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"golang.org/x/net/http2"
)

// HTTP/2 to backends (backends[].protocol h2c or h2).
//
// The connections and their frames are golang.org/x/net/http2's client
// (the Transport behind net/http's HTTP/2): flow control, the peer's
// stream limit, GOAWAY, trailers and PING are its. What is baton's: the
// pool of connections per endpoint, the request head, which is written
// as an HTTP/1.1 head by the code every other request goes out with
// (h1.Request.WriteHead: the route's edits, X-Forwarded-*) and read back
// as HTTP/2 fields, so that a request to an HTTP/2 backend meets the same
// rules as any other; the timeouts; and gRPC's view of baton's own
// failures (grpc.go).

// newH2Transport is the HTTP/2 client of backend bc's connections.
func newH2Transport(bc *config.Backend, headMax int) *http2.Transport {
	return &http2.Transport{
		AllowHTTP:                  true, // h2c: the connection is ours, and plain
		DisableCompression:         true, // the client's Accept-Encoding goes as it came
		MaxHeaderListSize:          uint32(headMax),
		StrictMaxConcurrentStreams: true, // the backend's limit holds: more streams open more connections
		IdleConnTimeout:            bc.IdleTimeout.Std(),
		ReadIdleTimeout:            30 * time.Second, // then a PING: a silent backend is found out
		PingTimeout:                15 * time.Second,
		WriteByteTimeout:           bc.SendTimeout.Std(),
	}
}

// h2Conns holds an endpoint's HTTP/2 connections. A request takes a
// stream on the first that has room; when none has, one new connection is
// dialled, by the first request to need it while the others wait for it.
type h2Conns struct {
	mu      sync.Mutex
	conns   []h2Conn
	dialing chan struct{} // closed when the dial under way ends; nil: none
	retired bool
}

type h2Conn struct {
	cc      *http2.ClientConn
	created time.Time
}

// errNoStream is a new connection on which the backend allows no stream.
var errNoStream = errors.New("the backend allows no stream on a new HTTP/2 connection")

// get returns a connection with a stream reserved for one request
// (RoundTrip must follow), dialling one if need be, within ctx.
func (p *h2Conns) get(ctx context.Context, b *backend, ep *endpoint) (*http2.ClientConn, error) {
	for {
		now := time.Now()
		p.mu.Lock()
		if cc := p.reserveLocked(now, b.lifetime); cc != nil {
			p.mu.Unlock()
			return cc, nil
		}
		if ch := p.dialing; ch != nil {
			p.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, &dialError{ctx.Err()}
			}
		}
		ch := make(chan struct{})
		p.dialing = ch
		p.mu.Unlock()

		cc, err := b.dialH2(ctx, ep)
		p.mu.Lock()
		p.dialing = nil
		close(ch)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.conns = append(p.conns, h2Conn{cc: cc, created: now})
		ok := cc.ReserveNewRequest()
		p.mu.Unlock()
		if !ok {
			return nil, &dialError{errNoStream}
		}
		return cc, nil
	}
}

// reserveLocked reserves a stream on a pooled connection, forgetting the
// ones that closed and closing the idle ones past lifetime (0: none).
func (p *h2Conns) reserveLocked(now time.Time, lifetime time.Duration) *http2.ClientConn {
	var got *http2.ClientConn
	live := p.conns[:0]
	for _, c := range p.conns {
		st := c.cc.State()
		old := lifetime > 0 && now.Sub(c.created) > lifetime
		switch {
		case st.Closed:
			continue
		case old && st.StreamsActive == 0 && st.StreamsReserved == 0:
			c.cc.Close()
			continue
		}
		live = append(live, c)
		if got == nil && !old && c.cc.ReserveNewRequest() {
			got = c.cc
		}
	}
	clear(p.conns[len(live):])
	p.conns = live
	return got
}

// done is called when a request's stream on cc is over: a connection of
// a retired endpoint is closed once it carries no stream.
func (p *h2Conns) done(cc *http2.ClientConn) {
	p.mu.Lock()
	retired := p.retired
	p.mu.Unlock()
	if st := cc.State(); retired && st.StreamsActive == 0 && st.StreamsReserved == 0 {
		cc.Close()
	}
}

// retire closes the idle connections; the others close as their last
// stream ends (done). reopen undoes it for an endpoint that came back.
func (p *h2Conns) retire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = true
	p.closeIdleLocked()
}

// closeIdle closes the connections that carry no stream.
func (p *h2Conns) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeIdleLocked()
}

func (p *h2Conns) closeIdleLocked() {
	p.reapLocked(time.Now(), time.Nanosecond) // every connection is older than that
}

// reopen lets a retired endpoint's pool take requests again.
func (p *h2Conns) reopen() {
	p.mu.Lock()
	p.retired = false
	p.mu.Unlock()
}

// reap forgets closed connections and closes idle ones past lifetime.
func (p *h2Conns) reap(now time.Time, lifetime time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reapLocked(now, lifetime)
}

func (p *h2Conns) reapLocked(now time.Time, lifetime time.Duration) {
	live := p.conns[:0]
	for _, c := range p.conns {
		st := c.cc.State()
		if st.Closed {
			continue
		}
		if lifetime > 0 && now.Sub(c.created) > lifetime && st.StreamsActive == 0 && st.StreamsReserved == 0 {
			c.cc.Close()
			continue
		}
		live = append(live, c)
	}
	clear(p.conns[len(live):])
	p.conns = live
}

// dialH2 opens an HTTP/2 connection to ep: TCP, TLS with ALPN h2 for
// protocol h2, then the connection preface. A failure is a failed
// connect (*dialError): nothing was sent.
func (b *backend) dialH2(ctx context.Context, ep *endpoint) (*http2.ClientConn, error) {
	start := time.Now()
	c, err := b.dialer.DialContext(ctx, "tcp", ep.addr)
	if err == nil && ep.tlsConf != nil {
		if c, err = b.handshake(ctx, c, ep.tlsConf); err == nil {
			if proto := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; proto != "h2" {
				c.Close()
				err = fmt.Errorf("the backend's TLS handshake chose %q, not h2 (ALPN): it does not speak HTTP/2 over TLS", proto)
			}
		}
	}
	var cc *http2.ClientConn
	if err == nil {
		tc := newTurnConn(c, b.sendTimeout)
		if cc, err = b.h2t.NewClientConn(tc); err != nil {
			tc.Close()
		}
	}
	if err != nil {
		ep.connectFailed()
		var de *dialError
		if errors.As(err, &de) {
			return nil, err
		}
		return nil, &dialError{err}
	}
	b.connectTime.Observe(time.Since(start))
	ep.connected()
	return cc, nil
}

// h2NotProcessed reports whether a failed RoundTrip left the request
// unprocessed by the backend, so that it may go again on another
// connection whatever its method (RFC 9113 §8.7): the stream was refused,
// or the connection was going away before the stream was opened on it.
func h2NotProcessed(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) && se.Code == http2.ErrCodeRefusedStream {
		return true
	}
	// x/net/http2 does not export these two.
	msg := err.Error()
	return strings.Contains(msg, "client conn not usable") || strings.Contains(msg, "graceful shutdown GOAWAY")
}

// h2Head is scratch for writing a request head as HTTP/1.1 and reading
// it back as HTTP/2 fields.
type h2Head struct {
	buf bytes.Buffer
	bw  *bufio.Writer
}

var h2Heads = sync.Pool{New: func() any {
	h := new(h2Head)
	h.bw = bufio.NewWriterSize(&h.buf, 4<<10)
	return h
}}

// upstreamRequest is what a request to an HTTP/2 backend is built from.
type upstreamRequest struct {
	rt     *routed
	req    *h1.Request
	fwd    h1.Forwarded
	body   io.Reader // nil: none (or whole)
	whole  []byte    // a body read ahead whole, sent again on a retry
	length int64     // body's length, -1: unknown
	// trailers, when set, are announced: the client may send some.
	trailers http.Header
	// grpc: the request is gRPC's; deadline is its grpc-timeout's end
	// (zero: none).
	grpc     bool
	deadline time.Time
}

// build makes the http.Request for ep of backend b, within ctx: the head
// as baton forwards any request (h1.Request.WriteHead), read back as
// fields; the hop-by-hop ones were left out by WriteHead already, Host
// becomes :authority.
func (u *upstreamRequest) build(ctx context.Context, ep *endpoint, now time.Time) *http.Request {
	h := h2Heads.Get().(*h2Head)
	defer h2Heads.Put(h)
	h.buf.Reset()
	h.bw.Reset(&h.buf)
	fwd := u.fwd
	fwd.Host = ep.addr
	u.rt.forwarded(&fwd, u.req)
	u.req.WriteHead(h.bw, h1.Framing{Length: -1}, &fwd)
	h.bw.Flush()
	head := h.buf.Bytes()

	line, rest, _ := bytes.Cut(head, crlf)
	method, line, _ := bytes.Cut(line, []byte(" "))
	target, _, _ := bytes.Cut(line, []byte(" "))
	hdr := make(http.Header, 16)
	var host string
	for len(rest) > 2 {
		line, rest, _ = bytes.Cut(rest, crlf)
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimLeft(value, " \t")
		switch {
		case h1.EqualFold(name, "host"):
			host = string(value)
			continue
		case h1.EqualFold(name, "te"), h1.EqualFold(name, "connection"), h1.EqualFold(name, "upgrade"),
			h1.EqualFold(name, "content-length"), h1.EqualFold(name, "transfer-encoding"):
			continue
		case u.grpc && h1.EqualFold(name, "grpc-timeout"):
			continue // written below, shortened by the time spent
		}
		k := http.CanonicalHeaderKey(string(name))
		hdr[k] = append(hdr[k], string(value))
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr["User-Agent"] = nil // x/net/http2 would add Go's
	}
	if u.grpc {
		hdr["Te"] = []string{"trailers"} // gRPC over HTTP/2 asks for it (PROTOCOL-HTTP2.md)
		if !u.deadline.IsZero() {
			hdr["Grpc-Timeout"] = []string{appendGRPCTimeout(nil, u.deadline.Sub(now))}
		}
	}
	path, query, _ := strings.Cut(string(target), "?")
	scheme := "http"
	if ep.tlsConf != nil {
		scheme = "https"
	}
	uu := &url.URL{Scheme: scheme, Host: ep.addr, Opaque: path, RawQuery: query}
	if strings.HasPrefix(path, "//") {
		// RequestURI would take "//x" for an authority.
		uu.Opaque = "//" + host + path
	}
	r := (&http.Request{
		Method:        string(method),
		URL:           uu,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        hdr,
		Host:          host,
		ContentLength: u.length,
		Trailer:       u.trailers,
	}).WithContext(ctx)
	if u.whole != nil {
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(u.whole)), int64(len(u.whole))
	} else if u.body != nil {
		r.Body = io.NopCloser(u.body)
		if u.length == 0 {
			r.ContentLength = -1 // a body of unknown length, maybe empty
		}
	} else {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	return r
}

// h2Upstream is a request's exchange with an HTTP/2 backend: the
// response, and what to let go of once its body is relayed.
type h2Upstream struct {
	resp   *http.Response
	ep     *endpoint
	cc     *http2.ClientConn
	cancel context.CancelCauseFunc
	// timer bounds each wait for the response body (the backend's
	// responseTimeout; gRPC's streams have none but their deadline).
	timer   *time.Timer
	timeout time.Duration
	release func()
}

// errResponseTimeout ends a request whose backend kept it waiting past
// the backend's responseTimeout; errGRPCDeadline one past its
// grpc-timeout.
var (
	errResponseTimeout = fmt.Errorf("response timeout: %w", context.DeadlineExceeded)
	errGRPCDeadline    = fmt.Errorf("grpc-timeout: %w", context.DeadlineExceeded)
)

// exchangeH2 sends u to an endpoint of rt's backend over HTTP/2 and waits
// for the response head, moving on to another endpoint as exchangeUpstream
// does: a connect that fails, always; a request the backend did not
// process (refused stream, GOAWAY), when its body can be sent again; a
// failed exchange, when replayable and retries are left. It returns the
// exchange, or the status to answer when no endpoint answered, or a
// *clientError when the client's side failed. bodyStarted reports whether
// u's body was read from (the request cannot go again once it was, unless
// replayable).
func exchangeH2(f *httpFrontend, w *upstreamWork, rt *routed, set *endpointSet, a *attempt, replayable bool, u *upstreamRequest, body *bodyPipe) (*h2Upstream, int, error) {
	b := rt.backend
	giveUp := func(addr, stage string, err error) (*h2Upstream, int, error) {
		b.errors.Add(1)
		status := upstreamStatus(err)
		if errors.Is(err, errGRPCDeadline) {
			status = 504
		}
		if err == nil {
			err = errNoEndpoint
		}
		f.failed(rt, addr, stage, fmt.Sprint(status), err)
		return nil, status, nil
	}
	ep := b.pick(set, a)
	if ep == nil {
		return giveUp("", "connect", nil)
	}
	a.tried(ep)
	retries := 0
	for {
		if w.isAborted() {
			return nil, 0, &clientError{errClientGone}
		}
		ctx, release := w.dialContext()
		ctx, cancel := context.WithCancelCause(ctx)
		x := &h2Upstream{ep: ep, cancel: cancel, release: release, timeout: b.responseTimeout}
		now := time.Now()
		// The wait for the head: the rule's backendRequest timeout or
		// the backend's responseTimeout, never past the request timeout
		// or the gRPC deadline.
		headWait := b.responseTimeout
		if bt := rt.rule.Timeouts.BackendRequest; bt > 0 {
			headWait = bt
		}
		dl, cause := now.Add(headWait), errResponseTimeout
		if !rt.deadline.IsZero() && rt.deadline.Before(dl) {
			dl = rt.deadline
		}
		if !u.deadline.IsZero() && u.deadline.Before(dl) {
			dl, cause = u.deadline, errGRPCDeadline
		}
		x.timer = time.AfterFunc(dl.Sub(now), func() { cancel(cause) })
		if u.grpc {
			x.timeout = 0 // once it has its head, a stream lives by its deadline
		}

		cc, err := ep.pool.h2Conns().get(ctx, b, ep)
		if err != nil {
			x.end()
			if w.isAborted() {
				return nil, 0, &clientError{errClientGone}
			}
			if c := context.Cause(ctx); c == errGRPCDeadline || c == errResponseTimeout {
				err = c
			}
			b.connectFailures.Add(1)
			addr := ep.addr
			if ep = b.pick(set, a); ep == nil || errors.Is(err, context.DeadlineExceeded) {
				return giveUp(addr, "connect", err)
			}
			a.tried(ep)
			f.failed(rt, addr, "connect", "next endpoint", err)
			continue
		}
		x.cc = cc
		ep.inflight.Add(1)
		if x.resp, err = cc.RoundTrip(u.build(ctx, ep, now)); err == nil {
			if x.timeout > 0 {
				x.timer.Reset(x.timeout)
			} else if u.deadline.IsZero() {
				x.timer.Stop()
			} else {
				x.timer.Reset(time.Until(u.deadline))
			}
			return x, 0, nil
		}
		ep.inflight.Add(-1)
		if c := context.Cause(ctx); c == errGRPCDeadline || c == errResponseTimeout {
			err = c
		}
		x.end()
		if w.isAborted() {
			return nil, 0, &clientError{errClientGone}
		}
		if berr := body.error(); berr != nil && !errors.Is(berr, errBodyAbandoned) {
			return nil, 0, clientSide(berr) // the client's body failed
		}
		again := replayable || !body.wasRead()
		switch {
		case rt.expired(time.Now()) || errors.Is(err, errGRPCDeadline):
			return giveUp(ep.addr, "response", err)
		case again && h2NotProcessed(err) && retries < 3:
			f.failed(rt, ep.addr, "response", "not processed: again", err)
			retries++
			b.retries.Add(1)
		case replayable && retries < b.cfg.Retries:
			addr := ep.addr
			if ep = b.pick(set, a); ep == nil {
				return giveUp(addr, "response", err)
			}
			a.tried(ep)
			f.failed(rt, addr, "response", "retry on another endpoint", err)
			retries++
			b.retries.Add(1)
		default:
			return giveUp(ep.addr, "response", err)
		}
	}
}

// read reads the response body into p, each wait bounded as the
// exchange's timeout says.
func (x *h2Upstream) read(p []byte) (int, error) {
	n, err := x.resp.Body.Read(p)
	if x.timeout > 0 {
		x.timer.Reset(x.timeout)
	}
	if err != nil && err != io.EOF {
		return n, &h1.ReadError{Err: x.cause(err)}
	}
	return n, err
}

// cause is why the exchange's context ended, when it did, else err.
func (x *h2Upstream) cause(err error) error {
	if c := context.Cause(x.resp.Request.Context()); c != nil && c != context.Canceled {
		return c
	}
	return err
}

// end lets go of the exchange: the stream is closed (reset upstream if
// its response was not read to its end), the timer stopped.
func (x *h2Upstream) end() {
	x.timer.Stop()
	if x.resp != nil {
		x.resp.Body.Close()
	}
	x.cancel(nil)
	x.release()
	if x.cc != nil {
		x.ep.pool.h2Conns().done(x.cc)
	}
}

// pipeWriter is an io.PipeWriter as an h1.Writer: a request body copy
// from a client writes into it, and the HTTP/2 client reads the pipe.
type pipeWriter struct{ *io.PipeWriter }

func (pipeWriter) Flush() error { return nil }

// bodyPipe runs a copy of a client's request body, for an HTTP/2 backend
// to read as it comes: copy writes into the pipe, in a goroutine of its
// own that wait waits for.
type bodyPipe struct {
	pr      *io.PipeReader
	wg      sync.WaitGroup
	mu      sync.Mutex
	started bool  // Read was called
	done    bool  // the copy returned
	err     error // the copy's error, once done
}

// startBody starts copy, and returns the pipe's reading end.
func startBody(copy func(w h1.Writer) error) *bodyPipe {
	pr, pw := io.Pipe()
	bp := &bodyPipe{pr: pr}
	bp.wg.Add(1)
	go func() {
		defer bp.wg.Done()
		err := copy(pipeWriter{pw})
		bp.mu.Lock()
		bp.err, bp.done = err, true
		bp.mu.Unlock()
		pw.CloseWithError(err)
	}()
	return bp
}

// Read reads the body.
func (bp *bodyPipe) Read(p []byte) (int, error) {
	bp.mu.Lock()
	bp.started = true
	bp.mu.Unlock()
	return bp.pr.Read(p)
}

// wasRead reports whether the body was read from (nil: no body).
func (bp *bodyPipe) wasRead() bool {
	if bp == nil {
		return false
	}
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return bp.started
}

// wait ends the copy (its writes fail once the reader is closed) and
// waits for it; it returns the copy's error. unblock is called first,
// to end a copy that waits for the client.
func (bp *bodyPipe) wait(unblock func()) error {
	bp.pr.CloseWithError(errBodyAbandoned)
	bp.mu.Lock()
	done := bp.done
	bp.mu.Unlock()
	if !done && unblock != nil {
		unblock()
	}
	bp.wg.Wait()
	return bp.err
}

// error is the copy's error once it is done with one, else nil (nil: no
// body).
func (bp *bodyPipe) error() error {
	if bp == nil {
		return nil
	}
	bp.mu.Lock()
	defer bp.mu.Unlock()
	return bp.err
}

// errBodyAbandoned ends a request body copy whose exchange is over.
var errBodyAbandoned = errors.New("request body no longer wanted upstream")
