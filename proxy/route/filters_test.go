package route

import (
	"strings"
	"testing"
)

// ReplacePrefixMatch by the Gateway API's table (HTTPPathModifier,
// apis/v1/httproute_types.go): the matched prefix is replaced by whole
// segments, trailing slashes of either side ignored; ReplaceFullPath
// replaces everything.
func TestModifyPath(t *testing.T) {
	for _, tc := range []struct {
		matched, path, value, want string
		full                       bool
	}{
		{"/foo", "/foo/bar", "/xyz", "/xyz/bar", false},
		{"/foo", "/foo/bar", "/xyz/", "/xyz/bar", false},
		{"/foo/", "/foo/bar", "/xyz", "/xyz/bar", false},
		{"/foo/", "/foo/bar", "/xyz/", "/xyz/bar", false},
		{"/foo", "/foo", "/xyz", "/xyz", false},
		{"/foo", "/foo/", "/xyz", "/xyz/", false},
		{"/foo/", "/foo/", "/xyz", "/xyz/", false},
		{"/foo", "/foo", "", "/", false},
		{"/foo", "/foo/", "", "/", false},
		{"/foo", "/foo/bar", "", "/bar", false},
		{"/foo", "/foo", "/", "/", false},
		{"/foo", "/foo/bar", "/", "/bar", false},
		{"/", "/foo/bar", "/xyz", "/xyz/foo/bar", false},
		{"/foo", "/foo/bar", "/one", "/one", true},
	} {
		m := &PathModifier{ReplacePrefix: !tc.full, Value: tc.value}
		if got := string(ModifyPath(nil, m, tc.matched, nil, []byte(tc.path))); got != tc.want {
			t.Errorf("%q matched %q, %+v: %q, want %q", tc.path, tc.matched, m, got, tc.want)
		}
	}
}

// ingress-nginx's rewrite-target (docs/user-guide/nginx-configuration/
// annotations.md#rewrite, and its examples/rewrite): the path matched as
// a regular expression, the whole path replaced by the target, $1 to $9
// its groups; a group that took nothing is empty.
func TestModifyPathRegex(t *testing.T) {
	for _, tc := range []struct{ re, path, target, want string }{
		{"(?i)/something(/|$)(.*).*", "/something", "/$2", "/"},
		{"(?i)/something(/|$)(.*).*", "/something/", "/$2", "/"},
		{"(?i)/something(/|$)(.*).*", "/something/new", "/$2", "/new"},
		{"(?i)/something(/|$)(.*).*", "/SOMETHING/new", "/$2", "/new"},
		{"(?i)/api(/|$)(.*).*", "/api/v1/x", "/internal/$2", "/internal/v1/x"},
		{"(?i)/foo.*", "/foo/bar", "/", "/"},
		{"(?i)/(a)(b).*", "/ab/c", "$2$1", "/ba"},
		{"(?i)/x.*", "/x", "/$9/$a$", "//$a$"},
	} {
		tb := compile(t, Rule[string]{Name: "r", Listener: "web", Matches: []Match{{Path: PathMatch{Type: PathRegex, Value: tc.re}}}, Backends: []Backend[string]{{Target: "r", Weight: 1}}})
		c, pm := tb.Match("web", req("GET", "h"+tc.path))
		if pm == nil {
			t.Fatalf("%s does not match %s", tc.re, tc.path)
		}
		m := &PathModifier{Regex: true, Value: tc.target}
		if got := string(ModifyPath([]byte("kept"), m, pm.Value, c.PathRegexp(pm.Value), []byte(tc.path))); got != "kept"+tc.want {
			t.Errorf("%s on %s, %s: %q, want %q", tc.re, tc.path, tc.target, got, "kept"+tc.want)
		}
	}
}

// A redirect's Location (HTTPRequestRedirectFilter): what the filter does
// not say is the request's; the port is the listener's unless the scheme
// changes (then the scheme's well-known port); 80 with http and 443 with
// https are left out.
func TestLocation(t *testing.T) {
	for _, tc := range []struct {
		r            Redirect
		scheme, host string
		port         int
		path, query  string
		want         string
	}{
		{Redirect{}, "http", "a.example:8080", 8080, "/p", "?q=1", "http://a.example:8080/p?q=1"},
		{Redirect{Scheme: "https"}, "http", "a.example:8080", 8080, "/p", "", "https://a.example/p"},
		{Redirect{Scheme: "https", Port: 8443}, "http", "a.example", 80, "/p", "", "https://a.example:8443/p"},
		{Redirect{Hostname: "b.example"}, "http", "a.example", 80, "/", "", "http://b.example/"},
		{Redirect{Port: 443}, "https", "a.example", 8443, "/", "", "https://a.example/"},
		{Redirect{Scheme: "http"}, "http", "a.example:8080", 8080, "/", "", "http://a.example:8080/"},
	} {
		got := string(tc.r.Location(nil, tc.scheme, []byte(tc.host), tc.port, []byte(tc.path), []byte(tc.query)))
		if got != tc.want {
			t.Errorf("%+v from %s://%s (listener %d): %q, want %q", tc.r, tc.scheme, tc.host, tc.port, got, tc.want)
		}
	}
}

// A header edit drops the fields Set and Remove name (without case), and
// writes Set's then Add's.
func TestHeaderEdit(t *testing.T) {
	e := newHeaderEdit(&HeaderModifier{Set: []Header{{"X-Set", "1"}}, Add: []Header{{"X-Add", "2"}}, Remove: []string{"X-Gone"}})
	for name, want := range map[string]bool{"x-set": true, "X-SET": true, "x-gone": true, "x-add": false, "x-other": false} {
		if got := e.Drops([]byte(name)); got != want {
			t.Errorf("Drops(%q) = %v, want %v", name, got, want)
		}
	}
	if got := string(e.Lines()); got != "X-Set: 1\r\nX-Add: 2\r\n" {
		t.Errorf("lines %q", got)
	}
	if p := e.Pairs(); len(p) != 2 || string(p[0].Name) != "x-set" || string(p[1].Name) != "x-add" {
		t.Errorf("pairs %v", p)
	}
	if newHeaderEdit(&HeaderModifier{}) != nil {
		t.Error("an empty modifier compiled to an edit")
	}
}

// Filters that would put a line break, a control character or a space
// where the wire cannot take one refuse their rule (routes come from any
// namespace's owner: CRLF in a header value is header injection, in a
// path request splitting).
func TestFiltersRefuseInjection(t *testing.T) {
	for _, f := range []Filters[string]{
		{RequestHeaders: &HeaderModifier{Set: []Header{{"X-A", "v\r\nX-Injected: 1"}}}},
		{RequestHeaders: &HeaderModifier{Add: []Header{{"X A", "v"}}}},
		{ResponseHeaders: &HeaderModifier{Set: []Header{{"X-A", "v\x00"}}}},
		{ResponseHeaders: &HeaderModifier{Remove: []string{"X:A"}}},
		{Redirect: &Redirect{Hostname: "a.example\r\nX: y"}},
		{Redirect: &Redirect{Path: &PathModifier{Value: "/a b"}}},
		{Redirect: &Redirect{Scheme: "javascript"}},
		{Rewrite: &Rewrite{Path: &PathModifier{Value: "/x HTTP/1.1\r\n\r\nGET /admin"}}},
		{Rewrite: &Rewrite{Path: &PathModifier{Value: "/x?admin=1"}}},
		{Rewrite: &Rewrite{Hostname: "a/b"}},
	} {
		r := rule("bad", nil)
		r.Filters = f
		if _, err := Compile([]Rule[string]{r}); err == nil {
			t.Errorf("filters %+v compiled", f)
		}
	}
	ok := rule("ok", nil)
	ok.Filters = Filters[string]{RequestHeaders: &HeaderModifier{Set: []Header{{"X-A", "a\tb"}}}, Rewrite: &Rewrite{Hostname: "a-b.example", Path: &PathModifier{ReplacePrefix: true}}}
	if _, err := Compile([]Rule[string]{ok}); err != nil {
		t.Errorf("good filters refused: %v", err)
	}
}

// A filter may not write or remove the fields that frame a message or its
// connection, nor Host and X-Forwarded-*: a second Content-Length or a
// Transfer-Encoding written by a route's author would let one message be
// read two ways by the next hop (RFC 9112 section 6.3; the CL.TE and TE.CL
// request smuggling of PortSwigger's "HTTP request smuggling", 2019, and
// its response-side twin, response splitting). Every translator's rules
// (the YAML, the Gateway API, Ingress) come through here.
func TestFiltersMayNotWriteFraming(t *testing.T) {
	for _, f := range []Filters[string]{
		{RequestHeaders: &HeaderModifier{Set: []Header{{Name: "Content-Length", Value: "0"}}}},
		{RequestHeaders: &HeaderModifier{Add: []Header{{Name: "transfer-encoding", Value: "chunked"}}}},
		{ResponseHeaders: &HeaderModifier{Set: []Header{{Name: "Content-Length", Value: "5"}}}},
		{ResponseHeaders: &HeaderModifier{Add: []Header{{Name: "Connection", Value: "close"}}}},
		{RequestHeaders: &HeaderModifier{Set: []Header{{Name: "Host", Value: "other.example"}}}},
		{RequestHeaders: &HeaderModifier{Remove: []string{"X-Forwarded-For"}}},
		{ResponseHeaders: &HeaderModifier{Remove: []string{"Transfer-Encoding"}}},
	} {
		if err := checkFilters(&f); err == nil || !strings.Contains(err.Error(), "baton's to write") {
			t.Errorf("%+v %+v: %v", f.RequestHeaders, f.ResponseHeaders, err)
		}
	}
	if err := checkFilters(&Filters[string]{ResponseHeaders: &HeaderModifier{Set: []Header{{Name: "X-Frame-Options", Value: "DENY"}}}}); err != nil {
		t.Errorf("an ordinary header refused: %v", err)
	}
}
