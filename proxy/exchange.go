package proxy

import (
	"net/netip"
	"strconv"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
)

// requestSender is the client side of a request being proxied, an HTTP/1.1
// connection (h1conn) or an HTTP/2 stream (h2exchange): it writes the
// request on an upstream connection.
type requestSender interface {
	// sendRequest writes the request's head and body to uc. An error of
	// the client's side (reading its body, or a body that breaks a rule)
	// is a *clientError.
	sendRequest(uc *upConn, rt *routed) error
	// upstream is the request's upstream work, which the client's side
	// aborts when it goes away.
	upstream() *upstreamWork
}

// route finds the rule of a request parsed into req and picks its backend
// into rt, then the endpoints, and prepares the balancer's attempt (sticky
// cookie, hash header). A status other than 0 is the answer when nothing
// can serve it: routeRedirect (the rule redirects: rt's location),
// routePreflight (a CORS preflight, which baton answers), 404
// (no rule), 421 and 400 (the host verifies client certificates, and
// this connection's server name or certificate does not do: checkClient;
// routeCertErrorPage where the host redirects such requests, 403 where
// the certificate's subject is not the one the host asks for),
// 403 (the rule's Access refuses the client), routeLimited
// (the client is over the rule's rate limit: 503), 500 (the rule's share of a backend that
// cannot be reached, as the Gateway API asks), 413 (a body over the
// rule's limit, known from its length), 503 (the backend has no
// endpoint).
func (p *Proxy) route(listener string, client netip.Addr, peer *tlsPeer, req *h1.Request, rt *routed, a *attempt, e *accessEntry) (set *endpointSet, status int) {
	*rt = routed{path: rt.path, cors: rt.cors, certEdit: certEdit{lines: rt.certEdit.lines}}
	v, status := p.checkClient(listener, req.Authority, peer)
	if status != 0 {
		if status == routeCertErrorPage {
			rt.errorPage = v.auth.errorPage
		}
		return nil, status
	}
	r := route.Request{Host: req.Authority, Path: req.MatchPath(), Method: req.Method, Query: req.Query, Fields: req}
	rule, matched := p.routes.Load().Match(listener, &r)
	if rule == nil {
		return nil, 404
	}
	rt.rule, rt.matched = rule, matched
	if rule.ClientCert != nil {
		rt.clientCert(v)
	}
	if rule.Access != nil && !rule.Access.Allows(client) {
		return nil, 403
	}
	if !rule.Allow(client, e.start) || !rule.Acquire(client) {
		return nil, routeLimited
	}
	rt.client, rt.acquired = client, true
	if rule.Filters.CORS != nil && string(req.Method) == "OPTIONS" {
		return nil, routePreflight
	}
	if rule.Filters.Redirect != nil {
		return nil, routeRedirect
	}
	b, ok := rule.Pick()
	if !ok {
		return nil, 500
	}
	rt.backend, rt.maxBody, rt.buffer = b, rule.MaxBodySize, rule.BufferRequestBody
	if d := rule.Timeouts.Request; d > 0 {
		rt.deadline = e.start.Add(d) // from when the request began
	}
	if rt.maxBody > 0 && req.ContentLength > rt.maxBody {
		return nil, 413
	}
	b.requests.Add(1)
	e.backend = b.name
	if set = b.set.Load(); len(set.active) == 0 {
		return set, 503
	}
	switch b.cfg.Balancer {
	case config.BalancerCookie:
		if v := cookieValue(req, b.cfg.Cookie); v != nil {
			a.sticky = set.serving[string(v)]
		}
	case config.BalancerHashHeader:
		if v := req.Field(b.hashHeader); v != nil {
			a.hash, a.hashed = hashBytes(v), true
		}
	}
	return set, 0
}

// exchangeUpstream sends a request of f's with x to an endpoint of rt's
// backend and reads the response head into resp. A connection that fails before anything was
// sent moves on to another endpoint, always; a pooled connection the
// backend had closed is retried on a new one, and a failed exchange on
// another endpoint (up to the backend's retries), when the request can be
// replayed. It returns the connection and endpoint the response came on
// (counted in the endpoint's in-flight requests until the caller is done),
// or the status to answer (502, 503 or 504) when no endpoint answered, or
// a *clientError when the client's side failed (nothing to answer but its
// own error), errClientGone among them: once the client went away, no
// attempt is made again.
func exchangeUpstream(f *httpFrontend, x requestSender, rt *routed, set *endpointSet, a *attempt, replayable bool, resp *h1.Response) (*upConn, *endpoint, int, error) {
	b := rt.backend
	// Each failure is logged once, with what follows it: another
	// endpoint, a retry, or the answer. giveUp answers when none is left.
	giveUp := func(addr, stage string, err error) (*upConn, *endpoint, int, error) {
		b.errors.Add(1)
		status := upstreamStatus(err)
		if err == nil {
			err = errNoEndpoint // every endpoint ejected
		}
		f.failed(rt, addr, stage, strconv.Itoa(status), err)
		return nil, nil, status, nil
	}
	ep := b.pick(set, a)
	if ep == nil {
		return giveUp("", "connect", nil)
	}
	a.tried(ep)
	retries := 0
	w := x.upstream()
	for fresh := false; ; {
		if w.isAborted() {
			return nil, nil, 0, &clientError{errClientGone}
		}
		uc, err := ep.conn(w, b, fresh)
		if err != nil && w.isAborted() {
			return nil, nil, 0, &clientError{errClientGone} // the dial was cancelled
		}
		if err != nil {
			// Nothing was sent: another endpoint, always.
			b.connectFailures.Add(1)
			addr := ep.addr
			if ep, fresh = b.pick(set, a), false; ep == nil {
				return giveUp(addr, "connect", err)
			}
			a.tried(ep)
			f.failed(rt, addr, "connect", "next endpoint", err)
			continue
		}
		ep.inflight.Add(1)
		err = x.sendRequest(uc, rt)
		if err == nil {
			err = readResponseHead(uc, resp, rt)
		}
		if err == nil {
			return uc, ep, 0, nil
		}
		ep.inflight.Add(-1)
		uc.c.Close()
		if w.isAborted() {
			return nil, nil, 0, &clientError{errClientGone}
		}
		if !upstreamFault(err) {
			// The client's side failed (went away, or sent a body that
			// breaks a rule or the limit): nothing to retry.
			return nil, nil, 0, err
		}
		switch {
		case rt.expired(time.Now()):
			// The rule's request timeout: no other attempt.
			return giveUp(ep.addr, "response", err)
		case uc.reuse && replayable && !fresh && len(uc.rd.Buffered()) == 0:
			// A pooled connection the backend had closed: the same
			// endpoint, on a new connection.
			f.failed(rt, ep.addr, "response", "retry on a new connection", err)
			fresh = true
			b.retries.Add(1)
		case replayable && retries < b.cfg.Retries:
			addr := ep.addr
			if ep, fresh = b.pick(set, a), false; ep == nil {
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

// readResponseHead reads the response head from uc into resp, skipping
// interim (1xx) responses other than 101, within rt's bounds
// (routed.headDeadline). A head that breaks a rule is an upstream
// failure.
func readResponseHead(uc *upConn, resp *h1.Response, rt *routed) error {
	rt.headDeadline(uc, time.Now())
	for {
		head, err := uc.rd.ReadResponseHead()
		if err != nil {
			return &h1.ReadError{Err: err}
		}
		if err := resp.Parse(head); err != nil {
			return &h1.ReadError{Err: err}
		}
		if resp.Status >= 200 || resp.Status == 101 {
			return nil
		}
	}
}

// reusable reports whether uc may serve another request once the response
// resp was relayed without error (untilEOF: its body ended with the
// connection). Bytes after the end of the response are never another
// client's: a connection that has any is not reused.
func reusable(uc *upConn, resp *h1.Response, untilEOF bool) bool {
	return !resp.Close && !untilEOF && len(uc.rd.Buffered()) == 0
}

// writeRequestHead writes req's head to uc as baton forwards it, with the
// framing of its body: as it came, or the Content-Length of a body read
// ahead whole; a prefix read ahead of a larger body is written as its
// first chunk, the rest to follow.
func writeRequestHead(uc *upConn, rt *routed, req *h1.Request, state bodyState, body []byte, fwd *h1.Forwarded) {
	extendWriteDeadline(uc.c, &uc.wdl, time.Now(), uc.sendTimeout)
	framing := h1.Framing{Length: req.ContentLength, Chunked: req.Chunked}
	if state == bodyWhole {
		framing = h1.Framing{Length: int64(len(body))}
	}
	rt.forwarded(fwd, req)
	req.WriteHead(uc.bw, framing, fwd)
	switch state {
	case bodyWhole:
		uc.bw.Write(body)
	case bodyPrefix:
		uc.bw.Write(strconv.AppendInt(uc.bw.AvailableBuffer(), int64(len(body)), 16))
		uc.bw.WriteString("\r\n")
		uc.bw.Write(body)
		uc.bw.WriteString("\r\n")
	}
}

// flushRequest sends what is left of a request written to uc, its last
// bytes from inside the wait for the response (sockConn.holdNext).
func (uc *upConn) flushRequest() error {
	if uc.sock != nil {
		uc.sock.holdNext()
		defer uc.sock.unhold()
	}
	if err := uc.bw.Flush(); err != nil {
		return &h1.WriteError{Err: err}
	}
	return nil
}
