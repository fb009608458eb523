package kube

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/integration/internal/harness"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What a client sees of the ingress-nginx annotations that
// TestIngressAnnotations leaves out, each as ingress-nginx's
// docs/user-guide/nginx-configuration/annotations.md has it (the section
// in each comment):
//
//   - use-regex ("Use Regex"): the paths are regular expressions;
//   - ssl-redirect "false" and force-ssl-redirect ("Server-side HTTPS
//     enforcement through redirect");
//   - backend-protocol HTTPS ("Backend Protocol"), the pod's certificate
//     not verified (proxy-ssl-verify's default "off");
//   - proxy-read-timeout ("Custom timeouts"): a pod that answers later
//     is 504;
//   - canary-weight, canary-by-header-value, canary-by-header-pattern
//     ("Canary");
//   - session-cookie-path and session-cookie-expires ("Cookie affinity");
//   - upstream-hash-by $http_NAME ("Custom NGINX upstream hashing");
//   - limit-rpm with limit-burst-multiplier ("Rate Limiting");
//   - auth-tls-verify-client optional ("Client Certificate
//     Authentication"): no certificate is served, and the backend told;
//   - ssl-passthrough ("SSL Passthrough"): the pod's own TLS reached
//     through the HTTPS listener, baton holding no key for the host.
func TestIngressAnnotationsEach(t *testing.T) {
	ctx := t.Context()
	const addr = "198.18.65.3"
	ns := newNamespace(t)
	for _, svc := range []string{"app", "next", "pair", "secure"} {
		createService(t, ns, svc, "")
	}
	writeSlice(t, ns, "app", []podState{readyPod(startPod(t, "each-app", "198.18.3.31"))})
	writeSlice(t, ns, "next", []podState{readyPod(startPod(t, "each-next", "198.18.3.32"))})
	writeSlice(t, ns, "pair", []podState{readyPod(startPod(t, "each-a", "198.18.3.33")), readyPod(startPod(t, "each-b", "198.18.3.34"))})
	writeSlicePort(t, ns, "secure", 8443, []podState{readyPod(startPod(t, "each-tls", "198.18.3.35", "-https", "198.18.3.35:8443"))})
	b, class := ingressBaton(t, ns, addr)

	ca := certs.NewCA(t, "each CA")
	crt, key := ca.Issue(t, []string{"nossl.example", "optional.example"}, certs.Options{SerialNum: 31})
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "each"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client-ca"},
		Data: map[string][]byte{"ca.crt": ca.PEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tlsOf := func(host string) []networkingv1.IngressTLS {
		return []networkingv1.IngressTLS{{Hosts: []string{host}, SecretName: "each"}}
	}
	prefix, impl := networkingv1.PathTypePrefix, networkingv1.PathTypeImplementationSpecific
	create := func(name, host, p string, pt networkingv1.PathType, svc string, tls []networkingv1.IngressTLS, annotations ...string) {
		t.Helper()
		createIngress(t, ns, class, name, host, p, pt, svc, tls, annotations...)
	}
	create("regex", "re.example", "/api/v[0-9]+/", impl, "app", nil, "use-regex", "true")
	create("nossl", "nossl.example", "/", prefix, "app", tlsOf("nossl.example"), "ssl-redirect", "false")
	create("force", "force.example", "/", prefix, "app", nil, "force-ssl-redirect", "true")
	create("https", "https.example", "/", prefix, "secure", nil, "backend-protocol", "HTTPS")
	create("passthrough", "pass.example", "/", prefix, "secure", nil, "ssl-passthrough", "true")
	create("slow", "slow.example", "/", prefix, "app", nil, "proxy-read-timeout", "1")
	create("main", "can.example", "/", prefix, "app", nil)
	create("canary", "can.example", "/", prefix, "next", nil, "canary", "true", "canary-by-header", "X-Env", "canary-by-header-value", "blue")
	create("wmain", "weight.example", "/", prefix, "app", nil)
	create("wcanary", "weight.example", "/", prefix, "next", nil, "canary", "true", "canary-weight", "100")
	create("pmain", "pattern.example", "/", prefix, "app", nil)
	create("pcanary", "pattern.example", "/", prefix, "next", nil, "canary", "true", "canary-by-header", "X-Env", "canary-by-header-pattern", "te.l|blue")
	create("sticky", "sticky.example", "/", prefix, "pair", nil, "affinity", "cookie", "session-cookie-path", "/app", "session-cookie-expires", "120")
	create("hash", "hash.example", "/", prefix, "pair", nil, "upstream-hash-by", "$http_x_user")
	create("rpm", "rpm.example", "/", prefix, "app", nil, "limit-rpm", "2", "limit-burst-multiplier", "1")
	create("optional", "optional.example", "/", prefix, "app", tlsOf("optional.example"), "auth-tls-secret", "client-ca", "auth-tls-verify-client", "optional")

	hc := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(host, target string, hdr ...string) *http.Response {
		return doRequest(hc, "GET", "http://"+addr+target, host, "", hdr...)
	}
	harness.WaitFor(t, 60*time.Second, "every Ingress served by both workers", func() bool {
		for _, h := range []string{"re.example/api/v1/", "nossl.example/", "https.example/", "slow.example/", "can.example/", "weight.example/",
			"pattern.example/", "sticky.example/", "hash.example/"} {
			host, target, _ := strings.Cut(h, "/")
			if !servedByEveryWorker(b, addr, host, "/"+target) {
				return false
			}
		}
		return true
	})
	gen := b.Status().ActiveGeneration

	// use-regex: /api/v[0-9]+/ is a regular expression, anchored at the
	// start, case-insensitive (nginx's location ~*).
	for target, want := range map[string]int{"/api/v2/users": 200, "/API/V10/": 200, "/api/vx/": 404, "/x/api/v1/": 404} {
		if got := do("re.example", target).StatusCode; got != want {
			t.Errorf("use-regex /api/v[0-9]+/: %s is %d, want %d", target, got, want)
		}
	}
	// ssl-redirect "false": a TLS host served on plain HTTP too;
	// force-ssl-redirect: a host without TLS redirected (308) all the same.
	if r := do("nossl.example", "/"); r.StatusCode != 200 {
		t.Errorf("ssl-redirect false, plain HTTP to a TLS host: %d, want 200", r.StatusCode)
	}
	if r := do("force.example", "/x?y=1"); r.StatusCode != 308 || r.Header.Get("Location") != "https://force.example/x?y=1" {
		t.Errorf("force-ssl-redirect: %d %q, want 308 to https://force.example/x?y=1", r.StatusCode, r.Header.Get("Location"))
	}
	// backend-protocol HTTPS: the pod is reached over TLS; its
	// self-signed certificate is not verified.
	if r := do("https.example", "/"); r.StatusCode != 200 || r.Header.Get("X-Request-Scheme") != "https" || r.Header.Get("X-Backend") != "each-tls" {
		t.Errorf("backend-protocol HTTPS: %d, scheme %q, backend %q", r.StatusCode, r.Header.Get("X-Request-Scheme"), r.Header.Get("X-Backend"))
	}
	// ssl-passthrough: a TLS connection to the HTTPS listener naming
	// pass.example reaches the pod whole: its certificate, its answer
	// to a request over its own TLS; other hosts still terminate here.
	harness.WaitFor(t, 30*time.Second, "ssl-passthrough served", func() bool {
		pc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "pass.example", InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp := doRequest(pc, "GET", "https://"+addr+"/", "pass.example", "")
		return resp.StatusCode == 200 && resp.Header.Get("X-Backend") == "each-tls" && resp.TLS != nil && resp.TLS.PeerCertificates[0].Issuer.CommonName != "each CA"
	})
	nossl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "nossl.example", RootCAs: ca.Pool}, DisableKeepAlives: true}}
	if r := doRequest(nossl, "GET", "https://"+addr+"/", "nossl.example", ""); r.StatusCode != 200 || r.TLS == nil || r.TLS.PeerCertificates[0].Issuer.CommonName != "each CA" {
		t.Errorf("beside ssl-passthrough, a host that terminates here: %d", r.StatusCode)
	}
	// proxy-read-timeout 1: a pod that answers in 3 s is 504; one that
	// answers at once is served.
	if r := do("slow.example", "/sleep/3s"); r.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("proxy-read-timeout 1, a pod 3 s late: %d, want 504", r.StatusCode)
	}
	if r := do("slow.example", "/"); r.StatusCode != 200 {
		t.Errorf("proxy-read-timeout 1, a pod on time: %d", r.StatusCode)
	}
	// canary-by-header-value: the value alone sends to the canary;
	// canary-by-header-pattern: a value the pattern matches whole.
	for _, tt := range []struct{ host, value, want string }{
		{"can.example", "blue", "each-next"}, {"can.example", "green", "each-app"}, {"can.example", "", "each-app"},
		{"pattern.example", "teal", "each-next"}, {"pattern.example", "blue", "each-next"}, {"pattern.example", "steal", "each-app"},
	} {
		if got := do(tt.host, "/", "X-Env", tt.value).Header.Get("X-Backend"); got != tt.want {
			t.Errorf("%s with X-Env %q: %s, want %s", tt.host, tt.value, got, tt.want)
		}
	}
	// canary-weight 100: every request to the canary.
	for range 8 {
		if got := do("weight.example", "/").Header.Get("X-Backend"); got != "each-next" {
			t.Fatalf("canary-weight 100: %s, want each-next", got)
		}
	}
	// session-cookie-path and -expires: the sticky cookie's Path, and
	// its lifetime (baton writes Max-Age beside Expires); the cookie
	// brings the client back to its pod.
	r := do("sticky.example", "/")
	cookie := r.Header.Get("Set-Cookie")
	if !strings.Contains(cookie, "; Max-Age=120; Expires=") || !strings.Contains(cookie, "; Path=/app;") {
		t.Errorf("session-cookie-path /app, -expires 120: Set-Cookie %q", cookie)
	}
	pod := r.Header.Get("X-Backend")
	name, _, _ := strings.Cut(cookie, ";")
	for range 8 {
		if got := do("sticky.example", "/", "Cookie", name).Header.Get("X-Backend"); got != pod {
			t.Fatalf("the sticky cookie: %s, then %s", pod, got)
		}
	}
	// upstream-hash-by $http_x_user: each user's requests to one pod,
	// and the two pods both used by some of 16 users.
	pods := map[string]bool{}
	for u := range 16 {
		user := "user-" + string(rune('a'+u))
		first := do("hash.example", "/", "X-User", user).Header.Get("X-Backend")
		pods[first] = true
		for range 3 {
			if got := do("hash.example", "/", "X-User", user).Header.Get("X-Backend"); got != first {
				t.Fatalf("upstream-hash-by $http_x_user, %s: %s, then %s", user, first, got)
			}
		}
	}
	if !pods["each-a"] || !pods["each-b"] {
		t.Errorf("upstream-hash-by: 16 users reached only %v", pods)
	}
	// limit-rpm 2, bursts of 2 (rpm times limit-burst-multiplier 1, as
	// ingress-nginx sets limit_req's burst): on one connection (one
	// worker), one request and its burst of two go through, as nginx's
	// limit_req ... nodelay lets them, and the fourth, right after, is 503.
	harness.WaitFor(t, 30*time.Second, "the rate-limited Ingress served", func() bool { return do("rpm.example", "/").StatusCode == 200 })
	for i := 2; i <= 3; i++ {
		if got := do("rpm.example", "/").StatusCode; got != 200 {
			t.Errorf("limit-rpm 2, request %d: %d, want 200", i, got)
		}
	}
	if got := do("rpm.example", "/").StatusCode; got != 503 {
		t.Errorf("limit-rpm 2, the fourth request within the minute: %d, want 503", got)
	}
	// auth-tls-verify-client optional: a client without a certificate is
	// served, and its backend told NONE.
	harness.WaitFor(t, 30*time.Second, "the optional client verification served", func() bool {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "optional.example"}, DisableKeepAlives: true}}
		resp := doRequest(c, "GET", "https://"+addr+"/headers", "optional.example", "")
		return resp.StatusCode == 200
	})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "optional.example"}}}
	req, _ := http.NewRequest("GET", "https://"+addr+"/headers", nil)
	req.Host = "optional.example"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), "Ssl-Client-Verify: NONE\r\n") {
		t.Errorf("auth-tls-verify-client optional, no certificate: %d %v\n%s", resp.StatusCode, err, body)
	}

	if g := b.Status().ActiveGeneration; g != gen {
		t.Errorf("Ingress changes made a handoff: generation %d, then %d", gen, g)
	}
}
