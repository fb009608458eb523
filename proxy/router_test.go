package proxy

import (
	"testing"

	"github.com/baton-proxy/baton/internal/config"
)

func TestRouterPicksMostSpecificHostThenLongestPrefix(t *testing.T) {
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
	r := newRouter(cfg, backends)
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
		{"web", "", "/api/v1", "any-api"},
		{"web", "[::1]:80", "/apix", "any-api"},
		{"other", "shop.example.com", "/", "other"},
		{"nope", "", "/", ""},
	} {
		rt := r.match(tt.listener, tt.host, tt.path)
		got := ""
		if rt != nil {
			got = rt.backend.name
		}
		if got != tt.want {
			t.Errorf("match(%q, %q, %q) = %q, want %q", tt.listener, tt.host, tt.path, got, tt.want)
		}
	}
}

func BenchmarkRouterMatch(b *testing.B) {
	cfg := &config.Config{}
	for _, p := range []string{"/", "/api", "/api/v1", "/static", "/img", "/a/b/c"} {
		cfg.Routes = append(cfg.Routes, config.Route{Listener: "web", PathPrefix: p, Backend: "b"})
	}
	r := newRouter(cfg, map[string]*backend{"b": {name: "b"}})
	b.ReportAllocs()
	for b.Loop() {
		r.match("web", "Example.com:8080", "/api/v1/users")
	}
}
