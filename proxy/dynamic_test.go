package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/kube/kubetest"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func routingPayload(t *testing.T, r config.Routing) []byte {
	t.Helper()
	b, err := config.MarshalRouting(r)
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
	ctx := context.Background()
	err := p.ApplyRouting(ctx, routingPayload(t, config.Routing{
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
	err = p.ApplyRouting(ctx, routingPayload(t, config.Routing{
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
	// The same rule again (its decoding kept from the last routing), its
	// backend changed: the rule leads to the backend as it is now.
	err = p.ApplyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "gw/green", Static: []string{hostOf(blue)}}},
		Rules:    []route.Rule[string]{rule("gw/green"), {Name: "second", Listener: "web", Hostnames: []string{"second.example"}, Backends: []route.Backend[string]{{Target: "gw/green", Weight: 1}}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := get("app.example"); got != "blue" {
		t.Fatalf("a kept rule whose backend changed: %q", got)
	}
	if got := get("second.example"); got != "blue" {
		t.Fatalf("a new rule beside a kept one: %q", got)
	}
	err = p.ApplyRouting(ctx, routingPayload(t, config.Routing{
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

// A routing's backends may be Kubernetes Services: the worker starts its
// watch for them (the config named none), and a route leads to one only
// once its endpoints are in place, so the first request after the routing
// is answered, not a 503. The watch follows the routing: a Service
// another routing names is watched, then.
func TestApplyRoutingWatchesKubernetes(t *testing.T) {
	named := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
		t.Cleanup(s.Close)
		return s
	}
	yaml, pod, other := named("yaml"), named("pod"), named("other")
	client := fake.NewClientset()
	ctx := context.Background()
	svc := func(ns, name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	}
	endpoints := func(ns, name string, srv *httptest.Server) *discoveryv1.EndpointSlice {
		host, port, _ := net.SplitHostPort(hostOf(srv))
		n, _ := strconv.Atoi(port)
		pn, p32 := "http", int32(n)
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &pn, Port: &p32}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}}},
		}
	}
	client.CoreV1().Services("shop").Create(ctx, svc("shop", "web"), metav1.CreateOptions{})
	client.DiscoveryV1().EndpointSlices("shop").Create(ctx, endpoints("shop", "web", pod), metav1.CreateOptions{})
	client.CoreV1().Services("blog").Create(ctx, svc("blog", "posts"), metav1.CreateOptions{})
	client.DiscoveryV1().EndpointSlices("blog").Create(ctx, endpoints("blog", "posts", other), metav1.CreateOptions{})

	p, web, _ := startProxy(t, webConfig(hostOf(yaml)))
	p.testKubeSource = kubetest.Source{C: client}
	t.Cleanup(p.StopKube)
	kubeBackend := func(name, service string) config.Backend {
		return config.Backend{Name: name, Kubernetes: &config.KubeService{Service: service, Port: config.Port{Name: "http"}}}
	}
	rule := func(host, backend string) route.Rule[string] {
		return route.Rule[string]{Name: host, Listener: "web", Hostnames: []string{host}, Backends: []route.Backend[string]{{Target: backend, Weight: 1}}}
	}
	get := func(host string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+web+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	if err := p.ApplyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{kubeBackend("gw/web", "shop/web")},
		Rules:    []route.Rule[string]{rule("app.example", "gw/web")},
	})); err != nil {
		t.Fatal(err)
	}
	if got := get("app.example"); got != "pod" {
		t.Fatalf("the first request after the routing: %q, want the pod's answer", got)
	}
	if err := p.ApplyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{kubeBackend("gw/web", "shop/web"), kubeBackend("gw/posts", "blog/posts")},
		Rules:    []route.Rule[string]{rule("app.example", "gw/web"), rule("blog.example", "gw/posts")},
	})); err != nil {
		t.Fatal(err)
	}
	if got := get("blog.example"); got != "other" {
		t.Fatalf("a Service of a namespace the routing added: %q", got)
	}
	if got := get("app.example"); got != "pod" {
		t.Fatalf("the Service kept: %q", got)
	}
}
