package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
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

// lingerTimeout bounds how long a connection being closed waits for the
// client to close its side, discarding what it sends, so that the kernel
// does not reset the connection under the last response.
const lingerTimeout = 2 * time.Second

// h1conn serves one client connection of an http listener: HTTP/1.x
// requests one after the other, each proxied on a pooled upstream
// connection by this one goroutine.
type h1conn struct {
	f      *httpFrontend
	c      net.Conn
	rd     *reader
	bw     *bufio.Writer
	client []byte // the client's address, for X-Forwarded-For

	state   atomic.Int32
	closeMu sync.Mutex // serialises the drain's closing with the wake-up
	wdl     time.Time  // the write deadline last set

	req       reqHead
	resp      respHead
	setCookie string     // a Set-Cookie to add to the response: name=value
	out       bodyCopier // client to upstream
	in        bodyCopier // upstream to client
}

// serve runs the connection until it closes.
func (hc *h1conn) serve() {
	defer hc.finish()
	for first := true; ; first = false {
		head, err := hc.readRequestHead(first)
		if err != nil {
			hc.headError(err)
			return
		}
		if head == nil {
			return // handed over to HTTP/2
		}
		if !hc.handle(head) {
			return
		}
	}
}

// readRequestHead waits for the next request head. It returns nil, nil
// when the connection turned out to be HTTP/2 and was handed over.
func (hc *h1conn) readRequestHead(first bool) ([]byte, error) {
	cfg := &hc.f.p.cfg.HTTP
	if len(hc.rd.buffered()) == 0 {
		timeout := cfg.IdleTimeout.Std()
		if first {
			timeout = cfg.ReadHeaderTimeout.Std()
		}
		hc.state.Store(connIdle)
		if first {
			hc.rd.setDeadline(time.Now().Add(timeout))
		} else {
			hc.rd.extendDeadline(time.Now(), timeout)
		}
		for {
			var err error
			if hc.state.Load() == connClosing {
				err = os.ErrDeadlineExceeded // the drain woke us before we waited
			} else {
				err = hc.rd.fill()
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
	if first && bytes.HasPrefix(h2Preface, hc.rd.buffered()[:min(len(hc.rd.buffered()), len(h2Preface))]) {
		return nil, hc.maybeHTTP2()
	}
	if !hc.rd.hasHead() {
		// A head that does not come in one piece gets ReadHeaderTimeout
		// from its first byte: a slowloris does not hold the connection.
		hc.rd.setDeadline(time.Now().Add(cfg.ReadHeaderTimeout.Std()))
	}
	return hc.rd.readHead()
}

// activate takes a connection the drain marked closing back to serving a
// request that arrived meanwhile, once the drain's wake-up is done.
func (hc *h1conn) activate() {
	hc.closeMu.Lock()
	hc.state.Store(connActive)
	hc.closeMu.Unlock()
	hc.rd.setDeadline(time.Now().Add(hc.f.p.cfg.HTTP.ReadHeaderTimeout.Std()))
}

var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// maybeHTTP2 reads the whole HTTP/2 preface and hands the connection to the
// HTTP/2 server.
func (hc *h1conn) maybeHTTP2() error {
	for len(hc.rd.buffered()) < len(h2Preface) {
		if err := hc.rd.fill(); err != nil {
			return err
		}
	}
	if !bytes.HasPrefix(hc.rd.buffered(), h2Preface) {
		return errMalformed
	}
	hc.rd.setDeadline(time.Time{})
	pc := &prefixConn{Conn: hc.c, prefix: append([]byte(nil), hc.rd.buffered()...)}
	if !hc.f.h2.hand(pc) {
		return errDraining
	}
	hc.c = nil // the HTTP/2 server owns it now
	return nil
}

var errDraining = errors.New("draining")

// handle proxies one request whose head is head. It reports whether the
// connection may serve another.
func (hc *h1conn) handle(head []byte) bool {
	p := hc.f.p
	p.stats.requests.Add(1)
	req := &hc.req
	if err := parseRequest(req, head); err != nil {
		status := 400
		if err == errVersion {
			status = 505
		}
		hc.errorResponse(status, true)
		return false
	}
	hasBody := req.contentLength > 0 || req.chunked
	rt := p.router.matchBytes(hc.f.name, req.host, requestPath(req.target))
	if rt == nil {
		return hc.errorResponse(404, hasBody || req.close)
	}
	b := rt.backend
	b.requests.Add(1)
	set := b.set.Load()
	if len(set.active) == 0 {
		// The route stays; its Service has nothing serving right now.
		b.errors.Add(1)
		return hc.errorResponse(503, hasBody || req.close)
	}
	var a attempt
	hc.setCookie = ""
	switch b.cfg.Balancer {
	case config.BalancerCookie:
		if v := req.cookie(b.cfg.Cookie); v != nil {
			a.sticky = set.serving[string(v)]
		}
	case config.BalancerHashHeader:
		if v := req.header(b.cfg.HashHeader); v != nil {
			a.hash, a.hashed = hashBytes(v), true
		}
	}
	if req.upgrade != nil {
		return hc.upgrade(b, set, &a)
	}
	replayable := !hasBody && idempotent(req.method)
	retries := 0
	var (
		uc  *upConn
		ep  *endpoint
		err error
	)
	for fresh := false; ; {
		if ep == nil {
			if ep = b.pick(set, &a); ep == nil {
				status := 502
				if isTimeout(err) {
					status = 504
				}
				b.errors.Add(1)
				return hc.errorResponse(status, true)
			}
			a.tried(ep)
		}
		uc, err = ep.conn(context.Background(), b, fresh, !replayable)
		if err != nil {
			// Nothing was sent: another endpoint, always.
			b.connectFailures.Add(1)
			p.log.Debug("connect failed", zap.String("backend", b.name), zap.String("addr", ep.addr), zap.Error(err))
			ep, fresh = nil, false
			continue
		}
		ep.inflight.Add(1)
		err = hc.sendRequest(uc, retries == 0 && !fresh)
		if ce, ok := err.(*clientError); ok {
			ep.inflight.Add(-1)
			uc.c.Close()
			p.log.Debug("client went away mid-request", zap.Error(ce))
			return false
		}
		if err == nil {
			err = hc.readResponseHead(uc)
		}
		if err == nil {
			break
		}
		ep.inflight.Add(-1)
		uc.c.Close()
		p.log.Debug("upstream failed", zap.String("backend", b.name), zap.String("addr", ep.addr), zap.Error(err))
		switch {
		case uc.reuse && replayable && !fresh && len(uc.rd.buffered()) == 0:
			// A pooled connection the backend had closed: the same
			// endpoint, on a new connection.
			fresh = true
			b.retries.Add(1)
		case replayable && retries < b.cfg.Retries:
			retries++
			ep, fresh = nil, false
			b.retries.Add(1)
		default:
			status := 502
			if isTimeout(err) {
				status = 504
			}
			b.errors.Add(1)
			return hc.errorResponse(status, true)
		}
	}
	if b.cfg.Balancer == config.BalancerCookie && a.sticky != ep {
		hc.setCookie = b.cfg.Cookie + "=" + ep.key
	}
	keep := hc.forwardResponse(uc)
	ep.inflight.Add(-1)
	return keep
}

func idempotent(method []byte) bool {
	switch string(method) {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// sendRequest writes the request head and body to uc.
func (hc *h1conn) sendRequest(uc *upConn, firstAttempt bool) error {
	req := &hc.req
	if req.expectContinue && firstAttempt && req.minor == 1 && (req.contentLength > 0 || req.chunked) {
		// Answer the client's Expect ourselves, as nginx does, and send
		// the body along without making the backend decide.
		hc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := hc.bw.Flush(); err != nil {
			return &clientError{err}
		}
	}
	extendWriteDeadline(uc.c, &uc.wdl, time.Now(), upstreamTimeout)
	hc.writeRequestHead(uc.bw)
	hc.out = bodyCopier{src: hc.rd, dst: uc.bw, timeout: hc.f.p.cfg.HTTP.IdleTimeout.Std()}
	var err error
	switch {
	case req.chunked:
		err = hc.out.copyChunked(false)
	case req.contentLength > 0:
		err = hc.out.copyN(req.contentLength)
	}
	if re, ok := err.(*readError); ok {
		return &clientError{re.err}
	}
	if err != nil {
		return err
	}
	if err := uc.bw.Flush(); err != nil {
		return &writeError{err}
	}
	return nil
}

// writeRequestHead writes the request line and headers for the upstream:
// hop-by-hop headers dropped, X-Forwarded-* added.
func (hc *h1conn) writeRequestHead(w *bufio.Writer) {
	req := &hc.req
	w.Write(req.method)
	w.WriteByte(' ')
	w.Write(req.target)
	w.WriteString(" HTTP/1.1\r\n")
	var xff [][]byte
	for _, h := range req.headers {
		switch {
		case isHopByHop(h.name, req.hopByHop):
			continue
		case len(h.name) == 15 && eqFold(h.name, "x-forwarded-for"):
			xff = append(xff, h.value)
			continue
		case len(h.name) > 12 && (eqFold(h.name, "x-forwarded-host") || eqFold(h.name, "x-forwarded-proto")):
			continue
		case len(h.name) == 6 && eqFold(h.name, "expect"):
			continue
		}
		w.Write(h.line)
		w.Write(crlf)
	}
	w.WriteString("X-Forwarded-For: ")
	for _, v := range xff {
		w.Write(v)
		w.WriteString(", ")
	}
	w.Write(hc.client)
	w.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	if req.host != nil {
		w.WriteString("X-Forwarded-Host: ")
		w.Write(req.host)
		w.Write(crlf)
	}
	if req.chunked {
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if req.upgrade != nil {
		w.WriteString("Connection: Upgrade\r\nUpgrade: ")
		w.Write(req.upgrade)
		w.Write(crlf)
	}
	w.Write(crlf)
}

// readResponseHead reads the response head from uc into hc.resp, skipping
// interim (1xx) responses other than 101.
func (hc *h1conn) readResponseHead(uc *upConn) error {
	for {
		uc.rd.extendDeadline(time.Now(), upstreamTimeout)
		head, err := uc.rd.readHead()
		if err != nil {
			return &readError{err}
		}
		if err := parseResponse(&hc.resp, head); err != nil {
			return &readError{err}
		}
		if hc.resp.status >= 200 || hc.resp.status == 101 {
			return nil
		}
	}
}

// forwardResponse writes the response head and body to the client, returns
// uc to its pool when it can serve again, and reports whether the client
// connection can.
func (hc *h1conn) forwardResponse(uc *upConn) bool {
	p := hc.f.p
	req, resp := &hc.req, &hc.resp
	noBody := string(req.method) == "HEAD" || resp.status == 204 || resp.status == 304 || resp.status == 101
	untilEOF := !noBody && !resp.chunked && resp.contentLength < 0
	decode := resp.chunked && !noBody && req.minor == 0
	keep := !req.close && !untilEOF && !decode && !p.draining.Load()

	w := hc.bw
	extendWriteDeadline(hc.c, &hc.wdl, time.Now(), upstreamTimeout)
	w.WriteString("HTTP/1.1 ")
	w.Write(resp.statusLine)
	w.Write(crlf)
	for _, h := range resp.headers {
		if isHopByHop(h.name, resp.hopByHop) {
			continue
		}
		w.Write(h.line)
		w.Write(crlf)
	}
	if resp.chunked && !decode && !noBody {
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if hc.setCookie != "" {
		w.WriteString("Set-Cookie: ")
		w.WriteString(hc.setCookie)
		w.WriteString("; Path=/; HttpOnly\r\n")
	}
	switch {
	case !keep:
		w.WriteString("Connection: close\r\n")
	case req.minor == 0:
		w.WriteString("Connection: keep-alive\r\n")
	}
	w.Write(crlf)

	hc.in = bodyCopier{src: uc.rd, dst: w, timeout: upstreamTimeout}
	var err error
	switch {
	case noBody:
	case resp.chunked:
		err = hc.in.copyChunked(decode)
	case resp.contentLength >= 0:
		err = hc.in.copyN(resp.contentLength)
	default:
		err = hc.in.copyUntilEOF()
	}
	if err == nil {
		if ferr := w.Flush(); ferr != nil {
			err = &writeError{ferr}
		}
	}
	if err != nil || resp.close || untilEOF || len(uc.rd.buffered()) > 0 {
		uc.c.Close()
	} else {
		uc.pool.put(uc, time.Now())
	}
	if err != nil {
		if _, ok := err.(*readError); ok {
			p.stats.errors.Add(1)
			p.log.Debug("upstream response broke off", zap.String("addr", uc.pool.addr), zap.Error(err))
		}
		return false
	}
	return keep
}

// upgrade proxies a protocol switch (WebSocket): the request goes on a new
// upstream connection; on 101 both connections are joined until they end.
func (hc *h1conn) upgrade(b *backend, set *endpointSet, a *attempt) bool {
	req := &hc.req
	if req.contentLength > 0 || req.chunked {
		return hc.errorResponse(400, true)
	}
	var uc *upConn
	for {
		ep := b.pick(set, a)
		if ep == nil {
			return hc.errorResponse(502, true)
		}
		a.tried(ep)
		var err error
		if uc, err = ep.conn(context.Background(), b, true, false); err == nil {
			break
		}
	}
	err := hc.sendRequest(uc, true)
	if err == nil {
		err = hc.readResponseHead(uc)
	}
	if err != nil {
		uc.c.Close()
		return hc.errorResponse(502, true)
	}
	if hc.resp.status != 101 {
		hc.resp.close = true // not kept: it was dialled for the upgrade
		return hc.forwardResponse(uc)
	}
	w := hc.bw
	w.WriteString("HTTP/1.1 ")
	w.Write(hc.resp.statusLine)
	w.Write(crlf)
	for _, h := range hc.resp.headers {
		if isHopByHop(h.name, hc.resp.hopByHop) && !eqFold(h.name, "upgrade") {
			continue
		}
		w.Write(h.line)
		w.Write(crlf)
	}
	w.WriteString("Connection: Upgrade\r\n\r\n")
	if err := w.Flush(); err != nil {
		uc.c.Close()
		return false
	}
	hc.f.inflight.Add(1)
	tunnel(hc.c, hc.rd, uc.c, uc.rd)
	hc.f.inflight.Done()
	uc.c.Close()
	return false
}

// errorResponse answers with a short error and reports whether the
// connection may go on (not when closing, or a request body is unread).
func (hc *h1conn) errorResponse(status int, closeConn bool) bool {
	p := hc.f.p
	p.stats.errors.Add(1)
	closeConn = closeConn || p.draining.Load() || hc.req.close
	text := statusText[status]
	w := hc.bw
	extendWriteDeadline(hc.c, &hc.wdl, time.Now(), upstreamTimeout)
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
	400: "Bad Request",
	404: "Not Found",
	408: "Request Timeout",
	431: "Request Header Fields Too Large",
	502: "Bad Gateway",
	503: "Service Unavailable",
	504: "Gateway Timeout",
	505: "HTTP Version Not Supported",
}

// headError answers a request head that could not be read, where an answer
// makes sense, before the connection closes.
func (hc *h1conn) headError(err error) {
	switch {
	case hc.c == nil:
	case errors.Is(err, errHeadTooLarge):
		hc.errorResponse(431, true)
	case errors.Is(err, errMalformed):
		hc.errorResponse(400, true)
	case isTimeout(err) && len(hc.rd.buffered()) > 0:
		hc.errorResponse(408, true)
	}
}

// finish closes the connection, lingering so that the client reads the
// last response before the close.
func (hc *h1conn) finish() {
	f := hc.f
	if hc.c != nil {
		// Closing with unread input resets the connection, which can
		// destroy the last response before the client reads it: then
		// close our side, and read until the client closes its own.
		if len(hc.rd.buffered()) > 0 || pendingInput(hc.c) {
			if cw, ok := hc.c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				hc.c.SetReadDeadline(time.Now().Add(lingerTimeout))
				io.Copy(io.Discard, hc.c)
			}
		}
		hc.c.Close()
	}
	f.forget(hc)
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

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
