package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
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
	rule := table.Match(listener, &r)
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
