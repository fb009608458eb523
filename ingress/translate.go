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
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// ConfigMaps finds a ConfigMap by "namespace/name" (nil: none), for
	// custom-headers.
	ConfigMaps func(key string) *corev1.ConfigMap
	// Good are the last Result's: an Ingress refused (a value that does
	// not parse) serves its last good version, and one whose object and
	// world are as they were is not translated again.
	Good map[string]*Translation
	// World counts the changes of what an Ingress's translation reads
	// besides the Ingress (Secrets, IngressClasses); 0 keeps nothing.
	World uint64
}

// Translation is what one Ingress became: its rules (and their lines of
// the routing payload, config.RoutingPayload), the backends they name, its
// certificates, what it could not serve as asked; and what it was made
// from, for the next Translate.
type Translation struct {
	rules    []route.Rule[string]
	lines    [][]byte
	backends []config.Backend
	certs    []Certificate
	auth     *config.ClientAuth // of its hosts (auth-tls-*); nil: none
	problems []Problem

	uid         types.UID
	gen         int64
	annotations map[string]string
	world       uint64
	canaries    string // the canaries it took: their keys and versions
}

// current reports whether tr was made from ing, in world, with canaries.
func (tr *Translation) current(ing *networkingv1.Ingress, world uint64, canaries string) bool {
	return world != 0 && tr.world == world && tr.uid == ing.UID && tr.gen == ing.Generation && tr.canaries == canaries && maps.Equal(tr.annotations, ing.Annotations)
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
	// ClientAuth is how the HTTPS listener verifies the clients of some
	// hosts (auth-tls-*), in the order of the Ingresses: the first of a
	// host's is the one.
	ClientAuth []config.ClientAuth
	// Ours are the Ingresses served ("namespace/name"), whose status
	// baton writes.
	Ours []string
	// Problems are what could not be served as asked, by Ingress: each
	// said once per change (a log line, an Event).
	Problems map[string][]Problem
	// Lines are Routing.Rules encoded, a line each (config.RoutingPayload).
	Lines [][]byte
	// Good are the Ingresses' translations, for the next Snapshot.
	Good map[string]*Translation
}

// Problem is one thing of an Ingress not served as asked: Reason is an
// Event's (NotImplemented, Invalid, Refused), Message says what.
type Problem struct{ Reason, Message string }

// Problem reasons.
const (
	ReasonNotImplemented = "NotImplemented"
	ReasonInvalid        = "Invalid"
)

// Certificate is a certificate chain and its key, PEM, and the Secret it
// came from.
type Certificate struct {
	Secret          string
	CertPEM, KeyPEM []byte
}

// Translate turns a snapshot into what baton serves.
func Translate(s *Snapshot, opts Options) *Result {
	res := &Result{Problems: map[string][]Problem{}, Good: map[string]*Translation{}}
	t := &translator{s: s, opts: opts, res: res, backends: map[string]bool{}, secrets: map[string]bool{}, canaries: map[string]*canary{}, authHosts: map[string]string{}}
	classes := ourClasses(s.Classes)
	ings := slices.Clone(s.Ingresses)
	slices.SortFunc(ings, func(a, b networkingv1.Ingress) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var mains []*networkingv1.Ingress
	opt := map[*networkingv1.Ingress]options{}
	for i := range ings {
		ing := &ings[i]
		if !classes.takes(ing) {
			continue
		}
		key := ing.Namespace + "/" + ing.Name
		res.Ours = append(res.Ours, key)
		o, unknown, err := parseOptions(ing)
		for _, a := range unknown {
			t.problem(ing, ReasonNotImplemented, "annotation %s is not implemented by baton: the Ingress is served without it", a)
		}
		if err == nil && o.authSecret != "" && !o.canary {
			o.authCA, err = t.clientCA(ing, o.authSecret)
		}
		if err != nil {
			t.refuse(ing, err)
			continue
		}
		if o.canary {
			if o.authSecret != "" {
				t.problem(ing, ReasonInvalid, "auth-tls-secret: a canary's is not read: its main Ingress's verifies the clients of the host")
			}
			t.addCanary(ing, o)
			continue
		}
		mains = append(mains, ing)
		opt[ing] = o
	}
	for _, ing := range mains {
		key := ing.Namespace + "/" + ing.Name
		o := opt[ing]
		sig := t.canarySig(ing) + t.headersSig(ing, o.customHeaders)
		if tr := s.Good[key]; tr != nil && tr.current(ing, s.World, sig) {
			t.keep(key, tr)
			for _, p := range tr.problems {
				t.res.Problems[key] = append(t.res.Problems[key], p)
			}
			continue
		}
		t.ingress(ing, o, sig)
	}
	for _, k := range slices.Sorted(maps.Keys(t.canaries)) {
		if c := t.canaries[k]; !c.used {
			t.problem(c.ing, ReasonInvalid, "canary: no main Ingress has the host and path %q: a canary applies to those of its main Ingress only", k)
		}
	}
	return res
}

// refuse serves the last good version of ing, if there is one, for err.
func (t *translator) refuse(ing *networkingv1.Ingress, err error) {
	key := ing.Namespace + "/" + ing.Name
	good := t.s.Good[key]
	what := "it is not served"
	if good != nil {
		what = "its last good version serves"
		t.keep(key, good)
	}
	t.problem(ing, ReasonInvalid, "%v: %s", err, what)
}

// canarySig names the canaries ing's paths take (marking them used), for
// Translation.current: a change of one translates ing again.
func (t *translator) canarySig(ing *networkingv1.Ingress) string {
	var b strings.Builder
	for _, rule := range ing.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			if c := t.canaries[canaryKey(strings.ToLower(rule.Host), &p)]; c != nil {
				c.used = true
				fmt.Fprintf(&b, "%s/%s@%s;", c.ing.Namespace, c.ing.Name, c.ing.ResourceVersion)
			}
		}
	}
	return b.String()
}

// headersSig names the version of the ConfigMap of ing's custom-headers
// (v, its annotation), for Translation.current.
func (t *translator) headersSig(ing *networkingv1.Ingress, v string) string {
	if cm := t.customHeaders(ing, v); cm != nil {
		return "headers@" + cm.ResourceVersion
	}
	return ""
}

// customHeaders returns the ConfigMap that v, ing's custom-headers, names,
// nil when none or none such. It is looked for in ing's namespace only:
// an Ingress may not read another namespace's ConfigMaps into its
// responses.
func (t *translator) customHeaders(ing *networkingv1.Ingress, v string) *corev1.ConfigMap {
	if v == "" || t.s.ConfigMaps == nil {
		return nil
	}
	name := v
	if ns, n, ok := strings.Cut(v, "/"); ok {
		if ns != ing.Namespace {
			return nil
		}
		name = n
	}
	return t.s.ConfigMaps(ing.Namespace + "/" + name)
}

// keep adds tr, the translation of the Ingress key, to the result.
func (t *translator) keep(key string, tr *Translation) {
	t.res.Good[key] = tr
	t.res.Routing.Rules = append(t.res.Routing.Rules, tr.rules...)
	t.res.Lines = append(t.res.Lines, tr.lines...)
	for _, b := range tr.backends {
		if !t.backends[b.Name] {
			t.backends[b.Name] = true
			t.res.Routing.Backends = append(t.res.Routing.Backends, b)
		}
	}
	for _, c := range tr.certs {
		if !t.secrets[c.Secret] {
			t.secrets[c.Secret] = true
			t.res.Certificates = append(t.res.Certificates, c)
		}
	}
	if a := tr.auth; a != nil {
		for _, h := range a.Hosts {
			if by, ok := t.authHosts[h]; ok {
				p := Problem{ReasonInvalid, fmt.Sprintf("auth-tls-secret: the clients of %s are verified as the older Ingress %s says", h, by)}
				t.res.Problems[key] = append(t.res.Problems[key], p)
				continue
			}
			t.authHosts[h] = key
		}
		t.res.ClientAuth = append(t.res.ClientAuth, *a)
	}
}

// clientCA returns the CA certificates of the Secret name of ing's
// namespace (auth-tls-secret): its ca.crt, as ingress-nginx reads it.
// A Secret with a revocation list (ca.crl) is refused: baton does not
// read one, and would accept the certificates it revokes.
func (t *translator) clientCA(ing *networkingv1.Ingress, name string) ([]byte, error) {
	key := ing.Namespace + "/" + name
	sec := t.s.Secrets[key]
	if sec == nil {
		return nil, fmt.Errorf("annotation auth-tls-secret: Secret %s not found", key)
	}
	if _, ok := sec.Data["ca.crl"]; ok {
		return nil, fmt.Errorf("annotation auth-tls-secret: Secret %s: ca.crl: certificate revocation lists are not implemented, and a certificate it revokes would be accepted", key)
	}
	ca := sec.Data["ca.crt"]
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("annotation auth-tls-secret: Secret %s: no certificate in ca.crt", key)
	}
	return ca, nil
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
	// authHosts are the hosts whose clients are verified: by which
	// Ingress.
	authHosts map[string]string
	canaries  map[string]*canary
	cur       *Translation // the Ingress being translated
}

// problem notes what of ing could not be served as asked.
func (t *translator) problem(ing *networkingv1.Ingress, reason, format string, args ...any) {
	k := ing.Namespace + "/" + ing.Name
	p := Problem{Reason: reason, Message: fmt.Sprintf(format, args...)}
	t.res.Problems[k] = append(t.res.Problems[k], p)
	if t.cur != nil {
		t.cur.problems = append(t.cur.problems, p) // said again when the translation is kept
	}
}

// canary is a canary Ingress (ingress-nginx's canary annotations): it
// takes a share of the requests of the same host and path of a main
// Ingress, and those its header or cookie names.
type canary struct {
	ing     *networkingv1.Ingress
	o       options
	backend string // where its path of that host and path goes
	used    bool
}

// canaryKey is a host and path that a canary and a main Ingress share.
func canaryKey(host string, p *networkingv1.HTTPIngressPath) string {
	return host + " " + string(pathType(p)) + " " + p.Path
}

// addCanary indexes a canary Ingress's paths, for the main Ingresses of
// the same host and path; the oldest canary of a path takes it.
func (t *translator) addCanary(ing *networkingv1.Ingress, o options) {
	key := ing.Namespace + "/" + ing.Name
	t.cur = &Translation{}
	defer func() { // its backends (and certificates)
		t.keep(key, t.cur)
		t.cur = nil
	}()
	for _, tl := range ing.Spec.TLS {
		t.certificate(ing, tl.SecretName)
	}
	for _, rule := range ing.Spec.Rules {
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			k := canaryKey(strings.ToLower(rule.Host), &p)
			if t.canaries[k] != nil {
				continue
			}
			if name, ok := t.backend(ing, &p.Backend, o); ok {
				t.canaries[k] = &canary{ing: ing, o: o, backend: name}
			}
		}
	}
}

// ingress adds ing's rules, default backend and certificates, as its
// options ask.
func (t *translator) ingress(ing *networkingv1.Ingress, o options, canaries string) {
	key := ing.Namespace + "/" + ing.Name
	t.cur = &Translation{uid: ing.UID, gen: ing.Generation, annotations: ing.Annotations, world: t.s.World, canaries: canaries}
	defer func() { t.cur = nil }()
	tlsHosts := map[string]bool{}
	for _, tl := range ing.Spec.TLS {
		for _, h := range tl.Hosts {
			tlsHosts[strings.ToLower(h)] = true
		}
		t.certificate(ing, tl.SecretName)
	}
	if o.customHeaders != "" {
		o.responseHeaders = t.headers(ing, o.customHeaders)
	}
	if o.authCA != nil {
		a := &config.ClientAuth{CA: o.authCA, Verify: o.authVerify, Depth: o.authDepth, MatchCN: o.authCN, ErrorPage: o.authPage}
		for _, rule := range ing.Spec.Rules {
			if h := strings.ToLower(rule.Host); h != "" && !slices.Contains(a.Hosts, h) {
				a.Hosts = append(a.Hosts, h)
			}
		}
		if len(a.Hosts) > 0 {
			t.cur.auth = a
		}
	}
	said := map[string]bool{} // the auth-tls problems, said once
	once := func(format string, args ...any) {
		if !said[format] {
			said[format] = true
			t.problem(ing, ReasonInvalid, format, args...)
		}
	}
	// A host with TLS is redirected from HTTP to HTTPS (ingress-nginx's
	// ssl-redirect, on unless "false"; 308 keeps the method and body);
	// force-ssl-redirect redirects every host of ing.
	redirects := func(host string) bool {
		if t.opts.HTTPSListener == "" {
			return false
		}
		return o.forceSSLRedirect || tlsHosts[host] && o.sslRedirect
	}
	passHosts := t.passthrough(ing, o)
	order := 0
	add := func(name, host string, m route.Match, backends []route.Backend[string], redirect *route.Redirect) {
		if o.authCA != nil && host == "" {
			// Clients are verified by host (the server name of their
			// handshake): one without a host would be served unverified.
			once("auth-tls-secret: the default backend and rules without a host are not served: client certificates are verified by host")
			return
		}
		for _, listener := range []string{t.opts.HTTPListener, t.opts.HTTPSListener} {
			if listener == "" || listener == t.opts.HTTPSListener && passHosts[host] {
				continue // its TLS connections are passed through
			}
			r := route.Rule[string]{
				Name:     fmt.Sprintf("ingress %s %s", key, name),
				Listener: listener,
				Matches:  []route.Match{m},
				Order:    route.Order{Created: ing.CreationTimestamp.Time, Route: key, Index: order},
				Backends: backends,
			}
			if host != "" {
				r.Hostnames, r.OneLabel = []string{host}, true // "*.foo.com" takes one label
			}
			if o.bodySize >= 0 {
				r.MaxBodySize = o.bodySize
			}
			r.Access, r.RateLimit, r.MaxConnections = o.access, o.limit, o.conns
			authHTTP := o.authCA != nil && listener == t.opts.HTTPListener
			if authHTTP && !redirects(host) {
				once("auth-tls-secret: plain HTTP is redirected to HTTPS, whatever ssl-redirect and spec.tls say: client certificates need TLS")
			}
			if o.authCA != nil && listener == t.opts.HTTPSListener {
				r.ClientCert = &route.ClientCert{Pass: o.authPass}
			}
			switch {
			case listener == t.opts.HTTPListener && (redirects(host) || authHTTP):
				r.Backends = nil
				r.Filters.Redirect = &route.Redirect{Scheme: "https", StatusCode: 308}
				if t.opts.HTTPSPort != 443 {
					r.Filters.Redirect.Port = t.opts.HTTPSPort
				}
			case redirect != nil:
				r.Backends, r.Filters.Redirect = nil, redirect
			default:
				o.filters(&r)
			}
			t.cur.rules = append(t.cur.rules, r)
		}
		order++
	}
	var redirect *route.Redirect
	if u := o.redirectURL; u != nil {
		redirect = &route.Redirect{Scheme: u.Scheme, Hostname: u.Hostname(), StatusCode: o.redirectCode,
			Path: &route.PathModifier{Value: cmp.Or(u.EscapedPath(), "/")}}
		if p := u.Port(); p != "" {
			redirect.Port, _ = strconv.Atoi(p)
		}
	}
	to := func(name string) []route.Backend[string] { return []route.Backend[string]{{Target: name, Weight: 1}} }
	if db := ing.Spec.DefaultBackend; db != nil {
		if name, ok := t.backend(ing, db, o); ok {
			add("default backend", "", route.Match{Path: route.PathMatch{Type: route.PathPrefix, Value: "/"}}, to(name), redirect)
		}
	}
	for ri, rule := range ing.Spec.Rules {
		host := strings.ToLower(rule.Host)
		if o.appRoot != "" {
			// ingress-nginx's app-root: "/" alone is sent (302) there.
			add(fmt.Sprintf("rule %d app-root", ri), host, route.Match{Path: route.PathMatch{Type: route.PathExact, Value: "/"}}, nil,
				&route.Redirect{Path: &route.PathModifier{Value: o.appRoot}, StatusCode: 302})
		}
		if rule.HTTP == nil {
			continue
		}
		for pi, p := range rule.HTTP.Paths {
			m, ok := pathMatch(&p)
			if !ok {
				t.problem(ing, ReasonInvalid, "rule %d path %d: path %q (type %s) is not a path baton can match", ri, pi, p.Path, pathType(&p))
				continue
			}
			if o.regex() && pathType(&p) != networkingv1.PathTypeExact {
				v, err := regexPath(p.Path)
				if err != nil {
					t.cur = nil
					t.refuse(ing, fmt.Errorf("rule %d path %d: %w", ri, pi, err))
					return
				}
				m.Path = route.PathMatch{Type: route.PathRegex, Value: v}
			}
			name, ok := t.backend(ing, &p.Backend, o)
			if !ok {
				continue
			}
			what := fmt.Sprintf("rule %d path %d", ri, pi)
			c := t.canaries[canaryKey(host, &p)]
			if c == nil || redirect != nil {
				add(what, host, m, to(name), redirect)
				continue
			}
			// The canary's header, then its cookie ("always" to it,
			// "never" to the main backend), then its weight: ingress-nginx's
			// order.
			c.used = true
			if h := c.o.canaryHeader; h != "" {
				if v := c.o.canaryHeaderValue; v != "" {
					add(what+" canary header", host, withHeader(m, h, v, false), to(c.backend), nil)
				} else if re := c.o.canaryHeaderRegex; re != "" {
					add(what+" canary header", host, withHeader(m, h, re, true), to(c.backend), nil)
				} else {
					add(what+" canary header", host, withHeader(m, h, "always", false), to(c.backend), nil)
					add(what+" canary header never", host, withHeader(m, h, "never", false), to(name), nil)
				}
			}
			if ck := c.o.canaryCookie; ck != "" {
				add(what+" canary cookie", host, withHeader(m, "cookie", cookieIs(ck, "always"), true), to(c.backend), nil)
				add(what+" canary cookie never", host, withHeader(m, "cookie", cookieIs(ck, "never"), true), to(name), nil)
			}
			add(what, host, m, []route.Backend[string]{{Target: name, Weight: c.o.canaryTotal - c.o.canaryWeight}, {Target: c.backend, Weight: c.o.canaryWeight}}, nil)
		}
	}
	for i := range t.cur.rules {
		line, err := json.Marshal(&t.cur.rules[i])
		if err != nil { // no value of a rule's types fails to encode
			panic(fmt.Sprintf("ingress: encode rule %s: %v", t.cur.rules[i].Name, err))
		}
		t.cur.lines = append(t.cur.lines, line)
	}
	t.keep(key, t.cur)
}

// passthrough adds the rules of ing's ssl-passthrough (ingress-nginx's,
// without its --enable-ssl-passthrough: only the connections to the HTTPS
// listener of a host that passes through pay for the ClientHello read
// first): each host's TLS connections go to the backend of its path "/",
// as ingress-nginx takes, as TCP streams, ClientHello included; the
// backend terminates TLS, and the other annotations do not apply to them.
// It returns the hosts that pass through.
func (t *translator) passthrough(ing *networkingv1.Ingress, o options) map[string]bool {
	if !o.sslPassthrough {
		return nil
	}
	if t.opts.HTTPSListener == "" {
		t.problem(ing, ReasonInvalid, "ssl-passthrough: no HTTPS listener (ingress.httpsAddress)")
		return nil
	}
	key := ing.Namespace + "/" + ing.Name
	hosts := map[string]bool{}
	for ri, rule := range ing.Spec.Rules {
		host := strings.ToLower(rule.Host)
		if host == "" {
			t.problem(ing, ReasonInvalid, "ssl-passthrough: rule %d has no host: the server name routes a connection passed through", ri)
			continue
		}
		var root *networkingv1.IngressBackend
		if rule.HTTP != nil {
			for pi := range rule.HTTP.Paths {
				if p := &rule.HTTP.Paths[pi]; cmp.Or(p.Path, "/") == "/" {
					root = &p.Backend
					break
				}
			}
		}
		if root == nil {
			t.problem(ing, ReasonInvalid, "ssl-passthrough: rule %d (host %s) has no path \"/\", whose backend the connections would go to", ri, host)
			continue
		}
		name, ok := t.backend(ing, root, options{})
		if !ok {
			continue
		}
		hosts[host] = true
		t.cur.rules = append(t.cur.rules, route.Rule[string]{
			Name:      fmt.Sprintf("ingress %s rule %d ssl-passthrough", key, ri),
			Listener:  route.PassthroughListener(t.opts.HTTPSListener),
			Hostnames: []string{host},
			OneLabel:  true,
			Order:     route.Order{Created: ing.CreationTimestamp.Time, Route: key, Index: -1 - ri},
			Backends:  []route.Backend[string]{{Target: name, Weight: 1}},
		})
	}
	return hosts
}

// headers are the response header fields of custom-headers v, the
// ConfigMap of ing's namespace whose data are the fields (ingress-nginx's
// custom-headers, its more_set_headers). A field that is not one, or that
// is baton's to write (framing, X-Forwarded-*), is said and left out.
func (t *translator) headers(ing *networkingv1.Ingress, v string) *route.HeaderModifier {
	cm := t.customHeaders(ing, v)
	if cm == nil {
		t.problem(ing, ReasonInvalid, "custom-headers: ConfigMap %q not found in the Ingress's namespace (another namespace's is not read)", v)
		return nil
	}
	m := &route.HeaderModifier{}
	for _, name := range slices.Sorted(maps.Keys(cm.Data)) {
		value := strings.TrimSpace(cm.Data[name])
		switch {
		case !h1.IsToken(name) || route.Reserved(name) || strings.ContainsAny(value, "\r\n\x00"):
			t.problem(ing, ReasonInvalid, "custom-headers: %s: %q is not a header baton may set", v, name)
		default:
			m.Set = append(m.Set, route.Header{Name: name, Value: value})
		}
	}
	if len(m.Set) == 0 {
		return nil
	}
	return m
}

// filters adds what o asks of the requests a rule forwards.
func (o *options) filters(r *route.Rule[string]) {
	r.Filters.ResponseHeaders = o.responseHeaders
	if o.rewriteTarget != "" || o.upstreamVhost != "" {
		r.Filters.Rewrite = &route.Rewrite{Hostname: o.upstreamVhost}
		if o.rewriteTarget != "" {
			r.Filters.Rewrite.Path = &route.PathModifier{Regex: true, Value: o.rewriteTarget}
		}
	}
	r.Filters.CORS = o.cors
	if o.forwardedPrefix != "" {
		r.Filters.RequestHeaders = &route.HeaderModifier{Set: []route.Header{{Name: "X-Forwarded-Prefix", Value: o.forwardedPrefix}}}
	}
}

// withHeader is m with a header match besides.
func withHeader(m route.Match, name, value string, regex bool) route.Match {
	m.Headers = append(slices.Clone(m.Headers), route.ValueMatch{Name: name, Value: value, Regex: regex})
	return m
}

// cookieIs is a regular expression of a Cookie field that has cookie name
// with value.
func cookieIs(name, value string) string {
	return `(.*;\s*)?` + regexp.QuoteMeta(name) + `=` + regexp.QuoteMeta(value) + `(\s*;.*)?`
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
// port number or name, reached as o asks (its ClusterIP, TLS, a sticky
// cookie, timeouts). The backend is in the routing whether or not the
// Service exists (the watch finds it when it comes; until then its routes
// answer 503, as ingress-nginx does).
func (t *translator) backend(ing *networkingv1.Ingress, b *networkingv1.IngressBackend, o options) (string, bool) {
	svc := b.Service
	if svc == nil {
		t.problem(ing, ReasonNotImplemented, "backend: only Service backends are served (a resource backend is not)")
		return "", false
	}
	port := config.Port{Number: svc.Port.Number, Name: svc.Port.Name}
	if port.Number == 0 && port.Name == "" {
		t.problem(ing, ReasonInvalid, "backend %s: no port", svc.Name)
		return "", false
	}
	portKey := port.Name
	if port.Number != 0 {
		portKey = strconv.Itoa(int(port.Number))
	}
	bc := config.Backend{Kubernetes: &config.KubeService{Service: ing.Namespace + "/" + svc.Name, Port: port, Mode: config.ModeEndpoints}}
	// Named as the Gateway API's backends are (so that a Service both
	// reach alike is one backend with one pool), and by what the
	// options change.
	name := fmt.Sprintf("k8s/%s/%s:%s", ing.Namespace, svc.Name, portKey)
	if o.upstream {
		bc.Kubernetes.Mode, name = config.ModeClusterIP, name+"/clusterIP"
	}
	if o.backendTLS {
		// ingress-nginx's proxy-ssl-verify is off by default: so here.
		bc.TLS, name = &config.BackendTLS{InsecureSkipVerify: true}, name+"/https"
	}
	if o.backendProtocol != "" {
		bc.Protocol, name = o.backendProtocol, name+"/"+o.backendProtocol
	}
	if o.affinityCookie != "" && !o.upstream {
		bc.Balancer, bc.Cookie, name = config.BalancerCookie, o.affinityCookie, name+"/cookie="+o.affinityCookie
		bc.CookiePath, bc.CookieMaxAge, bc.CookieSameSite = o.cookiePath, config.Duration(o.cookieMaxAge), o.cookieSameSite
		if o.cookiePath != "" || o.cookieMaxAge > 0 || o.cookieSameSite != "" {
			name += fmt.Sprintf(";path=%s;max-age=%s;samesite=%s", o.cookiePath, o.cookieMaxAge, o.cookieSameSite)
		}
	} else if o.hashHeader != "" && !o.upstream {
		bc.Balancer, bc.HashHeader, name = config.BalancerHashHeader, o.hashHeader, name+"/hash="+o.hashHeader
	}
	if o.connectTimeout > 0 {
		bc.ConnectTimeout, name = config.Duration(o.connectTimeout), name+"/connect="+o.connectTimeout.String()
	}
	if o.readTimeout > 0 {
		bc.ResponseTimeout, name = config.Duration(o.readTimeout), name+"/read="+o.readTimeout.String()
	}
	if o.sendTimeout > 0 {
		bc.SendTimeout, name = config.Duration(o.sendTimeout), name+"/send="+o.sendTimeout.String()
	}
	bc.Name = name
	if !slices.ContainsFunc(t.cur.backends, func(x config.Backend) bool { return x.Name == name }) {
		t.cur.backends = append(t.cur.backends, bc)
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

// certificate adds the certificate of a TLS Secret of ing's namespace.
func (t *translator) certificate(ing *networkingv1.Ingress, secret string) {
	if secret == "" {
		return // a host served with the default certificate
	}
	key := ing.Namespace + "/" + secret
	sec := t.s.Secrets[key]
	if sec == nil {
		t.problem(ing, ReasonInvalid, "tls: Secret %s: not found (or not of type kubernetes.io/tls)", key)
		return
	}
	crt, k := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(k) == 0 {
		t.problem(ing, ReasonInvalid, "tls: Secret %s: no %s or %s", key, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		return
	}
	if _, err := tls.X509KeyPair(crt, k); err != nil {
		t.problem(ing, ReasonInvalid, "tls: Secret %s: %v", key, err)
		return
	}
	t.cur.certs = append(t.cur.certs, Certificate{Secret: key, CertPEM: crt, KeyPEM: k})
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
