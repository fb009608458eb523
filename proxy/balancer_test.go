package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/kube"
)

func kubeBackend(balancer string, eps ...kube.Endpoint) *backend {
	b := newBackend(config.Backend{Name: "shop", Balancer: balancer, HashHeader: "X-User", Cookie: "baton-shop", Kubernetes: &config.KubeService{Mode: config.ModeEndpoints}}, 4096)
	b.update(eps, nil)
	return b
}

func ready(addr string) kube.Endpoint {
	return kube.Endpoint{Address: addr, Ready: true, Serving: true}
}
func terminating(addr string) kube.Endpoint {
	return kube.Endpoint{Address: addr, Serving: true, Terminating: true}
}

func TestNewRequestsGoToReadyElseServingTerminating(t *testing.T) {
	b := kubeBackend(config.BalancerRoundRobin, ready("a:1"), terminating("b:1"), kube.Endpoint{Address: "c:1"})
	seen := map[string]int{}
	for range 10 {
		var a attempt
		seen[b.pick(b.set.Load(), &a).addr]++
	}
	if seen["a:1"] != 10 {
		t.Errorf("with one ready endpoint: %v", seen)
	}
	b.update([]kube.Endpoint{terminating("b:1"), kube.Endpoint{Address: "c:1"}}, nil)
	var a attempt
	if ep := b.pick(b.set.Load(), &a); ep == nil || ep.addr != "b:1" {
		t.Errorf("none ready: picked %v, want the serving terminating one", ep)
	}
	b.update([]kube.Endpoint{{Address: "c:1"}}, nil)
	if set := b.set.Load(); len(set.active) != 0 || set.err != errNoEndpoint {
		t.Errorf("none serving: %+v", set)
	}
}

func TestRetriesGoElsewhere(t *testing.T) {
	b := kubeBackend(config.BalancerLeastRequest, ready("a:1"), ready("b:1"), ready("c:1"))
	var a attempt
	got := map[string]bool{}
	for range 3 {
		ep := b.pick(b.set.Load(), &a)
		a.tried(ep)
		got[ep.addr] = true
	}
	if len(got) != 3 || b.pick(b.set.Load(), &a) != nil {
		t.Errorf("three tries: %v; a fourth must find nothing", got)
	}
}

func TestEjection(t *testing.T) {
	b := kubeBackend(config.BalancerRoundRobin, ready("a:1"), ready("b:1"))
	bad := b.byAddr["a:1"]
	for range ejectAfter {
		bad.connectFailed()
	}
	for range 10 {
		var a attempt
		if ep := b.pick(b.set.Load(), &a); ep == bad {
			t.Fatal("an ejected endpoint was picked while another is usable")
		}
	}
	// When every endpoint is ejected, one is used anyway.
	for range ejectAfter {
		b.byAddr["b:1"].connectFailed()
	}
	var a attempt
	if b.pick(b.set.Load(), &a) == nil {
		t.Fatal("all ejected: nothing picked")
	}
}

func TestLeastRequestPrefersTheIdle(t *testing.T) {
	b := kubeBackend(config.BalancerLeastRequest, ready("a:1"), ready("b:1"))
	b.byAddr["a:1"].inflight.Store(100)
	for range 20 {
		var a attempt
		if ep := b.pick(b.set.Load(), &a); ep.addr != "b:1" {
			t.Fatalf("picked the busy endpoint")
		}
	}
}

func TestHashHeaderIsConsistent(t *testing.T) {
	var eps []kube.Endpoint
	for i := range 10 {
		eps = append(eps, ready(fmt.Sprintf("10.0.0.%d:80", i)))
	}
	b := kubeBackend(config.BalancerHashHeader, eps...)
	pickFor := func(user string) string {
		a := attempt{hash: hashBytes([]byte(user)), hashed: true}
		return b.pick(b.set.Load(), &a).addr
	}
	before := map[string]string{}
	spread := map[string]int{}
	for i := range 1000 {
		u := fmt.Sprint("user-", i)
		before[u] = pickFor(u)
		spread[before[u]]++
		if pickFor(u) != before[u] {
			t.Fatal("same header, another endpoint")
		}
	}
	for addr, n := range spread {
		if n < 40 || n > 200 {
			t.Errorf("%s got %d of 1000 users", addr, n)
		}
	}
	// One endpoint leaves: only its users move.
	b.update(eps[1:], nil)
	moved := 0
	for u, addr := range before {
		if now := pickFor(u); now != addr {
			moved++
			if addr != eps[0].Address {
				t.Fatalf("%s moved from %s to %s though its endpoint stayed", u, addr, now)
			}
		}
	}
	if moved != spread[eps[0].Address] {
		t.Errorf("%d users moved, want %d", moved, spread[eps[0].Address])
	}
}

// TestStickyCookieEndToEnd runs requests through the proxy: the first gets
// a cookie, later ones with it reach the same backend, even once it is
// terminating.
func TestStickyCookieEndToEnd(t *testing.T) {
	var addrs []string
	for i := range 3 {
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, i) }))
		defer be.Close()
		addrs = append(addrs, hostOf(be))
	}
	cfg := strings.Replace(webConfig(addrs...), "    connectTimeout: 1s\n", "    connectTimeout: 1s\n    balancer: cookie\n", 1)
	p, web, _ := startProxy(t, cfg)
	get := func(cookie string) (string, string) {
		req, _ := http.NewRequest("GET", "http://"+web+"/", nil)
		if cookie != "" {
			req.Header.Set("Cookie", "other=1; "+cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := make([]byte, 8)
		n, _ := resp.Body.Read(b)
		return string(b[:n]), resp.Header.Get("Set-Cookie")
	}
	first, set := get("")
	if !strings.HasPrefix(set, "baton-app=") {
		t.Fatalf("first response sets %q", set)
	}
	cookie := strings.SplitN(set, ";", 2)[0]
	for range 10 {
		if got, again := get(cookie); got != first || again != "" {
			t.Fatalf("sticky request reached %s (first %s), Set-Cookie %q", got, first, again)
		}
	}
	// The pod it sticks to starts terminating but still serves.
	b := p.backends["app"]
	var eps []kube.Endpoint
	for i, a := range addrs {
		if fmt.Sprint(i) == first {
			eps = append(eps, terminating(a))
		} else {
			eps = append(eps, ready(a))
		}
	}
	b.update(eps, nil)
	if got, _ := get(cookie); got != first {
		t.Errorf("sticky client left its terminating pod: %s, want %s", got, first)
	}
	if got, set := get(""); got == first || set == "" {
		t.Errorf("a new client reached the terminating pod %s", got)
	}
}

// A ClusterIP while a pod behind it terminates (kube.Endpoint.NoReuse)
// takes requests as ever, on connections of their own: its idle ones are
// closed and none is pooled after a request, so that none meets the
// stopping pod's close; once no pod terminates, connections pool again.
func TestNoReuseEndpoint(t *testing.T) {
	b := newBackend(config.Backend{Name: "vip", Kubernetes: &config.KubeService{Service: "shop/web", Mode: config.ModeClusterIP}}, 0)
	b.update([]kube.Endpoint{{Address: "198.18.128.10:80", Ready: true, Serving: true, NoReuse: true}}, nil)
	ep := b.byAddr["198.18.128.10:80"]
	if set := b.set.Load(); len(set.active) != 1 || set.active[0] != ep || !ep.pool.retired.Load() {
		t.Fatalf("while a pod terminates: active %d, pooling %v", len(set.active), !ep.pool.retired.Load())
	}
	b.update([]kube.Endpoint{{Address: "198.18.128.10:80", Ready: true, Serving: true}}, nil)
	if ep.pool.retired.Load() || b.byAddr["198.18.128.10:80"] != ep {
		t.Error("connections do not pool again once no pod terminates")
	}
}

// The sticky cookie's attributes (ingress-nginx's session-cookie-path,
// -max-age and -expires, -samesite; RFC 6265 section 4.1): Path, Max-Age
// with the matching Expires, SameSite (None with Secure, which browsers
// require), HttpOnly; without them a session cookie for "/".
func TestStickyCookieAttributes(t *testing.T) {
	now := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	ep := &endpoint{key: "k1"}
	for _, tt := range []struct {
		bc   config.Backend
		want string
	}{
		{config.Backend{Name: "a", Cookie: "route"}, "route=k1; Path=/; HttpOnly"},
		{config.Backend{Name: "a", Cookie: "route", CookiePath: "/app", CookieMaxAge: config.Duration(48 * time.Hour), CookieSameSite: "Lax"},
			"route=k1; Max-Age=172800; Expires=Sat, 05 Dec 2026 18:00:00 GMT; Path=/app; SameSite=Lax; HttpOnly"},
		{config.Backend{Name: "a", Cookie: "route", CookieSameSite: "None"}, "route=k1; Path=/; SameSite=None; Secure; HttpOnly"},
	} {
		b := newBackend(tt.bc, 0)
		if got := string(b.appendCookie(nil, ep, now)); got != tt.want {
			t.Errorf("%+v:\n got %s\nwant %s", tt.bc, got, tt.want)
		}
	}
}
