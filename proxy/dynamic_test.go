package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/route"
)

func routingPayload(t *testing.T, r config.Routing) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A route provider's routing serves beside the config's routes and
// replaces itself without a new generation: a keep-alive connection opened
// before a change is served by the new routes after it, and a backend
// that leaves the routing takes no more requests. A routing cannot take a
// name of the config's.
func TestApplyRouting(t *testing.T) {
	named := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	yaml, blue, green := named("yaml"), named("blue"), named("green")
	p, web, _ := startProxy(t, webConfig(hostOf(yaml)))
	c, br := dialWeb(t, web)
	get := func(host string) string {
		t.Helper()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	rule := func(backend string) route.Rule[string] {
		return route.Rule[string]{Name: "httproute default/app rule 0", Listener: "web", Hostnames: []string{"app.example"},
			Backends: []route.Backend[string]{{Target: backend, Weight: 1}}}
	}
	if got := get("app.example"); got != "yaml" {
		t.Fatalf("before any routing: %q", got)
	}
	err := p.ApplyRouting(routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "gw/blue", Static: []string{hostOf(blue)}}, {Name: "gw/green", Static: []string{hostOf(green)}}},
		Rules:    []route.Rule[string]{rule("gw/blue")},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := get("app.example"); got != "blue" {
		t.Fatalf("after the routing: %q", got)
	}
	if got := get("other.example"); got != "yaml" {
		t.Fatalf("a host the routing does not take: %q", got)
	}
	blueBackend := p.dynamicBackends()["gw/blue"]
	err = p.ApplyRouting(routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "gw/green", Static: []string{hostOf(green)}}},
		Rules:    []route.Rule[string]{rule("gw/green")},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := get("app.example"); got != "green" {
		t.Fatalf("after the change, on the same connection: %q", got)
	}
	if !blueBackend.byAddr[hostOf(blue)].pool.retired.Load() {
		t.Error("the backend that left the routing still pools connections")
	}
	err = p.ApplyRouting(routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "app", Static: []string{hostOf(green)}}},
		Rules:    []route.Rule[string]{rule("gw/nowhere")},
	}))
	if err == nil || !strings.Contains(err.Error(), `"app": the name is taken`) {
		t.Fatalf("a routing backend named as the config's: %v", err)
	}
	if got := get("app.example"); got != "baton: Internal Server Error\n" {
		t.Fatalf("a rule whose backend is unknown answered %q, want a 500 (the Gateway API's)", got)
	}
}
