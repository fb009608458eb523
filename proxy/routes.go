package proxy

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
)

// routeTable is the proxy's compiled routes, whose backends are its own.
type routeTable = route.Table[*backend]

// routed is where one request goes: the rule that took it and the backend
// picked for it (of the rule's, by weight), with the rule's body limits.
// A connection keeps one and fills it per request.
type routed struct {
	rule    *route.Compiled[*backend]
	matched *route.PathMatch // the match that took the request
	backend *backend
	maxBody int64 // request body limit; 0: none
	buffer  int64 // request bodies up to this size are read ahead
	// path is the path the request goes upstream with, when the rule
	// rewrites it (a buffer kept from one request to the next).
	path []byte
	// deadline is when the rule's request timeout ends the wait for a
	// response; zero: none.
	deadline time.Time
	// mirrored: the request's copies went to the rule's mirrors.
	mirrored bool
	// cors holds the CORS fields of a response (a buffer kept from one
	// request to the next).
	cors []route.Field
	// acquired: the request is counted in its rule's MaxConnections, as
	// client's, until release.
	acquired bool
	client   netip.Addr
	// certEdit is the rule's request edit with the fields of its
	// ClientCert (clientCert); its lines a buffer kept from one request
	// to the next.
	certEdit certEdit
	// errorPage is where a request refused for its client certificate
	// is redirected (routeCertErrorPage).
	errorPage string
}

// certEdit is a rule's request edit and the ClientCertFields lines of a
// request's client certificate.
type certEdit struct {
	base  *route.HeaderEdit // never nil: it drops the client's own
	lines []byte
}

// Drops reports whether a field named name is left out.
func (e *certEdit) Drops(name []byte) bool { return e.base.Drops(name) }

// Lines are the fields to write.
func (e *certEdit) Lines() []byte { return e.lines }

// clientCert prepares the request's ClientCertFields from v, the
// verdict on its connection's certificate (nil: none asked for).
func (rt *routed) clientCert(v *peerVerdict) {
	e := &rt.certEdit
	e.base = rt.rule.RequestEdit
	e.lines = append(e.lines[:0], e.base.Lines()...)
	switch {
	case v == nil:
		e.lines = append(e.lines, "ssl-client-verify: NONE\r\n"...)
	default:
		e.lines = append(e.lines, v.lines...)
		if rt.rule.ClientCert.Pass {
			e.lines = append(e.lines, v.cert...)
		}
	}
}

// release counts the request out of its rule's MaxConnections, once it
// is over.
func (rt *routed) release() {
	if rt.acquired {
		rt.rule.Release(rt.client)
		rt.acquired = false
	}
}

// headDeadline sets uc's read deadline for the response head of an
// attempt starting at now: the rule's backendRequest timeout or else the
// backend's responseTimeout, and never past the request timeout.
func (rt *routed) headDeadline(uc *upConn, now time.Time) {
	b := rt.backend
	bt := rt.rule.Timeouts.BackendRequest
	if bt == 0 && rt.deadline.IsZero() {
		// The operator's bound: within a tenth of it (and a second).
		uc.rd.ExtendDeadlineNear(now, b.responseTimeout)
		return
	}
	if bt == 0 {
		bt = b.responseTimeout
	}
	dl := now.Add(bt)
	if !rt.deadline.IsZero() && rt.deadline.Before(dl) {
		dl = rt.deadline
	}
	uc.rd.SetDeadline(dl)
}

// expired reports whether the request timeout has passed at now.
func (rt *routed) expired(now time.Time) bool {
	return !rt.deadline.IsZero() && !now.Before(rt.deadline)
}

// routeRedirect is the status route gives a request its rule redirects;
// routePreflight a CORS preflight, which baton answers itself (204);
// routeLimited one over its rule's rate limit (answered 503, not counted
// as a backend's failure); routeCertErrorPage one refused for its client
// certificate, where the host has an error page (302 to rt.errorPage).
const (
	routeRedirect      = -1
	routePreflight     = -2
	routeLimited       = -3
	routeCertErrorPage = -4
)

// appendCORS appends to dst the CORS header lines of rt's rule, if it has
// CORS, for a response to a request from origin (preflight: the answer
// to a preflight).
func (rt *routed) appendCORS(dst, origin []byte, preflight bool) []byte {
	c := rt.rule.Filters.CORS
	if c == nil {
		return dst
	}
	rt.cors = c.AppendFields(rt.cors[:0], origin, preflight)
	for _, f := range rt.cors {
		dst = append(dst, f.Name...)
		dst = append(dst, ": "...)
		dst = append(dst, f.Value...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// forwarded adds what the rule changes on the way upstream to fwd: its
// header filter, the rewritten path and host. req is the request.
func (rt *routed) forwarded(fwd *h1.Forwarded, req *h1.Request) {
	rule := rt.rule
	if rule == nil {
		return
	}
	switch {
	case rule.ClientCert != nil:
		fwd.Edit = &rt.certEdit
	case rule.RequestEdit != nil:
		fwd.Edit = rule.RequestEdit
	}
	if rw := rule.Filters.Rewrite; rw != nil {
		if rw.Path != nil {
			rt.path = route.ModifyPath(rt.path[:0], rw.Path, rt.matched.Value, rule.PathRegexp(rt.matched.Value), req.Path)
			fwd.Path = rt.path
		}
		fwd.Authority = rule.RewriteHost
	}
}

// location appends the Location of the redirect of rt's rule for req, a
// request that came over scheme on a listener's port.
func (rt *routed) location(dst []byte, req *h1.Request, scheme string, port int) []byte {
	r := rt.rule.Filters.Redirect
	path := req.Path
	if r.Path != nil {
		rt.path = route.ModifyPath(rt.path[:0], r.Path, rt.matched.Value, rt.rule.PathRegexp(rt.matched.Value), req.Path)
		path = rt.path
	}
	return r.Location(dst, scheme, req.Authority, port, path, req.Query)
}

// name is the rule's name, for logs.
func (rt *routed) name() string {
	if rt.rule == nil {
		return ""
	}
	return rt.rule.Name
}

// yamlRules translates the config's routes (baton's own YAML) into the
// route model: one rule a route, named for its place in the file.
func yamlRules(cfg *config.Config, backends map[string]*backend) []route.Rule[*backend] {
	rules := make([]route.Rule[*backend], 0, len(cfg.Routes))
	for i, rc := range cfg.Routes {
		r := route.Rule[*backend]{
			Name:              yamlRouteName(i, &rc),
			Listener:          rc.Listener,
			Hostnames:         rc.Hostnames,
			MaxBodySize:       int64(rc.MaxBodySize),
			BufferRequestBody: int64(rc.BufferRequestBody),
			Order:             route.Order{Index: i},
		}
		if rc.Host != "" {
			r.Hostnames = append([]string{rc.Host}, rc.Hostnames...)
		}
		m := route.Match{Method: rc.Method, Path: route.PathMatch{Type: route.PathStringPrefix, Value: rc.PathPrefix}}
		switch {
		case rc.Path != nil:
			m.Path.Value = rc.Path.Value
			switch rc.Path.Type {
			case config.PathTypeExact:
				m.Path.Type = route.PathExact
			case config.PathTypeRegex:
				m.Path.Type = route.PathRegex
			default:
				m.Path.Type = route.PathPrefix
			}
		case rc.PathPrefix == "":
			m.Path.Value = "/" // a tcp listener's route: any
		}
		m.Headers, m.Query = valueMatches(rc.Headers), valueMatches(rc.QueryParams)
		r.Matches = []route.Match{m}
		if rc.Backend != "" {
			r.Backends = []route.Backend[*backend]{{Target: backends[rc.Backend], Weight: 1}}
		}
		r.Filters = route.Filters[*backend]{
			RequestHeaders:  headerModifier(rc.RequestHeaders),
			ResponseHeaders: headerModifier(rc.ResponseHeaders),
		}
		if rd := rc.Redirect; rd != nil {
			r.Filters.Redirect = &route.Redirect{Scheme: rd.Scheme, Hostname: rd.Hostname, Port: rd.Port, StatusCode: rd.StatusCode, Path: pathModifier(rd.Path)}
		}
		if rw := rc.Rewrite; rw != nil {
			r.Filters.Rewrite = &route.Rewrite{Hostname: rw.Hostname, Path: pathModifier(rw.Path)}
		}
		for _, m := range rc.Mirrors {
			r.Filters.Mirrors = append(r.Filters.Mirrors, route.Mirror[*backend]{Target: backends[m.Backend], Percent: m.Percent})
		}
		if to := rc.Timeouts; to != nil {
			r.Timeouts = route.Timeouts{Request: to.Request.Std(), BackendRequest: to.BackendRequest.Std()}
		}
		for _, wb := range rc.Backends {
			w := 1
			if wb.Weight != nil {
				w = *wb.Weight
			}
			r.Backends = append(r.Backends, route.Backend[*backend]{Target: backends[wb.Name], Weight: w})
		}
		rules = append(rules, r)
	}
	return rules
}

// yamlRouteName names routes[i] for logs: its place, and what it takes.
func yamlRouteName(i int, rc *config.Route) string {
	var b strings.Builder
	fmt.Fprintf(&b, "routes[%d]", i)
	if rc.Host != "" || rc.PathPrefix != "" && rc.PathPrefix != "/" {
		fmt.Fprintf(&b, " %s%s", rc.Host, rc.PathPrefix)
	}
	return b.String()
}

func headerModifier(f *config.HeaderFilter) *route.HeaderModifier {
	if f == nil {
		return nil
	}
	m := &route.HeaderModifier{Remove: f.Remove}
	for _, h := range f.Set {
		m.Set = append(m.Set, route.Header{Name: h.Name, Value: h.Value})
	}
	for _, h := range f.Add {
		m.Add = append(m.Add, route.Header{Name: h.Name, Value: h.Value})
	}
	return m
}

func pathModifier(m *config.PathModifier) *route.PathModifier {
	switch {
	case m == nil:
		return nil
	case m.ReplacePrefixMatch != nil:
		return &route.PathModifier{ReplacePrefix: true, Value: *m.ReplacePrefixMatch}
	}
	return &route.PathModifier{Value: *m.ReplaceFullPath}
}

func valueMatches(vs []config.ValueMatch) []route.ValueMatch {
	var out []route.ValueMatch
	for _, v := range vs {
		out = append(out, route.ValueMatch{Name: v.Name, Value: v.Value, Regex: v.Type == config.PathTypeRegex})
	}
	return out
}
