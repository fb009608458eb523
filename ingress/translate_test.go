package ingress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var opts = Options{HTTPListener: "http", HTTPSListener: "https", HTTPSPort: 443}

func class(name, controller string, isDefault bool) networkingv1.IngressClass {
	c := networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: controller}}
	if isDefault {
		c.Annotations = map[string]string{DefaultClassAnnotation: "true"}
	}
	return c
}

func ptr[T any](v T) *T { return &v }

func svcBackend(name string, port any) networkingv1.IngressBackend {
	b := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name}}
	switch p := port.(type) {
	case int:
		b.Service.Port.Number = int32(p)
	case string:
		b.Service.Port.Name = p
	}
	return b
}

func path(p string, typ networkingv1.PathType, backend string) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{Path: p, PathType: &typ, Backend: svcBackend(backend, 80)}
}

// ing is an Ingress of namespace "shop" with one rule.
func ing(name string, className *string, host string, paths ...networkingv1.HTTPIngressPath) networkingv1.Ingress {
	return networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))},
		Spec: networkingv1.IngressSpec{IngressClassName: className, Rules: []networkingv1.IngressRule{{
			Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: paths}},
		}}},
	}
}

// routeTo compiles a result and returns the backend (or "redirect
// LOCATION-PARTS", or "404") a request gets on listener.
func routeTo(t *testing.T, res *Result, listener, host, p string) string {
	t.Helper()
	table, err := route.Compile(res.Routing.Rules)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := table.Match(listener, &route.Request{Host: []byte(host), Path: []byte(p), Method: []byte("GET")})
	switch {
	case c == nil:
		return "404"
	case c.Filters.Redirect != nil:
		return "redirect " + c.Filters.Redirect.Scheme
	}
	return c.Backends[0].Target
}

// The IngressClass decides what is baton's (networking.k8s.io/v1
// IngressClass; the API reference's "Default IngressClass"): an Ingress
// of a class whose spec.controller is baton's, one naming none when a
// class of baton's is the default, and the legacy kubernetes.io/ingress.class
// annotation as ingress-nginx reads it; not another controller's.
func TestClasses(t *testing.T) {
	for _, tt := range []struct {
		name    string
		classes []networkingv1.IngressClass
		ing     networkingv1.Ingress
		ours    bool
	}{
		{"our class", []networkingv1.IngressClass{class("baton", ControllerName, false)}, ing("a", ptr("baton"), "a.example"), true},
		{"another's class", []networkingv1.IngressClass{class("baton", ControllerName, false), class("nginx", "k8s.io/ingress-nginx", true)}, ing("a", ptr("nginx"), "a.example"), false},
		{"no class, ours the default", []networkingv1.IngressClass{class("baton", ControllerName, true)}, ing("a", nil, "a.example"), true},
		{"no class, no default", []networkingv1.IngressClass{class("baton", ControllerName, false)}, ing("a", nil, "a.example"), false},
		{"no class, another's the default", []networkingv1.IngressClass{class("baton", ControllerName, false), class("nginx", "k8s.io/ingress-nginx", true)}, ing("a", nil, "a.example"), false},
		{"a class that does not exist", []networkingv1.IngressClass{class("baton", ControllerName, true)}, ing("a", ptr("gone"), "a.example"), false},
	} {
		s := &Snapshot{Classes: tt.classes, Ingresses: []networkingv1.Ingress{tt.ing}}
		if got := len(Translate(s, opts).Ours) == 1; got != tt.ours {
			t.Errorf("%s: ours %v, want %v", tt.name, got, tt.ours)
		}
	}
	legacy := ing("a", nil, "a.example")
	legacy.Annotations = map[string]string{legacyClassAnnotation: "baton"}
	if got := Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: []networkingv1.Ingress{legacy}}, opts).Ours; len(got) != 1 {
		t.Errorf("the legacy class annotation: %v", got)
	}
}

// Paths as the API reference defines them (networking.k8s.io/v1
// HTTPIngressPath, "Examples" of the Ingress concept page): Exact matches
// the path alone, Prefix by whole elements ("/foo" takes "/foo/bar" and
// "/foo/", not "/foobar"), the longest first; ImplementationSpecific is
// Prefix (docs/ingress.md); a defaultBackend takes every request no rule
// matches, of any host.
func TestPathsAndDefaultBackend(t *testing.T) {
	a := ing("a", ptr("baton"), "shop.example",
		path("/cart", networkingv1.PathTypeExact, "exact"),
		path("/foo", networkingv1.PathTypePrefix, "foo"),
		path("/foo/bar", networkingv1.PathTypePrefix, "foobar"),
		path("/impl", networkingv1.PathTypeImplementationSpecific, "impl"),
	)
	a.Spec.DefaultBackend = ptr(svcBackend("fallback", "http"))
	res := Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: []networkingv1.Ingress{a}}, opts)
	for _, tt := range []struct{ host, path, want string }{
		{"shop.example", "/cart", "k8s/shop/exact:80"},
		{"shop.example", "/cart/1", "k8s/shop/fallback:http"},
		{"shop.example", "/foo", "k8s/shop/foo:80"},
		{"shop.example", "/foo/", "k8s/shop/foo:80"},
		{"shop.example", "/foobar", "k8s/shop/fallback:http"},
		{"shop.example", "/foo/bar/baz", "k8s/shop/foobar:80"},
		{"shop.example", "/impl/x", "k8s/shop/impl:80"},
		{"SHOP.example:80", "/foo", "k8s/shop/foo:80"},
		{"other.example", "/foo", "k8s/shop/fallback:http"},
	} {
		for _, l := range []string{"http", "https"} {
			if got := routeTo(t, res, l, tt.host, tt.path); got != tt.want {
				t.Errorf("%s %s%s: %s, want %s", l, tt.host, tt.path, got, tt.want)
			}
		}
	}
	var named *config.Backend
	for i, b := range res.Routing.Backends {
		if b.Name == "k8s/shop/fallback:http" {
			named = &res.Routing.Backends[i]
		}
	}
	if named == nil || named.Kubernetes.Port.Name != "http" || named.Kubernetes.Service != "shop/fallback" || named.Kubernetes.Mode != config.ModeEndpoints {
		t.Errorf("a backend by port name: %+v", named)
	}
}

// A wildcard host takes one label (the API reference: "*.foo.com" matches
// "bar.foo.com", not "baz.bar.foo.com" nor "foo.com"); an exact host wins
// over it.
func TestWildcardHosts(t *testing.T) {
	res := Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: []networkingv1.Ingress{
		ing("w", ptr("baton"), "*.foo.com", path("/", networkingv1.PathTypePrefix, "wild")),
		ing("e", ptr("baton"), "exact.foo.com", path("/", networkingv1.PathTypePrefix, "exact")),
	}}, opts)
	for host, want := range map[string]string{"bar.foo.com": "k8s/shop/wild:80", "exact.foo.com": "k8s/shop/exact:80", "baz.bar.foo.com": "404", "foo.com": "404"} {
		if got := routeTo(t, res, "http", host, "/"); got != want {
			t.Errorf("%s: %s, want %s", host, got, want)
		}
	}
}

// The seed's annotation (kubernetes/ingress-nginx#981, Traefik's
// ingress.kubernetes.io/service-upstream): the Ingress's backends are its
// Services' ClusterIPs, a backend apart from the endpoints' one.
func TestServiceUpstream(t *testing.T) {
	for _, a := range serviceUpstream {
		up := ing("up", ptr("baton"), "up.example", path("/", networkingv1.PathTypePrefix, "web"))
		up.Annotations = map[string]string{a: "true"}
		plain := ing("plain", ptr("baton"), "plain.example", path("/", networkingv1.PathTypePrefix, "web"))
		res := Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: []networkingv1.Ingress{up, plain}}, opts)
		modes := map[string]string{}
		for _, b := range res.Routing.Backends {
			modes[b.Name] = b.Kubernetes.Mode
		}
		if modes["k8s/shop/web:80/clusterIP"] != config.ModeClusterIP || modes["k8s/shop/web:80"] != config.ModeEndpoints {
			t.Errorf("%s: backends %v", a, modes)
		}
		if got := routeTo(t, res, "http", "up.example", "/"); got != "k8s/shop/web:80/clusterIP" {
			t.Errorf("%s: routed to %s", a, got)
		}
	}
}

// TLS (the API reference's IngressTLS; ingress-nginx's "Server-side HTTPS
// enforcement through redirect"): a host with TLS is served over HTTPS
// with its Secret's certificate and redirected (308) from HTTP, unless
// ssl-redirect is "false"; force-ssl-redirect redirects every host; a
// Secret that is missing or holds no key pair is said, not served.
func TestTLS(t *testing.T) {
	secret := func(name string) *corev1.Secret {
		crt, key := selfSigned(t, name+".example")
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
	}
	a := ing("a", ptr("baton"), "a.example", path("/", networkingv1.PathTypePrefix, "web"))
	a.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"a.example"}, SecretName: "a"}}
	off := ing("off", ptr("baton"), "off.example", path("/", networkingv1.PathTypePrefix, "web"))
	off.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"off.example"}, SecretName: "off"}}
	off.Annotations = map[string]string{nginxPrefix + "ssl-redirect": "false"}
	force := ing("force", ptr("baton"), "force.example", path("/", networkingv1.PathTypePrefix, "web"))
	force.Annotations = map[string]string{batonPrefix + "force-ssl-redirect": "true"}
	broken := ing("broken", ptr("baton"), "broken.example", path("/", networkingv1.PathTypePrefix, "web"))
	broken.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"broken.example"}, SecretName: "gone"}}
	bad := secret("bad")
	bad.Data[corev1.TLSPrivateKeyKey] = []byte("not a key")
	missingKey := ing("nokey", ptr("baton"), "nokey.example", path("/", networkingv1.PathTypePrefix, "web"))
	missingKey.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"nokey.example"}, SecretName: "bad"}}

	res := Translate(&Snapshot{
		Classes:   []networkingv1.IngressClass{class("baton", ControllerName, false)},
		Ingresses: []networkingv1.Ingress{a, off, force, broken, missingKey},
		Secrets:   map[string]*corev1.Secret{"shop/a": secret("a"), "shop/off": secret("off"), "shop/bad": bad},
	}, opts)
	if len(res.Certificates) != 2 || res.Certificates[0].Secret != "shop/a" || res.Certificates[1].Secret != "shop/off" {
		t.Fatalf("certificates: %+v", res.Certificates)
	}
	for _, tt := range []struct{ listener, host, want string }{
		{"http", "a.example", "redirect https"},
		{"https", "a.example", "k8s/shop/web:80"},
		{"http", "off.example", "k8s/shop/web:80"},
		{"http", "force.example", "redirect https"},
		{"https", "force.example", "k8s/shop/web:80"},
	} {
		if got := routeTo(t, res, tt.listener, tt.host, "/"); got != tt.want {
			t.Errorf("%s %s: %s, want %s", tt.listener, tt.host, got, tt.want)
		}
	}
	if p := res.Problems["shop/broken"]; len(p) != 1 || !strings.Contains(p[0].Message, "shop/gone: not found") {
		t.Errorf("a missing Secret: %v", p)
	}
	if p := res.Problems["shop/nokey"]; len(p) != 1 || !strings.Contains(p[0].Message, "shop/bad") {
		t.Errorf("a Secret without a key pair: %v", p)
	}
}

// The address in status.loadBalancer (ingress-nginx's publish-service
// and publish-status-address): the configured address's host unless it
// is unspecified, else the fronting Service's load balancer, external
// IPs, or ClusterIP.
func TestStatusAddress(t *testing.T) {
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.0.0.9"},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}}}}
	cip := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.0.0.9"}}
	for _, tt := range []struct {
		addr    string
		publish *corev1.Service
		want    string
	}{
		{"198.18.0.5:80", lb, "198.18.0.5"},
		{"0.0.0.0:80", lb, "203.0.113.7"},
		{"[::]:80", cip, "10.0.0.9"},
		{"0.0.0.0:80", nil, ""},
	} {
		got := StatusAddress(tt.addr, tt.publish)
		ip := ""
		if len(got) > 0 {
			ip = got[0].IP
		}
		if ip != tt.want {
			t.Errorf("%s: %v, want %s", tt.addr, got, tt.want)
		}
	}
}

// selfSigned returns a certificate for host and its key, PEM.
func selfSigned(t *testing.T, host string) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// Nothing silently ignored (issue 22): an ingress-nginx annotation baton
// does not implement, every *-snippet among them, is said; the rest of
// the Ingress is served.
func TestUnimplementedAnnotationsSaid(t *testing.T) {
	a := ing("a", ptr("baton"), "a.example", path("/", networkingv1.PathTypePrefix, "web"))
	a.Annotations = map[string]string{nginxPrefix + "configuration-snippet": "more_set_headers x;", nginxPrefix + "ssl-redirect": "false", "example.com/other": "x"}
	res := Translate(&Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: []networkingv1.Ingress{a}}, opts)
	if p := res.Problems["shop/a"]; len(p) != 1 || !strings.Contains(p[0].Message, "configuration-snippet is not implemented") {
		t.Errorf("problems: %v", p)
	}
	if got := routeTo(t, res, "http", "a.example", "/"); got != "k8s/shop/web:80" {
		t.Errorf("the rest of the Ingress: %s", got)
	}
}

// An Ingress whose object (UID, generation, annotations), world (Secrets,
// IngressClasses) and canaries are as they were is not translated again:
// its translation, lines and problems are kept; one that changed is.
func TestTranslationKept(t *testing.T) {
	a := annotatedIngress("a", "a.example", "configuration-snippet", "x")
	b := annotatedIngress("b", "b.example")
	s := &Snapshot{Classes: []networkingv1.IngressClass{class("baton", ControllerName, false)}, Ingresses: []networkingv1.Ingress{a, b}, World: 1}
	first := Translate(s, opts)
	s.Good = first.Good
	b.Annotations = map[string]string{nginxPrefix + "proxy-body-size": "1m"}
	s.Ingresses = []networkingv1.Ingress{a, b}
	second := Translate(s, opts)
	if second.Good["shop/a"] != first.Good["shop/a"] {
		t.Error("an unchanged Ingress was translated again")
	}
	if second.Good["shop/b"] == first.Good["shop/b"] {
		t.Error("an Ingress whose annotations changed was kept")
	}
	if p := second.Problems["shop/a"]; len(p) != 1 {
		t.Errorf("the kept Ingress's problems: %+v", p)
	}
	if len(second.Lines) != len(second.Routing.Rules) || len(second.Lines) != 4 {
		t.Errorf("%d lines for %d rules", len(second.Lines), len(second.Routing.Rules))
	}
	s.Good, s.World = second.Good, 2 // a Secret changed
	if third := Translate(s, opts); third.Good["shop/a"] == second.Good["shop/a"] {
		t.Error("an Ingress kept across a change of its world")
	}
}

func annotatedIngress(name, host string, kv ...string) networkingv1.Ingress {
	i := ing(name, ptr("baton"), host, path("/", networkingv1.PathTypePrefix, "web"))
	i.UID, i.Generation = types.UID("uid-"+name), 1
	if len(kv) > 0 {
		i.Annotations = map[string]string{nginxPrefix + kv[0]: kv[1]}
	}
	return i
}
