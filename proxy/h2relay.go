package proxy

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/h2"
	"golang.org/x/net/http2"
)

// The client's side of a request to an HTTP/2 backend: an HTTP/2 stream
// (h2exchange.toH2Backend), which gets the response as it came, trailers
// and resets included, or an HTTP/1.1 request (h1conn.toH2Backend), which
// gets it as HTTP/1.1 (its trailers dropped, as nginx drops them).

// errUpgradeH2 is a protocol switch asked of a backend that speaks
// HTTP/2.
var errUpgradeH2 = errors.New("an HTTP/1.1 protocol switch (Upgrade) cannot go to a backend that speaks HTTP/2")

// toH2Backend proxies the stream's request to rt's backend, which speaks
// HTTP/2.
func (x *h2exchange) toH2Backend(rt *routed, set *endpointSet, a *attempt) {
	f := x.cl.f
	req, e := &x.req, &x.entry
	b := rt.backend
	u := upstreamRequest{rt: rt, req: req, length: -1, grpc: x.grpc, deadline: x.deadline,
		fwd: h1.Forwarded{For: x.cl.client, Proto: x.cl.proto, Trusted: x.cl.trusted}}
	var bp *bodyPipe
	switch {
	case x.bodyState == bodyWhole:
		u.whole = x.body.b
	case req.HasBody():
		prefix, limit := []byte(nil), rt.maxBody
		if x.bodyState == bodyPrefix {
			prefix = x.body.b
			if limit > 0 {
				limit -= int64(len(prefix))
			}
		} else {
			u.length = req.ContentLength
		}
		// The trailers the client announced are announced upstream
		// (an HTTP/2 server may keep only those, as net/http's does);
		// what it sends is passed on once its body ends.
		u.trailers = announcedTrailers(req)
		trailers := u.trailers
		bp = startBody(func(w h1.Writer) error {
			if _, err := w.Write(prefix); err != nil {
				return &h1.WriteError{Err: err}
			}
			_, err := x.copyBody(w, false, limit)
			if err == nil {
				for _, tf := range x.s.Trailers() {
					k := http.CanonicalHeaderKey(tf.Name)
					trailers[k] = append(trailers[k], tf.Value)
				}
			}
			return err
		})
		u.body = bp
	}
	replayable := idempotent(req.Method) && bp == nil
	upStart := time.Now()
	up, status, err := exchangeH2(f, &x.work, rt, set, a, replayable, &u, bp)
	if up == nil {
		if bp != nil {
			if berr := bp.wait(x.s.StopReading); berr != nil && err == nil && !errors.Is(berr, errBodyAbandoned) {
				err = clientSide(berr)
			}
		}
		switch {
		case err != nil:
			x.bodyFailed(err)
		default:
			x.errorResponse(status)
		}
		return
	}
	e.upstream, e.endpoint = time.Since(upStart), up.ep.addr
	b.responseTime.Observe(e.upstream)
	if b.cfg.Balancer == config.BalancerCookie && a.sticky != up.ep {
		x.cookie = b.appendCookie(x.cookie, up.ep, e.start)
	}
	x.relayH2(up, rt)
	up.end()
	up.ep.inflight.Add(-1)
	if bp != nil {
		bp.wait(x.s.StopReading)
	}
}

// relayH2 sends the response of up to the stream.
func (x *h2exchange) relayH2(up *h2Upstream, rt *routed) {
	s, req, resp := x.s, &x.req, up.resp
	f := x.cl.f
	hb := s.StartResponse(resp.StatusCode)
	edit := rt.rule.ResponseEdit
	for k, vv := range resp.Header {
		name := []byte(k)
		if edit != nil && edit.Drops(name) {
			continue
		}
		for _, v := range vv {
			hb.Add(name, []byte(v))
		}
	}
	if edit != nil {
		for _, fl := range edit.Pairs() {
			hb.Add(fl.Name, fl.Value)
		}
	}
	if len(x.cookie) > 0 {
		hb.AddString("set-cookie", x.cookie)
	}
	if c := rt.rule.Filters.CORS; c != nil {
		rt.cors = c.AppendFields(rt.cors[:0], req.Field("origin"), false)
		for _, fl := range rt.cors {
			hb.Add(fl.Name, fl.Value)
		}
	}
	x.entry.status = resp.StatusCode
	if resp.ContentLength == 0 {
		// Perhaps a gRPC "Trailers-Only" response: nothing follows the
		// head but, maybe, trailers; they are known at once.
		if _, err := up.read(x.buf[:1]); err == io.EOF && len(resp.Trailer) == 0 {
			s.SendHeaders(true)
			return
		} else if err != nil && err != io.EOF {
			x.upstreamCut(up, rt, err, false)
			return
		}
	}
	// The head goes at once: a stream's body may be a while coming (a
	// gRPC server stream, a response to a body still being sent).
	if s.SendHeaders(false) != nil || s.Flush() != nil {
		return
	}
	for {
		n, err := up.read(x.buf)
		if n > 0 {
			if _, werr := s.Write(x.buf[:n]); werr != nil {
				return // the client reset the stream
			}
			x.entry.bodyOut += int64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			x.upstreamCut(up, rt, err, true)
			return
		}
		if s.Flush() != nil {
			return
		}
	}
	if len(resp.Trailer) == 0 {
		s.End()
		return
	}
	tb := s.StartTrailers()
	for k, vv := range resp.Trailer {
		name := []byte(k)
		for _, v := range vv {
			tb.Add(name, []byte(v))
		}
	}
	if err := s.SendTrailers(); err != nil {
		f.p.log.Debug("trailers not sent: the client reset the stream")
	}
}

// upstreamCut ends a stream whose response failed upstream after its head
// (sent: the head went to the client): reset with the backend's own code
// when the backend reset the stream, CANCEL past the gRPC deadline,
// INTERNAL_ERROR otherwise, so that the client cannot take a part for the
// whole.
func (x *h2exchange) upstreamCut(up *h2Upstream, rt *routed, err error, sent bool) {
	if x.work.isAborted() {
		x.entry.status = statusClientGone
		return
	}
	code := http2.ErrCodeInternal
	var se http2.StreamError
	switch {
	case errors.As(err, &se):
		code = se.Code
	case errors.Is(err, errGRPCDeadline):
		code = http2.ErrCodeCancel
	}
	if !sent && x.grpc {
		x.errorResponse(upstreamStatus(err))
	} else {
		x.s.Reset(code)
	}
	x.cl.f.failed(rt, up.ep.addr, "response body", "cut off", err)
	x.cl.f.p.stats.errors.Add(1)
}

// grpcError answers the stream's gRPC call with baton's own failure,
// status, as a Trailers-Only response.
func (x *h2exchange) grpcError(status int) {
	p := x.cl.f.p
	p.stats.errors.Add(1)
	x.entry.status = status
	hb := x.s.StartResponse(200)
	hb.AddString("content-type", grpcContentType)
	x.num = strconv.AppendInt(x.num[:0], int64(grpcStatus(status)), 10)
	hb.AddString("grpc-status", x.num)
	x.num = append(append(x.num[:0], "baton: "...), statusText[status]...)
	hb.AddString("grpc-message", x.num)
	x.s.SendHeaders(true)
}

var grpcContentType = []byte("application/grpc")

// toH2Backend proxies the connection's request to rt's backend, which
// speaks HTTP/2, and reports whether the connection goes on.
func (hc *h1conn) toH2Backend(rt *routed, set *endpointSet, a *attempt) bool {
	req := &hc.req
	b := rt.backend
	if err := hc.sendContinue(); err != nil {
		return false
	}
	proto := "http"
	if hc.tls != nil {
		proto = "https"
	}
	u := upstreamRequest{rt: rt, req: req, length: -1,
		fwd: h1.Forwarded{For: hc.client, Proto: proto, Trusted: hc.trusted}}
	var bp *bodyPipe
	switch {
	case hc.bodyState == bodyWhole:
		u.whole = hc.body.b
	case req.HasBody():
		state := hc.bodyState
		prefix := hc.body.b
		if state == bodyStreamed && !req.Chunked {
			u.length = req.ContentLength
		}
		bp = startBody(func(w h1.Writer) error {
			if state == bodyPrefix {
				if _, err := w.Write(prefix); err != nil {
					return &h1.WriteError{Err: err}
				}
				hc.out.Dst, hc.out.Limit = w, rt.maxBody
				return hc.out.CopyChunked(true)
			}
			hc.out = h1.Body{Src: hc.rd, Dst: w, Timeout: hc.f.p.cfg.HTTP.IdleTimeout.Std(), Limit: rt.maxBody}
			if req.Chunked {
				return hc.out.CopyChunked(true)
			}
			return hc.out.CopyN(req.ContentLength)
		})
		u.body = bp
	}
	// A copy still waiting for the client when the exchange is over is
	// ended by a deadline in the past: the connection cannot go on.
	interrupted := false
	unblock := func() {
		interrupted = true
		hc.c.SetReadDeadline(time.Unix(1, 0))
	}
	bodyDone := func() bool {
		if bp == nil {
			return true
		}
		err := bp.wait(unblock)
		return err == nil && !interrupted
	}
	replayable := idempotent(req.Method) && bp == nil
	upStart := time.Now()
	hc.work.begin(hc.c)
	defer hc.work.end()
	up, status, err := exchangeH2(hc.f, &hc.work, rt, set, a, replayable, &u, bp)
	if up == nil {
		done := bodyDone()
		if berr := bp.error(); err == nil && berr != nil && !errors.Is(berr, errBodyAbandoned) {
			err = clientSide(berr)
		}
		if err != nil {
			return hc.bodyFailed(err)
		}
		return hc.errorResponse(status, !done)
	}
	hc.entry.upstream, hc.entry.backend, hc.entry.endpoint = time.Since(upStart), b.name, up.ep.addr
	b.responseTime.Observe(hc.entry.upstream)
	if b.cfg.Balancer == config.BalancerCookie && a.sticky != up.ep {
		hc.extra = append(hc.extra, "Set-Cookie: "...)
		hc.extra = b.appendCookie(hc.extra, up.ep, hc.entry.start)
		hc.extra = append(hc.extra, "\r\n"...)
	}
	keep := hc.relayH2(up, rt)
	up.end()
	up.ep.inflight.Add(-1)
	return bodyDone() && keep
}

// relayH2 writes the response of up to the client as HTTP/1.1, and
// reports whether the connection can go on.
func (hc *h1conn) relayH2(up *h2Upstream, rt *routed) bool {
	p := hc.f.p
	req, resp := &hc.req, up.resp
	noBody := string(req.Method) == "HEAD" || resp.StatusCode == 204 || resp.StatusCode == 304
	chunked := !noBody && resp.ContentLength < 0 && req.Minor == 1
	untilEOF := !noBody && resp.ContentLength < 0 && !chunked
	keep := !req.Close && !untilEOF && !p.draining.Load() && !hc.lastRequest()
	w := hc.bw
	extendWriteDeadline(hc.c, &hc.wdl, time.Now(), clientWriteTimeout)
	sent := hc.cw.n
	hc.entry.status = resp.StatusCode
	w.WriteString("HTTP/1.1 ")
	w.WriteString(strconv.Itoa(resp.StatusCode))
	w.WriteByte(' ')
	w.WriteString(http.StatusText(resp.StatusCode))
	w.Write(crlf)
	edit := rt.rule.ResponseEdit
	for k, vv := range resp.Header {
		name := []byte(k)
		if h1.EqualFold(name, "content-length") || edit != nil && edit.Drops(name) {
			continue
		}
		for _, v := range vv {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.Write(crlf)
		}
	}
	if edit != nil {
		w.Write(edit.Lines())
	}
	switch {
	case chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	case resp.ContentLength >= 0 && (!noBody || string(req.Method) == "HEAD" || resp.StatusCode == 304):
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.FormatInt(resp.ContentLength, 10))
		w.Write(crlf)
	}
	if rt.rule.Filters.CORS != nil {
		hc.extra = rt.appendCORS(hc.extra, req.Field("origin"), false)
	}
	w.Write(hc.extra)
	switch {
	case !keep:
		w.WriteString("Connection: close\r\n")
	case req.Minor == 0:
		w.WriteString("Connection: keep-alive\r\n")
	}
	w.Write(crlf)

	bufp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bufp)
	buf := *bufp
	var err error
	for !noBody {
		n, rerr := up.read(buf)
		if n > 0 {
			if chunked {
				w.WriteString(strconv.FormatInt(int64(n), 16))
				w.Write(crlf)
			}
			w.Write(buf[:n])
			if chunked {
				w.Write(crlf)
			}
			hc.entry.bodyOut += int64(n)
		}
		if rerr == io.EOF {
			if chunked {
				w.Write(lastChunk)
			}
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
		extendWriteDeadline(hc.c, &hc.wdl, time.Now(), clientWriteTimeout)
		if ferr := w.Flush(); ferr != nil {
			return false
		}
	}
	if err == nil {
		if ferr := w.Flush(); ferr != nil {
			return false
		}
		return keep
	}
	if !hc.work.using(nil) {
		return false // the client went away
	}
	if hc.cw.n == sent {
		w.Reset(&hc.cw)
		hc.f.failed(rt, up.ep.addr, "response", "502", err)
		return hc.errorResponse(upstreamStatus(err), true)
	}
	hc.f.failed(rt, up.ep.addr, "response body", "cut off", err)
	p.stats.errors.Add(1)
	return false
}

// announcedTrailers are the trailer fields req's Trailer field names,
// without values yet.
func announcedTrailers(req *h1.Request) http.Header {
	t := make(http.Header)
	for _, name := range strings.Split(string(req.Field("trailer")), ",") {
		if name = strings.TrimSpace(name); name != "" && h2.TrailerAllowed(strings.ToLower(name)) {
			t[http.CanonicalHeaderKey(name)] = nil
		}
	}
	return t
}
