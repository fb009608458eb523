// Package ingress makes baton an Ingress controller (networking.k8s.io/v1):
// it translates the Ingresses of baton's IngressClasses into the route
// model (package proxy/route) that baton's YAML and the Gateway API
// translate into too, and writes their status.
//
// Where ingress-nginx and the API reference differ, docs/ingress.md says
// which this package follows.
package ingress

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// ControllerName is the spec.controller of baton's IngressClasses.
const ControllerName = config.DefaultIngressController

// DefaultClassAnnotation marks the IngressClass that takes the Ingresses
// naming none.
const DefaultClassAnnotation = networkingv1.AnnotationIsDefaultIngressClass

// legacyClassAnnotation names an Ingress's class in objects older than
// spec.ingressClassName (ingress-nginx still reads it).
const legacyClassAnnotation = "kubernetes.io/ingress.class"

// Annotation prefixes: ingress-nginx's names are read under both.
const (
	nginxPrefix = "nginx.ingress.kubernetes.io/"
	batonPrefix = "baton-proxy.github.io/"
)

// serviceUpstream are the annotations that route an Ingress's backends
// through their Services' ClusterIPs (kube-proxy balances) instead of the
// endpoints: Traefik's, ingress-nginx's (kubernetes/ingress-nginx#981) and
// baton's name.
var serviceUpstream = []string{"ingress.kubernetes.io/service-upstream", nginxPrefix + "service-upstream", batonPrefix + "service-upstream"}

// Snapshot is what the controller read of the cluster.
type Snapshot struct {
	Classes   []networkingv1.IngressClass
	Ingresses []networkingv1.Ingress
	// Services and Secrets by "namespace/name".
	Services map[string]*corev1.Service
	Secrets  map[string]*corev1.Secret
}

// Options are the controller's settings (the config's ingress section).
type Options struct {
	// HTTPListener and HTTPSListener are the names of baton's listeners
	// for Ingress HTTP and HTTPS.
	HTTPListener, HTTPSListener string
	// HTTPSPort is the HTTPS listener's port, for redirects to it.
	HTTPSPort int
}

// Result is what baton serves of the Ingresses.
type Result struct {
	Routing config.Routing
	// Certificates are the HTTPS listener's, from the Ingresses' TLS
	// Secrets, in the order of the Ingresses (the first is the default
	// for a client that names no host); SNI picks among them.
	Certificates []Certificate
	// Ours are the Ingresses served ("namespace/name"), whose status
	// baton writes.
	Ours []string
	// Problems are what could not be served as asked, by Ingress: each
	// said once per change (a log line, an Event).
	Problems map[string][]string
}

// Certificate is a certificate chain and its key, PEM, and the Secret it
// came from.
type Certificate struct {
	Secret          string
	CertPEM, KeyPEM []byte
}

// Translate turns a snapshot into what baton serves.
func Translate(s *Snapshot, opts Options) *Result {
	res := &Result{Problems: map[string][]string{}}
	t := &translator{s: s, opts: opts, res: res, backends: map[string]bool{}, secrets: map[string]bool{}}
	classes := ourClasses(s.Classes)
	ings := slices.Clone(s.Ingresses)
	slices.SortFunc(ings, func(a, b networkingv1.Ingress) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	for i := range ings {
		ing := &ings[i]
		if !classes.takes(ing) {
			continue
		}
		res.Ours = append(res.Ours, ing.Namespace+"/"+ing.Name)
		t.ingress(ing)
	}
	return res
}

// classes are baton's IngressClasses: their names, and whether one is the
// default.
type classes struct {
	names        map[string]bool
	defaultTaken bool
}

func ourClasses(cs []networkingv1.IngressClass) classes {
	out := classes{names: map[string]bool{}}
	for _, c := range cs {
		if c.Spec.Controller != ControllerName {
			continue
		}
		out.names[c.Name] = true
		if c.Annotations[DefaultClassAnnotation] == "true" {
			out.defaultTaken = true
		}
	}
	return out
}

// takes reports whether ing is baton's: its class is one of baton's, or
// it names none and a class of baton's is the default.
func (c classes) takes(ing *networkingv1.Ingress) bool {
	name := ""
	if ing.Spec.IngressClassName != nil {
		name = *ing.Spec.IngressClassName
	} else if v, ok := ing.Annotations[legacyClassAnnotation]; ok {
		name = v
	}
	if name == "" {
		return c.defaultTaken
	}
	return c.names[name]
}

type translator struct {
	s        *Snapshot
	opts     Options
	res      *Result
	backends map[string]bool // names added to the routing
	secrets  map[string]bool // Secrets whose certificate is in the result
}

// problem notes what of ing could not be served as asked.
func (t *translator) problem(ing *networkingv1.Ingress, format string, args ...any) {
	k := ing.Namespace + "/" + ing.Name
	t.res.Problems[k] = append(t.res.Problems[k], fmt.Sprintf(format, args...))
}

// implemented are the annotations (under nginxPrefix or batonPrefix)
// that baton serves; any other under those prefixes is said, not ignored
// in silence.
var implemented = map[string]bool{"service-upstream": true, "ssl-redirect": true, "force-ssl-redirect": true}

// ingress adds ing's rules, default backend and certificates.
func (t *translator) ingress(ing *networkingv1.Ingress) {
	key := ing.Namespace + "/" + ing.Name
	var unknown []string
	for a := range ing.Annotations {
		name, ok := strings.CutPrefix(a, nginxPrefix)
		if !ok {
			name, ok = strings.CutPrefix(a, batonPrefix)
		}
		if ok && !implemented[name] {
			unknown = append(unknown, a)
		}
	}
	slices.Sort(unknown)
	for _, a := range unknown {
		t.problem(ing, "annotation %s is not implemented by baton: the Ingress is served without it", a)
	}
	tlsHosts := map[string]bool{}
	for _, tl := range ing.Spec.TLS {
		for _, h := range tl.Hosts {
			tlsHosts[strings.ToLower(h)] = true
		}
		t.certificate(ing, tl.SecretName)
	}
	// A host with TLS is redirected from HTTP to HTTPS (ingress-nginx's
	// ssl-redirect, on unless "false"; 308 keeps the method and body);
	// force-ssl-redirect redirects every host of ing.
	force := annotation(ing, "force-ssl-redirect") == "true"
	redirects := func(host string) bool {
		if t.opts.HTTPSListener == "" {
			return false
		}
		return force || tlsHosts[host] && annotation(ing, "ssl-redirect") != "false"
	}
	order := 0
	add := func(name, host string, m route.Match, backend string) {
		for _, listener := range []string{t.opts.HTTPListener, t.opts.HTTPSListener} {
			if listener == "" {
				continue
			}
			r := route.Rule[string]{
				Name:     fmt.Sprintf("ingress %s %s", key, name),
				Listener: listener,
				Matches:  []route.Match{m},
				Order:    route.Order{Created: ing.CreationTimestamp.Time, Route: key, Index: order},
				Backends: []route.Backend[string]{{Target: backend, Weight: 1}},
			}
			if host != "" {
				r.Hostnames, r.OneLabel = []string{host}, true // "*.foo.com" takes one label
			}
			if listener == t.opts.HTTPListener && redirects(host) {
				r.Backends = nil
				r.Filters.Redirect = &route.Redirect{Scheme: "https", StatusCode: 308}
				if t.opts.HTTPSPort != 443 {
					r.Filters.Redirect.Port = t.opts.HTTPSPort
				}
			}
			t.res.Routing.Rules = append(t.res.Routing.Rules, r)
		}
		order++
	}
	if db := ing.Spec.DefaultBackend; db != nil {
		if name, ok := t.backend(ing, db); ok {
			add("default backend", "", route.Match{Path: route.PathMatch{Type: route.PathPrefix, Value: "/"}}, name)
		}
	}
	for ri, rule := range ing.Spec.Rules {
		host := strings.ToLower(rule.Host)
		if rule.HTTP == nil {
			continue
		}
		for pi, p := range rule.HTTP.Paths {
			m, ok := pathMatch(&p)
			if !ok {
				t.problem(ing, "rule %d path %d: path %q (type %s) is not a path baton can match", ri, pi, p.Path, pathType(&p))
				continue
			}
			name, ok := t.backend(ing, &p.Backend)
			if !ok {
				continue
			}
			add(fmt.Sprintf("rule %d path %d", ri, pi), host, m, name)
		}
	}
}

func pathType(p *networkingv1.HTTPIngressPath) networkingv1.PathType {
	if p.PathType == nil {
		return networkingv1.PathTypeImplementationSpecific
	}
	return *p.PathType
}

// pathMatch is an Ingress path as the route model matches it: Exact as
// is; Prefix by whole segments ("/foo" takes "/foo/bar", not "/foobar"),
// which is the route model's PathPrefix; ImplementationSpecific, and a
// path without a type, as Prefix (documented in docs/ingress.md). A path
// must begin with '/'; none means "/".
func pathMatch(p *networkingv1.HTTPIngressPath) (route.Match, bool) {
	v := p.Path
	if v == "" {
		v = "/"
	}
	if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?#") {
		return route.Match{}, false
	}
	typ := route.PathPrefix
	if pathType(p) == networkingv1.PathTypeExact {
		typ = route.PathExact
	}
	return route.Match{Path: route.PathMatch{Type: typ, Value: v}}, true
}

// backend resolves an Ingress backend: a Service of ing's namespace, by
// port number or name. The backend is in the routing whether or not the
// Service exists (the watch finds it when it comes; until then its routes
// answer 503, as ingress-nginx does).
func (t *translator) backend(ing *networkingv1.Ingress, b *networkingv1.IngressBackend) (string, bool) {
	svc := b.Service
	if svc == nil {
		t.problem(ing, "backend: only Service backends are served (a resource backend is not)")
		return "", false
	}
	port := config.Port{Number: svc.Port.Number, Name: svc.Port.Name}
	if port.Number == 0 && port.Name == "" {
		t.problem(ing, "backend %s: no port", svc.Name)
		return "", false
	}
	portKey := port.Name
	if port.Number != 0 {
		portKey = strconv.Itoa(int(port.Number))
	}
	mode, suffix := config.ModeEndpoints, ""
	if upstream(ing) {
		mode, suffix = config.ModeClusterIP, "/clusterIP"
	}
	// Named as the Gateway API's backends are, so that a Service both
	// reach is one backend with one pool.
	name := fmt.Sprintf("k8s/%s/%s:%s%s", ing.Namespace, svc.Name, portKey, suffix)
	if !t.backends[name] {
		t.backends[name] = true
		t.res.Routing.Backends = append(t.res.Routing.Backends, config.Backend{
			Name:       name,
			Kubernetes: &config.KubeService{Service: ing.Namespace + "/" + svc.Name, Port: port, Mode: mode},
		})
	}
	return name, true
}

// upstream reports whether ing routes through its Services' ClusterIPs.
func upstream(ing *networkingv1.Ingress) bool {
	for _, a := range serviceUpstream {
		if ing.Annotations[a] == "true" {
			return true
		}
	}
	return false
}

// annotation returns the value of an ingress-nginx annotation of ing, by
// its name under either prefix (baton's first).
func annotation(ing *networkingv1.Ingress, name string) string {
	if v, ok := ing.Annotations[batonPrefix+name]; ok {
		return v
	}
	return ing.Annotations[nginxPrefix+name]
}

// certificate adds the certificate of a TLS Secret of ing's namespace.
func (t *translator) certificate(ing *networkingv1.Ingress, secret string) {
	if secret == "" {
		return // a host served with the default certificate
	}
	key := ing.Namespace + "/" + secret
	if t.secrets[key] {
		return
	}
	sec := t.s.Secrets[key]
	if sec == nil {
		t.problem(ing, "tls: Secret %s: not found (or not of type kubernetes.io/tls)", key)
		return
	}
	crt, k := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(k) == 0 {
		t.problem(ing, "tls: Secret %s: no %s or %s", key, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		return
	}
	if _, err := tls.X509KeyPair(crt, k); err != nil {
		t.problem(ing, "tls: Secret %s: %v", key, err)
		return
	}
	t.secrets[key] = true
	t.res.Certificates = append(t.res.Certificates, Certificate{Secret: key, CertPEM: crt, KeyPEM: k})
}

// StatusAddress is the address an Ingress's status.loadBalancer gives:
// the host of the configured address unless it is unspecified, then the
// address of the Service that fronts baton (publish): its load balancer's,
// else its external IPs, else its ClusterIP (ingress-nginx's
// publish-service). Empty when there is none.
func StatusAddress(address string, publish *corev1.Service) []networkingv1.IngressLoadBalancerIngress {
	if ap, err := netip.ParseAddrPort(address); err == nil && !ap.Addr().IsUnspecified() {
		return []networkingv1.IngressLoadBalancerIngress{{IP: ap.Addr().String()}}
	}
	if publish == nil {
		return nil
	}
	var out []networkingv1.IngressLoadBalancerIngress
	switch publish.Spec.Type {
	case corev1.ServiceTypeExternalName:
		return []networkingv1.IngressLoadBalancerIngress{{Hostname: publish.Spec.ExternalName}}
	case corev1.ServiceTypeLoadBalancer:
		for _, lb := range publish.Status.LoadBalancer.Ingress {
			out = append(out, networkingv1.IngressLoadBalancerIngress{IP: lb.IP, Hostname: lb.Hostname})
		}
	}
	for _, ip := range publish.Spec.ExternalIPs {
		out = append(out, networkingv1.IngressLoadBalancerIngress{IP: ip})
	}
	if len(out) == 0 && publish.Spec.ClusterIP != "" && publish.Spec.ClusterIP != corev1.ClusterIPNone {
		out = append(out, networkingv1.IngressLoadBalancerIngress{IP: publish.Spec.ClusterIP})
	}
	return out
}
