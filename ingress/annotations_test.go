package ingress

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The annotations' meanings are ingress-nginx's, each cited to its
// documentation: docs/user-guide/nginx-configuration/annotations.md of
// kubernetes/ingress-nginx (section named in each test).

// annotated is an Ingress of baton's class for host a.example, path
// /app Prefix to Service web, with the annotations given as name, value
// pairs (names under nginxPrefix).
func annotated(name string, kv ...string) networkingv1.Ingress {
	i := ing(name, ptr("baton"), "a.example", path("/app", networkingv1.PathTypePrefix, "web"))
	i.Annotations = map[string]string{}
	for j := 0; j+1 < len(kv); j += 2 {
		i.Annotations[nginxPrefix+kv[j]] = kv[j+1]
	}
	return i
}

func translate(good map[string]*Translation, ings ...networkingv1.Ingress) *Result {
	return Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: ings, Good: good}, opts)
}

// request is what a request gets from a result: the rule that takes it
// (nil: 404) and the path it goes upstream with.
func request(t *testing.T, res *Result, host, p string, hdr ...string) (*route.Compiled[string], string) {
	t.Helper()
	table, err := route.Compile(res.Routing.Rules)
	if err != nil {
		t.Fatal(err)
	}
	r := req("GET", host+p, hdr...)
	c, pm := table.Match("http", r)
	if c == nil {
		return nil, ""
	}
	up := p
	if rw := c.Filters.Rewrite; rw != nil && rw.Path != nil {
		up = string(route.ModifyPath(nil, rw.Path, pm.Value, c.PathRegexp(pm.Value), []byte(p)))
	}
	return c, up
}

// req builds a request for host/path with header fields (name, value).
func req(method, target string, hdr ...string) *route.Request {
	host, rest, _ := strings.Cut(target, "/")
	f := fields{}
	for i := 0; i+1 < len(hdr); i += 2 {
		f[strings.ToLower(hdr[i])] = hdr[i+1]
	}
	return &route.Request{Host: []byte(host), Path: []byte("/" + rest), Method: []byte(method), Fields: f}
}

type fields map[string]string

func (f fields) Field(name string) []byte {
	if v, ok := f[name]; ok {
		return []byte(v)
	}
	return nil
}

func backendOf(res *Result, name string) *config.Backend {
	for i := range res.Routing.Backends {
		if res.Routing.Backends[i].Name == name {
			return &res.Routing.Backends[i]
		}
	}
	return nil
}

// "Rewrite": with rewrite-target the paths are regular expressions
// (case-insensitive, anchored at the start), and the whole path upstream
// is the target with $1..$9 its groups (the documented example:
// /something(/|$)(.*) with /$2).
func TestRewriteTarget(t *testing.T) {
	i := ing("rw", ptr("baton"), "a.example", path("/something(/|$)(.*)", networkingv1.PathTypeImplementationSpecific, "web"))
	i.Annotations = map[string]string{nginxPrefix + "rewrite-target": "/$2"}
	res := translate(nil, i)
	for p, want := range map[string]string{"/something": "/", "/something/": "/", "/something/new": "/new", "/SOMETHING/new/x": "/new/x"} {
		c, up := request(t, res, "a.example", p)
		if c == nil || up != want {
			t.Errorf("%s: upstream %q, want %q", p, up, want)
		}
	}
	if c, _ := request(t, res, "a.example", "/other"); c != nil {
		t.Errorf("/other taken by %s", c.Name)
	}
	// use-regex alone: regular expression paths, no rewrite.
	u := ing("re", ptr("baton"), "b.example", path("/v[0-9]+/api", networkingv1.PathTypePrefix, "web"))
	u.Annotations = map[string]string{nginxPrefix + "use-regex": "true"}
	res = translate(nil, u)
	if c, up := request(t, res, "b.example", "/v2/api/x"); c == nil || up != "/v2/api/x" {
		t.Errorf("use-regex: %v %q", c, up)
	}
	// A regular expression that does not compile refuses the Ingress.
	bad := ing("bad", ptr("baton"), "c.example", path("/(", networkingv1.PathTypePrefix, "web"))
	bad.Annotations = map[string]string{nginxPrefix + "use-regex": "true"}
	res = translate(nil, bad)
	if p := res.Problems["shop/bad"]; len(p) != 1 || p[0].Reason != ReasonInvalid || !strings.Contains(p[0].Message, "not a regular expression") {
		t.Errorf("a bad regex: %+v", p)
	}
	if len(res.Routing.Rules) != 0 {
		t.Errorf("the refused Ingress serves %d rules", len(res.Routing.Rules))
	}
}

// "Permanent Redirect", "Temporal Redirect" (with their -code), "App
// Root": a redirect to the URL (301, 302 or the code), and "/" alone to
// the app root (302).
func TestRedirects(t *testing.T) {
	res := translate(nil,
		annotated("perm", "permanent-redirect", "https://www.example.com/new", "permanent-redirect-code", "308"),
	)
	c, _ := request(t, res, "a.example", "/app/x")
	if c == nil || c.Filters.Redirect == nil || c.Filters.Redirect.StatusCode != 308 || c.Filters.Redirect.Hostname != "www.example.com" ||
		c.Filters.Redirect.Scheme != "https" || c.Filters.Redirect.Path.Value != "/new" {
		t.Fatalf("permanent-redirect: %+v", c)
	}
	res = translate(nil, annotated("temp", "temporal-redirect", "http://b.example:8080"))
	if c, _ := request(t, res, "a.example", "/app"); c == nil || c.Filters.Redirect.StatusCode != 302 || c.Filters.Redirect.Port != 8080 || c.Filters.Redirect.Path.Value != "/" {
		t.Errorf("temporal-redirect: %+v", c.Filters.Redirect)
	}
	root := ing("root", ptr("baton"), "a.example", path("/", networkingv1.PathTypePrefix, "web"))
	root.Annotations = map[string]string{nginxPrefix + "app-root": "/app1"}
	res = translate(nil, root)
	if c, _ := request(t, res, "a.example", "/"); c == nil || c.Filters.Redirect == nil || c.Filters.Redirect.Path.Value != "/app1" || c.Filters.Redirect.StatusCode != 302 {
		t.Errorf("app-root at /: %+v", c)
	}
	if c, _ := request(t, res, "a.example", "/app1/x"); c == nil || c.Filters.Redirect != nil {
		t.Errorf("app-root elsewhere: %+v", c)
	}
	res = translate(nil, annotated("bad", "permanent-redirect", "not a url"))
	if p := res.Problems["shop/bad"]; len(p) != 1 || !strings.Contains(p[0].Message, "not an http or https URL") {
		t.Errorf("a bad URL: %+v", p)
	}
}

// "Backend Protocol" (HTTPS: TLS to the pods, not verified, as
// proxy-ssl-verify's default "off"), "Custom timeouts" (seconds),
// "Session Affinity" (cookie, session-cookie-name, INGRESSCOOKIE by
// default), "Custom NGINX upstream hashing" ($http_ variables): each a
// backend of its own, so that a Service reached otherwise elsewhere keeps
// its pool.
func TestBackendAnnotations(t *testing.T) {
	res := translate(nil,
		annotated("tls", "backend-protocol", "HTTPS", "proxy-connect-timeout", "5", "proxy-read-timeout", "120", "proxy-send-timeout", "30"),
		annotated("sticky", "affinity", "cookie", "session-cookie-name", "route"),
		annotated("sticky2", "affinity", "cookie", "session-cookie-path", "/app", "session-cookie-max-age", "172800", "session-cookie-samesite", "lax"),
		annotated("hash", "upstream-hash-by", "$http_x_user"),
	)
	tb := backendOf(res, "k8s/shop/web:80/https/connect=5s/read=2m0s/send=30s")
	if tb == nil || tb.TLS == nil || !tb.TLS.InsecureSkipVerify || tb.ConnectTimeout.Std() != 5*time.Second || tb.ResponseTimeout.Std() != 120*time.Second ||
		tb.SendTimeout.Std() != 30*time.Second {
		t.Errorf("backend-protocol and timeouts: %+v (backends %v)", tb, res.Routing.Backends)
	}
	if sb := backendOf(res, "k8s/shop/web:80/cookie=route"); sb == nil || sb.Balancer != config.BalancerCookie || sb.Cookie != "route" {
		t.Errorf("affinity: %+v", sb)
	}
	if sb := backendOf(res, "k8s/shop/web:80/cookie=INGRESSCOOKIE;path=/app;max-age=48h0m0s;samesite=Lax"); sb == nil || sb.CookiePath != "/app" ||
		sb.CookieMaxAge.Std() != 48*time.Hour || sb.CookieSameSite != "Lax" {
		t.Errorf("session-cookie-path, -max-age, -samesite: %+v (backends %v)", sb, res.Routing.Backends)
	}
	if hb := backendOf(res, "k8s/shop/web:80/hash=x-user"); hb == nil || hb.Balancer != config.BalancerHashHeader || hb.HashHeader != "x-user" {
		t.Errorf("upstream-hash-by: %+v", hb)
	}
	res = translate(nil, annotated("grpc", "backend-protocol", "GRPC"))
	if gb := backendOf(res, "k8s/shop/web:80/h2c"); gb == nil || gb.Protocol != config.ProtocolH2C || gb.TLS != nil {
		t.Errorf("backend-protocol GRPC: %+v (backends %v)", gb, res.Routing.Backends)
	}
	res = translate(nil, annotated("grpcs", "backend-protocol", "GRPCS"))
	if gb := backendOf(res, "k8s/shop/web:80/https/h2"); gb == nil || gb.Protocol != config.ProtocolH2 || gb.TLS == nil {
		t.Errorf("backend-protocol GRPCS: %+v (backends %v)", gb, res.Routing.Backends)
	}
	res = translate(nil, annotated("fcgi", "backend-protocol", "FCGI"))
	if p := res.Problems["shop/fcgi"]; len(p) != 1 || !strings.Contains(p[0].Message, "is not HTTP, HTTPS, GRPC or GRPCS") || len(res.Routing.Rules) != 0 {
		t.Errorf("FCGI: %+v, %d rules", p, len(res.Routing.Rules))
	}
}

// "Custom max body size" (nginx sizes; 0 is no limit), "Server-side
// upstream vhost", "X-Forwarded-Prefix Header"; an invalid value refuses
// the Ingress and its last good version serves on (issue 22: "the
// previous version of it keeps serving").
func TestRequestAnnotationsAndLastGood(t *testing.T) {
	res := translate(nil, annotated("a", "proxy-body-size", "8m", "upstream-vhost", "internal.example", "x-forwarded-prefix", "/app"))
	c, _ := request(t, res, "a.example", "/app")
	if c == nil || c.MaxBodySize != 8<<20 || c.Filters.Rewrite == nil || c.Filters.Rewrite.Hostname != "internal.example" ||
		c.Filters.RequestHeaders == nil || c.Filters.RequestHeaders.Set[0] != (route.Header{Name: "X-Forwarded-Prefix", Value: "/app"}) {
		t.Fatalf("rule: %+v", c)
	}
	next := translate(res.Good, annotated("a", "proxy-body-size", "eight megabytes"))
	if p := next.Problems["shop/a"]; len(p) != 1 || !strings.Contains(p[0].Message, "last good version serves") {
		t.Errorf("an invalid size: %+v", p)
	}
	if c, _ := request(t, next, "a.example", "/app"); c == nil || c.MaxBodySize != 8<<20 {
		t.Errorf("the last good version does not serve: %+v", c)
	}
	if n, err := nginxSize("0"); err != nil || n != 0 {
		t.Errorf("0: %d %v", n, err)
	}
}

// "Canary": a canary Ingress takes canary-weight of canary-weight-total
// of its main Ingress's host and path; canary-by-header "always" and
// "never" (or canary-by-header-value) and then canary-by-cookie decide
// before the weight; a canary of a host and path no main Ingress has
// serves nothing and is said.
func TestCanary(t *testing.T) {
	main := annotated("main")
	c := ing("canary", ptr("baton"), "a.example", path("/app", networkingv1.PathTypePrefix, "web-v2"))
	c.Annotations = map[string]string{nginxPrefix + "canary": "true", nginxPrefix + "canary-weight": "20",
		nginxPrefix + "canary-by-header": "X-Canary", nginxPrefix + "canary-by-cookie": "canary"}
	lost := ing("lost", ptr("baton"), "a.example", path("/nowhere", networkingv1.PathTypePrefix, "web-v2"))
	lost.Annotations = map[string]string{nginxPrefix + "canary": "true", nginxPrefix + "canary-weight": "50"}
	res := translate(nil, main, c, lost)
	to := func(hdr ...string) string {
		t.Helper()
		r, _ := request(t, res, "a.example", "/app", hdr...)
		if r == nil {
			return "404"
		}
		var s []string
		for _, b := range r.Backends {
			s = append(s, b.Target+"="+strconv.Itoa(b.Weight))
		}
		return strings.Join(s, ",")
	}
	for _, tt := range []struct {
		hdr  []string
		want string
	}{
		{nil, "k8s/shop/web:80=80,k8s/shop/web-v2:80=20"},
		{[]string{"X-Canary", "always"}, "k8s/shop/web-v2:80=1"},
		{[]string{"X-Canary", "never", "Cookie", "canary=always"}, "k8s/shop/web:80=1"},
		{[]string{"Cookie", "a=b; canary=always"}, "k8s/shop/web-v2:80=1"},
		{[]string{"Cookie", "canary=never"}, "k8s/shop/web:80=1"},
		{[]string{"Cookie", "notcanary=always"}, "k8s/shop/web:80=80,k8s/shop/web-v2:80=20"},
	} {
		if got := to(tt.hdr...); got != tt.want {
			t.Errorf("%v: %s, want %s", tt.hdr, got, tt.want)
		}
	}
	if r, _ := request(t, res, "a.example", "/nowhere"); r != nil {
		t.Errorf("a canary without its main Ingress serves: %s", r.Name)
	}
	if p := res.Problems["shop/lost"]; len(p) != 1 || !strings.Contains(p[0].Message, "no main Ingress") {
		t.Errorf("the lost canary: %+v", p)
	}
	// canary-by-header-value: that value only.
	c.Annotations[nginxPrefix+"canary-by-header-value"] = "yes"
	delete(c.Annotations, nginxPrefix+"canary-by-cookie")
	res = translate(nil, main, c)
	if got := to("X-Canary", "yes"); got != "k8s/shop/web-v2:80=1" {
		t.Errorf("by header value: %s", got)
	}
	if got := to("X-Canary", "always"); got != "k8s/shop/web:80=80,k8s/shop/web-v2:80=20" {
		t.Errorf("another value: %s", got)
	}
	// canary-by-header-pattern (when no -value): a regular expression of
	// the whole value.
	delete(c.Annotations, nginxPrefix+"canary-by-header-value")
	c.Annotations[nginxPrefix+"canary-by-header-pattern"] = "beta-.*"
	res = translate(nil, main, c)
	if got := to("X-Canary", "beta-7"); got != "k8s/shop/web-v2:80=1" {
		t.Errorf("by header pattern: %s", got)
	}
	if got := to("X-Canary", "xbeta-7"); got != "k8s/shop/web:80=80,k8s/shop/web-v2:80=20" {
		t.Errorf("a value the pattern does not match whole: %s", got)
	}
}

// "Whitelist source range" (allowlist-source-range, its new name) and
// "Denylist source range": comma-separated CIDRs on the Ingress's rules;
// one that does not parse refuses the Ingress.
func TestSourceRanges(t *testing.T) {
	res := translate(nil, annotated("a", "allowlist-source-range", "10.0.0.0/8, 192.0.2.7", "denylist-source-range", "10.9.0.0/16"))
	c, _ := request(t, res, "a.example", "/app")
	if c == nil || c.Access == nil || len(c.Access.Allow) != 2 || c.Access.Allow[1].String() != "192.0.2.7/32" || len(c.Access.Deny) != 1 {
		t.Fatalf("access: %+v", c)
	}
	res = translate(nil, annotated("b", "whitelist-source-range", "10.0.0.0/8,nope"))
	if p := res.Problems["shop/b"]; len(p) != 1 || !strings.Contains(p[0].Message, `"nope" is not a CIDR`) {
		t.Errorf("a bad range: %+v", p)
	}
}

// "Rate Limiting": limit-rps (else limit-rpm) with bursts of
// limit-burst-multiplier (5 by default) times it.
func TestRateLimitAnnotations(t *testing.T) {
	res := translate(nil, annotated("rps", "limit-rps", "10"), annotated("rpm", "limit-rpm", "120", "limit-burst-multiplier", "2"))
	for _, tt := range []struct {
		name string
		want route.RateLimit
	}{{"shop/rps", route.RateLimit{Rate: 10, Burst: 50}}, {"shop/rpm", route.RateLimit{Rate: 2, Burst: 240}}} {
		got := res.Good[tt.name].rules[0].RateLimit
		if got == nil || *got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if res := translate(nil, annotated("bad", "limit-rps", "fast")); len(res.Problems["shop/bad"]) != 1 {
		t.Errorf("a bad limit: %+v", res.Problems)
	}
}

// "Custom Headers": the fields of a ConfigMap of the Ingress's namespace
// on every response; one that frames the message is said and left out; a
// ConfigMap of another namespace is not read (an Ingress may not copy
// another namespace's data into its responses).
func TestCustomHeaders(t *testing.T) {
	cms := map[string]*corev1.ConfigMap{
		"shop/headers":  {ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "headers", ResourceVersion: "1"}, Data: map[string]string{"X-Frame-Options": "DENY", "Content-Length": "0"}},
		"other/secrets": {ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "secrets"}, Data: map[string]string{"X-Token": "hidden"}},
	}
	s := &Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, ConfigMaps: func(k string) *corev1.ConfigMap { return cms[k] },
		Ingresses: []networkingv1.Ingress{annotated("a", "custom-headers", "shop/headers"), annotated("b", "custom-headers", "other/secrets")}}
	res := Translate(s, opts)
	c, _ := request(t, res, "a.example", "/app")
	if c == nil || c.Filters.ResponseHeaders == nil || len(c.Filters.ResponseHeaders.Set) != 1 || c.Filters.ResponseHeaders.Set[0] != (route.Header{Name: "X-Frame-Options", Value: "DENY"}) {
		t.Fatalf("custom headers: %+v", c)
	}
	if p := res.Problems["shop/a"]; len(p) != 1 || !strings.Contains(p[0].Message, "Content-Length") {
		t.Errorf("a framing field: %+v", p)
	}
	if p := res.Problems["shop/b"]; len(p) != 1 || !strings.Contains(p[0].Message, "not found in the Ingress's namespace") {
		t.Errorf("another namespace's ConfigMap: %+v", p)
	}
}

// "Client Certificate Authentication": auth-tls-secret names the Secret
// whose ca.crt the clients' certificates must chain to (of the Ingress's
// own namespace here), auth-tls-verify-client says how (on, optional,
// optional_no_ca, off), auth-tls-verify-depth how deep, and
// auth-tls-pass-certificate-to-upstream whether the certificate goes to
// the backend. The verification is of the Ingress's hosts; plain HTTP is
// redirected to HTTPS whatever ssl-redirect says, and a rule without a
// host is not served; a Secret that is missing, holds no CA or has a
// revocation list (which baton does not read) refuses the Ingress.
func TestClientCertificateAnnotations(t *testing.T) {
	crt, _ := selfSigned(t, "ca.example")
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Type: corev1.SecretTypeOpaque, Data: data}
	}
	run := func(ings ...networkingv1.Ingress) *Result {
		return Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: ings,
			Secrets: map[string]*corev1.Secret{
				"shop/ca":        secret("ca", map[string][]byte{"ca.crt": crt}),
				"shop/crl":       secret("crl", map[string][]byte{"ca.crt": crt, "ca.crl": []byte("x")}),
				"shop/bad":       secret("bad", map[string][]byte{"ca.crt": []byte("no PEM")}),
				"kube-system/ca": secret("ca", map[string][]byte{"ca.crt": crt}),
			}}, opts)
	}
	on := annotated("on", "auth-tls-secret", "shop/ca", "auth-tls-pass-certificate-to-upstream", "true", "ssl-redirect", "false")
	res := run(on)
	if len(res.ClientAuth) != 1 || !slices.Equal(res.ClientAuth[0].Hosts, []string{"a.example"}) || res.ClientAuth[0].Verify != config.VerifyOn ||
		res.ClientAuth[0].Depth != 1 || string(res.ClientAuth[0].CA) != string(crt) {
		t.Fatalf("client authentication: %+v", res.ClientAuth)
	}
	for _, r := range res.Routing.Rules {
		switch r.Listener {
		case "https":
			if r.ClientCert == nil || !r.ClientCert.Pass {
				t.Errorf("HTTPS rule without the client's certificate fields: %+v", r)
			}
		case "http":
			if r.Filters.Redirect == nil || r.Filters.Redirect.Scheme != "https" || len(r.Backends) != 0 {
				t.Errorf("plain HTTP served to a verified host: %+v", r)
			}
		}
	}
	if p := res.Problems["shop/on"]; len(p) != 1 || !strings.Contains(p[0].Message, "whatever ssl-redirect") {
		t.Errorf("ssl-redirect false not said: %+v", p)
	}

	opt := annotated("opt", "auth-tls-secret", "ca", "auth-tls-verify-client", "optional_no_ca", "auth-tls-verify-depth", "3")
	opt.Spec.Rules[0].Host = "b.example"
	opt.Spec.Rules = append(opt.Spec.Rules, networkingv1.IngressRule{IngressRuleValue: opt.Spec.Rules[0].IngressRuleValue}) // no host
	off := annotated("off", "auth-tls-secret", "shop/ca", "auth-tls-verify-client", "off")
	off.Spec.Rules[0].Host = "c.example"
	res = run(opt, off)
	if len(res.ClientAuth) != 1 || res.ClientAuth[0].Verify != config.VerifyOptionalNoCA || res.ClientAuth[0].Depth != 3 {
		t.Errorf("optional_no_ca, depth 3, and off: %+v", res.ClientAuth)
	}
	if c, _ := request(t, res, "other.example", "/app"); c != nil {
		t.Errorf("a rule without a host served beside client verification: %s", c.Name)
	}
	if p := res.Problems["shop/opt"]; len(p) != 2 || !strings.Contains(p[1].Message, "without a host are not served") {
		t.Errorf("the rule without a host not said: %+v", p)
	}

	for _, tt := range []struct{ v, want string }{
		{"shop/missing", "not found"},
		{"shop/crl", "revocation lists are not implemented"},
		{"shop/bad", "no certificate in ca.crt"},
		{"kube-system/ca", "another namespace"},
	} {
		res := run(annotated("x", "auth-tls-secret", tt.v))
		if p := res.Problems["shop/x"]; len(p) != 1 || !strings.Contains(p[0].Message, tt.want) || len(res.Routing.Rules) != 0 {
			t.Errorf("%s: %+v, %d rules", tt.v, p, len(res.Routing.Rules))
		}
	}
	res = run(annotated("x", "auth-tls-secret", "shop/ca", "auth-tls-verify-client", "sometimes"))
	if p := res.Problems["shop/x"]; len(p) != 1 || !strings.Contains(p[0].Message, "not on, off, optional") {
		t.Errorf("a bad verify-client: %+v", p)
	}

	// auth-tls-match-cn ("CN=...", matched against the subject) and
	// auth-tls-error-page (a URL), as ingress-nginx's annotations.md
	// has them; a value that is neither refuses the Ingress.
	res = run(annotated("x", "auth-tls-secret", "shop/ca", "auth-tls-match-cn", "CN=(alice|bob)", "auth-tls-error-page", "https://login.example/cert"))
	if len(res.ClientAuth) != 1 || res.ClientAuth[0].MatchCN != "CN=(alice|bob)" || res.ClientAuth[0].ErrorPage != "https://login.example/cert" {
		t.Errorf("match-cn and error-page: %+v", res.ClientAuth)
	}
	for _, tt := range []struct{ name, v string }{
		{"auth-tls-match-cn", "alice"},                           // not CN=
		{"auth-tls-match-cn", "CN=(alice"},                       // does not compile
		{"auth-tls-error-page", "/local"},                        // not absolute
		{"auth-tls-error-page", "ftp://x/y"},                     // not http(s)
		{"auth-tls-error-page", "https://x/\r\nSet-Cookie: a=b"}, // a line break
	} {
		res := run(annotated("x", "auth-tls-secret", "shop/ca", tt.name, tt.v))
		if p := res.Problems["shop/x"]; len(p) == 0 || !strings.Contains(p[0].Message, tt.name) || len(res.Routing.Rules) != 0 {
			t.Errorf("%s %q: %+v, %d rules", tt.name, tt.v, p, len(res.Routing.Rules))
		}
	}
}

// ssl-passthrough (ingress-nginx's "SSL Passthrough"): a host's TLS
// connections go to the backend of its path "/" as TCP streams, routed by
// server name on the HTTPS listener's passthrough rules, and none of its
// HTTP rules is on the HTTPS listener; plain HTTP on the HTTP listener is
// served as before. A rule without a host, or without a path "/", cannot
// pass through, and says so.
func TestSSLPassthrough(t *testing.T) {
	pass := ing("pass", ptr("baton"), "secure.example", path("/", networkingv1.PathTypePrefix, "tls-app"), path("/other", networkingv1.PathTypePrefix, "web"))
	pass.Annotations = map[string]string{nginxPrefix + "ssl-passthrough": "true", nginxPrefix + "ssl-redirect": "false"}
	noRoot := ing("no-root", ptr("baton"), "noroot.example", path("/app", networkingv1.PathTypePrefix, "web"))
	noRoot.Annotations = map[string]string{nginxPrefix + "ssl-passthrough": "true"}
	plain := ing("plain", ptr("baton"), "plain.example", path("/", networkingv1.PathTypePrefix, "web"))
	res := translate(nil, pass, noRoot, plain)

	for _, tc := range []struct{ listener, host, want string }{
		{route.PassthroughListener("https"), "secure.example", "k8s/shop/tls-app:80"},
		{route.PassthroughListener("https"), "SECURE.example", "k8s/shop/tls-app:80"},
		{route.PassthroughListener("https"), "plain.example", "404"},
		{route.PassthroughListener("https"), "", "404"},
		{"https", "secure.example", "404"}, // a fronted Host never reaches its HTTP rules over TLS
		{"http", "secure.example", "k8s/shop/tls-app:80"},
		{"https", "plain.example", "k8s/shop/web:80"},
	} {
		if got := routeTo(t, res, tc.listener, tc.host, "/"); got != tc.want {
			t.Errorf("%s, host %q: %s, want %s", tc.listener, tc.host, got, tc.want)
		}
	}
	if b := backendOf(res, "k8s/shop/tls-app:80"); b == nil || b.TLS != nil || b.Protocol != "" {
		t.Errorf("the passthrough backend %+v, want a plain stream", b)
	}
	if ps := res.Problems["shop/no-root"]; len(ps) != 1 || !strings.Contains(ps[0].Message, `no path "/"`) {
		t.Errorf("an Ingress without path \"/\": %+v", ps)
	}
}
