package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy/kube/kubetest"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func routingPayload(t testing.TB, r config.Routing) []byte {
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
	err = p.applyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "gw/green", Static: []string{hostOf(blue)}}},
		Rules:    []route.Rule[string]{rule("gw/green"), {Name: "second", Listener: "web", Hostnames: []string{"second.example"}, Backends: []route.Backend[string]{{Target: "gw/green", Weight: 1}}}},
	}), 3)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.RoutingVersion != 3 || st.RoutingError != "" {
		t.Fatalf("after routing 3, whole: the worker reports version %d, error %q", st.RoutingVersion, st.RoutingError)
	}
	if got := get("app.example"); got != "blue" {
		t.Fatalf("a kept rule whose backend changed: %q", got)
	}
	if got := get("second.example"); got != "blue" {
		t.Fatalf("a new rule beside a kept one: %q", got)
	}
	err = p.applyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "app", Static: []string{hostOf(green)}}},
		Rules:    []route.Rule[string]{rule("gw/nowhere")},
	}), 4)
	if err == nil || !strings.Contains(err.Error(), `"app": the name is taken`) {
		t.Fatalf("a routing backend named as the config's: %v", err)
	}
	// What the status shows of it (baton status: "applied in part by").
	if st := p.Stats(); st.RoutingVersion != 4 || st.RoutingError != err.Error() {
		t.Fatalf("after routing 4, in part: the worker reports version %d, error %q", st.RoutingVersion, st.RoutingError)
	}
	if got := get("app.example"); got != "baton: Internal Server Error\n" {
		t.Fatalf("a rule whose backend is unknown answered %q, want a 500 (the Gateway API's)", got)
	}
}

// A routing that changes one rule of several compiles that rule only: the
// others keep what they were compiled to (their lines and backends are the
// same), and the table is built again from them.
func TestApplyRoutingCompilesOnlyWhatChanged(t *testing.T) {
	p, _, _ := startProxy(t, webConfig("127.0.0.1:1"))
	rule := func(name, host string) route.Rule[string] {
		return route.Rule[string]{Name: name, Listener: "web", Hostnames: []string{host}, Backends: []route.Backend[string]{{Target: "gw/app", Weight: 1}}}
	}
	apply := func(rules ...route.Rule[string]) map[string]*route.Prepared[*backend] {
		t.Helper()
		if err := p.ApplyRouting(context.Background(), routingPayload(t, config.Routing{Backends: []config.Backend{{Name: "gw/app", Static: []string{"127.0.0.1:2"}}}, Rules: rules})); err != nil {
			t.Fatal(err)
		}
		got := make(map[string]*route.Prepared[*backend])
		for _, pr := range p.prepared {
			got[pr.prep.Rule().Name] = pr.prep
		}
		return got
	}
	before := apply(rule("a", "a.example"), rule("b", "b.example"))
	after := apply(rule("a", "a.example"), rule("b", "b2.example"))
	if after["a"] != before["a"] {
		t.Error("an unchanged rule was compiled again")
	}
	if after["b"] == before["b"] || after["b"].Rule().Hostnames[0] != "b2.example" {
		t.Errorf("the changed rule: %v", after["b"].Rule().Hostnames)
	}
	if len(p.prepared) != 2 {
		t.Errorf("%d rules kept, want the routing's 2", len(p.prepared))
	}
	if rc, _ := p.routes.Load().Match("web", &route.Request{Host: []byte("b2.example"), Path: []byte("/")}); rc == nil || rc.Name != "b" {
		t.Errorf("the new table does not route b2.example to b: %v", rc)
	}
	if rc, _ := p.routes.Load().Match("web", &route.Request{Host: []byte("b.example"), Path: []byte("/")}); rc != nil && rc.Name == "b" {
		t.Error("the new table still routes the old host")
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

	// The backend made again under its name (its config changed): the
	// new one has the Service's endpoints at once, though they are the
	// ones the name last had (the watch's last update is per backend
	// instance).
	changed := kubeBackend("gw/web", "shop/web")
	changed.ConnectTimeout = config.Duration(2 * time.Second)
	if err := p.ApplyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{changed, kubeBackend("gw/posts", "blog/posts")},
		Rules:    []route.Rule[string]{rule("app.example", "gw/web"), rule("blog.example", "gw/posts")},
	})); err != nil {
		t.Fatal(err)
	}
	if got := get("app.example"); got != "pod" {
		t.Fatalf("a backend made again under its name: %q, want the pod's answer", got)
	}

	// A Service of a namespace baton may not list: the routing waits for
	// it no longer than the bound, says why, and serves the rest; the
	// watch goes on serving the endpoints of the others.
	client.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "locked" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("RBAC: not allowed"))
	})
	p.kubeSyncWait = 200 * time.Millisecond
	err := p.ApplyRouting(ctx, routingPayload(t, config.Routing{
		Backends: []config.Backend{kubeBackend("gw/web", "shop/web"), kubeBackend("gw/x", "locked/x")},
		Rules:    []route.Rule[string]{rule("app.example", "gw/web"), rule("x.example", "gw/x"), rule("new.example", "gw/web")},
	}))
	if err == nil || !strings.Contains(err.Error(), "not in place after 200ms") || !strings.Contains(err.Error(), "namespace locked Services") {
		t.Fatalf("a routing naming a namespace that cannot sync: %v", err)
	}
	if got := get("new.example"); got != "pod" {
		t.Fatalf("a route beside it: %q", got)
	}
	if got := get("x.example"); !strings.Contains(got, "Service Unavailable") {
		t.Fatalf("the route to the Service not in place: %q, want a 503", got)
	}
	client.DiscoveryV1().EndpointSlices("shop").Update(ctx, endpoints("shop", "web", other), metav1.UpdateOptions{})
	waitUntil(t, "the endpoints of a Service in place to change", func() bool { return get("app.example") == "other" })
}

// BenchmarkApplyRoutingOneChange measures what a worker spends on a route
// change among 1,000 routes (each of its own host, as a Gateway's
// HTTPRoutes): the routing decoded, the changed rule compiled, the table
// built and swapped in.
//
//	go test -run '^$' -bench ApplyRoutingOneChange ./proxy/
func BenchmarkApplyRoutingOneChange(b *testing.B) {
	p, _, _ := startProxy(b, webConfig("127.0.0.1:1"))
	r := config.Routing{Backends: []config.Backend{{Name: "gw/app", Static: []string{"127.0.0.1:2"}}}}
	for i := range 1000 {
		r.Rules = append(r.Rules, route.Rule[string]{Name: fmt.Sprintf("httproute gw/r%d rule 0", i), Listener: "web",
			Hostnames: []string{fmt.Sprintf("r%d.example", i)}, Matches: []route.Match{{Path: route.PathMatch{Type: route.PathPrefix, Value: "/"}}},
			Backends: []route.Backend[string]{{Target: "gw/app", Weight: 1}}})
	}
	payloads := make([][]byte, 2)
	for i := range payloads {
		r.Rules[0].Hostnames = []string{fmt.Sprintf("r0-%d.example", i)}
		payloads[i] = routingPayload(b, r)
	}
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		if err := p.ApplyRouting(ctx, payloads[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}

// A route provider's tcp listener (a Gateway's TCP listener) routes each
// connection by the routing as it is when the connection comes (the
// TCPRoute's rule, weights splitting connections): a routing change
// reaches the next connection without a new generation, and a
// connection that no rule takes is closed with nothing sent.
func TestProviderStreamListener(t *testing.T) {
	named := func(name string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return serveConns(t, ln, func(c net.Conn) { io.WriteString(c, name) })
	}
	one, two := named("one"), named("two")
	listen := func(name string) ipc.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ipc.Listener{ListenerInfo: ipc.ListenerInfo{Name: name}, Listeners: []net.Listener{ln}}
	}
	web, gw := listen("web"), listen("gw/infra/gw:9000")
	addr := gw.Listeners[0].Addr().String()
	cfg, err := config.Parse([]byte(strings.Replace(webConfig(one), "@WEB@", web.Listeners[0].Addr().String(), 1)))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "gw/infra/gw:9000", Address: addr, Protocol: config.ProtocolTCP, Provider: config.ProviderGateway})
	p := startProxyConfig(t, cfg, []ipc.Listener{web, gw})
	read := func() string {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := read(); got != "" {
		t.Fatalf("before any routing: %q, want the connection closed", got)
	}
	apply := func(backend string) {
		t.Helper()
		err := p.ApplyRouting(context.Background(), routingPayload(t, config.Routing{
			Backends: []config.Backend{{Name: "k8s/one", Static: []string{one}}, {Name: "k8s/two", Static: []string{two}}},
			Rules:    []route.Rule[string]{{Name: "tcproute infra/r rule 0", Listener: "gw/infra/gw:9000", Backends: []route.Backend[string]{{Target: backend, Weight: 1}}}},
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	apply("k8s/one")
	if got := read(); got != "one" {
		t.Fatalf("after the routing: %q, want one", got)
	}
	apply("k8s/two")
	if got := read(); got != "two" {
		t.Fatalf("after the change: %q, want two", got)
	}
}
