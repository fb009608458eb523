package route

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// fields is a request's header fields, for tests.
type fields map[string]string

func (f fields) Field(name string) []byte {
	if v, ok := f[name]; ok {
		return []byte(v)
	}
	return nil
}

// req builds a request: "GET host/path?query" with header fields.
func req(method, target string, hdr ...string) *Request {
	host, rest, _ := strings.Cut(target, "/")
	path, query, _ := strings.Cut("/"+rest, "?")
	f := fields{}
	for i := 0; i+1 < len(hdr); i += 2 {
		f[strings.ToLower(hdr[i])] = hdr[i+1]
	}
	return &Request{Host: []byte(host), Path: []byte(path), Method: []byte(method), Query: []byte(query), Fields: f}
}

func prefix(v string) Match { return Match{Path: PathMatch{Type: PathPrefix, Value: v}} }
func exact(v string) Match  { return Match{Path: PathMatch{Type: PathExact, Value: v}} }

// rule is a rule on listener "web" whose backend is its own name.
func rule(name string, hosts []string, ms ...Match) Rule[string] {
	return Rule[string]{Name: name, Listener: "web", Hostnames: hosts, Matches: ms, Backends: []Backend[string]{{Target: name, Weight: 1}}}
}

func compile(t *testing.T, rules ...Rule[string]) *Table[string] {
	t.Helper()
	tb, err := Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func matched(tb *Table[string], r *Request) string {
	c, _ := tb.Match("web", r)
	if c == nil {
		return "404"
	}
	return c.Name
}

// The Gateway API's precedence of matches (HTTPRouteRule.Matches,
// apis/v1/httproute_types.go, v1.6): an Exact path, then the longest
// prefix, then a method match, then more header matches, then more query
// matches; then the oldest route, the route first by namespace/name, the
// first rule of a route.
func TestPrecedence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	withMethod := prefix("/")
	withMethod.Method = "GET"
	twoHeaders := prefix("/")
	twoHeaders.Headers = []ValueMatch{{Name: "X-A", Value: "1"}, {Name: "x-b", Value: "2"}}
	oneHeader := prefix("/")
	oneHeader.Headers = []ValueMatch{{Name: "x-a", Value: "1"}}
	oneQuery := prefix("/")
	oneQuery.Query = []ValueMatch{{Name: "q", Value: "1"}}
	twoQueries := oneQuery
	twoQueries.Query = append(twoQueries.Query, ValueMatch{Name: "r", Value: "2"})
	older, newer := rule("older", nil, prefix("/same")), rule("newer", nil, prefix("/same"))
	older.Order.Created, newer.Order.Created = t0, t0.Add(time.Second)
	byName1, byName2 := rule("ns/a", nil, prefix("/name")), rule("ns/b", nil, prefix("/name"))
	byName1.Order, byName2.Order = Order{Created: t0, Route: "ns/a"}, Order{Created: t0, Route: "ns/b"}
	second, first := rule("rule 1", nil, prefix("/rule")), rule("rule 0", nil, prefix("/rule"))
	second.Order, first.Order = Order{Route: "ns/r", Index: 1}, Order{Route: "ns/r", Index: 0}

	tb := compile(t,
		rule("prefix /", nil, prefix("/")),
		rule("prefix /foo", nil, prefix("/foo")),
		rule("exact /foo", nil, exact("/foo")),
		rule("prefix /foo/bar", nil, prefix("/foo/bar")),
		rule("headers 2", nil, withPath(twoHeaders, "/h")),
		rule("method", nil, withPath(withMethod, "/h")),
		rule("headers 1", nil, withPath(oneHeader, "/h")),
		rule("query 1", nil, withPath(oneQuery, "/q")),
		rule("query 2", nil, withPath(twoQueries, "/q")),
		newer, older, byName2, byName1, second, first,
	)
	for _, tc := range []struct {
		req  *Request
		want string
	}{
		{req("GET", "a/foo"), "exact /foo"},              // Exact over the prefix of the same length
		{req("GET", "a/foo/"), "prefix /foo"},            // not Exact
		{req("GET", "a/foo/bar/baz"), "prefix /foo/bar"}, // the longest prefix
		{req("GET", "a/foobar"), "prefix /"},             // PathPrefix is by segments
		{req("GET", "a/h", "x-a", "1", "x-b", "2"), "method"},
		{req("POST", "a/h", "x-a", "1", "x-b", "2"), "headers 2"},
		{req("POST", "a/h", "x-a", "1"), "headers 1"},
		{req("GET", "a/q?q=1&r=2"), "query 2"},
		{req("GET", "a/q?q=1"), "query 1"},
		{req("GET", "a/q?r=2"), "prefix /"},
		{req("GET", "a/same"), "older"},
		{req("GET", "a/name"), "ns/a"},
		{req("GET", "a/rule"), "rule 0"},
	} {
		if got := matched(tb, tc.req); got != tc.want {
			t.Errorf("%s %s%s?%s: %s, want %s", tc.req.Method, tc.req.Host, tc.req.Path, tc.req.Query, got, tc.want)
		}
	}
}

func withPath(m Match, p string) Match {
	m.Path = PathMatch{Type: PathPrefix, Value: p}
	return m
}

// Hostnames (HTTPRouteSpec.Hostnames): an exact host over a wildcard, a
// longer wildcard over a shorter, both over no host; "*.example.com" takes
// a.example.com and a.b.example.com, not example.com. Hosts match without
// case, port or trailing dot. A group without a rule for the path leaves
// the request to the next.
func TestHostnames(t *testing.T) {
	tb := compile(t,
		rule("any", nil),
		rule("wild", []string{"*.example.com"}),
		rule("wild longer", []string{"*.b.example.com"}),
		rule("exact", []string{"a.b.example.com"}, prefix("/only")),
		rule("two hosts", []string{"x.test", "Y.test."}),
	)
	for _, tc := range []struct{ host, path, want string }{
		{"a.b.example.com", "/only/x", "exact"},
		{"A.B.Example.COM.:8443", "/only", "exact"},
		{"a.b.example.com", "/other", "wild longer"}, // the exact group has no rule for it
		{"c.b.example.com", "/", "wild longer"},
		{"c.example.com", "/", "wild"},
		{"example.com", "/", "any"},
		{"b.example.com", "/", "wild"}, // *.b.example.com does not take b.example.com
		{"y.test", "/", "two hosts"},
		{"[::1]:80", "/", "any"},
	} {
		if got := matched(tb, req("GET", tc.host+tc.path)); got != tc.want {
			t.Errorf("%s%s: %s, want %s", tc.host, tc.path, got, tc.want)
		}
	}
}

// Path types: PathPrefix by segments (a trailing slash in the value
// ignored), Exact, a regular expression matching the whole path, and the
// YAML's byte prefix.
func TestPathTypes(t *testing.T) {
	for _, tc := range []struct {
		m    PathMatch
		path string
		want bool
	}{
		{PathMatch{PathPrefix, "/foo"}, "/foo", true},
		{PathMatch{PathPrefix, "/foo"}, "/foo/", true},
		{PathMatch{PathPrefix, "/foo/"}, "/foo", true},
		{PathMatch{PathPrefix, "/foo"}, "/foobar", false},
		{PathMatch{PathPrefix, "/"}, "/anything", true},
		{PathMatch{PathExact, "/foo"}, "/foo/", false},
		{PathMatch{PathRegex, "/v[0-9]+/.*"}, "/v2/x", true},
		{PathMatch{PathRegex, "/v[0-9]+"}, "/v2/x", false}, // the whole path
		{PathMatch{PathStringPrefix, "/foo"}, "/foobar", true},
	} {
		tb := compile(t, rule("r", nil, Match{Path: tc.m}))
		if c, _ := tb.Match("web", req("GET", "a"+tc.path)); (c != nil) != tc.want {
			t.Errorf("%s %q on %q: %v, want %v", tc.m.Type, tc.m.Value, tc.path, c != nil, tc.want)
		}
	}
}

// A rule whose regular expression does not compile is left out and named;
// the rest serve (the Gateway API refuses that rule only).
func TestBadRegexRefusesItsRuleOnly(t *testing.T) {
	bad := rule("bad", nil, Match{Path: PathMatch{PathRegex, "/(["}})
	tb, err := Compile([]Rule[string]{bad, rule("good", nil, prefix("/"))})
	if err == nil || !strings.Contains(err.Error(), "bad") {
		t.Fatalf("error %v, want one naming the bad rule", err)
	}
	if got := matched(tb, req("GET", "a/x")); got != "good" {
		t.Fatalf("%s, want the good rule", got)
	}
}

// Header names match without case; values exactly or by regular
// expression; of two matches on the same name only the first counts
// (HTTPHeaderMatch). Query parameters are compared decoded.
func TestValueMatches(t *testing.T) {
	m := prefix("/")
	m.Headers = []ValueMatch{{Name: "X-Version", Value: "v[12]", Regex: true}, {Name: "x-version", Value: "never"}}
	m.Query = []ValueMatch{{Name: "name", Value: "a b/c"}}
	tb := compile(t, rule("r", nil, m))
	for _, tc := range []struct {
		r    *Request
		want bool
	}{
		{req("GET", "a/?name=a+b%2Fc", "x-version", "v1"), true},
		{req("GET", "a/?x=1&name=a%20b/c&name=zz", "x-version", "v2"), true},
		{req("GET", "a/?name=a+b%2Fc", "x-version", "v3"), false},
		{req("GET", "a/?name=ab", "x-version", "v1"), false},
		{req("GET", "a/?name=a+b%2Fc"), false},
	} {
		if c, _ := tb.Match("web", tc.r); (c != nil) != tc.want {
			t.Errorf("%s?%s %v: %v, want %v", tc.r.Path, tc.r.Query, tc.r.Fields, c != nil, tc.want)
		}
	}
}

// Weighted backends share requests by weight; a rule whose weights sum to
// 0, or a backend marked invalid, answers 500 for its share
// (HTTPBackendRef).
func TestPick(t *testing.T) {
	r := rule("w", nil)
	r.Backends = []Backend[string]{{Target: "a", Weight: 1}, {Target: "b", Weight: 3}, {Target: "none", Weight: 0}, {Target: "gone", Weight: 1, Invalid: true}}
	tb := compile(t, r)
	c, _ := tb.Match("web", req("GET", "a/"))
	n := map[string]int{}
	const picks = 50000
	for range picks {
		b, ok := c.Pick()
		if !ok {
			b = "500"
		}
		n[b]++
	}
	for b, want := range map[string]float64{"a": 0.2, "b": 0.6, "500": 0.2} {
		if got := float64(n[b]) / picks; got < want-0.02 || got > want+0.02 {
			t.Errorf("%s: %.3f of the requests, want %.2f", b, got, want)
		}
	}
	if n["none"] > 0 {
		t.Errorf("a backend of weight 0 got %d requests", n["none"])
	}
	z := rule("zero", nil)
	z.Backends = []Backend[string]{{Target: "a", Weight: 0}}
	if c, _ := compile(t, z).Match("web", req("GET", "a/")); c == nil {
		t.Error("no match")
	} else if _, ok := c.Pick(); ok {
		t.Error("a rule of weight 0 picked a backend")
	}
}

// BenchmarkMatchOne is the common case: one rule (a YAML route, pathPrefix
// /, no host) per listener.
func BenchmarkMatchOne(b *testing.B) {
	r := rule("root", nil, Match{Path: PathMatch{Type: PathStringPrefix, Value: "/"}})
	tb, _ := Compile([]Rule[string]{r})
	rq := req("GET", "bench.example/bench")
	b.ReportAllocs()
	for b.Loop() {
		if c, _ := tb.Match("web", rq); c == nil {
			b.Fatal("no match")
		} else if _, ok := c.Pick(); !ok {
			b.Fatal("no backend")
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	var rules []Rule[string]
	for i := range 100 {
		rules = append(rules, rule("r", []string{"app.example.com"}, prefix("/api/v"+string(rune('a'+i%26))+"/"+strings.Repeat("x", i%7))))
	}
	rules = append(rules, rule("root", nil, prefix("/")))
	tb, _ := Compile(rules)
	for _, path := range []string{"/static/main.css", "/api/vz/"} {
		b.Run(path, func(b *testing.B) {
			r := req("GET", "app.example.com"+path)
			b.ReportAllocs()
			for b.Loop() {
				if c, _ := tb.Match("web", r); c == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

// scan is Match without the trie: every entry of the host's group tried in
// precedence order. The index must agree with it.
func scan(tb *Table[string], r *Request) string {
	ht := tb.listeners["web"]
	host := strings.ToLower(string(normalizeHostBytes(r.Host)))
	groups := []*group[string]{ht.exact[host]}
	for _, w := range ht.wildcards {
		if len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
			groups = append(groups, w.group)
		}
	}
	groups = append(groups, ht.any)
	for _, g := range groups {
		if g == nil {
			continue
		}
		for _, e := range g.entries {
			if e.matches(r) {
				return e.rule.Name
			}
		}
	}
	return "404"
}

// The segment trie picks what a scan of every rule in precedence order
// picks, over random rules and paths.
func TestIndexAgreesWithScan(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	segs := []string{"a", "b", "ab", "api", "v1", ""}
	path := func(n int) string {
		var p strings.Builder
		for range n {
			p.WriteString("/" + segs[rnd.IntN(len(segs))])
		}
		if p.Len() == 0 {
			return "/"
		}
		return p.String()
	}
	hosts := [][]string{nil, {"x.test"}, {"*.test"}}
	for round := range 200 {
		var rules []Rule[string]
		for i := range 30 {
			m := Match{Path: PathMatch{Type: PathType(rnd.IntN(4)), Value: path(rnd.IntN(4))}}
			if m.Path.Type == PathRegex {
				m.Path.Value = "/a.*"
			}
			if rnd.IntN(4) == 0 {
				m.Method = "POST"
			}
			r := rule(fmt.Sprintf("r%d", i), hosts[rnd.IntN(len(hosts))], m)
			r.Order.Index = i
			rules = append(rules, r)
		}
		tb := compile(t, rules...)
		for range 50 {
			method := []string{"GET", "POST"}[rnd.IntN(2)]
			r := req(method, []string{"x.test", "y.test", "z.example"}[rnd.IntN(3)]+path(rnd.IntN(5)))
			if got, want := matched(tb, r), scan(tb, r); got != want {
				t.Fatalf("round %d: %s %s%s: the index picks %s, a scan %s", round, method, r.Host, r.Path, got, want)
			}
		}
	}
}

// Build from a previous table keeps the groups of the hosts whose rules
// are the same (shared by both tables, unchanged), and builds those whose
// rules changed: a rule moved to another host leaves its old one and is
// found at its new one, in precedence with the rules already there; the
// table the build started from answers as before.
func TestBuildKeepsUnchangedHosts(t *testing.T) {
	prepare := func(r Rule[string]) *Prepared[string] {
		t.Helper()
		p, err := Prepare(&r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := prepare(rule("a", []string{"a.example"}))
	b := prepare(rule("b", []string{"b.example"}, prefix("/b")))
	wild := prepare(rule("wild", []string{"*.example"}))
	anyHost := prepare(rule("any", nil))
	t1 := Build([]*Prepared[string]{a, b, wild, anyHost}, nil)

	moved := prepare(rule("b", []string{"a.example"}, prefix("/b")))
	t2 := Build([]*Prepared[string]{a, moved, wild, anyHost}, t1)

	h1, h2 := t1.listeners["web"], t2.listeners["web"]
	if h2.any != h1.any || h2.wildcards[0].group != h1.wildcards[0].group {
		t.Error("the groups whose rules did not change were built again")
	}
	if h2.exact["a.example"] == h1.exact["a.example"] {
		t.Error("the group a rule moved to kept its old entries")
	}
	for _, tt := range []struct {
		tb         *Table[string]
		host, path string
		want       string
	}{
		{t2, "a.example", "/b/1", "b"},
		{t2, "a.example", "/", "a"},
		{t2, "b.example", "/b", "wild"}, // b left it: the wildcard takes it
		{t2, "x.example", "/", "wild"},
		{t2, "other", "/", "any"},
		{t1, "b.example", "/b", "b"},
		{t1, "a.example", "/b/1", "a"},
	} {
		if got := matched(tt.tb, req("GET", tt.host+tt.path)); got != tt.want {
			t.Errorf("%s%s: %s, want %s", tt.host, tt.path, got, tt.want)
		}
	}
}

// A wildcard of one label (Ingress: "*.foo.com" matches "bar.foo.com",
// not "baz.bar.foo.com", networking.k8s.io/v1 IngressRule.Host) beside
// the Gateway API's of any number of labels (HTTPRoute hostnames).
func TestOneLabelWildcard(t *testing.T) {
	one := rule("one", []string{"*.foo.com"})
	one.OneLabel = true
	tb := compile(t, one, rule("any", []string{"*.bar.com"}))
	for _, tt := range []struct{ host, want string }{
		{"a.foo.com", "one"},
		{"a.b.foo.com", "404"},
		{"foo.com", "404"},
		{"a.bar.com", "any"},
		{"a.b.bar.com", "any"},
	} {
		if got := matched(tb, req("GET", tt.host+"/")); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.host, got, tt.want)
		}
	}
}

// Access as nginx's allow and deny in ingress-nginx's source ranges
// (annotations.md, "Whitelist source range" and "Denylist source
// range"): a denied address is refused whatever Allow says; with Allow,
// only its addresses; an IPv4-mapped IPv6 address is its IPv4 address.
func TestAccess(t *testing.T) {
	p := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	a := &Access{Allow: []netip.Prefix{p("10.0.0.0/8"), p("2001:db8::/32")}, Deny: []netip.Prefix{p("10.1.0.0/16")}}
	for ip, want := range map[string]bool{"10.2.3.4": true, "10.1.2.3": false, "192.0.2.1": false, "2001:db8::1": true, "::ffff:10.2.3.4": true, "::ffff:10.1.0.1": false} {
		if got := a.Allows(netip.MustParseAddr(ip)); got != want {
			t.Errorf("%s: %v, want %v", ip, got, want)
		}
	}
	deny := &Access{Deny: []netip.Prefix{p("192.0.2.0/24")}}
	if !deny.Allows(netip.MustParseAddr("198.51.100.1")) || deny.Allows(netip.MustParseAddr("192.0.2.9")) || !deny.Allows(netip.Addr{}) {
		t.Error("deny alone")
	}
	if a.Allows(netip.Addr{}) {
		t.Error("an unknown address allowed by an allow list")
	}
}

// CORS as ingress-nginx's enable-cors answers (annotations.md, "Enable
// CORS"; the Fetch standard's CORS protocol): an allowed origin is echoed
// (with Vary: Origin), one not allowed gets no CORS field at all, "*"
// stays "*" even with credentials (so a browser sends none), and a
// preflight's answer has the methods, headers and max age.
func TestCORS(t *testing.T) {
	c := &CORS{AllowOrigins: []string{"https://app.example", "http://localhost:8080"}, AllowMethods: "GET, POST", AllowHeaders: "X-A",
		ExposeHeaders: "X-B", AllowCredentials: true, MaxAge: 600}
	fields := func(c *CORS, origin string, preflight bool) string {
		var s []string
		for _, f := range c.AppendFields(nil, []byte(origin), preflight) {
			s = append(s, string(f.Name)+"="+string(f.Value))
		}
		return strings.Join(s, " ")
	}
	for _, tt := range []struct {
		c         *CORS
		origin    string
		preflight bool
		want      string
	}{
		{c, "https://app.example", false, "access-control-allow-origin=https://app.example vary=Origin access-control-allow-credentials=true access-control-expose-headers=X-B"},
		{c, "HTTPS://APP.example", false, "access-control-allow-origin=HTTPS://APP.example vary=Origin access-control-allow-credentials=true access-control-expose-headers=X-B"},
		{c, "https://app.example", true, "access-control-allow-origin=https://app.example vary=Origin access-control-allow-credentials=true access-control-allow-methods=GET, POST access-control-allow-headers=X-A access-control-max-age=600"},
		{c, "https://evil.example", false, ""},
		{c, "", true, ""},
		{&CORS{AllowOrigins: []string{"*"}, AllowCredentials: true}, "https://evil.example", false, "access-control-allow-origin=* access-control-allow-credentials=true"},
		{&CORS{}, "", false, "access-control-allow-origin=*"},
	} {
		if got := fields(tt.c, tt.origin, tt.preflight); got != tt.want {
			t.Errorf("%v origin %q preflight %v:\n got %s\nwant %s", tt.c.AllowOrigins, tt.origin, tt.preflight, got, tt.want)
		}
	}
	// A value that would split a header line is refused.
	if err := checkFilters(&Filters[string]{CORS: &CORS{AllowHeaders: "X-A\r\nX-Injected: 1"}}); err == nil {
		t.Error("a CORS value with CRLF accepted")
	}
}

// Build from a previous table answers as a Build from nothing, over
// random sequences of rule sets (rules kept, added, dropped, moved
// between hosts, listeners and wildcards from one set to the next).
func TestBuildFromPreviousAgreesWithFresh(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	hosts := []string{"a.example", "b.example", "*.example", "*.b.example", ""}
	pool := map[string]*Prepared[string]{}
	prepared := func(name string) *Prepared[string] {
		if p := pool[name]; p != nil {
			return p
		}
		var hs []string
		if h := hosts[rng.IntN(len(hosts))]; h != "" {
			hs = []string{h}
		}
		r := rule(name, hs, prefix([]string{"/", "/x", "/x/y"}[rng.IntN(3)]))
		r.Listener = []string{"web", "tls"}[rng.IntN(2)]
		r.OneLabel = rng.IntN(2) == 0
		p, err := Prepare(&r)
		if err != nil {
			t.Fatal(err)
		}
		pool[name] = p
		return p
	}
	var prev *Table[string]
	for round := range 200 {
		var ps []*Prepared[string]
		for i := range 12 {
			if rng.IntN(3) > 0 {
				ps = append(ps, prepared(fmt.Sprintf("r%d-%d", i, rng.IntN(3))))
			}
		}
		built, fresh := Build(ps, prev), Build(ps, nil)
		for _, l := range []string{"web", "tls"} {
			for _, h := range []string{"a.example", "b.example", "x.example", "x.b.example", "y.x.b.example", "other"} {
				for _, p := range []string{"/", "/x", "/x/y/z", "/q"} {
					r := req("GET", h+p)
					got, _ := built.Match(l, r)
					want, _ := fresh.Match(l, r)
					if got != want && (got == nil || want == nil || got.Name != want.Name) {
						t.Fatalf("round %d, %s %s%s: built from the previous table %v, fresh %v", round, l, h, p, got, want)
					}
				}
			}
		}
		prev = built
	}
}

// A rate limit as nginx's limit_req with burst and nodelay (ingress-nginx's
// limit-rps and limit-rpm): a client has the burst and one more at once,
// then the rate; clients apart have buckets apart; a bucket idle a minute
// is dropped at the next sweep.
func TestRateLimit(t *testing.T) {
	r := rule("limited", nil)
	r.RateLimit = &RateLimit{Rate: 2, Burst: 3}
	tb := compile(t, r)
	c, _ := tb.Match("web", req("GET", "h/"))
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")
	now := time.Unix(1000, 0)
	for i := range 4 {
		if !c.Allow(a, now) {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	if c.Allow(a, now) {
		t.Error("a request past the burst allowed")
	}
	if !c.Allow(b, now) {
		t.Error("another client shares the first's bucket")
	}
	if !c.Allow(a, now.Add(500*time.Millisecond)) || c.Allow(a, now.Add(500*time.Millisecond)) {
		t.Error("half a second at 2 a second is not one request")
	}
	later := now.Add(2 * time.Minute)
	c.Allow(b, later)
	if n := len(c.limit.buckets); n != 1 {
		t.Errorf("%d buckets after a's minute idle, want b's alone", n)
	}
	if _, err := Compile([]Rule[string]{{Name: "bad", Listener: "web", RateLimit: &RateLimit{Rate: 0}}}); err == nil {
		t.Error("a rate limit of 0 a second compiled")
	}
}

// MaxConnections as nginx's limit_conn (ingress-nginx's limit-connections):
// a client's requests in flight at once, counted per client; one released
// makes room for the next.
func TestMaxConnections(t *testing.T) {
	r := rule("limited", nil)
	r.MaxConnections = 2
	c, _ := compile(t, r).Match("web", req("GET", "h/"))
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	if !c.Acquire(a) || !c.Acquire(a) || c.Acquire(a) {
		t.Fatal("two in flight allowed, a third refused: not so")
	}
	if !c.Acquire(b) {
		t.Error("another client counted with the first")
	}
	c.Release(a)
	if !c.Acquire(netip.MustParseAddr("::ffff:192.0.2.1")) {
		t.Error("a released request made no room (or a mapped address is another client)")
	}
	c.Release(a)
	c.Release(a)
	c.Release(b)
	if n := len(c.conns.n); n != 0 {
		t.Errorf("%d clients still counted", n)
	}
}
