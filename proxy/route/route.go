// Package route is baton's one route model: what a request is matched on
// (its listener, host, path, method, header fields and query parameters),
// where it goes (weighted backends) and what bounds its body. baton's own
// YAML, the Gateway API and Ingress are translators into it; the proxy's
// request path knows only this package.
//
// A Table is compiled once from a list of rules and never changed after:
// a change of routes compiles a new Table, which the caller swaps in
// atomically, so matching takes no lock. The order in which a request's
// candidate rules are tried is the Gateway API's (HTTPRouteRule.Matches,
// HTTPRouteSpec.Hostnames): the most specific host first, then, among the
// rules for that host, an Exact path, a longer prefix, a method, more
// header matches, more query matches, then the older rule.
package route

import (
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rule is one routing rule: the requests it takes on a listener, and
// PassthroughListener is the listener of the rules that name the hosts
// whose TLS connections to listener l, a listener that terminates TLS,
// are passed through to a backend instead (ingress-nginx's
// ssl-passthrough): a connection is routed by its ClientHello's server
// name and never reaches l's own rules, as HTTP or otherwise.
func PassthroughListener(l string) string { return l + " passthrough" }

// where they go. B is the proxy's backend type.
type Rule[B any] struct {
	// Name says where the rule came from (for logs and status):
	// "routes[3]" in baton's YAML, "httproute ns/name rule 2" for the
	// Gateway API.
	Name string `json:",omitzero"`
	// Listener is the listener the rule serves.
	Listener string `json:",omitzero"`
	// Hostnames are the hosts the rule takes: exact names, or "*.suffix"
	// for any host under suffix (not suffix itself). None: any host.
	// They match case-insensitively, without port or trailing dot.
	Hostnames []string `json:",omitzero"`
	// OneLabel makes a "*.suffix" of Hostnames take one label only
	// ("*.foo.com" takes "bar.foo.com", not "baz.bar.foo.com": Ingress's
	// rule); without it, any number (the Gateway API's).
	OneLabel bool `json:",omitzero"`
	// Matches: the rule takes a request that satisfies any one of them;
	// none is a PathPrefix match of "/", which takes every request.
	Matches []Match `json:",omitzero"`
	// Backends are where the requests go, each with its share. A zero
	// total weight (no backend, or all weighted 0) answers 500, as the
	// Gateway API asks of a rule whose backends are all invalid; a backend
	// whose Invalid is set answers 500 for its share.
	Backends []Backend[B] `json:",omitzero"`
	// MaxBodySize bounds a request body (413 above it); 0: no bound.
	MaxBodySize int64 `json:",omitzero"`
	// BufferRequestBody: request bodies up to this size are read whole
	// before a backend is chosen; 0: every body streams.
	BufferRequestBody int64 `json:",omitzero"`
	// Filters change requests and responses; Timeouts bound them.
	Filters  Filters[B] `json:",omitzero"`
	Timeouts Timeouts   `json:",omitzero"`
	// Order breaks the ties the matches leave: the older rule wins.
	Order Order `json:",omitzero"`
	// Access, when set, says which clients the rule serves; the others
	// are answered 403.
	Access *Access `json:",omitzero"`
	// RateLimit, when set, bounds each client's requests; beyond it,
	// 503.
	RateLimit *RateLimit `json:",omitzero"`
	// MaxConnections, when not 0, bounds each client's requests in
	// flight at once (ingress-nginx's limit-connections); beyond it, 503.
	// Each worker counts its own.
	MaxConnections int `json:",omitzero"`
	// ClientCert, when set, tells the backend about the client's
	// certificate in the fields of ClientCertFields (ingress-nginx's
	// auth-tls headers); the client's own fields of those names are
	// dropped.
	ClientCert *ClientCert `json:",omitzero"`
}

// ClientCert is what a rule tells its backend of the client's
// certificate: its verification, subject and issuer always, and with Pass
// the certificate itself (ingress-nginx's
// auth-tls-pass-certificate-to-upstream).
type ClientCert struct {
	Pass bool `json:",omitzero"`
}

// ClientCertFields are the request fields of a rule's ClientCert, as
// ingress-nginx names them: "SUCCESS", "NONE" or "FAILED:reason"; the
// subject's and issuer's distinguished names (RFC 2253); the PEM,
// URL-encoded (nginx's $ssl_client_escaped_cert).
var ClientCertFields = []string{"ssl-client-verify", "ssl-client-subject-dn", "ssl-client-issuer-dn", "ssl-client-cert"}

// Access is who may send a rule's requests, by the client's address (the
// connection's, or the PROXY protocol's): none of Deny, and one of Allow
// when Allow has any (ingress-nginx's denylist-source-range and
// allowlist-source-range, nginx's deny and allow).
type Access struct {
	Allow, Deny []netip.Prefix `json:",omitzero"`
}

// Allows reports whether a client of address ip may send the rule's
// requests. An address unknown (a unix socket's) is allowed only when
// Allow is empty.
func (a *Access) Allows(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.Deny {
		if p.Contains(ip) {
			return false
		}
	}
	if len(a.Allow) == 0 {
		return true
	}
	for _, p := range a.Allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Backend is one of a rule's backends and its weight.
type Backend[B any] struct {
	Target B `json:",omitzero"`
	// Weight is the backend's share, relative to the rule's other
	// backends; 0 sends it nothing.
	Weight int `json:",omitzero"`
	// Invalid marks a backend the rule names but that cannot be reached
	// (an unknown kind, a Service that does not exist): its share of the
	// requests is answered 500.
	Invalid bool `json:",omitzero"`
}

// Order is what decides between rules that the matches leave tied, in the
// Gateway API's order: the oldest route (by creation time), then the route
// first by "namespace/name", then the first rule of the route, then the
// first match of the rule. Translators without routes of their own (baton's
// YAML) leave Created zero and number their rules in Index.
type Order struct {
	Created time.Time `json:",omitzero"`
	Route   string    `json:",omitzero"` // namespace/name
	Index   int       `json:",omitzero"` // the rule's place in its route
}

// PathType is how a Match compares the request's path.
type PathType int

// Path match types.
const (
	// PathPrefix matches a path whose segments begin with the value's (the
	// Gateway API's PathPrefix): "/foo" takes "/foo", "/foo/" and
	// "/foo/bar", not "/foobar". A trailing slash in the value is ignored.
	PathPrefix PathType = iota
	// PathExact matches the path exactly.
	PathExact
	// PathRegex matches a path that the regular expression (RE2, Go's
	// regexp) matches as a whole.
	PathRegex
	// PathStringPrefix matches a path that begins with the value, byte for
	// byte: baton's YAML pathPrefix, as nginx's location prefixes.
	PathStringPrefix
)

func (t PathType) String() string {
	switch t {
	case PathPrefix:
		return "PathPrefix"
	case PathExact:
		return "Exact"
	case PathRegex:
		return "RegularExpression"
	case PathStringPrefix:
		return "StringPrefix"
	}
	return "PathType(?)"
}

// Match is a set of conditions that must all hold.
type Match struct {
	Path PathMatch `json:",omitzero"`
	// Method, when set, is the request's method exactly.
	Method string `json:",omitzero"`
	// Headers and Query must all match. Names of header fields are
	// case-insensitive; query parameter names are exact.
	Headers []ValueMatch `json:",omitzero"`
	Query   []ValueMatch `json:",omitzero"`
}

// PathMatch is a condition on the request's path (normalised, without its
// query).
type PathMatch struct {
	Type  PathType `json:",omitzero"`
	Value string   `json:",omitzero"`
}

// ValueMatch is a condition on a header field or a query parameter: its
// value is Value exactly or, when Regex is set, Value as a regular
// expression matches all of it.
type ValueMatch struct {
	Name  string `json:",omitzero"`
	Value string `json:",omitzero"`
	Regex bool   `json:",omitzero"`
}

// compiledValue is a ValueMatch ready for requests.
type compiledValue struct {
	name  string // header names lower case
	value []byte
	re    *regexp.Regexp
}

// Filters are what a rule does to the requests it takes and their
// responses, the Gateway API's HTTPRouteFilter kinds. At most one of
// Redirect and Rewrite acts on the URL.
type Filters[B any] struct {
	// RequestHeaders and ResponseHeaders change the header fields of the
	// request on its way upstream, and of the response on its way back.
	RequestHeaders, ResponseHeaders *HeaderModifier `json:",omitzero"`
	// Redirect answers the request with a redirect instead of sending it
	// anywhere.
	Redirect *Redirect `json:",omitzero"`
	// Rewrite changes the host and path the request goes upstream with.
	Rewrite *Rewrite `json:",omitzero"`
	// Mirrors get a copy of each request (their answers are dropped).
	Mirrors []Mirror[B] `json:",omitzero"`
	// CORS answers cross-origin requests (ingress-nginx's enable-cors).
	CORS *CORS `json:",omitzero"`
}

// CORS is how a rule answers cross-origin requests, as ingress-nginx's
// enable-cors does: an OPTIONS request (a preflight) is answered 204 by
// baton with the Allow headers; every other response gets
// Access-Control-Allow-Origin (and -Allow-Credentials, -Expose-Headers).
type CORS struct {
	// AllowOrigins are the origins allowed ("https://a.example"), or "*"
	// for any; none: any. An Origin not allowed gets no CORS header.
	AllowOrigins []string `json:",omitzero"`
	// AllowMethods and AllowHeaders answer a preflight; ExposeHeaders
	// goes on other responses when set. Comma-separated lists.
	AllowMethods, AllowHeaders, ExposeHeaders string `json:",omitzero"`
	AllowCredentials                          bool   `json:",omitzero"`
	// MaxAge is how long a preflight's answer may be cached, in seconds.
	MaxAge int `json:",omitzero"`
}

// AllowOrigin is the Access-Control-Allow-Origin of a request from
// origin: "*" when any is allowed, origin itself when it is one of
// AllowOrigins, else nil (no CORS header). "*" stays "*" with credentials
// allowed, as in ingress-nginx: a browser then sends no credentials, where
// echoing every origin would let any site make credentialed requests.
func (c *CORS) AllowOrigin(origin []byte) []byte {
	if len(c.AllowOrigins) == 0 || slices.Contains(c.AllowOrigins, "*") {
		return star
	}
	for _, o := range c.AllowOrigins {
		if len(origin) > 0 && strings.EqualFold(o, string(origin)) {
			return origin
		}
	}
	return nil
}

var star = []byte("*")

// AppendFields appends to dst the CORS header fields (names in lower
// case) of a response to a request from origin; preflight adds those of a
// preflight's answer.
func (c *CORS) AppendFields(dst []Field, origin []byte, preflight bool) []Field {
	allow := c.AllowOrigin(origin)
	if allow == nil {
		return dst
	}
	add := func(name, value string) { dst = append(dst, Field{Name: []byte(name), Value: []byte(value)}) }
	dst = append(dst, Field{Name: []byte("access-control-allow-origin"), Value: allow})
	if string(allow) != "*" {
		add("vary", "Origin")
	}
	if c.AllowCredentials {
		add("access-control-allow-credentials", "true")
	}
	if !preflight {
		if c.ExposeHeaders != "" {
			add("access-control-expose-headers", c.ExposeHeaders)
		}
		return dst
	}
	if c.AllowMethods != "" {
		add("access-control-allow-methods", c.AllowMethods)
	}
	if c.AllowHeaders != "" {
		add("access-control-allow-headers", c.AllowHeaders)
	}
	if c.MaxAge > 0 {
		add("access-control-max-age", strconv.Itoa(c.MaxAge))
	}
	return dst
}

// HeaderModifier sets, adds and removes header fields (HTTPHeaderFilter):
// the fields named by Set or Remove are dropped, then Set and Add are
// written. Names are case-insensitive.
type HeaderModifier struct {
	Set, Add []Header `json:",omitzero"`
	Remove   []string `json:",omitzero"`
}

// Header is a header field to write.
type Header struct{ Name, Value string }

// Redirect is a redirect's target (HTTPRequestRedirectFilter): each part
// that is empty (0 for the port) is the request's own, the port derived
// as the Gateway API says (the scheme's well-known port when the scheme
// changes, else the listener's; 80 for http and 443 for https are left
// out of Location).
type Redirect struct {
	Scheme, Hostname string        `json:",omitzero"`
	Port             int           `json:",omitzero"`
	Path             *PathModifier `json:",omitzero"`
	// StatusCode is 301, 302, 303, 307 or 308 (default 302).
	StatusCode int `json:",omitzero"`
}

// Rewrite is the host and path a request goes upstream with
// (HTTPURLRewriteFilter): an empty Hostname keeps the request's.
type Rewrite struct {
	Hostname string        `json:",omitzero"`
	Path     *PathModifier `json:",omitzero"`
}

// PathModifier replaces a request's path: all of it, or the prefix the
// rule matched (ReplacePrefixMatch, which needs a PathPrefix match).
type PathModifier struct {
	// ReplacePrefix: replace the matched prefix, else the full path.
	ReplacePrefix bool `json:",omitzero"`
	// Regex: Value is the whole new path, in which $1 to $9 are the
	// groups of the rule's regular expression path match (ingress-nginx's
	// rewrite-target, nginx's rewrite); for a rule of PathRegex matches.
	Regex bool   `json:",omitzero"`
	Value string `json:",omitzero"`
}

// Mirror is a backend that gets a copy of a rule's requests.
type Mirror[B any] struct {
	Target B `json:",omitzero"`
	// Percent of the requests mirrored (1 to 100; 0 is 100).
	Percent int `json:",omitzero"`
}

// Timeouts bound a rule's requests (HTTPRouteTimeouts): Request the whole
// exchange, from the request's start to its response's end; BackendRequest
// each attempt upstream, to the response's head. 0: the backend's own
// bounds only.
type Timeouts struct {
	Request, BackendRequest time.Duration `json:",omitzero"`
}

// Resolve returns r with the targets of its backends and mirrors resolved
// by find, as a translator naming backends turns names into the proxy's:
// a backend find does not know is Invalid (its share answers 500), a
// mirror it does not know is left out.
func Resolve[A, B any](r Rule[A], find func(A) (B, bool)) Rule[B] {
	out := Rule[B]{
		Name: r.Name, Listener: r.Listener, Hostnames: r.Hostnames, OneLabel: r.OneLabel, Matches: r.Matches,
		MaxBodySize: r.MaxBodySize, BufferRequestBody: r.BufferRequestBody, Order: r.Order, Timeouts: r.Timeouts, Access: r.Access, RateLimit: r.RateLimit, MaxConnections: r.MaxConnections, ClientCert: r.ClientCert,
		Filters: Filters[B]{RequestHeaders: r.Filters.RequestHeaders, ResponseHeaders: r.Filters.ResponseHeaders, Redirect: r.Filters.Redirect, Rewrite: r.Filters.Rewrite, CORS: r.Filters.CORS},
	}
	for _, b := range r.Backends {
		t, ok := find(b.Target)
		out.Backends = append(out.Backends, Backend[B]{Target: t, Weight: b.Weight, Invalid: b.Invalid || !ok})
	}
	for _, m := range r.Filters.Mirrors {
		if t, ok := find(m.Target); ok {
			out.Filters.Mirrors = append(out.Filters.Mirrors, Mirror[B]{Target: t, Percent: m.Percent})
		}
	}
	return out
}
