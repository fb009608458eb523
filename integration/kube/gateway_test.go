package kube

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/kuberig"

	"github.com/baton-proxy/baton/gateway"
	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/supervisor"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// installCRDs installs the Gateway API's standard CRDs, from the module
// the types come from (the version go.mod names), once per run; a failure
// fails every test that needs them, not only the first.
var installCRDs = sync.OnceValue(func() error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return fmt.Errorf("the gateway-api module: %w", err)
	}
	return kuberig.GatewayCRDs(restConfig, strings.TrimSpace(string(out)), "standard")
})

// runController runs a Gateway API controller of opts and the pool
// 198.18.64.0/24 until the test ends, logging to log, and returns what it
// serves.
func runController(t *testing.T, opts gateway.Options, log *zap.Logger) *sink {
	t.Helper()
	c, err := gateway.NewClient(kubeconfig, "baton-test")
	if err != nil {
		t.Fatal(err)
	}
	sk := &sink{results: make(chan *gateway.Result, 64)}
	opts.Addresses = []netip.Prefix{netip.MustParsePrefix("198.18.64.0/24")}
	ctl := gateway.New(c, opts, sk, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return sk
}

// classGatewayRoute is a GatewayClass of baton's (class), a Gateway "gw" of
// it in ns with an HTTP listener on port 80, and an HTTPRoute "app"
// attached to it whose spec goes on with routeSpec.
func classGatewayRoute(ns, class, routeSpec string) string {
	return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: %[2]s}
spec: {controllerName: %[3]s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: %[1]s}
spec:
  gatewayClassName: %[2]s
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: %[1]s}
spec:
  parentRefs: [{name: gw}]
%[4]s`, ns, class, gateway.DefaultControllerName, routeSpec)
}

// gatewayCRDs installs the CRDs (installCRDs) and returns a dynamic client.
func gatewayCRDs(t testing.TB) dynamic.Interface {
	t.Helper()
	if err := installCRDs(); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func gvr(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: resource}
}

// apply creates the objects of a YAML stream (--- separated).
func apply(t testing.TB, dyn dynamic.Interface, docs string) {
	t.Helper()
	for _, doc := range strings.Split(docs, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		plural := map[string]string{"GatewayClass": "gatewayclasses", "Gateway": "gateways", "HTTPRoute": "httproutes", "ReferenceGrant": "referencegrants",
			"GRPCRoute": "grpcroutes", "TLSRoute": "tlsroutes", "TCPRoute": "tcproutes"}[u.GetKind()]
		res := dyn.Resource(gvr(plural))
		var err error
		if ns := u.GetNamespace(); ns != "" {
			_, err = res.Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
		} else {
			_, err = res.Create(context.Background(), u, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// condition returns the status of condition typ of the object's status
// (or of its status.parents[0], for a route), "" when absent.
func condition(t testing.TB, dyn dynamic.Interface, resource, ns, name, typ string) string {
	t.Helper()
	res := dyn.Resource(gvr(resource))
	var u *unstructured.Unstructured
	var err error
	if ns != "" {
		u, err = res.Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	} else {
		u, err = res.Get(context.Background(), name, metav1.GetOptions{})
	}
	if err != nil {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	if parents, _, _ := unstructured.NestedSlice(u.Object, "status", "parents"); len(parents) > 0 {
		conds, _, _ = unstructured.NestedSlice(parents[0].(map[string]any), "conditions")
	}
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == typ {
			return fmt.Sprint(m["status"])
		}
	}
	return ""
}

// sink takes the controller's results.
type sink struct{ results chan *gateway.Result }

func (s *sink) Serve(_ context.Context, res *gateway.Result) error {
	s.results <- res
	return nil
}

// The controller against a real API server with the Gateway API's CRDs: a
// GatewayClass of baton's, a Gateway, a Service and an HTTPRoute become a
// listener at an address of the pool and a rule, and their statuses say
// so (GatewayClass Accepted, Gateway Programmed with its address, the
// route Accepted with its references resolved); a change of the route is
// served again, and its status follows.
func TestGatewayController(t *testing.T) {
	dyn := gatewayCRDs(t)
	ns := newNamespace(t)
	createService(t, ns, "app", "")
	class := "baton-" + ns
	sk := runController(t, gateway.Options{}, zaptest.NewLogger(t))
	apply(t, dyn, classGatewayRoute(ns, class, `  hostnames: [app.example]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v1}}]
    backendRefs: [{name: app, port: 80}]`))

	served := func(what string, ok func(*gateway.Result) bool) *gateway.Result {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case r := <-sk.results:
				if ok(r) {
					return r
				}
			case <-timeout:
				t.Fatalf("not served within 30s: %s", what)
			}
		}
	}
	listener := "gw/" + ns + "/gw:80"
	res := served("the Gateway's listener and the route's rule", func(r *gateway.Result) bool {
		return len(r.Listeners) > 0 && len(r.Routing.Rules) > 0
	})
	var l *gateway.Listener
	for i := range res.Listeners {
		if res.Listeners[i].Name == listener {
			l = &res.Listeners[i]
		}
	}
	if l == nil || !netip.MustParsePrefix("198.18.64.0/24").Contains(l.Address.Addr()) || l.Address.Port() != 80 {
		t.Fatalf("listeners %+v, want %s at an address of the pool", res.Listeners, listener)
	}
	harness.WaitFor(t, 30*time.Second, "the statuses", func() bool {
		return condition(t, dyn, "gatewayclasses", "", class, "Accepted") == "True" &&
			condition(t, dyn, "gateways", ns, "gw", "Programmed") == "True" &&
			condition(t, dyn, "httproutes", ns, "app", "Accepted") == "True" &&
			condition(t, dyn, "httproutes", ns, "app", "ResolvedRefs") == "True"
	})

	// A change of the route: served again, at once.
	u, err := dyn.Resource(gvr("httproutes")).Namespace(ns).Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedSlice(u.Object, []any{map[string]any{
		"matches":     []any{map[string]any{"path": map[string]any{"type": "Exact", "value": "/v2"}}},
		"backendRefs": []any{map[string]any{"name": "missing", "port": int64(80)}},
	}}, "spec", "rules")
	start := time.Now()
	if _, err := dyn.Resource(gvr("httproutes")).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	served("the changed route", func(r *gateway.Result) bool {
		for _, rule := range r.Routing.Rules {
			if len(rule.Matches) == 1 && rule.Matches[0].Path.Value == "/v2" {
				return true
			}
		}
		return false
	})
	t.Logf("a route change served %v after the write", time.Since(start).Round(time.Millisecond))
	harness.WaitFor(t, 30*time.Second, "ResolvedRefs false for the missing Service", func() bool {
		return condition(t, dyn, "httproutes", ns, "app", "ResolvedRefs") == "False"
	})
}

// baton as a Gateway API implementation, end to end: the real binary
// with a config of only a gateway section, a real API server, pods that
// are real processes. A Gateway of baton's class gets an address of the
// pool, its listener goes live by a handoff, and an HTTPRoute's requests
// reach the pods of its Service; the route's change goes live without a
// handoff.
func TestGatewayEndToEnd(t *testing.T) {
	dyn := gatewayCRDs(t)
	ns := newNamespace(t)
	createService(t, ns, "app", "")
	v1, v2 := startPod(t, "v1", "198.18.3.1"), startPod(t, "v2", "198.18.3.2")
	writeSlice(t, ns, "app", []podState{readyPod(v1)})
	class := "baton-" + ns
	b := startBaton(t, fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
workers: 2
kubernetes:
  kubeconfig: %s
gateway:
  addresses: [%s]
`, kubeconfig, gatewayPool))
	apply(t, dyn, classGatewayRoute(ns, class, `  hostnames: [app.example]
  rules:
  - backendRefs: [{name: app, port: 80}]`))
	var addr string
	harness.WaitFor(t, 60*time.Second, "the Gateway programmed, with an address", func() bool {
		if condition(t, dyn, "gateways", ns, "gw", "Programmed") != "True" {
			return false
		}
		u, err := dyn.Resource(gvr("gateways")).Namespace(ns).Get(context.Background(), "gw", metav1.GetOptions{})
		if err != nil {
			return false
		}
		as, _, _ := unstructured.NestedSlice(u.Object, "status", "addresses")
		if len(as) == 0 {
			return false
		}
		addr = fmt.Sprint(as[0].(map[string]any)["value"])
		return true
	})
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(host string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+net.JoinHostPort(addr, "80")+"/", nil)
		req.Host = host
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Backend")
	}
	harness.WaitFor(t, 30*time.Second, "the route served", func() bool { code, be := get("app.example"); return code == 200 && be == "v1" })
	if code, _ := get("other.example"); code != 404 {
		t.Errorf("a host no route takes: %d, want 404", code)
	}
	st := b.Status()
	gen := st.ActiveGeneration
	handoff := false
	for _, h := range st.Handoffs {
		handoff = handoff || h.Trigger == "gateway" && h.Outcome == supervisor.OutcomeOK
	}
	if !handoff {
		t.Errorf("no handoff put the Gateway's listener live: %+v", st.Handoffs)
	}
	for _, l := range st.Listeners {
		t.Logf("listener %s at %s", l.Name, l.Address)
	}

	// The endpoints and the route change: no handoff.
	writeSlice(t, ns, "app", []podState{readyPod(v2)})
	harness.WaitFor(t, 30*time.Second, "the new pod served", func() bool { _, be := get("app.example"); return be == "v2" })
	u, err := dyn.Resource(gvr("httproutes")).Namespace(ns).Get(context.Background(), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedStringSlice(u.Object, []string{"new.example"}, "spec", "hostnames")
	if _, err := dyn.Resource(gvr("httproutes")).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each worker applies a routing on its own: until both have, a
	// connection to the other may still see the old one.
	harness.WaitFor(t, 30*time.Second, "the changed route served, and the host it left 404", func() bool {
		code, _ := get("new.example")
		left, _ := get("app.example")
		return code == 200 && left == 404
	})
	if g := b.Status().ActiveGeneration; g != gen {
		t.Errorf("a route change made a handoff: generation %d, then %d", gen, g)
	}
}

// With several replicas, each serves and one writes status: the one that
// holds the Lease. When it stops, it lets the Lease go and another takes
// it at its next look.
func TestGatewayStatusOneWriter(t *testing.T) {
	gatewayCRDs(t)
	ns := newNamespace(t)
	c, err := gateway.NewClient(kubeconfig, "baton-test")
	if err != nil {
		t.Fatal(err)
	}
	type replica struct {
		cancel context.CancelFunc
		done   chan struct{} // closed when Run returned
	}
	start := func(id string) replica {
		ctl := gateway.New(c, gateway.Options{Namespace: ns, Identity: id, LeaseDuration: 3 * time.Second, RetryPeriod: 100 * time.Millisecond,
			Addresses: []netip.Prefix{netip.MustParsePrefix(gatewayPool)}}, &sink{results: make(chan *gateway.Result, 1024)}, zaptest.NewLogger(t))
		ctx, cancel := context.WithCancel(context.Background())
		r := replica{cancel, make(chan struct{})}
		go func() {
			defer close(r.done)
			ctl.Run(ctx)
		}()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	holder := func() string {
		l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), gateway.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	replicas := map[string]replica{"a": start("a"), "b": start("b")}
	var first string
	harness.WaitFor(t, 30*time.Second, "a holder of the Lease", func() bool { first = holder(); return first != "" })
	replicas[first].cancel()
	<-replicas[first].done
	other := map[string]string{"a": "b", "b": "a"}[first]
	harness.WaitFor(t, 10*time.Second, "the other replica holding the Lease", func() bool { return holder() == other })
}

// An HTTPS listener of a Gateway, end to end: its certificate from a
// Secret, the route answered over TLS with SNI; the Secret rotated, new
// connections get the new certificate (a zero-drop handoff), and a
// Secret made invalid leaves the last good one serving.
func TestGatewayHTTPS(t *testing.T) {
	dyn := gatewayCRDs(t)
	ns := newNamespace(t)
	createService(t, ns, "app", "")
	pod := startPod(t, "tls", "198.18.3.5")
	writeSlice(t, ns, "app", []podState{readyPod(pod)})
	ca := certs.NewCA(t, "gateway test CA")
	secret := func(serial int64) *corev1.Secret {
		c, k := ca.Issue(t, []string{"secure.example"}, certs.Options{SerialNum: serial})
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: c, corev1.TLSPrivateKeyKey: k}}
	}
	if _, err := client.CoreV1().Secrets(ns).Create(context.Background(), secret(7), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	class := "baton-" + ns
	b := startBaton(t, fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
kubernetes:
  kubeconfig: %s
gateway:
  controllerName: example.test/%s
  addresses: [198.18.64.200/32]
`, kubeconfig, ns))
	apply(t, dyn, fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: %[2]s}
spec: {controllerName: example.test/%[1]s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tls, namespace: %[1]s}
spec:
  gatewayClassName: %[2]s
  listeners:
  - name: https
    port: 443
    protocol: HTTPS
    hostname: secure.example
    tls: {certificateRefs: [{name: secure}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: app, namespace: %[1]s}
spec:
  parentRefs: [{name: tls}]
  rules:
  - backendRefs: [{name: app, port: 80}]`, ns, class))
	var lastErr error
	defer func() {
		if t.Failed() {
			t.Logf("the last HTTPS error: %v", lastErr)
		}
	}()
	serial := func() (int64, int) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "secure.example"}}}
		req, _ := http.NewRequest("GET", "https://198.18.64.200/", nil)
		req.Host = "secure.example" // the listener's hostname: routes attach under it
		resp, err := c.Do(req)
		if err != nil {
			lastErr = err
			return 0, 0
		}
		defer resp.Body.Close()
		lastErr = fmt.Errorf("status %d, certificate %d", resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.Int64())
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), resp.StatusCode
	}
	harness.WaitFor(t, 60*time.Second, "HTTPS served with the Secret's certificate", func() bool { s, code := serial(); return s == 7 && code == 200 })
	// Status follows the data path: the Lease holder writes it.
	harness.WaitFor(t, 30*time.Second, "the serving Gateway Programmed", func() bool {
		return condition(t, dyn, "gateways", ns, "tls", "Programmed") == "True"
	})

	// Rotated: inside the workers (the certificates travel with the
	// routing), no handoff.
	gen := b.Status().ActiveGeneration
	if _, err := client.CoreV1().Secrets(ns).Update(context.Background(), secret(8), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 60*time.Second, "the rotated certificate served", func() bool { s, _ := serial(); return s == 8 })
	if g := b.Status().ActiveGeneration; g != gen {
		t.Errorf("a rotated Secret made a handoff: generation %d, then %d", gen, g)
	}

	// Made invalid: the last good certificate serves on, and the listener
	// says the reference is invalid.
	broken := secret(9)
	broken.Data[corev1.TLSCertKey] = []byte("not a certificate")
	if _, err := client.CoreV1().Secrets(ns).Update(context.Background(), broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "ResolvedRefs false on the listener", func() bool {
		u, err := dyn.Resource(gvr("gateways")).Namespace(ns).Get(context.Background(), "tls", metav1.GetOptions{})
		if err != nil {
			return false
		}
		ls, _, _ := unstructured.NestedSlice(u.Object, "status", "listeners")
		if len(ls) == 0 {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(ls[0].(map[string]any), "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "ResolvedRefs" {
				return m["status"] == "False" && m["reason"] == "InvalidCertificateRef"
			}
		}
		return false
	})
	if s, code := serial(); s != 8 || code != 200 {
		t.Errorf("with the Secret broken: certificate %d, status %d; want the last good one (8) serving", s, code)
	}
}

// A cluster whose Gateway API CRDs lack a route kind baton reads (an
// older release: TCPRoute at v1alpha2 only, or none) is served all the
// same: the controller leaves that kind unwatched, with a warning, instead
// of waiting for its cache for ever with every other kind's; its
// HTTPRoutes are served. The CRD is put back at the end.
func TestGatewayWithoutAnOptionalCRD(t *testing.T) {
	dyn := gatewayCRDs(t)
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	const crd = "tcproutes.gateway.networking.k8s.io"
	if err := crds.Delete(context.Background(), crd, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
		if err == nil {
			harness.WaitFor(t, 30*time.Second, "the TCPRoute CRD put back", func() bool {
				return kuberig.GatewayCRDs(restConfig, strings.TrimSpace(string(out)), "standard") == nil &&
					func() bool {
						_, err := dyn.Resource(gvr("tcproutes")).List(context.Background(), metav1.ListOptions{})
						return err == nil
					}()
			})
		}
	})
	harness.WaitFor(t, 30*time.Second, "TCPRoutes no longer served", func() bool {
		_, err := dyn.Resource(gvr("tcproutes")).List(context.Background(), metav1.ListOptions{})
		return err != nil
	})
	ns := newNamespace(t)
	createService(t, ns, "app", "")
	class := "baton-" + ns
	core, logs := observer.New(zap.WarnLevel)
	sk := runController(t, gateway.Options{DiscoveryEvery: 300 * time.Millisecond}, zap.New(core))
	apply(t, dyn, classGatewayRoute(ns, class, `  rules:
  - backendRefs: [{name: app, port: 80}]`))
	timeout := time.After(30 * time.Second)
	for served := false; !served; {
		select {
		case r := <-sk.results:
			served = len(r.Routing.Rules) > 0
		case <-timeout:
			t.Fatal("the HTTPRoute not served within 30s: the missing TCPRoute CRD held the controller up")
		}
	}
	if n := logs.FilterField(zap.String("resource", "tcproutes")).Len(); n != 1 {
		t.Errorf("%d warnings about the missing TCPRoute CRD, want 1: %v", n, logs.All())
	}

	// The CRD installed while baton runs: its TCPRoutes are served
	// from then on, without a restart.
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the TCPRoute CRD installed again", func() bool {
		if kuberig.GatewayCRDs(restConfig, strings.TrimSpace(string(out)), "standard") != nil {
			return false
		}
		_, err := dyn.Resource(gvr("tcproutes")).List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	apply(t, dyn, fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tcp, namespace: %[1]s}
spec:
  gatewayClassName: %[2]s
  listeners: [{name: db, port: 5432, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: db, namespace: %[1]s}
spec:
  parentRefs: [{name: tcp}]
  rules:
  - backendRefs: [{name: app, port: 80}]`, ns, class))
	listener := "gw/" + ns + "/tcp:5432"
	timeout = time.After(30 * time.Second)
	for served := false; !served; {
		select {
		case r := <-sk.results:
			for _, rule := range r.Routing.Rules {
				served = served || rule.Listener == listener
			}
		case <-timeout:
			t.Fatalf("the TCPRoute not served within 30s of its CRD's install")
		}
	}
}
