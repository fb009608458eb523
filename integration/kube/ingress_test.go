package kube

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/ingress"
	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/supervisor"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ingressAddr is where the Ingress test serves (outside the Gateway pool).
const ingressAddr = "198.18.65.1"

// ingressBaton starts baton (two workers) as the Ingress controller of an
// IngressClass of its own, "baton-"+ns, serving on addr:80 and addr:443,
// and returns it and the class.
func ingressBaton(t testing.TB, ns, addr string) (*harness.Baton, string) {
	t.Helper()
	if err := addAddr(addr); err != nil {
		t.Fatal(err)
	}
	b := startBaton(t, fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
drainTimeout: 30s
workers: 2
kubernetes:
  kubeconfig: %s
accessLog:
  path: "@DIR@/access.log"
ingress:
  address: %[2]s:80
  tlsAddress: %[2]s:443
`, kubeconfig, addr))
	class := "baton-" + ns
	if _, err := client.NetworkingV1().IngressClasses().Create(context.Background(), &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: networkingv1.IngressClassSpec{Controller: ingress.ControllerName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client.NetworkingV1().IngressClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	// The controller's first serve puts its listeners live by a handoff
	// (they may be live already, if the first generation read them):
	// the generation that follows it is the one that serves on.
	harness.WaitFor(t, 30*time.Second, "the Ingress listeners' handoff", func() bool {
		st, err := b.TryStatus()
		if err != nil {
			return false
		}
		for _, h := range st.Handoffs {
			if h.Trigger == config.ProviderIngress && h.Outcome == supervisor.OutcomeOK {
				return true
			}
		}
		return false
	})
	return b, class
}

// servedByEveryWorker reports whether host's target is routed (not 404)
// and every ready worker of b has applied the last routing: the one that
// answered applied a routing with the route, and the routings after it
// keep it. A worker applies a routing once the endpoints of its new
// Services are in place, so one may route a new Ingress before the other;
// requests cannot tell which worker answered (each takes connections from
// the other's sockets too, rawListener.helping), so the status's routing
// versions do.
func servedByEveryWorker(b *harness.Baton, addr, host, target string) bool {
	if code := servedCode(addr, host, target); code == 0 || code == 404 {
		return false
	}
	st, err := b.TryStatus()
	return err == nil && st.RoutingVersion > 0 && len(st.RoutingBehind()) == 0
}

// notOK is the lines of b's access log since a moment whose status is not
// 200, to tell which generation and listener answered a failed request,
// and when.
func notOK(t testing.TB, b *harness.Baton, since time.Time) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.Dir, "access.log"))
	if err != nil {
		return err.Error()
	}
	var out strings.Builder
	for line := range strings.Lines(string(data)) {
		var e struct {
			Time   time.Time `json:"time"`
			Status int       `json:"status"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || (e.Status != 200 && !e.Time.Before(since.Truncate(time.Millisecond))) {
			out.WriteString(line)
		}
	}
	return out.String()
}

// servedCode is the status of a GET of host's target from addr on a new
// connection (0: none).
func servedCode(addr, host, target string) int {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", "http://"+addr+target, nil)
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// createIngress creates Ingress ns/name of class, with one rule: host's
// path p of type pt to Service svc's port 80; tls (nil: none) as its
// spec.tls; and annotations, pairs of names under
// nginx.ingress.kubernetes.io/ and values.
func createIngress(t testing.TB, ns, class, name, host, p string, pt networkingv1.PathType, svc string, tls []networkingv1.IngressTLS, annotations ...string) {
	t.Helper()
	a := map[string]string{}
	for i := 0; i+1 < len(annotations); i += 2 {
		a["nginx.ingress.kubernetes.io/"+annotations[i]] = annotations[i+1]
	}
	in := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: a}, Spec: networkingv1.IngressSpec{
		IngressClassName: &class, TLS: tls,
		Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path: p, PathType: &pt, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Number: 80}}},
		}}}}}},
	}}
	if _, err := client.NetworkingV1().Ingresses(ns).Create(context.Background(), in, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// doRequest sends a request for host to url with body and the header
// fields hdr (name, value pairs) and returns the response, its body read;
// a failure is a response of status 0 whose Error field says why.
func doRequest(hc *http.Client, method, url, host, body string, hdr ...string) *http.Response {
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return &http.Response{StatusCode: 0, Header: http.Header{"Error": {err.Error()}}, Body: http.NoBody}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// An Ingress of baton's IngressClass, end to end on a real API server and
// the real binary: its rule served (the Service's port by name, the pods
// its EndpointSlice names), its TLS host served with its Secret's
// certificate and redirected from HTTP (308, ingress-nginx's ssl-redirect),
// its status.loadBalancer the configured address; the Secret rotated, a
// change of its rules and a second Ingress with the seed's
// service-upstream annotation go live with no handoff.
func TestIngressEndToEnd(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	clusterIP := "198.18.128.40"
	createService(t, ns, "app", clusterIP)
	v1 := startPod(t, "ing-v1", "198.18.3.21")
	writeSlice(t, ns, "app", []podState{readyPod(v1)})
	kp := startKubeProxy(t, clusterIP, 0)
	kp.setNow([]podState{readyPod(v1)})
	ca := certs.NewCA(t, "ingress test CA")
	crt, key := ca.Issue(t, []string{"secure.example"}, certs.Options{SerialNum: 11})
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, class := ingressBaton(t, ns, ingressAddr)
	prefix := networkingv1.PathTypePrefix
	rule := func(host, p string) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
			Path: p, PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "app", Port: networkingv1.ServiceBackendPort{Name: "http"}}},
		}}}}}
	}
	app := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: networkingv1.IngressSpec{
		IngressClassName: &class,
		Rules:            []networkingv1.IngressRule{rule("app.example", "/"), rule("secure.example", "/")},
		TLS:              []networkingv1.IngressTLS{{Hosts: []string{"secure.example"}, SecretName: "secure"}},
	}}
	if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	plain := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "secure.example"}}}
	get := func(c *http.Client, url, host string) (int, string, string) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Backend"), resp.Header.Get("Location")
	}
	httpURL, httpsURL := "http://"+ingressAddr+"/x", "https://"+ingressAddr+"/x"
	harness.WaitFor(t, 60*time.Second, "the Ingress rule served", func() bool { code, be, _ := get(plain, httpURL, "app.example"); return code == 200 && be == "ing-v1" })
	harness.WaitFor(t, 60*time.Second, "the TLS host served with its Secret's certificate", func() bool {
		code, be, _ := get(secure, httpsURL, "secure.example")
		return code == 200 && be == "ing-v1"
	})
	// Each worker applies each routing on its own: the plain client's
	// worker may not have the one with the TLS host's redirect yet.
	harness.WaitFor(t, 30*time.Second, "HTTP to the TLS host redirected (308 to https://secure.example/x)", func() bool {
		code, _, loc := get(plain, httpURL, "secure.example")
		return code == http.StatusPermanentRedirect && loc == "https://secure.example/x"
	})
	// Which worker answers is not the client's to pick (each takes from
	// the other's sockets too): `baton status` says when every worker has
	// applied the last routing, from the versions they report.
	harness.WaitFor(t, 30*time.Second, "baton status: every worker on the last routing", func() bool {
		out, err := b.Ctl("status")
		return err == nil && strings.Contains(out, ": applied by every ready worker")
	})
	if code, _, _ := get(plain, httpURL, "other.example"); code != 404 {
		t.Errorf("a host no rule takes: %d, want 404", code)
	}
	harness.WaitFor(t, 30*time.Second, "status.loadBalancer written", func() bool {
		cur, err := client.NetworkingV1().Ingresses(ns).Get(ctx, "app", metav1.GetOptions{})
		return err == nil && len(cur.Status.LoadBalancer.Ingress) == 1 && cur.Status.LoadBalancer.Ingress[0].IP == ingressAddr
	})

	// The Secret rotated, rules change, and a second Ingress routes
	// through the ClusterIP: inside the workers, no handoff.
	gen := b.Status().ActiveGeneration
	crt, key = ca.Issue(t, []string{"secure.example"}, certs.Options{SerialNum: 12})
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the rotated certificate served", func() bool {
		return servedSerial(ingressAddr, "secure.example") == 12
	})
	cur, err := client.NetworkingV1().Ingresses(ns).Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Rules[0] = rule("new.example", "/x")
	if _, err := client.NetworkingV1().Ingresses(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	up := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "up", Annotations: map[string]string{"nginx.ingress.kubernetes.io/service-upstream": "true"}},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{rule("up.example", "/")}}}
	if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, up, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each worker applies a routing on its own: until both have, a
	// connection to the other may still see the old one.
	harness.WaitFor(t, 30*time.Second, "the changed rule served, and the host it left 404", func() bool {
		code, _, _ := get(plain, httpURL, "new.example")
		left, _, _ := get(plain, httpURL, "app.example")
		return code == 200 && left == 404
	})
	harness.WaitFor(t, 30*time.Second, "the service-upstream Ingress served", func() bool { code, be, _ := get(plain, httpURL, "up.example"); return code == 200 && be == "ing-v1" })
	// The status's backends come from the workers' reports, which may
	// come after the request that a worker served.
	var st *supervisor.Status
	harness.WaitFor(t, 30*time.Second, "the status showing the Service's endpoints and, for service-upstream, its ClusterIP", func() bool {
		st = b.Status()
		modes := map[string]string{}
		for _, be := range st.Backends {
			modes[be.Name] = be.Mode
		}
		return modes["k8s/"+ns+"/app:http/clusterIP"] == "clusterIP" && modes["k8s/"+ns+"/app:http"] == "endpoints"
	})
	if st.ActiveGeneration != gen {
		t.Errorf("an Ingress change made a handoff: generation %d, then %d", gen, st.ActiveGeneration)
	}
}

// The ingress-nginx annotations, end to end (real API server, real
// binary, real pods), each asserting what a client sees, as
// docs/user-guide/nginx-configuration/annotations.md of
// kubernetes/ingress-nginx defines it: rewrite-target with capture
// groups, permanent-redirect, temporal-redirect, app-root, upstream-vhost,
// affinity cookie, custom-headers, canary-by-cookie,
// x-forwarded-prefix, proxy-body-size, canary-by-header, the source
// ranges, enable-cors, limit-rps, limit-connections; an annotation
// baton does not implement is an Event on its Ingress, the rest served;
// an invalid value is an Event too, and the Ingress's last good version
// serves on. None of it is a handoff.
func TestIngressAnnotations(t *testing.T) {
	ctx := context.Background()
	const addr = "198.18.65.2"
	ns := newNamespace(t)
	createService(t, ns, "app", "")
	createService(t, ns, "next", "")
	writeSlice(t, ns, "app", []podState{readyPod(startPod(t, "ann-app", "198.18.3.22"))})
	writeSlice(t, ns, "next", []podState{readyPod(startPod(t, "ann-next", "198.18.3.23"))})
	b, class := ingressBaton(t, ns, addr)
	create := func(name, host, p string, pt networkingv1.PathType, svc string, annotations ...string) {
		t.Helper()
		createIngress(t, ns, class, name, host, p, pt, svc, nil, annotations...)
	}
	prefix, impl := networkingv1.PathTypePrefix, networkingv1.PathTypeImplementationSpecific
	create("rewrite", "rw.example", "/something(/|$)(.*)", impl, "app", "rewrite-target", "/$2")
	create("moved", "moved.example", "/", prefix, "app", "permanent-redirect", "https://www.example.com/landing")
	create("root", "root.example", "/", prefix, "app", "app-root", "/app1")
	create("vhost", "vh.example", "/", prefix, "app", "upstream-vhost", "internal.example", "x-forwarded-prefix", "/vh",
		"proxy-body-size", "1k", "configuration-snippet", "more_set_headers \"X: y\";")
	create("main", "can.example", "/", prefix, "app")
	create("canary", "can.example", "/", prefix, "next", "canary", "true", "canary-by-header", "X-Canary", "canary-by-cookie", "canary")
	create("temp", "temp.example", "/", prefix, "app", "temporal-redirect", "https://other.example/x", "temporal-redirect-code", "307")
	create("sticky", "sticky.example", "/", prefix, "app", "affinity", "cookie", "session-cookie-name", "route",
		"session-cookie-max-age", "3600", "session-cookie-samesite", "Lax")
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "headers"},
		Data: map[string]string{"X-Frame-Options": "DENY"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create("custom", "custom.example", "/", prefix, "app", "custom-headers", "headers")
	create("cors", "cors.example", "/", prefix, "app", "enable-cors", "true", "cors-allow-origin", "https://app.example, https://admin.example")
	create("limited", "limit.example", "/", prefix, "app", "limit-rps", "1", "limit-burst-multiplier", "1")
	create("oneatatime", "conn.example", "/", prefix, "app", "limit-connections", "1")
	// The client is on 198.18.0.0/15 (the test's addresses).
	create("denied", "deny.example", "/", prefix, "app", "denylist-source-range", "198.18.0.0/15")
	create("outside", "allow.example", "/", prefix, "app", "allowlist-source-range", "10.0.0.0/8")
	create("inside", "allowed.example", "/", prefix, "app", "whitelist-source-range", "10.0.0.0/8,198.18.0.0/15")

	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, host, target string, body string, hdr ...string) *http.Response {
		return doRequest(hc, method, "http://"+addr+target, host, body, hdr...)
	}
	harness.WaitFor(t, 60*time.Second, "every Ingress served by both workers", func() bool {
		for _, h := range []string{"rw.example/something/x", "vh.example/", "cors.example/", "allowed.example/", "deny.example/", "allow.example/"} {
			host, target, _ := strings.Cut(h, "/")
			if !servedByEveryWorker(b, addr, host, "/"+target) {
				return false
			}
		}
		return do("GET", "can.example", "/", "", "X-Canary", "always").Header.Get("X-Backend") == "ann-next"
	})
	gen := b.Status().ActiveGeneration

	// rewrite-target: the whole path upstream is the target, $2 the
	// second group; the query goes along.
	for target, want := range map[string]string{"/something/new?q=1": "/new?q=1", "/something": "/", "/Something/a/b": "/a/b"} {
		if got := do("GET", "rw.example", target, "").Header.Get("X-Request-Target"); got != want {
			t.Errorf("rewrite-target /$2: %s went upstream as %q, want %q", target, got, want)
		}
	}
	// permanent-redirect: 301 to the URL.
	if r := do("GET", "moved.example", "/old?x=1", ""); r.StatusCode != 301 || !strings.HasPrefix(r.Header.Get("Location"), "https://www.example.com/landing") {
		t.Errorf("permanent-redirect: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	// app-root: "/" alone to the app root (302); the rest served.
	if r := do("GET", "root.example", "/", ""); r.StatusCode != 302 || r.Header.Get("Location") != "http://root.example/app1" {
		t.Errorf("app-root: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if r := do("GET", "root.example", "/app1/x", ""); r.StatusCode != 200 {
		t.Errorf("app-root, below it: %d", r.StatusCode)
	}
	// upstream-vhost, x-forwarded-prefix, proxy-body-size 1k.
	if r := do("GET", "vh.example", "/", ""); r.Header.Get("X-Request-Host") != "internal.example" || r.Header.Get("X-Request-Forwarded-Prefix") != "/vh" {
		t.Errorf("upstream-vhost and x-forwarded-prefix: Host %q, X-Forwarded-Prefix %q", r.Header.Get("X-Request-Host"), r.Header.Get("X-Request-Forwarded-Prefix"))
	}
	if r := do("POST", "vh.example", "/", strings.Repeat("x", 2048)); r.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("proxy-body-size 1k, a 2 KiB body: %d, want 413", r.StatusCode)
	}
	if r := do("POST", "vh.example", "/", strings.Repeat("x", 512)); r.StatusCode != 200 {
		t.Errorf("proxy-body-size 1k, a 512 B body: %d %v", r.StatusCode, r.Header)
	}
	// canary-by-header: "always" to the canary, else the main Ingress's
	// (canary-weight 0).
	for hdr, want := range map[string]string{"always": "ann-next", "never": "ann-app", "": "ann-app"} {
		if got := do("GET", "can.example", "/", "", "X-Canary", hdr).Header.Get("X-Backend"); got != want {
			t.Errorf("canary-by-header X-Canary %q: %s, want %s", hdr, got, want)
		}
	}
	// canary-by-cookie: "always" to the canary (after the header, which
	// is not sent here).
	if got := do("GET", "can.example", "/", "", "Cookie", "a=b; canary=always").Header.Get("X-Backend"); got != "ann-next" {
		t.Errorf("canary-by-cookie always: %s", got)
	}
	// temporal-redirect with its code.
	if r := do("GET", "temp.example", "/", ""); r.StatusCode != 307 || !strings.HasPrefix(r.Header.Get("Location"), "https://other.example/x") {
		t.Errorf("temporal-redirect 307: %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	// affinity cookie with its attributes.
	harness.WaitFor(t, 30*time.Second, "the sticky Ingress served", func() bool { return servedByEveryWorker(b, addr, "sticky.example", "/") })
	if c := do("GET", "sticky.example", "/", "").Header.Get("Set-Cookie"); !strings.HasPrefix(c, "route=") ||
		!strings.Contains(c, "; Max-Age=3600; Expires=") || !strings.HasSuffix(c, "; Path=/; SameSite=Lax; HttpOnly") {
		t.Errorf("affinity cookie: Set-Cookie %q", c)
	}
	// custom-headers: the ConfigMap's fields on the response.
	harness.WaitFor(t, 30*time.Second, "the custom headers served", func() bool {
		return do("GET", "custom.example", "/", "").Header.Get("X-Frame-Options") == "DENY"
	})
	// enable-cors: a preflight answered 204 by baton with the Allow
	// headers (ingress-nginx's defaults); the response of an allowed
	// origin gets its Allow-Origin; another origin gets none.
	if r := do("OPTIONS", "cors.example", "/", "", "Origin", "https://app.example", "Access-Control-Request-Method", "PUT"); r.StatusCode != 204 ||
		r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || r.Header.Get("Access-Control-Allow-Methods") != "GET, PUT, POST, DELETE, PATCH, OPTIONS" ||
		r.Header.Get("Access-Control-Max-Age") != "1728000" || r.Header.Get("X-Backend") != "" {
		t.Errorf("CORS preflight: %d %v", r.StatusCode, r.Header)
	}
	if r := do("GET", "cors.example", "/", "", "Origin", "https://admin.example"); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "https://admin.example" ||
		r.Header.Get("Access-Control-Allow-Credentials") != "true" || r.Header.Get("X-Backend") != "ann-app" {
		t.Errorf("CORS response: %d %v", r.StatusCode, r.Header)
	}
	if r := do("GET", "cors.example", "/", "", "Origin", "https://evil.example"); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS, an origin not allowed: %d %v", r.StatusCode, r.Header)
	}
	// limit-rps 1, bursts of 1: on one connection (one worker), two
	// requests at once, then 503 (limit-req-status-code's default).
	harness.WaitFor(t, 30*time.Second, "the rate-limited Ingress served", func() bool { return do("GET", "limit.example", "/", "").StatusCode != 404 })
	codes := map[int]int{}
	for range 9 {
		codes[do("GET", "limit.example", "/", "").StatusCode]++
	}
	if codes[200] != 1 || codes[503] != 8 {
		t.Errorf("limit-rps 1 with a burst of 1, 9 requests after the first: %v, want one 200 and eight 503", codes)
	}
	// limit-connections 1: while one request of the client's is in
	// flight (a backend that answers in 2 s), another is answered 503;
	// once it is over, one goes through again.
	harness.WaitFor(t, 30*time.Second, "the connection-limited Ingress served", func() bool { return servedByEveryWorker(b, addr, "conn.example", "/") })
	slow := make(chan int, 1)
	go func() {
		c := &http.Client{Timeout: 10 * time.Second}
		// A probe below may hold the one slot when the slow request comes
		// (then it is the one refused): it is sent again.
		for attempt := 1; ; attempt++ {
			req, _ := http.NewRequest("GET", "http://"+addr+"/sleep/2s", nil)
			req.Host = "conn.example"
			resp, err := c.Do(req)
			if err != nil {
				slow <- 0
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || attempt == 5 {
				slow <- resp.StatusCode
				return
			}
		}
	}()
	// Each worker counts its own: a request on a new connection is refused
	// when it lands on the slow request's worker, so some of a few hundred
	// are.
	refused := 0
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) && refused == 0 {
		if servedCode(addr, "conn.example", "/") == 503 {
			refused++
		}
	}
	if refused == 0 {
		t.Error("limit-connections 1: no request refused while one was in flight")
	}
	if code := <-slow; code != 200 {
		t.Errorf("the request in flight: %d", code)
	}
	harness.WaitFor(t, 10*time.Second, "a request after the slow one", func() bool { return servedCode(addr, "conn.example", "/") == 200 })
	// Source ranges: 403 to a client they do not allow.
	for host, want := range map[string]int{"deny.example": 403, "allow.example": 403, "allowed.example": 200} {
		if got := do("GET", host, "/", "").StatusCode; got != want {
			t.Errorf("source ranges of %s: %d, want %d", host, got, want)
		}
	}
	// auth-tls-secret (an Opaque Secret's ca.crt, as ingress-nginx's
	// documentation creates it), auth-tls-pass-certificate-to-upstream:
	// a client without a certificate of the CA is answered 400 as nginx
	// does, one with is served and its backend told (ssl-client-verify,
	// ssl-client-cert); a Host whose SNI named another host is 421; the
	// CA rotated in its Secret goes live with no handoff.
	serverCA, clientCA := certs.NewCA(t, "mtls server CA"), certs.NewCA(t, "mtls client CA")
	srvCrt, srvKey := serverCA.Issue(t, []string{"mtls.example", "plain-tls.example", "cn-tls.example"}, certs.Options{SerialNum: 21})
	for _, sec := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mtls"}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: srvCrt, corev1.TLSPrivateKeyKey: srvKey}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client-ca"}, Data: map[string][]byte{"ca.crt": clientCA.PEM}},
	} {
		if _, err := client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("mtls", "mtls.example", "/", prefix, "app", "auth-tls-secret", ns+"/client-ca", "auth-tls-pass-certificate-to-upstream", "true")
	create("plaintls", "plain-tls.example", "/", prefix, "app")
	create("cntls", "cn-tls.example", "/", prefix, "app", "auth-tls-secret", "client-ca", "auth-tls-match-cn", "CN=(alice|carol)",
		"auth-tls-error-page", "https://login.example/certificate")
	for _, name := range []string{"mtls", "plaintls", "cntls"} {
		in, err := client.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		in.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{in.Spec.Rules[0].Host}, SecretName: "mtls"}}
		if _, err := client.NetworkingV1().Ingresses(ns).Update(ctx, in, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cliCrt, cliKey := clientCA.Issue(t, []string{"alice"}, certs.Options{Client: true, SerialNum: 22})
	alice := certs.Pair(t, cliCrt, cliKey)
	mtlsGet := func(sni, host, target string, cert *tls.Certificate) (int, string) {
		cc := &tls.Config{RootCAs: serverCA.Pool, ServerName: sni}
		if cert != nil {
			cc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cc, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, _ := http.NewRequest("GET", "https://"+addr+target, nil)
		req.Host = host
		req.Header.Set("Ssl-Client-Verify", "FORGED")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if loc := resp.Header.Get("Location"); loc != "" {
			return resp.StatusCode, loc
		}
		return resp.StatusCode, string(body)
	}
	harness.WaitFor(t, 30*time.Second, "the client-verified host served", func() bool {
		code, _ := mtlsGet("mtls.example", "mtls.example", "/", &alice)
		return code == 200
	})
	for range 8 { // new connections: both workers
		if code, body := mtlsGet("mtls.example", "mtls.example", "/", nil); code != 400 {
			t.Fatalf("auth-tls, no client certificate: %d %s, want 400", code, body)
		}
		code, body := mtlsGet("mtls.example", "mtls.example", "/headers", &alice)
		if code != 200 || !strings.Contains(body, "Ssl-Client-Verify: SUCCESS\r\n") || strings.Contains(body, "FORGED") ||
			!strings.Contains(body, "Ssl-Client-Cert: -----BEGIN%20CERTIFICATE-----") || !strings.Contains(body, "Ssl-Client-Subject-Dn: CN=alice") {
			t.Fatalf("auth-tls with the CA's certificate: %d\n%s", code, body)
		}
	}
	if code, _ := mtlsGet("plain-tls.example", "mtls.example", "/", &alice); code != 421 {
		t.Errorf("auth-tls, SNI of a host without verification and Host of one with: %d, want 421", code)
	}
	if code, _ := mtlsGet("plain-tls.example", "plain-tls.example", "/", nil); code != 200 {
		t.Errorf("the host without verification, no certificate: %d", code)
	}
	// auth-tls-match-cn: a certificate of the CA whose subject does not
	// match is 403 (ingress-nginx's "return 403"); auth-tls-error-page:
	// what would be a 400 is a 302 to the page (its "error_page 495 496").
	malCrt, malKey := clientCA.Issue(t, []string{"mallory"}, certs.Options{Client: true, SerialNum: 24})
	mallory := certs.Pair(t, malCrt, malKey)
	harness.WaitFor(t, 30*time.Second, "the match-cn host served", func() bool {
		code, _ := mtlsGet("cn-tls.example", "cn-tls.example", "/", &alice)
		return code == 200
	})
	if code, _ := mtlsGet("cn-tls.example", "cn-tls.example", "/", &mallory); code != 403 {
		t.Errorf("auth-tls-match-cn CN=(alice|carol), mallory's certificate: %d, want 403", code)
	}
	if code, loc := mtlsGet("cn-tls.example", "cn-tls.example", "/", nil); code != 302 || loc != "https://login.example/certificate" {
		t.Errorf("auth-tls-error-page, no certificate: %d %q, want 302 to the page", code, loc)
	}
	if r := do("GET", "mtls.example", "/", ""); r.StatusCode != 308 {
		t.Errorf("plain HTTP to the client-verified host: %d, want 308 to HTTPS", r.StatusCode)
	}
	nextCA := certs.NewCA(t, "mtls client CA 2")
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client-ca"},
		Data: map[string][]byte{"ca.crt": nextCA.PEM}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	bobCrt, bobKey := nextCA.Issue(t, []string{"bob"}, certs.Options{Client: true, SerialNum: 23})
	bob := certs.Pair(t, bobCrt, bobKey)
	harness.WaitFor(t, 30*time.Second, "the rotated client CA in both workers", func() bool {
		for range 8 {
			if code, _ := mtlsGet("mtls.example", "mtls.example", "/", &bob); code != 200 {
				return false
			}
			if code, _ := mtlsGet("mtls.example", "mtls.example", "/", &alice); code != 400 {
				return false
			}
		}
		return true
	})

	// The snippet: an Event on its Ingress, and the rest served (above).
	events := func(name, reason string) []corev1.Event {
		list, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		var out []corev1.Event
		for _, e := range list.Items {
			if e.Reason == reason {
				out = append(out, e)
			}
		}
		return out
	}
	harness.WaitFor(t, 30*time.Second, "an Event for the annotation not implemented", func() bool {
		es := events("vhost", ingress.ReasonNotImplemented)
		return len(es) == 1 && strings.Contains(es[0].Message, "configuration-snippet")
	})
	// An invalid value: an Event, and the last good version serves.
	cur, err := client.NetworkingV1().Ingresses(ns).Get(ctx, "vhost", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"] = "huge"
	cur.Annotations["nginx.ingress.kubernetes.io/upstream-vhost"] = "other.example"
	if _, err := client.NetworkingV1().Ingresses(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "an Event for the invalid value", func() bool {
		es := events("vhost", ingress.ReasonInvalid)
		return len(es) == 1 && strings.Contains(es[0].Message, "proxy-body-size") && strings.Contains(es[0].Message, "last good version serves")
	})
	if r := do("GET", "vh.example", "/", ""); r.Header.Get("X-Request-Host") != "internal.example" {
		t.Errorf("the refused Ingress: upstream Host %q, want the last good version's internal.example", r.Header.Get("X-Request-Host"))
	}
	if g := b.Status().ActiveGeneration; g != gen {
		t.Errorf("Ingress changes made a handoff: generation %d, then %d", gen, g)
	}
}

// A rollout under load behind an Ingress (issue 22), with and without the
// seed's service-upstream: every pod of the Service replaced one by one,
// in the good order (a preStop grace; kube-proxy done by hand for the
// ClusterIP), with a baton handoff halfway. Not one request fails.
func TestIngressRollout(t *testing.T) {
	for i, upstream := range []bool{false, true} {
		t.Run(map[bool]string{false: "endpoints", true: "service-upstream"}[upstream], func(t *testing.T) {
			ctx := context.Background()
			addr := fmt.Sprintf("198.18.65.%d", 10+i)
			ns := newNamespace(t)
			clusterIP := ""
			if upstream {
				clusterIP = "198.18.128.41"
			}
			createService(t, ns, "shop", clusterIP)
			old := startPods(t, pods)
			var state []podState
			for _, p := range old {
				state = append(state, readyPod(p))
			}
			writeSlice(t, ns, "shop", state)
			var kp *kubeProxy
			annotations := map[string]string{}
			if upstream {
				kp = startKubeProxy(t, clusterIP, kubeProxyLag)
				kp.setNow(state)
				annotations["ingress.kubernetes.io/service-upstream"] = "true"
			}
			b, class := ingressBaton(t, ns, addr)
			prefix := networkingv1.PathTypePrefix
			if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, &networkingv1.Ingress{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop", Annotations: annotations},
				Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{Host: "shop.example", IngressRuleValue: networkingv1.IngressRuleValue{
					HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix,
						Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "shop", Port: networkingv1.ServiceBackendPort{Name: "http"}}}}}}}}}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			harness.WaitFor(t, 60*time.Second, "the Ingress served by both workers", func() bool { return servedByEveryWorker(b, addr, "shop.example", "/") })
			res := rolloutThrough(t, b, addr+":80", "shop.example", ns, "shop", old, false, kp)
			t.Logf("rollout of %d pods behind an Ingress in %s: %s; handoff %s", pods, res.duration.Round(time.Millisecond), res.load, res.handoff.Outcome)
			if res.handoff.Outcome != supervisor.OutcomeOK {
				t.Errorf("handoff during the rollout: %s %s", res.handoff.Outcome, res.handoff.Reason)
			}
			// Through the ClusterIP too: while a pod is in its grace
			// period, baton pools no connection to the ClusterIP
			// (kube.Endpoint.NoReuse), so none meets the pod's close.
			failed := res.load.TotalFailures()
			if failed != 0 {
				t.Errorf("%d failed requests: %v by kind %v; first: %q", failed, res.load.Failures, res.load.FailuresByKind, res.load.Examples)
				t.Logf("what baton answered other than 200 under the load:\n%s", notOK(t, b, res.start))
			}
			if res.load.Requests < 1000 {
				t.Errorf("too little load to show anything: %s", res.load)
			}
		})
	}
}
