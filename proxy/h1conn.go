package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/proxyproto"
	"go.uber.org/zap"
)

// Connection states, for the drain: an idle connection waits for a request;
// an active one is serving one; a closing one was idle when the drain's
// grace ended and is being closed.
const (
	connIdle int32 = iota
	connActive
	connClosing
)

// writerPool holds the response writers of connections waiting for a
// request (releaseBuffers): an idle keep-alive connection holds none.
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}

// takeWriter gives hc a response writer, for a request's responses.
func (hc *h1conn) takeWriter() {
	if hc.bw == nil {
		hc.bw = writerPool.Get().(*bufio.Writer)
		hc.bw.Reset(&hc.cw)
	}
}

// releaseWriter gives hc's writer back when nothing is left in it.
func (hc *h1conn) releaseWriter() {
	if hc.bw != nil && hc.bw.Buffered() == 0 {
		hc.bw.Reset(nil)
		writerPool.Put(hc.bw)
		hc.bw = nil
	}
}

// releaseBuffers gives back the read buffer and the writer, when nothing
// is buffered in either, as hc waits for its next request: an idle
// connection costs its goroutine and this struct, not 8 KiB of buffers.
// What the last request's fields point to in the read buffer is not read
// again: the next request is parsed anew.
func (hc *h1conn) releaseBuffers() {
	hc.rd.Release()
	hc.releaseWriter()
}

// lingerTimeout bounds how long a connection being closed waits for the
// client to close its side, discarding what it sends, so that the kernel
// does not reset the connection under the last response.
const lingerTimeout = 2 * time.Second

// h1conn serves one client connection of an http listener: HTTP/1.x
// requests one after the other, each proxied on a pooled upstream
// connection by this one goroutine. The wire format is package h1's: this
// file decides where requests go and what happens when something fails.
type h1conn struct {
	f        *httpFrontend
	c        net.Conn
	tls      *tls.Conn // c, when the listener terminates TLS
	peer     tlsPeer   // its client, for client authentication
	rd       *h1.Reader
	cw       countWriter // c, counting what was written
	bw       *bufio.Writer
	client   []byte     // the client's address, for X-Forwarded-For
	clientIP netip.Addr // and parsed, for rules' Access
	trusted  bool       // the client is a trusted proxy (trustedProxies)

	state   atomic.Int32
	closeMu sync.Mutex // serialises the drain's closing with the wake-up
	wdl     time.Time  // the write deadline last set

	req  h1.Request
	resp h1.Response
	// The access log's view of the request being served, when it is on.
	entry  accessEntry
	logBuf []byte
	extra  []byte  // header lines to add to the response (a sticky cookie)
	out    h1.Body // client to upstream
	in     h1.Body // upstream to client

	// A request body read before the upstream is chosen (a route's
	// bufferRequestBody): body holds it, decoded; bodyState says how much.
	head      []byte // a copy of the head, while the body is read ahead
	body      memWriter
	bodyState bodyState
	continued bool // 100 Continue was sent for this request
	parsed    bool // req holds the head handle is given (serveInline parsed it)
	// closeAsked: the last request said close and had no body, so the
	// client sends nothing more (RFC 9112 §9.6: it must not).
	closeAsked bool
	// requests counts the connection's requests, for
	// http.maxRequestsPerConnection.
	requests int
	// work is the upstream work of the request being served, aborted
	// when the client closes its connection (Proxy.watchClients).
	work upstreamWork
	// rt is where the request being served goes.
	rt routed
	// idleAt is when the connection last began to wait for a request
	// (serveInline); parked: it waits in the idle set, and this h1conn
	// serves it no more.
	idleAt time.Time
	parked bool
	// resumed: the connection came out of the idle set, and goes back
	// as soon as it would wait (serveInline).
	resumed bool
}

// bodyState says how much of a request's body was read ahead.
type bodyState int

const (
	bodyStreamed bodyState = iota // none: it is copied on the way up
	bodyWhole                     // all of it, in body
	bodyPrefix                    // a prefix of a chunked body; the rest follows
)

// serve runs the connection until it closes, or parks.
func (hc *h1conn) serve() {
	if hc.f.proxyProtocol && !hc.readProxyHeader() {
		hc.finish()
		return
	}
	if hc.tls != nil {
		switch hc.handshake() {
		case handshakeHTTP2:
			return // the HTTP/2 goroutine finishes hc
		case handshakeFailed:
			hc.finish()
			return
		}
	}
	defer hc.finish()
	hc.serveRequests(true)
}

// serveRequests serves the connection's requests, from its first when
// first, until it is to close or it parks (hc.parked).
func (hc *h1conn) serveRequests(first bool) {
	sc, _ := hc.c.(*sockConn) // plain HTTP, no PROXY header
	for ; ; first = false {
		var head []byte
		var err error
		if sc != nil && !first {
			var done bool
			if head, done, err = hc.serveInline(sc); done {
				return
			}
		}
		if head == nil && err == nil {
			if head, err = hc.readRequestHead(first); err == nil && head == nil {
				return // served as HTTP/2
			}
		}
		if err != nil {
			hc.headError(err)
			return
		}
		if !hc.handle(head) {
			return
		}
	}
}

// serveInline serves the requests of a plain connection that need nothing
// but their head (no body, no upgrade: most of them), each as soon as its
// head is read, all inside one read session (sockConn.readSession): after
// a response, when the last read left the socket empty, it waits for the
// next request at once, without the read that would find nothing. It
// returns done when the connection is to close; the head of a request
// that needs more, parsed when hc.parsed says so, for handle; the error
// that ended the wait for a head; or nothing, when a head came in pieces
// (readRequestHead reads the rest, under ReadHeaderTimeout). A connection
// that waits longer than parkAfter for its next request is parked in the
// frontend's idle set (done, with hc.parked): it waits there with no
// goroutine, and another serves it once its request comes (resume). A
// resumed one goes back at once, without the wait: it has been idle
// before, and waiting in the runtime's poller would cost it the
// registration there and its undoing at the next park, which make system
// calls the scheduler is told of, which wake its monitor (docs/design.md,
// "What waking a parked connection costs").
func (hc *h1conn) serveInline(sc *sockConn) (head []byte, done bool, err error) {
	idle := hc.f.p.cfg.HTTP.IdleTimeout.Std()
	wait := idle // how long a wait in the session lasts
	if hc.f.idle != nil {
		wait = min(idle, time.Duration(hc.f.idle.after.Load()))
	}
	// The session's wait begins with a look at the read deadline: the
	// one the last request's head was read under may have passed while
	// its response came (a backend slower than readHeaderTimeout), and
	// would close the connection under the next request. What follows is
	// idle time. (A drain's wake-up, which moves the deadline too, acts
	// on idle connections only, and this one is still active.) The first
	// request's (ReadHeaderTimeout) may be further than the wait: then
	// the wait's.
	now := time.Now()
	hc.rd.ExtendDeadline(now, wait)
	if hc.rd.Deadline().Sub(now) > wait {
		hc.rd.SetDeadline(now.Add(wait))
	}
	drained := false // the last read left the socket empty
	parkNow := false
	step := func() bool {
		for {
			if len(hc.rd.Buffered()) == 0 {
				if drained {
					// Wait for the next request, as readRequestHead
					// does, unless the drain closed in on us: its
					// wake-up is looked for after the deadline moves,
					// which would otherwise undo the one it set.
					if hc.state.Load() == connActive { // a request was served since the last wait
						hc.idleAt = time.Now()
						hc.state.Store(connIdle)
					}
					hc.rd.ExtendDeadline(time.Now(), wait)
					if hc.state.Load() == connClosing {
						err = os.ErrDeadlineExceeded
						return true
					}
					drained = false     // the next step follows input, or a deadline
					hc.releaseBuffers() // nothing buffered, nothing unsent: the wait holds none
					if hc.resumed && hc.state.Load() == connIdle {
						parkNow = true // back to the idle set, now
						return true
					}
					return false
				}
				short, rerr := hc.rd.FillFrom(sc.readNow)
				switch {
				case rerr == errWouldBlock:
					drained = true
					continue
				case rerr != nil:
					err = rerr
					return true
				}
				drained = short
				if hc.state.Load() != connActive && !hc.state.CompareAndSwap(connIdle, connActive) {
					hc.activate() // the drain marked us closing as the request arrived
				}
			}
			if !hc.rd.HasHead() {
				return true
			}
			h, _ := hc.rd.ReadRequestHead() // whole: it reads nothing
			perr := hc.req.Parse(h)
			if perr != nil || hc.req.HasBody() || hc.req.Upgrade != nil {
				head, hc.parsed = h, perr == nil
				return true
			}
			hc.parsed = true
			if !hc.handle(h) {
				done = true
				return true
			}
		}
	}
	for {
		werr := sc.readSession(step)
		if parkNow {
			parkNow = false
			if hc.f.park(hc, sc) {
				return nil, true, nil
			}
			// Refused (the frontend drains): wait here, as a connection
			// that does not park.
			hc.resumed = false
			continue
		}
		if err == nil {
			err = werr
		}
		if err != nil && hc.state.Load() == connClosing && isTimeout(err) && pendingInput(hc.c) {
			// The drain closed in on a request that was arriving: serve
			// it (with Connection: close).
			hc.activate()
			err, drained = nil, false
			continue
		}
		if isTimeout(err) && wait < idle && hc.state.Load() == connIdle && len(hc.rd.Buffered()) == 0 {
			// Waited wait, not the idle timeout: park, or (the
			// frontend drains, and will wake it) wait as a connection
			// that does not park.
			if hc.f.park(hc, sc) {
				return nil, true, nil
			}
			// The park's deadline has passed, and a session does not
			// begin under a passed deadline (RawConn.Read fails before
			// its step runs): the wait goes on under the idle
			// timeout's. A drain's wake-up that comes meanwhile still
			// counts: the step looks for it after the move.
			err, drained, wait = nil, true, idle
			hc.rd.SetDeadline(hc.idleAt.Add(idle))
			continue
		}
		return head, done, err
	}
}

// setClient records the client's address, for X-Forwarded-For and the
// access log, and whether it is a trusted proxy's.
func (hc *h1conn) setClient(addr net.Addr) {
	hc.client, hc.clientIP, hc.trusted = hc.client[:0], netip.Addr{}, false
	if ta, ok := addr.(*net.TCPAddr); ok {
		a := ta.AddrPort().Addr().Unmap()
		hc.client, hc.clientIP = a.AppendTo(hc.client), a
		hc.trusted = hc.f.p.isTrusted(a)
	}
}

// readProxyHeader reads the PROXY protocol header the connection starts
// with, within readHeaderTimeout, and takes the client's address from it;
// TLS, when the listener has it, starts after it. A connection without a
// valid header is closed, as nginx and HAProxy do ("broken header"). It
// reports whether the connection goes on.
func (hc *h1conn) readProxyHeader() bool {
	raw := hc.c
	hc.state.Store(connIdle) // the drain may close it, as an idle one
	raw.SetReadDeadline(time.Now().Add(hc.f.p.cfg.HTTP.ReadHeaderTimeout.Std()))
	h, err := proxyproto.Read(raw)
	for err != nil && isTimeout(err) && hc.state.Load() == connClosing && pendingInput(raw) {
		hc.activate() // the drain's wake-up met a header arriving
		raw.SetReadDeadline(time.Now().Add(hc.f.p.cfg.HTTP.ReadHeaderTimeout.Std()))
		h, err = proxyproto.Read(raw)
	}
	if err != nil {
		hc.f.p.badProxyHeader(hc.f.name, raw, err)
		return false
	}
	if !hc.state.CompareAndSwap(connIdle, connActive) {
		hc.activate()
	}
	raw.SetReadDeadline(time.Time{})
	c := proxyproto.NewConn(raw, h)
	hc.setClient(c.RemoteAddr())
	if hc.f.tls != nil {
		hc.tls = tls.Server(c, hc.f.tls)
		hc.peer.reset(hc.tls)
		c = hc.tls
	}
	hc.c, hc.cw.c = c, c
	hc.rd.Reset(c)
	return true
}

// handshakeOutcome is what follows a TLS handshake.
type handshakeOutcome int

const (
	handshakeHTTP1  handshakeOutcome = iota // HTTP/1.1 goes on here
	handshakeFailed                         // the connection ends (or was passed through, and ended)
	handshakeHTTP2                          // HTTP/2 goes on in a goroutine of its own
)

// handshake runs the TLS handshake, within readHeaderTimeout. A
// connection that chose HTTP/2 (ALPN) is handed to the HTTP/2 server in a
// new goroutine, which finishes hc: an HTTP/2 connection lives long, and
// this goroutine's stack grew in the handshake (crypto's signing and key
// agreement), which an idle one would hold on to (issue 23: 34 KB an idle
// HTTP/2 connection before, 24.6 KB after).
func (hc *h1conn) handshake() handshakeOutcome {
	if hc.f.p.routes.Load().Has(hc.f.passName) && !hc.terminates() {
		return handshakeFailed
	}
	timeout := hc.f.p.cfg.HTTP.ReadHeaderTimeout.Std()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := hc.tls.HandshakeContext(ctx)
	hc.f.metrics.handshake(err)
	if err != nil {
		hc.f.p.stats.tlsHandshakeErrors.Add(1)
		hc.f.p.log.Debug("tls handshake", zap.String("listener", hc.f.name), zap.ByteString("client", hc.client), zap.Error(err))
		return handshakeFailed
	}
	if hc.tls.ConnectionState().NegotiatedProtocol == "h2" {
		go func() { // owned by f.conns, as hc's goroutine was: finish says it is done
			defer hc.finish()
			hc.serveH2(hc.tls)
		}()
		return handshakeHTTP2
	}
	return handshakeHTTP1
}

// terminates reads the ClientHello of a connection to a listener some of
// whose hosts pass TLS through (route.PassthroughListener), within
// readHeaderTimeout. A server name that a passthrough rule takes is
// relayed to its backend as a TCP stream, ClientHello included, until it
// ends; terminates reports false then, and when the hello is not one. Any
// other goes on to the handshake here, the hello replayed to crypto/tls.
func (hc *h1conn) terminates() bool {
	f := hc.f
	raw := hc.tls.NetConn()
	hello, sni, ok := f.p.readHello(f.name, raw)
	if !ok {
		f.p.stats.tlsHandshakeErrors.Add(1) // what crypto/tls would have refused
		return false
	}
	if b, routed := f.p.pickStream(f.passName, sni); routed {
		if b != nil {
			var e *accessEntry
			if al := f.p.access; al != nil {
				e = &accessEntry{start: time.Now(), listener: f.name, client: hc.client, proto: protoTCP, sni: sni, status: http.StatusBadGateway, upstream: -1, generation: f.p.Generation}
				defer func() {
					e.bodyOut = e.bytesOut
					al.log(e)
				}()
			}
			f.p.stats.requests.Add(1)
			b.requests.Add(1)
			// A passed-through stream of an http listener (Ingress
			// ssl-passthrough) is closed silent as a tcp listener's is.
			f.p.streamTo(f.passName, raw, b, hello, e, f.gp.Go, func(net.Conn) bool { return true }, config.DefaultStreamIdleTimeout)
		}
		return false // passed through, or closed: the host's backend is gone
	}
	hc.tls = tls.Server(&prefixConn{Conn: raw, prefix: hello}, hc.f.tls)
	hc.peer.reset(hc.tls)
	hc.c, hc.cw.c = hc.tls, hc.tls
	hc.rd.Reset(hc.tls)
	return true
}

// readRequestHead waits for the next request head. It returns nil, nil
// when the connection turned out to be HTTP/2, and was served as such.
func (hc *h1conn) readRequestHead(first bool) ([]byte, error) {
	cfg := &hc.f.p.cfg.HTTP
	if len(hc.rd.Buffered()) == 0 {
		timeout := cfg.IdleTimeout.Std()
		if first {
			timeout = cfg.ReadHeaderTimeout.Std()
		}
		hc.state.Store(connIdle)
		if first {
			hc.rd.SetDeadline(time.Now().Add(timeout))
		} else {
			hc.rd.ExtendDeadline(time.Now(), timeout)
			hc.releaseWriter() // the read below needs its buffer
		}
		for {
			var err error
			if hc.state.Load() == connClosing {
				err = os.ErrDeadlineExceeded // the drain woke us before we waited
			} else {
				err = hc.rd.Fill()
			}
			if err == nil {
				break
			}
			if hc.state.Load() == connClosing && isTimeout(err) && pendingInput(hc.c) {
				// The drain closed in on a request that was arriving:
				// serve it (with Connection: close).
				hc.activate()
				continue
			}
			return nil, err
		}
	}
	if hc.state.Load() != connActive && !hc.state.CompareAndSwap(connIdle, connActive) {
		hc.activate() // the drain marked us closing as the request arrived
	}
	if b := hc.rd.Buffered(); first && bytes.HasPrefix(h2Preface, b[:min(len(b), len(h2Preface))]) {
		return nil, hc.maybeHTTP2()
	}
	if !hc.rd.HasHead() {
		// A head that does not come in one piece gets ReadHeaderTimeout
		// from its first byte: a slowloris does not hold the connection.
		hc.rd.SetDeadline(time.Now().Add(cfg.ReadHeaderTimeout.Std()))
	}
	return hc.rd.ReadRequestHead()
}

// activate takes a connection the drain marked closing back to serving a
// request that arrived meanwhile, once the drain's wake-up is done.
func (hc *h1conn) activate() {
	hc.closeMu.Lock()
	hc.state.Store(connActive)
	hc.closeMu.Unlock()
	hc.rd.SetDeadline(time.Now().Add(hc.f.p.cfg.HTTP.ReadHeaderTimeout.Std()))
}

var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// maybeHTTP2 reads the whole HTTP/2 preface and serves the connection as
// HTTP/2 (prior knowledge, RFC 9113 §3.3).
func (hc *h1conn) maybeHTTP2() error {
	for len(hc.rd.Buffered()) < len(h2Preface) {
		if err := hc.rd.Fill(); err != nil {
			return err
		}
	}
	if !bytes.HasPrefix(hc.rd.Buffered(), h2Preface) {
		return errNotHTTP2
	}
	hc.rd.SetDeadline(time.Time{})
	hc.serveH2(&prefixConn{Conn: hc.c, prefix: append([]byte(nil), hc.rd.Buffered()...)})
	hc.rd.Consume(len(hc.rd.Buffered())) // HTTP/2's, not unread input
	return nil
}

// errNotHTTP2 is a connection that began as the HTTP/2 preface begins and
// then broke it: a connection error (RFC 9113 §3.4), closed without an
// answer, which it could not read as either protocol.
var errNotHTTP2 = errors.New("malformed HTTP/2 preface")

// handle proxies one request whose head is head, and logs it when the
// access log is on. It reports whether the connection may serve another.
func (hc *h1conn) handle(head []byte) bool {
	hc.takeWriter()
	start := time.Now()
	e := &hc.entry
	al := hc.f.p.access
	if al == nil {
		e.status, e.backend, e.start = 0, "", start // the start bounds the rule's request timeout
		keep := hc.serveRequest(head)
		hc.f.metrics.request(e.backend, e.status, time.Since(start))
		return keep
	}
	*e = accessEntry{start: start, listener: hc.f.name, client: hc.client, proto: "HTTP/1.1", upstream: -1, generation: hc.f.p.Generation}
	if hc.tls != nil {
		cs := hc.tls.ConnectionState()
		e.tlsVersion, e.sni = tlsVersionName(cs.Version), cs.ServerName
	}
	sent := hc.cw.n
	keep := hc.serveRequest(head)
	e.bytesIn = int64(len(head)) + hc.out.Written
	e.bytesOut = hc.cw.n - sent
	if e.bodyOut == 0 {
		e.bodyOut = hc.in.Written
	}
	hc.f.metrics.request(e.backend, e.status, time.Since(start))
	al.log(e)
	return keep
}

// noteRequest copies what the access log says of the request parsed, before
// its body is read (which reuses the buffer the head is in).
func (hc *h1conn) noteRequest() {
	if hc.f.p.access == nil {
		return
	}
	req, e := &hc.req, &hc.entry
	b := hc.logBuf[:0]
	m := len(b)
	b = append(b, req.Method...)
	h := len(b)
	b = append(b, req.Authority...)
	t := len(b)
	b = append(append(b, req.Path...), req.Query...)
	r := len(b)
	b = append(b, req.Field("referer")...)
	u := len(b)
	b = append(b, req.Field("user-agent")...)
	hc.logBuf = b
	e.method, e.host, e.target, e.referer, e.userAgent = b[m:h], b[h:t], b[t:r], b[r:u], b[u:]
	if req.Minor == 0 {
		e.proto = "HTTP/1.0"
	}
}

// serveRequest proxies one request whose head is head. It reports whether
// the connection may serve another.
func (hc *h1conn) serveRequest(head []byte) bool {
	hc.out, hc.in = h1.Body{}, h1.Body{}
	p := hc.f.p
	p.stats.requests.Add(1)
	hc.requests++
	req := &hc.req
	hc.bodyState, hc.continued, hc.extra = bodyStreamed, false, hc.extra[:0]
	if hc.parsed {
		hc.parsed = false
	} else if err := req.Parse(head); err != nil {
		return hc.refuse(err)
	}
	hc.noteRequest()
	var a attempt
	rt := &hc.rt
	set, status := p.route(hc.f.name, hc.clientIP, &hc.peer, req, rt, &a, &hc.entry)
	defer rt.release()
	switch status {
	case 0:
	case routeRedirect:
		return hc.redirect(rt)
	case routePreflight:
		return hc.preflight(rt)
	case routeLimited:
		return hc.errorResponse(503, req.HasBody() || req.Close)
	case 413:
		return hc.errorResponse(413, true) // before 100 Continue: the body never comes
	case 400, 421: // the client's certificate or server name (checkClient): another connection may do
		return hc.errorResponse(status, true)
	case routeCertErrorPage: // the host's error page instead of a 400
		hc.extra = append(append(append(hc.extra[:0], "Location: "...), rt.errorPage...), "\r\nContent-Length: 0\r\n"...)
		return hc.answer(302, hc.extra)
	case 503:
		hc.f.noEndpoint(rt)
		fallthrough
	default:
		return hc.errorResponse(status, req.HasBody() || req.Close)
	}
	b := rt.backend
	if req.HasBody() {
		// req's fields are slices of the head, which lives in the
		// reader's buffer, and reading the body reuses that buffer: a
		// body read over a method would turn this POST into a HEAD
		// whose response goes out without its content, desynchronising
		// the client's connection. req reads a copy from here on (it
		// parsed before, so it does again).
		hc.head = append(hc.head[:0], head...)
		if err := req.Parse(hc.head); err != nil {
			return hc.refuse(err)
		}
	}
	if req.Upgrade != nil {
		if b.h2t != nil {
			// HTTP/2 has no Upgrade (RFC 9113 §8.6); WebSocket over it
			// (RFC 8441) is not carried to backends.
			b.errors.Add(1)
			hc.f.failed(rt, "", "connect", "502", errUpgradeH2)
			return hc.errorResponse(502, true)
		}
		return hc.upgrade(rt, set, &a)
	}
	if rt.buffer > 0 && req.HasBody() {
		if err := hc.readBodyAhead(rt); err != nil {
			return hc.bodyFailed(err)
		}
	}
	if b.h2t != nil {
		return hc.toH2Backend(rt, set, &a)
	}
	replayable := idempotent(req.Method) && (!req.HasBody() || hc.bodyState == bodyWhole)
	upStart := time.Now()
	hc.work.begin(hc.c)
	defer hc.work.end()
	uc, ep, status, err := exchangeUpstream(hc.f, hc, rt, set, &a, replayable, &hc.resp)
	switch {
	case err != nil:
		return hc.bodyFailed(err)
	case uc == nil:
		return hc.errorResponse(status, true)
	}
	hc.entry.upstream, hc.entry.backend, hc.entry.endpoint = time.Since(upStart), b.name, ep.addr
	b.responseTime.Observe(hc.entry.upstream)
	if b.cfg.Balancer == config.BalancerCookie && a.sticky != ep {
		hc.extra = append(hc.extra, "Set-Cookie: "...)
		hc.extra = b.appendCookie(hc.extra, ep, hc.entry.start)
		hc.extra = append(hc.extra, "\r\n"...)
	}
	keep := hc.forwardResponse(uc, rt)
	ep.inflight.Add(-1)
	return keep
}

// lastRequest reports whether the request being served is the
// connection's last (http.maxRequestsPerConnection, nginx's
// keepalive_requests): its response says Connection: close.
func (hc *h1conn) lastRequest() bool {
	return hc.requests >= hc.f.p.cfg.HTTP.MaxRequestsPerConnection
}

// upstreamStatus is the answer to a request that no backend answered: 504
// when the last attempt timed out (connecting, or waiting for the
// response), else 502 (refused, reset, or a response that breaks a rule).
// Every kind of timeout error counts, whichever of the dialer's timer and
// the socket's deadline fired first.
func upstreamStatus(err error) int {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return 504
	}
	return 502
}

// upstreamFault reports whether a failed exchange failed on the upstream
// side (worth another attempt) rather than the client's.
func upstreamFault(err error) bool {
	var ce *clientError
	return !errors.As(err, &ce)
}

// refuse answers a request head that breaks a rule.
func (hc *h1conn) refuse(err error) bool {
	hc.f.p.log.Debug("request refused", zap.ByteString("client", hc.client), zap.Error(err))
	return hc.errorResponse(refusalStatus(err), true)
}

// refusalStatus is the status that answers a request refused by err: the
// rule's (an *h1.Error's), else 400.
func refusalStatus(err error) int {
	var he *h1.Error
	if errors.As(err, &he) {
		return he.Status
	}
	return 400
}

// bodyFailed ends a request whose body could not be relayed: the client
// went away (nothing to answer), or its body broke a rule or the limit
// (answered with the rule's status). The connection closes either way.
func (hc *h1conn) bodyFailed(err error) bool {
	var he *h1.Error
	if errors.As(err, &he) {
		return hc.refuse(err)
	}
	if errors.Is(err, errClientGone) {
		hc.entry.status = statusClientGone
	}
	hc.f.p.log.Debug("client went away mid-request", zap.Error(err))
	return false
}

func idempotent(method []byte) bool {
	switch string(method) {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE":
		return true
	}
	return false
}

// sendContinue answers a client that waits for 100 Continue before it
// sends its body, as nginx does: the backend never decides.
func (hc *h1conn) sendContinue() error {
	req := &hc.req
	if !req.ExpectContinue || hc.continued || req.Minor == 0 || !req.HasBody() {
		return nil
	}
	hc.continued = true
	hc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	if err := hc.bw.Flush(); err != nil {
		return &clientError{err}
	}
	return nil
}

// readBodyAhead reads the request body into hc.body before an upstream is
// chosen, up to the route's bufferRequestBody: all of it (bodyWhole), or,
// for a chunked body that turns out larger, a prefix (bodyPrefix) that
// sendRequest sends before streaming the rest. A Content-Length body larger
// than the buffer is streamed from the start.
func (hc *h1conn) readBodyAhead(rt *routed) error {
	req := &hc.req
	if req.ContentLength > rt.buffer {
		return nil
	}
	if err := hc.sendContinue(); err != nil {
		return err
	}
	hc.body.reset()
	hc.out = h1.Body{Src: hc.rd, Dst: &hc.body, Timeout: hc.f.p.cfg.HTTP.IdleTimeout.Std(), Limit: rt.buffer}
	var err error
	if req.Chunked {
		err = hc.out.CopyChunked(true)
	} else {
		err = hc.out.CopyN(req.ContentLength)
	}
	switch {
	case err == nil:
		hc.bodyState = bodyWhole
	case err == h1.ErrBodyTooLarge && (rt.maxBody == 0 || rt.maxBody > rt.buffer):
		hc.bodyState = bodyPrefix
	default:
		return clientSide(err)
	}
	return nil
}

// clientSide marks an error of a request body copy as the client's
// (reading it, or its framing or size), unless writing upstream failed.
func clientSide(err error) error {
	var we *h1.WriteError
	if errors.As(err, &we) {
		return err
	}
	var re *h1.ReadError
	if errors.As(err, &re) {
		return &clientError{re.Err}
	}
	return &clientError{err}
}

// upstream is the upstream work of the request being served.
func (hc *h1conn) upstream() *upstreamWork { return &hc.work }

// sendRequest writes the request head and body to uc.
func (hc *h1conn) sendRequest(uc *upConn, rt *routed) error {
	if !hc.work.using(uc) {
		return &clientError{errClientGone}
	}
	req := &hc.req
	if err := hc.sendContinue(); err != nil {
		return err
	}
	proto := "http"
	if hc.tls != nil {
		proto = "https"
	}
	fwd := h1.Forwarded{For: hc.client, Proto: proto, Host: uc.pool.addr, Trusted: hc.trusted}
	hc.f.mirror(rt, req, hc.bodyState, hc.body.b, fwd)
	writeRequestHead(uc, rt, req, hc.bodyState, hc.body.b, &fwd)
	var err error
	switch hc.bodyState {
	case bodyPrefix:
		hc.out.Dst, hc.out.Limit = uc.bw, rt.maxBody
		err = hc.out.CopyChunked(false)
	case bodyStreamed:
		hc.out = h1.Body{Src: hc.rd, Dst: uc.bw, Timeout: hc.f.p.cfg.HTTP.IdleTimeout.Std(), Limit: rt.maxBody}
		switch {
		case req.Chunked:
			err = hc.out.CopyChunked(false)
		case req.ContentLength > 0:
			err = hc.out.CopyN(req.ContentLength)
		}
	}
	if err != nil {
		return clientSide(err)
	}
	return uc.flushRequest()
}

// forwardResponse writes the response head and body to the client, returns
// uc to its pool when it can serve again, and reports whether the client
// connection can.
func (hc *h1conn) forwardResponse(uc *upConn, rt *routed) bool {
	b := rt.backend
	p := hc.f.p
	req, resp := &hc.req, &hc.resp
	noBody := resp.NoBody(req.Method)
	untilEOF := !noBody && !resp.Chunked && resp.ContentLength < 0
	decode := resp.Chunked && !noBody && req.Minor == 0
	keep := !req.Close && !untilEOF && !decode && !p.draining.Load() && !hc.lastRequest()
	hc.closeAsked = req.Close && !req.HasBody()

	if rt.rule.Filters.CORS != nil { // the Origin lookup only for a rule with CORS
		hc.extra = rt.appendCORS(hc.extra, req.Field("origin"), false)
	}
	out := h1.ResponseOut{Body: h1.Framing{Length: resp.ContentLength, Chunked: resp.Chunked}, Extra: hc.extra}
	if e := rt.rule.ResponseEdit; e != nil {
		out.Edit = e
	}
	switch {
	case noBody && (string(req.Method) == "HEAD" || resp.Status == 304):
		// The length a GET would have had, as the backend said it.
		out.Body.Chunked = false
	case noBody:
		out.Body = h1.Framing{Length: -1}
	case decode:
		out.Body = h1.Framing{Length: -1} // an HTTP/1.0 client reads to the close
	}
	switch {
	case !keep:
		out.Connection = "close"
	case req.Minor == 0:
		out.Connection = "keep-alive"
	}
	extendWriteDeadline(hc.c, &hc.wdl, time.Now(), clientWriteTimeout)
	sent := hc.cw.n
	hc.entry.status = resp.Status
	resp.WriteHead(hc.bw, &out)

	hc.in = h1.Body{Src: uc.rd, Dst: hc.bw, Timeout: b.responseTimeout}
	var err error
	switch {
	case noBody:
	case resp.Chunked:
		err = hc.in.CopyChunked(decode)
	case resp.ContentLength >= 0:
		err = hc.in.CopyN(resp.ContentLength)
	default:
		err = hc.in.CopyUntilEOF()
	}
	if err == nil {
		if ferr := hc.bw.Flush(); ferr != nil {
			err = &h1.WriteError{Err: ferr}
		}
	}
	if !hc.work.using(nil) {
		// The client went away while the response came: the upstream
		// connection was cut, and is closed.
		uc.c.Close()
		return false
	}
	if err == nil && reusable(uc, resp, untilEOF) {
		uc.pool.put(uc, time.Now())
	} else {
		uc.c.Close()
	}
	if err != nil {
		var we *h1.WriteError
		if errors.As(err, &we) {
			return false // the client went away
		}
		if hc.cw.n == sent {
			// Nothing reached the client yet: it gets a 502 instead of
			// a response cut short.
			hc.bw.Reset(&hc.cw)
			hc.f.failed(rt, uc.pool.addr, "response", "502", err)
			return hc.errorResponse(502, true)
		}
		hc.f.failed(rt, uc.pool.addr, "response body", "cut off", err)
		p.stats.errors.Add(1)
		return false
	}
	return keep
}

// upgrade proxies a protocol switch (WebSocket): the request goes on a new
// upstream connection; on 101 both connections are joined until they end.
func (hc *h1conn) upgrade(rt *routed, set *endpointSet, a *attempt) bool {
	b := rt.backend
	if hc.req.HasBody() {
		return hc.errorResponse(400, true)
	}
	hc.work.begin(hc.c)
	defer hc.work.end()
	var (
		uc  *upConn
		err error
	)
	for {
		ep := b.pick(set, a)
		if ep == nil {
			status := upstreamStatus(err)
			hc.f.failed(rt, "", "connect", strconv.Itoa(status)+" (no endpoint left)", err)
			return hc.errorResponse(status, true)
		}
		a.tried(ep)
		if uc, err = ep.conn(&hc.work, b, true); err == nil {
			break
		}
		if hc.work.isAborted() {
			hc.entry.status = statusClientGone
			return false
		}
		b.connectFailures.Add(1)
		hc.f.failed(rt, ep.addr, "connect", "next endpoint", err)
	}
	err = hc.sendRequest(uc, rt)
	if err == nil {
		err = readResponseHead(uc, &hc.resp, rt)
	}
	if err != nil {
		uc.c.Close()
		status := upstreamStatus(err)
		hc.f.failed(rt, uc.pool.addr, "response", strconv.Itoa(status), err)
		return hc.errorResponse(status, true)
	}
	if hc.resp.Status != 101 {
		hc.resp.Close = true // not kept: it was dialled for the upgrade
		return hc.forwardResponse(uc, rt)
	}
	hc.entry.status = 101
	hc.resp.WriteHead(hc.bw, &h1.ResponseOut{Body: h1.Framing{Length: -1}, Connection: "Upgrade"})
	if err := hc.bw.Flush(); err != nil {
		uc.c.Close()
		return false
	}
	hc.work.end() // the tunnel ends when either side closes, on its own
	hc.f.inflight.Add(1)
	keepAlive(hc.c) // a tunnel may be silent for long
	tunnel(hc.c, hc.rd, uc.c, uc.rd, hc.f.gp.Go)
	hc.f.inflight.Done()
	uc.c.Close()
	return false
}

// cookieValue returns the value of the request's cookie named name, or
// nil.
func cookieValue(req *h1.Request, name string) []byte {
	for i := range req.Fields {
		f := &req.Fields[i]
		if !h1.EqualFold(f.Name, "cookie") {
			continue
		}
		v := f.Value
		for len(v) > 0 {
			var pair []byte
			if i := bytes.IndexByte(v, ';'); i >= 0 {
				pair, v = v[:i], v[i+1:]
			} else {
				pair, v = v, nil
			}
			pair = bytes.TrimLeft(pair, " \t")
			if len(pair) > len(name) && pair[len(name)] == '=' && string(pair[:len(name)]) == name {
				return pair[len(name)+1:]
			}
		}
	}
	return nil
}

// countWriter writes to a connection and counts the bytes, so that a
// response that fails can tell whether any of it reached the client.
type countWriter struct {
	c net.Conn
	n int64
}

func (w *countWriter) Write(p []byte) (int, error) {
	n, err := w.c.Write(p)
	w.n += int64(n)
	return n, err
}

// memWriter is an h1.Writer into memory, for bodies read ahead.
type memWriter struct{ b []byte }

func (m *memWriter) Write(p []byte) (int, error) {
	m.b = append(m.b, p...)
	return len(p), nil
}

func (m *memWriter) Flush() error { return nil }

// reset empties m, keeping a small buffer for the next body.
func (m *memWriter) reset() {
	if cap(m.b) > 64<<10 {
		m.b = nil
	}
	m.b = m.b[:0]
}

// errorResponse answers with a short error and reports whether the
// connection may go on (not when closing, or a request body is unread).
func (hc *h1conn) errorResponse(status int, closeConn bool) bool {
	p := hc.f.p
	p.stats.errors.Add(1)
	hc.entry.status = status
	hc.entry.bodyOut = int64(len(statusText[status]) + 8)
	closeConn = closeConn || p.draining.Load() || hc.req.Close || hc.lastRequest()
	text := statusText[status]
	w := hc.bw
	extendWriteDeadline(hc.c, &hc.wdl, time.Now(), clientWriteTimeout)
	w.WriteString("HTTP/1.1 ")
	w.WriteString(strconv.Itoa(status))
	w.WriteByte(' ')
	w.WriteString(text)
	w.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ")
	w.WriteString(strconv.Itoa(len(text) + 8))
	if closeConn {
		w.WriteString("\r\nConnection: close")
	}
	w.WriteString("\r\n\r\nbaton: ")
	w.WriteString(text)
	w.WriteByte('\n')
	if err := w.Flush(); err != nil {
		return false
	}
	return !closeConn
}

var statusText = map[int]string{
	301: "Moved Permanently",
	302: "Found",
	303: "See Other",
	307: "Temporary Redirect",
	308: "Permanent Redirect",
	500: "Internal Server Error",
	400: "Bad Request",
	403: "Forbidden",
	204: "No Content",
	404: "Not Found",
	405: "Method Not Allowed",
	413: "Content Too Large",
	421: "Misdirected Request",
	408: "Request Timeout",
	431: "Request Header Fields Too Large",
	501: "Not Implemented",
	502: "Bad Gateway",
	503: "Service Unavailable",
	504: "Gateway Timeout",
	505: "HTTP Version Not Supported",
}

// redirect answers a request whose rule redirects it (the Gateway API's
// RequestRedirect filter), without a body; the connection goes on unless
// a body of the request's is left unread.
func (hc *h1conn) redirect(rt *routed) bool {
	scheme := "http"
	if hc.tls != nil {
		scheme = "https"
	}
	status := rt.rule.Filters.Redirect.Status()
	hc.extra = append(hc.extra[:0], "Location: "...)
	hc.extra = rt.location(hc.extra, &hc.req, scheme, localPort(hc.c))
	hc.extra = append(hc.extra, "\r\nContent-Length: 0\r\n"...)
	return hc.answer(status, hc.extra)
}

// preflight answers a CORS preflight of a rule with CORS (204, the Allow
// headers, no body), as ingress-nginx's enable-cors does; the connection
// goes on unless a body of the request's is left unread.
func (hc *h1conn) preflight(rt *routed) bool {
	hc.extra = rt.appendCORS(hc.extra[:0], hc.req.Field("origin"), true)
	return hc.answer(204, hc.extra)
}

// answer writes a bodiless answer of baton's own: status and the header
// lines fields (each ending in CRLF). It reports whether the connection
// goes on: not when a body of the request's is left unread, the client
// asked to close, or the worker drains.
func (hc *h1conn) answer(status int, fields []byte) bool {
	hc.entry.status = status
	closeConn := hc.req.HasBody() || hc.req.Close || hc.f.p.draining.Load() || hc.lastRequest()
	w := hc.bw
	extendWriteDeadline(hc.c, &hc.wdl, time.Now(), clientWriteTimeout)
	w.WriteString("HTTP/1.1 ")
	w.WriteString(strconv.Itoa(status))
	w.WriteByte(' ')
	w.WriteString(statusText[status])
	w.WriteString("\r\n")
	w.Write(fields)
	if closeConn {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
	if err := w.Flush(); err != nil {
		return false
	}
	return !closeConn
}

// localPort is the port c was accepted on (the listener's), 0 when it has
// none.
func localPort(c net.Conn) int {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// headError answers a request head that could not be read, where an answer
// makes sense, before the connection closes.
func (hc *h1conn) headError(err error) {
	hc.takeWriter()
	var he *h1.Error
	switch {
	case hc.c == nil:
	case errors.As(err, &he):
		hc.refuse(err)
	case isTimeout(err) && len(hc.rd.Buffered()) > 0:
		hc.errorResponse(408, true)
	}
}

// finish closes the connection, lingering so that the client reads the
// last response before the close.
func (hc *h1conn) finish() {
	f := hc.f
	if hc.parked {
		hc.parked = false
		f.recycle(hc)
		return
	}
	if hc.c != nil {
		// Closing with unread input resets the connection, which can
		// destroy the last response before the client reads it: then
		// close our side, and read until the client closes its own. (A
		// TLS connection just closes: its close_notify says the end.)
		if hc.tls == nil && hc.unreadInput() {
			if cw, ok := hc.c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				hc.c.SetReadDeadline(time.Now().Add(lingerTimeout))
				io.Copy(io.Discard, hc.c)
			}
		}
		hc.c.Close()
	}
	f.forget(hc)
}

// unreadInput reports whether the client may have sent bytes not read
// yet, which a close would answer with a reset. A peek asks the socket,
// unless the reads have said already: the input came to its end, or the
// last request said close, had no body, and the read that took it left
// the socket empty (bytes after it break RFC 9112 §9.6; nginx lingers on
// the same signs, its short read included).
func (hc *h1conn) unreadInput() bool {
	if len(hc.rd.Buffered()) > 0 {
		return true
	}
	if sc, ok := hc.c.(*sockConn); ok && (sc.eof || hc.closeAsked && sc.short) {
		return false
	}
	return pendingInput(hc.c)
}

// wake is the drain's way to close an idle connection: it marks it closing
// and interrupts its wait for a request. A request arriving at that moment
// is still served.
func (hc *h1conn) wake(c net.Conn) {
	hc.closeMu.Lock()
	defer hc.closeMu.Unlock()
	if hc.state.CompareAndSwap(connIdle, connClosing) {
		c.SetReadDeadline(time.Unix(1, 0))
	}
}

// clientError marks a failure on the client's side of a request.
type clientError struct{ err error }

func (e *clientError) Error() string { return "client: " + e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// prefixConn replays bytes already read before the connection's own.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// CloseWrite closes the writing side of the connection under it. The
// end of an HTTP/2 connection needs it (h2.Conn's lingering close): a
// full close while the client still sends resets the connection, and the
// reset can destroy the last responses before the client reads them.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
