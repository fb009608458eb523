package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/h2"
	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// h2client is what the streams of one HTTP/2 connection share: where the
// connection came from.
type h2client struct {
	f        *httpFrontend
	client   []byte     // the client's address, for X-Forwarded-For
	clientIP netip.Addr // and parsed, for rules' Access
	trusted  bool
	proto    string   // "https" over TLS, else "http"
	port     int      // the port the connection was accepted on
	peer     *tlsPeer // the client's side of TLS (its connection's)
	// For the access log.
	tlsVersion, sni string
}

// serveH2 serves c, a connection that chose HTTP/2 (by ALPN, or by its
// preface), in the connection's goroutine, until it ends. The drain ends
// it with GOAWAY (see httpFrontend.drain).
func (hc *h1conn) serveH2(c net.Conn) {
	f := hc.f
	cl := &h2client{f: f, client: append([]byte(nil), hc.client...), clientIP: hc.clientIP, trusted: hc.trusted, proto: "http", port: localPort(c), peer: &hc.peer}
	if hc.tls != nil {
		cs := hc.tls.ConnectionState()
		cl.proto, cl.tlsVersion, cl.sni = "https", tlsVersionName(cs.Version), cs.ServerName
	}
	cfg := &f.p.cfg.HTTP
	sc := h2.NewConn(c, h2.Config{
		MaxHeaderListSize: uint32(cfg.MaxHeaderBytes),
		MaxRequests:       cfg.MaxRequestsPerConnection,
		PrefaceTimeout:    cfg.ReadHeaderTimeout.Std(),
		HeaderTimeout:     cfg.ReadHeaderTimeout.Std(),
		IdleTimeout:       cfg.IdleTimeout.Std(),
		WriteTimeout:      clientWriteTimeout,
		Go:                f.gp.Go,
		Logf:              cl.logf,
	}, cl.serve)
	f.mu.Lock()
	delete(f.live, hc) // the drain ends it with GOAWAY, not as an idle HTTP/1.1 connection
	f.h2live[sc] = struct{}{}
	draining := f.draining
	f.mu.Unlock()
	if draining {
		sc.Shutdown()
	}
	if err := sc.Serve(); err != nil {
		f.p.log.Debug("http2 connection", zap.String("listener", f.name), zap.ByteString("client", cl.client), zap.Error(err))
	}
	f.mu.Lock()
	delete(f.h2live, sc)
	f.mu.Unlock()
}

// h2exchange proxies one HTTP/2 stream to an HTTP/1.1 upstream. The
// request's head is written as an HTTP/1.1 head and parsed by package h1,
// so that a request over HTTP/2 meets every rule one over HTTP/1.1 does
// (docs/security.md), routes the same way, and is forwarded by the same
// code.
type h2exchange struct {
	cl   *h2client
	s    *h2.Stream
	req  h1.Request
	resp h1.Response
	head []byte
	buf  []byte // request body copies
	// over holds body bytes read past a copy's limit: the first bytes of
	// the next copy (a body read ahead as a prefix goes on from them).
	over []byte
	num  []byte // a number being formatted
	// The target as the access log writes it, when it has a query.
	target []byte
	// The sticky cookie to set, when the balancer wants one.
	cookie []byte
	entry  accessEntry
	in     h1.Body
	// A request body read before the upstream is chosen (a route's
	// bufferRequestBody), as h1conn's.
	body      memWriter
	bodyState bodyState
	bodyIn    int64
	continued bool // 100 Continue was sent
	// work is the stream's upstream work, aborted when the stream is
	// reset or its connection ends.
	work upstreamWork
	// rt is where the stream's request goes.
	rt routed
	// grpc: the request is a gRPC call (isGRPC); deadline, its
	// grpc-timeout's end.
	grpc     bool
	deadline time.Time
}

var h2exchanges = sync.Pool{New: func() any { return &h2exchange{buf: make([]byte, 16<<10)} }}

// logf logs one of package h2's protocol errors, at debug level.
func (cl *h2client) logf(format string, args ...any) {
	if ce := cl.f.p.log.Check(zap.DebugLevel, "http2"); ce != nil {
		ce.Message = fmt.Sprintf(format, args...)
		ce.Write(zap.String("listener", cl.f.name), zap.ByteString("client", cl.client))
	}
}

// serve proxies stream s.
func (cl *h2client) serve(s *h2.Stream) {
	f := cl.f
	x := h2exchanges.Get().(*h2exchange)
	defer h2exchanges.Put(x)
	x.start(cl, s)
	e := &x.entry
	s.OnReset(x.work.abort)
	x.serve()
	s.OnReset(nil)
	f.metrics.request(e.backend, e.status, time.Since(e.start))
	if al := f.p.access; al != nil {
		e.bytesIn = int64(len(x.head)) + x.bodyIn
		e.bytesOut = e.bodyOut
		al.log(e)
	}
	x.s, x.cl = nil, nil
}

// start readies x, from the pool, for stream s of cl.
func (x *h2exchange) start(cl *h2client, s *h2.Stream) {
	x.cl, x.s = cl, s
	x.work.begin(nil)
	x.cookie, x.over = x.cookie[:0], x.over[:0]
	x.continued, x.grpc, x.deadline = false, false, time.Time{}
	x.bodyState, x.bodyIn = bodyStreamed, 0
	f := cl.f
	x.entry = accessEntry{start: time.Now(), listener: f.name, client: cl.client, proto: "HTTP/2.0", upstream: -1, generation: f.p.Generation,
		tlsVersion: cl.tlsVersion, sni: cl.sni}
}

// upstream is the stream's upstream work.
func (x *h2exchange) upstream() *upstreamWork { return &x.work }

func (x *h2exchange) serve() {
	p := x.cl.f.p
	p.stats.requests.Add(1)
	s, req := x.s, &x.req
	if s.TooLarge {
		x.errorResponse(431)
		return
	}
	if err := x.parseHead(); err != nil {
		p.log.Debug("request refused", zap.ByteString("client", x.cl.client), zap.Error(err))
		x.errorResponse(refusalStatus(err))
		return
	}
	e := &x.entry
	if x.grpc = isGRPC(req); x.grpc {
		x.deadline = grpcDeadline(req, e.start)
	}
	e.method, e.host, e.target = req.Method, req.Authority, x.logTarget()
	e.referer, e.userAgent = req.Field("referer"), req.Field("user-agent")
	var a attempt
	rt := &x.rt
	set, status := p.route(x.cl.f.name, x.cl.clientIP, x.cl.peer, req, rt, &a, e)
	defer rt.release()
	switch status {
	case 0:
	case routeRedirect:
		x.redirect(rt)
		return
	case routePreflight:
		x.preflight(rt, req)
		return
	case routeLimited:
		x.errorResponse(503)
		return
	case routeCertErrorPage:
		x.certErrorPage(rt)
		return
	case 503:
		x.cl.f.noEndpoint(rt)
		fallthrough
	default:
		x.errorResponse(status)
		return
	}
	b := rt.backend
	if rt.buffer > 0 && req.HasBody() {
		if err := x.readBodyAhead(rt); err != nil {
			x.bodyFailed(err)
			return
		}
	}
	if b.h2t != nil {
		x.toH2Backend(rt, set, &a)
		return
	}
	replayable := idempotent(req.Method) && (!req.HasBody() || x.bodyState == bodyWhole)
	upStart := time.Now()
	uc, ep, status, err := exchangeUpstream(x.cl.f, x, rt, set, &a, replayable, &x.resp)
	switch {
	case err != nil:
		x.bodyFailed(err)
		return
	case uc == nil:
		x.errorResponse(status)
		return
	}
	e.upstream, e.endpoint = time.Since(upStart), ep.addr
	b.responseTime.Observe(e.upstream)
	if b.cfg.Balancer == config.BalancerCookie && a.sticky != ep {
		x.cookie = b.appendCookie(x.cookie, ep, e.start)
	}
	x.forwardResponse(uc, rt)
	ep.inflight.Add(-1)
}

// logTarget is the request's target as the access log writes it.
func (x *h2exchange) logTarget() []byte {
	if len(x.req.Query) == 0 {
		return x.req.Path
	}
	x.target = append(append(x.target[:0], x.req.Path...), x.req.Query...)
	return x.target
}

// parseHead writes the stream's request head as an HTTP/1.1 head and
// parses it into x.req.
func (x *h2exchange) parseHead() error {
	var err error
	if x.head, err = appendH1Head(x.head[:0], &x.s.Request, x.s.HasBody()); err != nil {
		return err
	}
	return x.req.Parse(x.head)
}

// appendH1Head appends r as an HTTP/1.1 request head (body: a body follows,
// framed by r's content-length, else chunked). What HTTP/2 allows and an
// HTTP/1.1 head cannot say is refused first: a :path that is not
// origin-form (RFC 9113 §8.3.1), a Host that names another authority than
// :authority. Cookie fields are joined into one (RFC 9113 §8.2.3). Field
// names and values were checked by h2.ParseRequest (no CR, LF or NUL:
// nothing can end a line early); package h1 then applies every HTTP/1.1
// rule to the whole.
func appendH1Head(h []byte, r *h2.Request, body bool) ([]byte, error) {
	if r.Method == "CONNECT" {
		return h, &h1.Error{Status: 405, Reason: "CONNECT: baton is no forward proxy"}
	}
	if r.Path[0] != '/' && (r.Path != "*" || r.Method != "OPTIONS") {
		return h, &h1.Error{Status: 400, Reason: "HTTP/2 :path not in origin-form"}
	}
	authority := r.Authority
	cookies, hosts := 0, 0
	for _, f := range r.Fields {
		switch f.Name {
		case "host":
			hosts++
			switch {
			case hosts > 1:
				return h, &h1.Error{Status: 400, Reason: "more than one Host"}
			case r.Authority == "":
				authority = f.Value
			case f.Value != r.Authority:
				// RFC 9113 §8.3.1: a server should refuse it.
				return h, &h1.Error{Status: 400, Reason: "Host differs from :authority"}
			}
		case "cookie":
			if f.Value != "" {
				cookies++
			}
		}
	}
	h = append(h, r.Method...)
	h = append(h, ' ')
	h = append(h, r.Path...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(h, authority...)
	h = append(h, "\r\n"...)
	if cookies > 0 {
		h = append(h, "Cookie: "...)
		n := 0
		for _, f := range r.Fields {
			if f.Name == "cookie" && f.Value != "" {
				if n > 0 {
					h = append(h, "; "...)
				}
				h = append(h, f.Value...)
				n++
			}
		}
		h = append(h, "\r\n"...)
	}
	for _, f := range r.Fields {
		switch f.Name {
		case "host", "cookie", "content-length", "te":
			continue
		}
		h = append(h, f.Name...)
		h = append(h, ": "...)
		h = append(h, f.Value...)
		h = append(h, "\r\n"...)
	}
	if body {
		if r.ContentLength >= 0 {
			h = append(h, "Content-Length: "...)
			h = strconv.AppendInt(h, r.ContentLength, 10)
			h = append(h, "\r\n"...)
		} else {
			h = append(h, "Transfer-Encoding: chunked\r\n"...)
		}
	}
	return append(h, "\r\n"...), nil
}

// readBodyAhead reads the request body into x.body before an upstream is
// chosen, as h1conn.readBodyAhead does.
func (x *h2exchange) readBodyAhead(rt *routed) error {
	if x.req.ContentLength > rt.buffer {
		return nil
	}
	x.body.reset()
	_, err := x.copyBody(&x.body, false, rt.buffer)
	switch {
	case err == nil:
		x.bodyState = bodyWhole
	case errors.Is(err, h1.ErrBodyTooLarge) && (rt.maxBody == 0 || rt.maxBody > rt.buffer):
		x.bodyState = bodyPrefix
	default:
		return err
	}
	return nil
}

// bodyFailed ends a request whose body could not be relayed: one over a
// limit is answered 413, one the client stopped sending 408 (nginx's
// client_body_timeout); a stream the client reset gets nothing.
func (x *h2exchange) bodyFailed(err error) {
	switch {
	case errors.Is(err, h1.ErrBodyTooLarge):
		x.errorResponse(413)
	case errors.Is(err, os.ErrDeadlineExceeded):
		x.errorResponse(408)
	case errors.Is(err, errClientGone):
		x.entry.status = statusClientGone
	default:
		x.cl.f.p.log.Debug("client went away mid-request", zap.Error(err))
	}
}

// sendContinue answers a client that waits for 100 Continue before it
// sends its body (RFC 9110 §10.1.1, over HTTP/2 an interim HEADERS), once,
// when the body is about to be read: as over HTTP/1.1, the backend never
// decides, and a request refused before its body (413) gets no 100.
func (x *h2exchange) sendContinue() {
	if !x.req.ExpectContinue || x.continued || !x.req.HasBody() {
		return
	}
	x.continued = true
	x.s.StartResponse(100)
	x.s.SendHeaders(false)
	x.s.Flush()
}

// copyBody copies the stream's body to dst, chunked when chunked is set,
// up to limit bytes (0: no limit), waiting at most the idle timeout for
// each piece. Past the limit it stops with h1.ErrBodyTooLarge, having
// copied limit bytes; what it read beyond them waits in x.over for the
// next copy. It flushes dst before each wait, so that a body streamed
// flows as it comes.
func (x *h2exchange) copyBody(dst h1.Writer, chunked bool, limit int64) (int64, error) {
	s := x.s
	timeout := x.cl.f.p.cfg.HTTP.IdleTimeout.Std()
	x.sendContinue()
	var n int64
	for {
		var (
			buf []byte
			m   int
			err error
		)
		if len(x.over) > 0 {
			m = copy(x.buf, x.over)
			x.over = x.over[:copy(x.over, x.over[m:])]
			buf = x.buf
		} else {
			if s.WouldWait() {
				if err := dst.Flush(); err != nil {
					return n, &h1.WriteError{Err: err}
				}
			}
			s.SetReadDeadline(time.Now().Add(timeout))
			buf = x.buf
			if limit > 0 && int64(len(buf)) > limit-n+1 {
				buf = buf[:limit-n+1] // one byte more tells a body over the limit
			}
			m, err = s.Read(buf)
		}
		if limit > 0 && n+int64(m) > limit {
			keep := int(limit - n)
			x.over = append(x.over, buf[keep:m]...)
			m, err = keep, h1.ErrBodyTooLarge
		}
		if m > 0 {
			if chunked {
				x.num = strconv.AppendInt(x.num[:0], int64(m), 16)
				x.num = append(x.num, "\r\n"...)
				dst.Write(x.num)
			}
			if _, werr := dst.Write(buf[:m]); werr != nil {
				return n, &h1.WriteError{Err: werr}
			}
			if chunked {
				dst.Write(crlf)
			}
			n += int64(m)
			x.bodyIn += int64(m)
		}
		switch {
		case err == io.EOF:
			if chunked {
				if _, werr := dst.Write(lastChunk); werr != nil {
					return n, &h1.WriteError{Err: werr}
				}
			}
			return n, nil
		case err != nil:
			return n, &clientError{err}
		}
	}
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)

// sendRequest writes the request's head and body to uc.
func (x *h2exchange) sendRequest(uc *upConn, rt *routed) error {
	if !x.work.using(uc) {
		return &clientError{errClientGone}
	}
	req := &x.req
	fwd := h1.Forwarded{For: x.cl.client, Proto: x.cl.proto, Host: uc.pool.addr, Trusted: x.cl.trusted}
	x.cl.f.mirror(rt, req, x.bodyState, x.body.b, fwd)
	writeRequestHead(uc, rt, req, x.bodyState, x.body.b, &fwd)
	var err error
	switch x.bodyState {
	case bodyPrefix:
		limit := rt.maxBody
		if limit > 0 {
			limit -= int64(len(x.body.b))
		}
		_, err = x.copyBody(uc.bw, true, limit)
	case bodyStreamed:
		if req.HasBody() {
			_, err = x.copyBody(uc.bw, req.Chunked, rt.maxBody)
		}
	}
	if err != nil {
		return clientSide(err)
	}
	return uc.flushRequest()
}

// forwardResponse sends the response whose head is in x.resp, and its
// body, to the client, and returns uc to its pool when it can serve again.
func (x *h2exchange) forwardResponse(uc *upConn, rt *routed) {
	b := rt.backend
	s, req, resp := x.s, &x.req, &x.resp
	if resp.Status == 101 {
		// A protocol switch nobody asked for (HTTP/2 has none).
		uc.c.Close()
		x.cl.f.failed(rt, uc.pool.addr, "response", "502", errors.New("101 Switching Protocols to an HTTP/2 request"))
		x.errorResponse(502)
		return
	}
	noBody := resp.NoBody(req.Method)
	untilEOF := !noBody && !resp.Chunked && resp.ContentLength < 0
	hb := s.StartResponse(resp.Status)
	edit := rt.rule.ResponseEdit
	for i := range resp.Fields {
		if f := &resp.Fields[i]; !f.Dropped() && (edit == nil || !edit.Drops(f.Name)) {
			hb.Add(f.Name, f.Value)
		}
	}
	if edit != nil {
		for _, f := range edit.Pairs() {
			hb.Add(f.Name, f.Value)
		}
	}
	if resp.ContentLength >= 0 && !resp.Chunked && (!noBody || string(req.Method) == "HEAD" || resp.Status == 304) {
		// The length a GET would have had, for HEAD and 304, as the
		// backend said it.
		x.num = strconv.AppendInt(x.num[:0], resp.ContentLength, 10)
		hb.AddString("content-length", x.num)
	}
	if len(x.cookie) > 0 {
		hb.AddString("set-cookie", x.cookie)
	}
	if c := rt.rule.Filters.CORS; c != nil {
		rt.cors = c.AppendFields(rt.cors[:0], req.Field("origin"), false)
		for _, f := range rt.cors {
			hb.Add(f.Name, f.Value)
		}
	}
	x.entry.status = resp.Status
	var err error
	sent := false
	if noBody {
		err = s.SendHeaders(true)
	} else if err = s.SendHeaders(false); err == nil {
		sent = true
		x.in = h1.Body{Src: uc.rd, Dst: s, Timeout: b.responseTimeout}
		switch {
		case resp.Chunked:
			err = x.in.CopyChunked(true)
		case resp.ContentLength >= 0:
			err = x.in.CopyN(resp.ContentLength)
		default:
			err = x.in.CopyUntilEOF()
		}
		x.entry.bodyOut = x.in.Written
		if err == nil {
			err = s.End()
		}
	}
	aborted := !x.work.using(nil)
	if err == nil && !aborted && reusable(uc, resp, untilEOF) {
		uc.pool.put(uc, time.Now())
	} else {
		uc.c.Close()
	}
	var re *h1.ReadError
	if err != nil && sent && !aborted && errors.As(err, &re) {
		// The response was cut off upstream: the stream is reset, so
		// that the client cannot take a part for the whole.
		s.Reset(http2.ErrCodeInternal)
		x.cl.f.failed(rt, uc.pool.addr, "response body", "cut off", err)
		x.cl.f.p.stats.errors.Add(1)
	}
}

// redirect answers a stream whose rule redirects it, as h1conn's.
func (x *h2exchange) redirect(rt *routed) {
	status := rt.rule.Filters.Redirect.Status()
	x.entry.status = status
	hb := x.s.StartResponse(status)
	x.num = rt.location(x.num[:0], &x.req, x.cl.proto, x.cl.port)
	hb.AddString("location", x.num)
	hb.AddString("content-length", zero)
	x.s.SendHeaders(true)
}

var zero = []byte("0")

// certErrorPage redirects (302) a request refused for its client
// certificate to its host's error page.
func (x *h2exchange) certErrorPage(rt *routed) {
	x.entry.status = 302
	hb := x.s.StartResponse(302)
	x.num = append(x.num[:0], rt.errorPage...)
	hb.AddString("location", x.num)
	hb.AddString("content-length", zero)
	x.s.SendHeaders(true)
}

// preflight answers a CORS preflight of a rule with CORS (204, the Allow
// headers), as h1conn's.
func (x *h2exchange) preflight(rt *routed, req *h1.Request) {
	x.entry.status = 204
	hb := x.s.StartResponse(204)
	rt.cors = rt.rule.Filters.CORS.AppendFields(rt.cors[:0], req.Field("origin"), true)
	for _, f := range rt.cors {
		hb.Add(f.Name, f.Value)
	}
	x.s.SendHeaders(true)
}

// errorResponse answers with a short error of baton's own, as h1conn's.
func (x *h2exchange) errorResponse(status int) {
	if x.grpc {
		x.grpcError(status)
		return
	}
	p := x.cl.f.p
	p.stats.errors.Add(1)
	text := statusText[status]
	x.entry.status = status
	x.entry.bodyOut = int64(len(text) + 8)
	hb := x.s.StartResponse(status)
	hb.AddString("content-type", contentTypeText)
	x.num = strconv.AppendInt(x.num[:0], int64(len(text)+8), 10)
	hb.AddString("content-length", x.num)
	if x.s.SendHeaders(false) != nil {
		return
	}
	x.num = append(append(append(x.num[:0], "baton: "...), text...), '\n')
	x.s.Write(x.num)
	x.s.End()
}

var contentTypeText = []byte("text/plain; charset=utf-8")
