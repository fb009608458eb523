package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
	"golang.org/x/net/http2"
)

// matchYAML compiles cfg's routes as the proxy does and matches a GET of
// host and path on listener, returning the backend's name.
func matchYAML(t *testing.T, table *routeTable, listener, host, path string) string {
	t.Helper()
	var req h1.Request
	if err := req.Parse([]byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := route.Request{Host: req.Authority, Path: req.MatchPath(), Method: req.Method, Query: req.Query, Fields: &req}
	rule, _ := table.Match(listener, &r)
	if rule == nil {
		return ""
	}
	b, _ := rule.Pick()
	return b.name
}

// The YAML's routes keep their meaning in the route model: the most
// specific host first (exact, the longest wildcard, none), then the longest
// byte prefix; a host whose routes do not take the path leaves it to the
// next group.
func TestYAMLRoutesPickMostSpecificHostThenLongestPrefix(t *testing.T) {
	cfg := &config.Config{Routes: []config.Route{
		{Listener: "web", PathPrefix: "/", Backend: "any-root"},
		{Listener: "web", PathPrefix: "/api", Backend: "any-api"},
		{Listener: "web", Host: "*.example.com", PathPrefix: "/", Backend: "wild"},
		{Listener: "web", Host: "*.a.example.com", PathPrefix: "/", Backend: "wild-a"},
		{Listener: "web", Host: "Shop.Example.com", PathPrefix: "/cart", Backend: "shop-cart"},
		{Listener: "web", Host: "shop.example.com", PathPrefix: "/", Backend: "shop"},
		{Listener: "web", Host: "only.example.org", PathPrefix: "/x", Backend: "only-x"},
		{Listener: "other", PathPrefix: "/", Backend: "other"},
	}}
	backends := map[string]*backend{}
	for _, r := range cfg.Routes {
		backends[r.Backend] = &backend{name: r.Backend}
	}
	table, err := route.Compile(yamlRules(cfg, backends))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ listener, host, path, want string }{
		{"web", "shop.example.com", "/cart/1", "shop-cart"},
		{"web", "SHOP.example.com:8080", "/cart", "shop-cart"},
		{"web", "shop.example.com.", "/", "shop"},
		{"web", "shop.example.com", "/api", "shop"}, // exact host wins over a longer prefix elsewhere
		{"web", "x.example.com", "/api", "wild"},
		{"web", "x.a.example.com", "/", "wild-a"},
		{"web", "example.com", "/", "any-root"}, // *.example.com needs a label
		{"web", "only.example.org", "/y", "any-root"},
		{"web", "only.example.org", "/x/1", "only-x"},
		{"web", "a", "/api/v1", "any-api"},
		{"web", "[::1]:80", "/apix", "any-api"},
		{"other", "shop.example.com", "/", "other"},
		{"nope", "a", "/", ""},
	} {
		if got := matchYAML(t, table, tt.listener, tt.host, tt.path); got != tt.want {
			t.Errorf("%s %s%s: %q, want %q", tt.listener, tt.host, tt.path, got, tt.want)
		}
	}
}

// The YAML's matchers and weights, through the real proxy: a path of the
// Gateway API's kinds, a method, a header and a query parameter, and two
// backends sharing a route 1:3.
func TestYAMLMatchersAndWeights(t *testing.T) {
	backend := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	a, b, c := backend("a"), backend("b"), backend("c")
	_, web, _ := startProxy(t, fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: web
    address: @WEB@
backends:
  - {name: a, static: [%q]}
  - {name: b, static: [%q]}
  - {name: c, static: [%q]}
routes:
  - {listener: web, backend: a}
  - {listener: web, path: {type: Exact, value: /exact}, backend: c}
  - {listener: web, path: {type: RegularExpression, value: "/v[0-9]+/.*"}, backend: c}
  - {listener: web, path: {value: /seg}, backend: c}
  - {listener: web, pathPrefix: /m, method: DELETE, backend: c}
  - {listener: web, pathPrefix: /h, headers: [{name: X-Canary, value: "y.*", type: RegularExpression}], backend: c}
  - {listener: web, pathPrefix: /q, queryParams: [{name: v, value: "2"}], backend: c}
  - listener: web
    pathPrefix: /split
    backends: [{name: a, weight: 1}, {name: b, weight: 3}, {name: c, weight: 0}]
`, hostOf(a), hostOf(b), hostOf(c)))
	get := func(method, path string, hdr ...string) string {
		req, _ := http.NewRequest(method, "http://"+web+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	for _, tc := range []struct {
		method, path string
		hdr          []string
		want         string
	}{
		{"GET", "/exact", nil, "c"},
		{"GET", "/exact/", nil, "a"},
		{"GET", "/v2/x", nil, "c"},
		{"GET", "/v2", nil, "a"},
		{"GET", "/seg/x", nil, "c"},
		{"GET", "/segment", nil, "a"}, // PathPrefix by segments
		{"DELETE", "/m", nil, "c"},
		{"GET", "/m", nil, "a"},
		{"GET", "/h", []string{"X-Canary", "yes"}, "c"},
		{"GET", "/h", []string{"X-Canary", "no"}, "a"},
		{"GET", "/q?v=2", nil, "c"},
		{"GET", "/q?v=3", nil, "a"},
	} {
		if got := get(tc.method, tc.path, tc.hdr...); got != tc.want {
			t.Errorf("%s %s %v: backend %q, want %q", tc.method, tc.path, tc.hdr, got, tc.want)
		}
	}
	n := map[string]int{}
	for range 400 {
		n[get("GET", "/split")]++
	}
	if n["c"] > 0 || n["a"] < 60 || n["a"] > 140 || n["b"] < 260 {
		t.Errorf("400 requests split %v, want about 100 a, 300 b, no c", n)
	}
}

// The Gateway API's filters in baton's YAML, through the real proxy over
// HTTP/1.1 and HTTP/2: header fields set, added and removed both ways; a
// redirect (scheme, host, port and path by the spec's rules); a URL
// rewrite of host and path (prefix by segments, or byte prefix).
func TestYAMLFilters(t *testing.T) {
	var got struct {
		sync.Mutex
		host, path string
		hdr        http.Header
	}
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Lock()
		got.host, got.path, got.hdr = r.Host, r.URL.RequestURI(), r.Header.Clone()
		got.Unlock()
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("X-Keep", "1")
		io.WriteString(w, "ok")
	}))
	defer be.Close()
	_, web, _ := startProxy(t, fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: web
    address: @WEB@
backends:
  - {name: app, static: [%q]}
routes:
  - listener: web
    pathPrefix: /h
    backend: app
    requestHeaders: {set: [{name: X-Set, value: "new"}], add: [{name: X-Add, value: "a"}], remove: [X-Gone]}
    responseHeaders: {set: [{name: X-Served-By, value: baton}], remove: [X-Internal]}
  - {listener: web, path: {value: /old}, redirect: {path: {replacePrefixMatch: /new}, statusCode: 301}}
  - {listener: web, path: {value: /secure}, redirect: {scheme: https, hostname: secure.example}}
  - {listener: web, path: {value: /port}, redirect: {port: 9090}}
  - {listener: web, path: {value: /v1}, backend: app, rewrite: {hostname: internal.example, path: {replacePrefixMatch: /api/v2}}}
  - {listener: web, pathPrefix: /legacy, backend: app, rewrite: {path: {replacePrefixMatch: /modern}}}
  - {listener: web, path: {value: /full}, backend: app, rewrite: {path: {replaceFullPath: /replaced}}}
`, hostOf(be)))
	_, port, _ := net.SplitHostPort(web)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	clients := map[string]*http.Client{
		"HTTP/1.1": {CheckRedirect: noRedirect},
		"HTTP/2": {CheckRedirect: noRedirect, Transport: &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}},
	}
	for proto, c := range clients {
		do := func(path string, hdr ...string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", "http://"+web+path, nil)
			req.Host = "shop.example:" + port
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		resp := do("/h/x", "X-Set", "old", "X-Gone", "1", "X-Other", "o")
		got.Lock()
		if got.hdr.Get("X-Set") != "new" || got.hdr.Values("X-Set")[0] != "new" || len(got.hdr.Values("X-Set")) != 1 || got.hdr.Get("X-Add") != "a" || got.hdr.Get("X-Gone") != "" || got.hdr.Get("X-Other") != "o" {
			t.Errorf("%s: the backend got %v", proto, got.hdr)
		}
		got.Unlock()
		if resp.Header.Get("X-Internal") != "" || resp.Header.Get("X-Served-By") != "baton" || resp.Header.Get("X-Keep") != "1" {
			t.Errorf("%s: the client got %v", proto, resp.Header)
		}
		for _, tc := range []struct {
			path   string
			status int
			loc    string
		}{
			{"/old/a?q=1", 301, "http://shop.example:" + port + "/new/a?q=1"},
			{"/secure/x", 302, "https://secure.example/secure/x"},
			{"/port", 302, "http://shop.example:9090/port"},
		} {
			if r := do(tc.path); r.StatusCode != tc.status || r.Header.Get("Location") != tc.loc {
				t.Errorf("%s: %s: %d %q, want %d %q", proto, tc.path, r.StatusCode, r.Header.Get("Location"), tc.status, tc.loc)
			}
		}
		for _, tc := range []struct{ path, host, upstream string }{
			{"/v1/users?id=7", "internal.example", "/api/v2/users?id=7"},
			{"/v1", "internal.example", "/api/v2"},
			{"/legacyx/y", "shop.example:" + port, "/modernx/y"}, // a byte prefix replaces bytes, as nginx's proxy_pass
			{"/full/a/b", "shop.example:" + port, "/replaced"},
		} {
			do(tc.path)
			got.Lock()
			if got.host != tc.host || got.path != tc.upstream {
				t.Errorf("%s: %s went up as %s %s, want %s %s", proto, tc.path, got.host, got.path, tc.host, tc.upstream)
			}
			got.Unlock()
		}
	}
}

// Timeouts (HTTPRouteTimeouts): request bounds the wait for the response
// from the request's start, backendRequest each attempt; past either the
// answer is 504. A route without them waits the backend's own bound.
func TestYAMLTimeouts(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/fast" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	defer be.Close()
	_, web, _ := startProxy(t, fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: web
    address: @WEB@
backends:
  - {name: app, static: [%q], retries: 2}
routes:
  - {listener: web, path: {value: /req}, backend: app, timeouts: {request: 200ms}}
  - {listener: web, path: {value: /be}, backend: app, timeouts: {backendRequest: 200ms}}
  - {listener: web, path: {value: /fast}, backend: app, timeouts: {request: 5s, backendRequest: 2s}}
`, hostOf(be)))
	for path, want := range map[string]int{"/req/x": 504, "/be/x": 504, "/fast": 200} {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// RequestMirror: each mirror gets a copy of the request as it goes
// upstream (filters applied, baton's X-Forwarded-For), its answer dropped;
// the client gets the primary's. A request whose body streams is not
// copied.
func TestYAMLMirror(t *testing.T) {
	mirrored := make(chan *http.Request, 10)
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mirrored <- r
		w.WriteHeader(500) // nobody's answer
	}))
	defer mirror.Close()
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "primary") }))
	defer primary.Close()
	p, web, _ := startProxy(t, fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: web
    address: @WEB@
backends:
  - {name: app, static: [%q]}
  - {name: shadow, static: [%q]}
routes:
  - listener: web
    backend: app
    mirrors: [{backend: shadow}]
    requestHeaders: {set: [{name: X-Filtered, value: "yes"}]}
`, hostOf(primary), hostOf(mirror)))
	resp, err := http.Get("http://" + web + "/copy/me?x=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "primary" {
		t.Fatalf("the client got %d %q, want the primary's answer", resp.StatusCode, body)
	}
	select {
	case r := <-mirrored:
		if r.URL.RequestURI() != "/copy/me?x=1" || r.Header.Get("X-Filtered") != "yes" || r.Header.Get("X-Forwarded-For") != "127.0.0.1" {
			t.Errorf("the mirror got %s %v", r.URL.RequestURI(), r.Header)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the mirror got nothing within 5s")
	}
	resp, err = http.Post("http://"+web+"/streamed", "text/plain", strings.NewReader("a body that streams"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get("http://" + web + "/after")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case r := <-mirrored:
		if r.URL.Path != "/after" {
			t.Errorf("the mirror got %s %s, want the GET", r.Method, r.URL.Path)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the mirror got nothing within 5s")
	}
	// Copies are counted as they are made, before the request goes
	// upstream: the POST's response came after its copy would have.
	if n := p.https[0].mirrored.Load(); n != 2 {
		t.Errorf("%d copies sent, want 2 (the GETs, not the POST)", n)
	}
}
