// Package gateway is baton's Gateway API implementation: it turns the
// GatewayClasses that name its controller, their Gateways, the HTTPRoutes
// attached to them and the ReferenceGrants that allow their references
// into what baton serves (listeners, and a routing of backends and rules
// of the route model), and says so in their status.
//
// Translate is the whole translation, a pure function of what the cluster
// holds (a Snapshot): the controller reads the cluster, translates, hands
// the listeners and the routing to the supervisor, and writes the
// statuses. The supervisor learns no Gateway API: it sees listeners and
// an opaque routing payload.
package gateway

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ServiceUpstream is the annotation of a Service that is reached through
// its ClusterIP (kube-proxy balances) instead of its endpoints, from every
// route that names it: ingress-nginx's service-upstream, Traefik's
// ingress.kubernetes.io/service-upstream.
const ServiceUpstream = "baton-proxy.github.io/service-upstream"

// DefaultControllerName is the controllerName of baton's GatewayClasses.
const DefaultControllerName = config.DefaultGatewayController

// Snapshot is what the controller read of the cluster.
type Snapshot struct {
	Classes    []gwv1.GatewayClass
	Gateways   []gwv1.Gateway
	HTTPRoutes []gwv1.HTTPRoute
	GRPCRoutes []gwv1.GRPCRoute
	TLSRoutes  []gwv1.TLSRoute
	TCPRoutes  []gwv1.TCPRoute
	Grants     []gwv1.ReferenceGrant
	// Services and Namespaces by name ("namespace/name", and name).
	Services   map[string]*corev1.Service
	Namespaces map[string]*corev1.Namespace
	// Secrets by "namespace/name": the certificates of HTTPS listeners.
	Secrets map[string]*corev1.Secret
	// Good are the certificates last served, by Secret: one that turned
	// invalid keeps serving its last good content.
	Good map[string]Certificate
	// Assigned are the Gateways' addresses in the last Result: a
	// Gateway keeps its own even before its status says it.
	Assigned map[string]netip.Addr
	// World counts the changes of everything but the HTTPRoutes; with
	// Routes (the last Result's), a route whose object and world are as
	// they were is not translated again.
	World  uint64
	Routes map[string]*RouteTranslation
}

// RouteTranslation is what one HTTPRoute became, kept for the next
// Translate: its rules (and their encodings), parent statuses (Shadowed
// aside, which depends on the other routes), the Gateway listeners it
// attached to and the backends it names.
type RouteTranslation struct {
	uid      types.UID
	gen      int64
	world    uint64
	rules    []route.Rule[string]
	lines    [][]byte
	statuses []ParentStatus
	attached []string
	backends []config.Backend
}

// Certificate is a certificate chain and its key, PEM.
type Certificate struct {
	CertPEM, KeyPEM []byte
}

// Options are the controller's settings (the config's gateway section).
type Options struct {
	// ControllerName: GatewayClasses naming it are ours.
	ControllerName string
	// Addresses are the pool each Gateway gets its address from.
	Addresses []netip.Prefix
	// The status writer's Lease: in Namespace (default: $POD_NAMESPACE,
	// else "default"), held as Identity (default: the host name and
	// pid), for LeaseDuration, looked at every RetryPeriod (defaults
	// lease.DefaultDuration, lease.DefaultRetryPeriod).
	Namespace, Identity        string
	LeaseDuration, RetryPeriod time.Duration
	// DiscoveryEvery is how often a route kind whose CRD was missing is
	// looked for again (default 30s): once installed, it is watched and
	// served without a restart.
	DiscoveryEvery time.Duration
}

// Listener is a socket baton serves a Gateway's listeners of one port on.
type Listener struct {
	// Name is the baton listener's: "gw/namespace/name:port".
	Name    string
	Address netip.AddrPort
	// Protocol is the Gateway listeners' (HTTP, HTTPS, TLS or TCP).
	Protocol gwv1.ProtocolType
	// Passthrough: a TLS listener that routes each connection by its
	// ClientHello's server name without terminating it.
	Passthrough bool
	// Certificates are an HTTPS (or TLS Terminate) listener's: those of every Gateway
	// listener of the port (SNI picks one by its names), the first the
	// default.
	Certificates []Certificate
}

// ListenerConditions are what became of one Gateway listener.
type ListenerConditions struct {
	Accepted                      bool
	AcceptedReason, AcceptedMsg   string
	ResolvedRefs                  bool
	ResolvedReason, ResolvedMsg   string
	Conflicted                    bool
	ConflictReason, ConflictedMsg string
	// Kinds are the route kinds it takes that baton serves.
	Kinds []gwv1.RouteGroupKind
}

// Result is what baton serves, and what the status says of each object.
type Result struct {
	Listeners []Listener
	Routing   config.Routing
	// Addresses are the Gateways' ("namespace/name").
	Addresses map[string]netip.Addr
	// Routes says, per HTTPRoute ("namespace/name") and per parent
	// reference (by index), what became of it.
	Routes map[string][]ParentStatus
	// Attached counts the routes attached to each Gateway listener
	// ("namespace/name/listener"), and Listeners says what became of each.
	Attached       map[string]int
	ListenerStatus map[string]ListenerConditions
	// Good are the certificates served, by Secret ("namespace/name"), for
	// the next Snapshot.
	Good map[string]Certificate
	// Lines are Routing.Rules encoded for the workers, a line each
	// (config.RoutingPayload), kept per route from one Translate to the
	// next.
	Lines [][]byte
	// Translations are the routes', for the next Snapshot.
	Translations map[string]*RouteTranslation
}

// ParentStatus is what became of one parent reference of a route: the
// Gateway API's Accepted and ResolvedRefs conditions, with their reasons.
type ParentStatus struct {
	Ref                                gwv1.ParentReference
	Accepted                           bool
	AcceptedReason, AcceptedMessage    string
	ResolvedRefs                       bool
	ResolvedReason, ResolvedRefMessage string
	// Shadowed says which of the route's matches an earlier route (in
	// the spec's order of precedence) takes as they are: those never
	// reach this route. Empty when none.
	Shadowed string
}

const (
	gatewayGroup  = gwv1.GroupName
	kindGateway   = "Gateway"
	kindRoute     = "HTTPRoute"
	kindGRPCRoute = "GRPCRoute"
	kindTLSRoute  = "TLSRoute"
	kindTCPRoute  = "TCPRoute"
	kindService   = "Service"
)

// Translate turns a snapshot into what baton serves.
func Translate(s *Snapshot, opts Options) *Result {
	res := &Result{Addresses: map[string]netip.Addr{}, Routes: map[string][]ParentStatus{}, Attached: map[string]int{},
		ListenerStatus: map[string]ListenerConditions{}, Good: map[string]Certificate{}}
	ours := map[string]bool{}
	for _, c := range s.Classes {
		if string(c.Spec.ControllerName) == opts.ControllerName {
			ours[c.Name] = true
		}
	}
	var gws []*gwv1.Gateway
	for i := range s.Gateways {
		if g := &s.Gateways[i]; ours[string(g.Spec.GatewayClassName)] {
			gws = append(gws, g)
		}
	}
	slices.SortFunc(gws, func(a, b *gwv1.Gateway) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	assignAddresses(gws, opts.Addresses, s.Assigned, res.Addresses)

	// The listeners, one baton listener per Gateway and port.
	for _, g := range gws {
		listeners(s, g, res)
	}

	// The routes: GRPCRoutes, TLSRoutes and TCPRoutes as the HTTPRoutes
	// they amount to (grpcAsHTTP, streamAsHTTP), all in the Gateway
	// API's order of precedence.
	t := &translator{s: s, res: res, backends: map[string]bool{}, lkeys: map[*gwv1.Listener]string{}, names: map[batonPort]string{}}
	routes := make([]*gwv1.HTTPRoute, 0, len(s.HTTPRoutes)+len(s.GRPCRoutes)+len(s.TLSRoutes)+len(s.TCPRoutes))
	for i := range s.HTTPRoutes {
		routes = append(routes, &s.HTTPRoutes[i])
	}
	kinds := make(map[*gwv1.HTTPRoute]gwv1.Kind, len(s.GRPCRoutes)+len(s.TLSRoutes)+len(s.TCPRoutes))
	for i := range s.GRPCRoutes {
		r := grpcAsHTTP(&s.GRPCRoutes[i])
		kinds[r] = kindGRPCRoute
		routes = append(routes, r)
	}
	for i := range s.TLSRoutes {
		tr := &s.TLSRoutes[i]
		r := streamAsHTTP(&tr.ObjectMeta, &tr.Spec.CommonRouteSpec, tr.Spec.Hostnames, tr.Spec.Rules)
		kinds[r] = kindTLSRoute
		routes = append(routes, r)
	}
	for i := range s.TCPRoutes {
		tr := &s.TCPRoutes[i]
		r := streamAsHTTP(&tr.ObjectMeta, &tr.Spec.CommonRouteSpec, nil, tr.Spec.Rules)
		kinds[r] = kindTCPRoute
		routes = append(routes, r)
	}
	slices.SortFunc(routes, func(a, b *gwv1.HTTPRoute) int { return olderFirst(&a.ObjectMeta, &b.ObjectMeta) })
	res.Translations = make(map[string]*RouteTranslation, len(routes))
	for _, r := range routes {
		t.kind = cmp.Or(kinds[r], kindRoute)
		rkey := routeKey(t.kind, &r.ObjectMeta)
		rt := s.Routes[rkey]
		if rt == nil || rt.uid != r.UID || rt.gen != r.Generation || rt.world != s.World || s.World == 0 {
			rt = t.route(r, gws)
			rt.uid, rt.gen, rt.world = r.UID, r.Generation, s.World
		} else {
			t.replay(rt)
		}
		res.Translations[rkey] = rt
		res.Routing.Rules = append(res.Routing.Rules, rt.rules...)
		res.Lines = append(res.Lines, rt.lines...)
		res.Routes[rkey] = slices.Clone(rt.statuses)
	}
	for rkey, msg := range shadowed(res.Routing.Rules) {
		for i := range res.Routes[rkey] {
			res.Routes[rkey][i].Shadowed = msg
		}
	}
	slices.SortFunc(res.Routing.Backends, func(a, b config.Backend) int { return strings.Compare(a.Name, b.Name) })
	return res
}

// replay puts a kept translation in the result: its backends and its
// attachments.
func (t *translator) replay(rt *RouteTranslation) {
	for _, lkey := range rt.attached {
		t.res.Attached[lkey]++
	}
	for _, b := range rt.backends {
		t.addBackend(b)
	}
}

func (t *translator) addBackend(b config.Backend) {
	if !t.backends[b.Name] {
		t.backends[b.Name] = true
		t.res.Routing.Backends = append(t.res.Routing.Backends, b)
	}
}

// olderFirst orders objects by creation, then namespace/name: the Gateway
// API's order of precedence.
func olderFirst(a, b *metav1.ObjectMeta) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

func key(m *metav1.ObjectMeta) string { return m.Namespace + "/" + m.Name }

// routeKey is the key of a route of kind in Result.Routes and
// Translations: "namespace/name" for an HTTPRoute, the kind and
// "namespace/name" for another ("GRPCRoute ns/name": routes of two kinds
// may share a name).
func routeKey(kind gwv1.Kind, m metav1.Object) string {
	k := m.GetNamespace() + "/" + m.GetName()
	if kind != kindRoute {
		return string(kind) + " " + k
	}
	return k
}

func listenerName(g *gwv1.Gateway, port gwv1.PortNumber) string {
	return fmt.Sprintf("gw/%s/%s:%d", g.Namespace, g.Name, port)
}

// assignAddresses gives each Gateway one address of the pool: the one it
// had in the last result (assigned), else the one its status has (so that
// an address stays a Gateway's across restarts of the controller), when
// it is in the pool and free; else the first free one, older Gateways
// first. The last result comes first because a status is written after
// the fact: a Gateway created in the same second as an older one, whose
// name sorts before it, would otherwise take the address the older one
// was served on and published (the TLSRouteHostnameIntersection test's
// four Gateways did), and the clients that read it reach the other.
func assignAddresses(gws []*gwv1.Gateway, pool []netip.Prefix, assigned map[string]netip.Addr, out map[string]netip.Addr) {
	taken := map[netip.Addr]bool{}
	inPool := func(a netip.Addr) bool {
		for _, p := range pool {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	var rest []*gwv1.Gateway
	keep := func(g *gwv1.Gateway, a netip.Addr) bool {
		if !a.IsValid() || !inPool(a) || taken[a] {
			return false
		}
		out[key(&g.ObjectMeta)], taken[a] = a, true
		return true
	}
	var unassigned []*gwv1.Gateway
	for _, g := range gws {
		if !keep(g, assigned[key(&g.ObjectMeta)]) {
			unassigned = append(unassigned, g)
		}
	}
	for _, g := range unassigned {
		kept := false
		for _, sa := range g.Status.Addresses {
			if a, err := netip.ParseAddr(sa.Value); err == nil && keep(g, a) {
				kept = true
				break
			}
		}
		if !kept {
			rest = append(rest, g)
		}
	}
	for _, g := range rest {
	next:
		for _, p := range pool {
			for a := firstHost(p); p.Contains(a); a = a.Next() {
				if !taken[a] {
					out[key(&g.ObjectMeta)], taken[a] = a, true
					break next
				}
			}
		}
	}
}

// firstHost is the first address of p to give: past the network address
// of an IPv4 prefix with room for hosts (/30 and wider), as an operator
// expects.
func firstHost(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	if a.Is4() && p.Bits() <= 30 {
		a = a.Next()
	}
	return a
}

// translator turns routes into rules.
type translator struct {
	s        *Snapshot
	res      *Result
	backends map[string]bool
	rkey     string            // the route being translated: routeKey
	kind     gwv1.Kind         // and its kind: HTTPRoute, or GRPCRoute
	cur      *RouteTranslation // and what it becomes
	// The keys of Gateway listeners ("namespace/name/listener") and the
	// names of baton listeners ("gw/namespace/name:port"), made once
	// each: every route looks them up.
	lkeys map[*gwv1.Listener]string
	names map[batonPort]string
}

type batonPort struct {
	g    *gwv1.Gateway
	port gwv1.PortNumber
}

func (t *translator) listenerKey(g *gwv1.Gateway, l *gwv1.Listener) string {
	k, ok := t.lkeys[l]
	if !ok {
		k = key(&g.ObjectMeta) + "/" + string(l.Name)
		t.lkeys[l] = k
	}
	return k
}

func (t *translator) batonListener(g *gwv1.Gateway, port gwv1.PortNumber) string {
	bp := batonPort{g, port}
	n, ok := t.names[bp]
	if !ok {
		n = listenerName(g, port)
		t.names[bp] = n
	}
	return n
}

// route attaches r to the listeners its parent references name, and
// translates its rules for each baton listener it is attached to.
func (t *translator) route(r *gwv1.HTTPRoute, gws []*gwv1.Gateway) *RouteTranslation {
	t.rkey = routeKey(t.kind, &r.ObjectMeta)
	rt := &RouteTranslation{}
	t.cur = rt
	// The effective hostnames on each baton listener; none when one of
	// its Gateway listeners takes the route for any host.
	hosts, anyHost := map[string][]string{}, map[string]bool{}
	var order []string
	statuses := make([]ParentStatus, len(r.Spec.ParentRefs))
	for i, ref := range r.Spec.ParentRefs {
		ps := ParentStatus{Ref: ref}
		g := findGateway(gws, &ref, r.Namespace)
		if g == nil {
			statuses[i] = ps // not ours: no status of ours
			continue
		}
		matched, allowed, hostOK := false, false, false
		for li := range g.Spec.Listeners {
			l := &g.Spec.Listeners[li]
			if ref.SectionName != nil && *ref.SectionName != l.Name || ref.Port != nil && *ref.Port != l.Port {
				continue
			}
			lkey := t.listenerKey(g, l)
			if lc := t.res.ListenerStatus[lkey]; !lc.Accepted || lc.Conflicted {
				continue // a listener not served takes no route
			}
			matched = true
			if !t.allows(g, l, r) {
				continue
			}
			allowed = true
			hs, ok := intersect(l.Hostname, r.Spec.Hostnames)
			if !ok {
				continue
			}
			hostOK = true
			t.res.Attached[lkey]++
			rt.attached = append(rt.attached, lkey)
			name := t.batonListener(g, l.Port)
			if _, seen := hosts[name]; !seen {
				order = append(order, name)
			}
			hosts[name] = union(hosts[name], hs)
			anyHost[name] = anyHost[name] || len(hs) == 0
		}
		switch {
		case !matched:
			ps.AcceptedReason, ps.AcceptedMessage = string(gwv1.RouteReasonNoMatchingParent), "no listener of the Gateway has that section name and port"
		case !allowed:
			ps.AcceptedReason, ps.AcceptedMessage = string(gwv1.RouteReasonNotAllowedByListeners), "the listeners do not allow this route (allowedRoutes)"
		case !hostOK:
			ps.AcceptedReason, ps.AcceptedMessage = string(gwv1.RouteReasonNoMatchingListenerHostname), "no hostname of the route matches the listeners'"
		default:
			ps.Accepted, ps.AcceptedReason = true, string(gwv1.RouteReasonAccepted)
		}
		statuses[i] = ps
	}
	resolved, reason, msg := true, string(gwv1.RouteReasonResolvedRefs), ""
	for _, name := range order {
		for ri := range r.Spec.Rules {
			hs := hosts[name]
			if anyHost[name] {
				hs = nil
			}
			rule, ok, why, m := t.rule(r, ri, name, hs)
			if !ok && resolved {
				resolved, reason, msg = false, why, m
			}
			line, err := json.Marshal(&rule)
			if err != nil { // no value of a rule's types fails to encode
				panic(fmt.Sprintf("gateway: encode rule %s: %v", rule.Name, err))
			}
			rt.rules, rt.lines = append(rt.rules, rule), append(rt.lines, line)
		}
	}
	for i := range statuses {
		statuses[i].ResolvedRefs, statuses[i].ResolvedReason, statuses[i].ResolvedRefMessage = resolved, reason, msg
	}
	rt.statuses = statuses
	t.cur = nil
	return rt
}

// findGateway returns the Gateway of ours that ref names, or nil.
func findGateway(gws []*gwv1.Gateway, ref *gwv1.ParentReference, routeNS string) *gwv1.Gateway {
	if ref.Group != nil && *ref.Group != gatewayGroup || ref.Kind != nil && *ref.Kind != kindGateway {
		return nil
	}
	ns := routeNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	for _, g := range gws {
		if g.Namespace == ns && g.Name == string(ref.Name) {
			return g
		}
	}
	return nil
}

// allows reports whether listener l of g lets route r attach
// (allowedRoutes: its kinds, and the namespaces it takes routes from).
func (t *translator) allows(g *gwv1.Gateway, l *gwv1.Listener, r *gwv1.HTTPRoute) bool {
	if kinds, _ := routeKinds(l); !slices.ContainsFunc(kinds, func(k gwv1.RouteGroupKind) bool { return isKind(k, t.kind) }) {
		return false
	}
	ar := l.AllowedRoutes
	from := gwv1.NamespacesFromSame
	if ar != nil && ar.Namespaces != nil && ar.Namespaces.From != nil {
		from = *ar.Namespaces.From
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSelector:
		ns := t.s.Namespaces[r.Namespace]
		if ns == nil || ar.Namespaces.Selector == nil {
			return false
		}
		sel, err := metav1.LabelSelectorAsSelector(ar.Namespaces.Selector)
		return err == nil && sel.Matches(labels.Set(ns.Labels))
	case gwv1.NamespacesFromNone:
		return false
	}
	return r.Namespace == g.Namespace
}

// intersect returns the hostnames a route takes on a listener (the Gateway
// API's intersection): the route's that the listener's takes, narrowed to
// the listener's where the route's wildcard is wider; the listener's when
// the route names none; the route's when the listener names none. ok is
// false when both name hostnames and none intersect.
func intersect(listener *gwv1.Hostname, route []gwv1.Hostname) ([]string, bool) {
	if listener == nil || *listener == "" {
		out := make([]string, len(route))
		for i, h := range route {
			out[i] = string(h)
		}
		return out, true
	}
	l := strings.ToLower(string(*listener))
	if len(route) == 0 {
		return []string{l}, true
	}
	var out []string
	for _, rh := range route {
		h := strings.ToLower(string(rh))
		switch {
		case h == l:
			out = append(out, h)
		case covers(l, h):
			out = append(out, h) // the route's is narrower
		case covers(h, l):
			out = append(out, l) // the listener's is narrower
		}
	}
	return out, len(out) > 0
}

// covers reports whether wildcard hostname w ("*.example.com") takes every
// host h takes: h is under its suffix (one label or more), or h is a
// wildcard of a longer suffix.
func covers(w, h string) bool {
	if !strings.HasPrefix(w, "*.") || h == w {
		return false
	}
	suffix := w[1:] // ".example.com"
	return strings.HasSuffix(h, suffix) && len(h) > len(suffix)
}

func union(a, b []string) []string {
	for _, h := range b {
		if !slices.Contains(a, h) {
			a = append(a, h)
		}
	}
	return a
}

// rule translates rule ri of r for baton listener name, whose hostnames
// are hosts. ok is false when a reference could not be resolved, with the
// ResolvedRefs reason and message.
func (t *translator) rule(r *gwv1.HTTPRoute, ri int, listener string, hosts []string) (rule route.Rule[string], ok bool, reason, msg string) {
	rr := &r.Spec.Rules[ri]
	rule = route.Rule[string]{
		Name:      strings.ToLower(string(t.kind)) + " " + key(&r.ObjectMeta) + " rule " + strconv.Itoa(ri),
		Listener:  listener,
		Hostnames: hosts,
		Order:     route.Order{Created: r.CreationTimestamp.Time, Route: t.rkey, Index: ri},
	}
	for _, m := range rr.Matches {
		rule.Matches = append(rule.Matches, match(&m))
	}
	ok = true
	for _, f := range rr.Filters {
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			rule.Filters.RequestHeaders = headers(f.RequestHeaderModifier)
			if n := reservedIn(rule.Filters.RequestHeaders); n != "" && ok {
				ok, reason, msg = false, string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("rule %d: header %s is baton's to write (framing, Host, X-Forwarded-*): the rule is not served", ri, n)
			}
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			rule.Filters.ResponseHeaders = headers(f.ResponseHeaderModifier)
			if n := reservedIn(rule.Filters.ResponseHeaders); n != "" && ok {
				ok, reason, msg = false, string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("rule %d: header %s is baton's to write (framing, Host, X-Forwarded-*): the rule is not served", ri, n)
			}
		case gwv1.HTTPRouteFilterRequestRedirect:
			rule.Filters.Redirect = redirect(f.RequestRedirect)
		case gwv1.HTTPRouteFilterURLRewrite:
			rule.Filters.Rewrite = rewrite(f.URLRewrite)
		case gwv1.HTTPRouteFilterRequestMirror:
			if m := f.RequestMirror; m != nil {
				if name, good, why, text := t.backend(r, &m.BackendRef); good {
					pct := 100
					if m.Percent != nil {
						pct = int(*m.Percent)
					} else if fr := m.Fraction; fr != nil && fr.Denominator != nil && *fr.Denominator > 0 {
						pct = int(100 * fr.Numerator / *fr.Denominator)
					}
					rule.Filters.Mirrors = append(rule.Filters.Mirrors, route.Mirror[string]{Target: name, Percent: max(pct, 1)})
				} else if ok {
					ok, reason, msg = false, why, text
				}
			}
		}
	}
	if to := rr.Timeouts; to != nil {
		rule.Timeouts.Request = duration(to.Request)
		rule.Timeouts.BackendRequest = duration(to.BackendRequest)
	}
	for i := range rr.BackendRefs {
		br := &rr.BackendRefs[i]
		w := 1
		if br.Weight != nil {
			w = int(*br.Weight)
		}
		name, good, why, text := t.backend(r, &br.BackendObjectReference)
		if !good && ok {
			ok, reason, msg = false, why, text
		}
		rule.Backends = append(rule.Backends, route.Backend[string]{Target: name, Weight: w, Invalid: !good})
	}
	return rule, ok, reason, msg
}

// backend resolves a backend reference of r: a Service (of r's namespace,
// or of another that a ReferenceGrant opens to r's), by name and port. It
// adds the backend to the routing the first time, and returns its name,
// or false with the ResolvedRefs reason.
func (t *translator) backend(r *gwv1.HTTPRoute, ref *gwv1.BackendObjectReference) (string, bool, string, string) {
	if ref.Group != nil && *ref.Group != "" && *ref.Group != "core" || ref.Kind != nil && *ref.Kind != kindService {
		return "", false, string(gwv1.RouteReasonInvalidKind), fmt.Sprintf("backend %s: only Services", ref.Name)
	}
	ns := r.Namespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	if ns != r.Namespace && !t.granted(t.kind, r.Namespace, ns, string(ref.Name)) {
		return "", false, string(gwv1.RouteReasonRefNotPermitted), fmt.Sprintf("backend %s/%s: no ReferenceGrant in %s allows it", ns, ref.Name, ns)
	}
	svc := t.s.Services[ns+"/"+string(ref.Name)]
	if svc == nil {
		return "", false, string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("backend %s/%s: no such Service", ns, ref.Name)
	}
	if ref.Port == nil {
		return "", false, string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("backend %s/%s: no port", ns, ref.Name)
	}
	mode, suffix := config.ModeEndpoints, ""
	if svc.Annotations[ServiceUpstream] == "true" {
		mode, suffix = config.ModeClusterIP, "/clusterIP"
	}
	protocol := backendProtocol(svc, int32(*ref.Port))
	switch t.kind {
	case kindGRPCRoute:
		protocol = config.ProtocolH2C // gRPC is HTTP/2 (GEP-1016)
	case kindTLSRoute, kindTCPRoute:
		protocol = "" // a stream: what it carries is the client's
	}
	if protocol != "" {
		suffix += "/" + protocol
	}
	name := fmt.Sprintf("k8s/%s/%s:%d%s", ns, ref.Name, *ref.Port, suffix)
	b := config.Backend{
		Name:       name,
		Kubernetes: &config.KubeService{Service: ns + "/" + string(ref.Name), Port: config.Port{Number: int32(*ref.Port)}, Mode: mode},
		Protocol:   protocol,
	}
	t.addBackend(b)
	if t.cur != nil && !slices.ContainsFunc(t.cur.backends, func(x config.Backend) bool { return x.Name == name }) {
		t.cur.backends = append(t.cur.backends, b)
	}
	return name, true, "", ""
}

// backendProtocol is what baton speaks to the Service svc's port: HTTP/2
// in the clear (config.ProtocolH2C) when its appProtocol says
// kubernetes.io/h2c (the Gateway API's BackendProtocolH2C, GEP-1911) or
// grpc, else "" (HTTP/1.1).
func backendProtocol(svc *corev1.Service, port int32) string {
	for _, p := range svc.Spec.Ports {
		if p.Port != port || p.AppProtocol == nil {
			continue
		}
		switch *p.AppProtocol {
		case "kubernetes.io/h2c", "grpc":
			return config.ProtocolH2C
		}
	}
	return ""
}

// granted reports whether a ReferenceGrant in namespace to lets routes of
// kind in namespace from reach the Service name.
func (t *translator) granted(kind gwv1.Kind, from, to, name string) bool {
	for _, g := range t.s.Grants {
		if g.Namespace != to {
			continue
		}
		okFrom := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return f.Group == gatewayGroup && f.Kind == kind && string(f.Namespace) == from
		})
		okTo := slices.ContainsFunc(g.Spec.To, func(to gwv1.ReferenceGrantTo) bool {
			return (to.Group == "" || to.Group == "core") && to.Kind == kindService && (to.Name == nil || string(*to.Name) == name)
		})
		if okFrom && okTo {
			return true
		}
	}
	return false
}

func match(m *gwv1.HTTPRouteMatch) route.Match {
	out := route.Match{Path: route.PathMatch{Type: route.PathPrefix, Value: "/"}}
	if p := m.Path; p != nil {
		if p.Value != nil {
			out.Path.Value = *p.Value
		}
		if p.Type != nil {
			switch *p.Type {
			case gwv1.PathMatchExact:
				out.Path.Type = route.PathExact
			case gwv1.PathMatchRegularExpression:
				out.Path.Type = route.PathRegex
			}
		}
	}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	for _, h := range m.Headers {
		out.Headers = append(out.Headers, route.ValueMatch{Name: string(h.Name), Value: h.Value, Regex: h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression})
	}
	for _, q := range m.QueryParams {
		out.Query = append(out.Query, route.ValueMatch{Name: string(q.Name), Value: q.Value, Regex: q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression})
	}
	return out
}

// reservedIn returns the first field of m that no filter may write or
// remove (route.Reserved: a filter setting Content-Length would let one
// message be read two ways), or "".
func reservedIn(m *route.HeaderModifier) string {
	if m == nil {
		return ""
	}
	for _, h := range append(append([]route.Header(nil), m.Set...), m.Add...) {
		if route.Reserved(h.Name) {
			return h.Name
		}
	}
	for _, n := range m.Remove {
		if route.Reserved(n) {
			return n
		}
	}
	return ""
}

func headers(f *gwv1.HTTPHeaderFilter) *route.HeaderModifier {
	if f == nil {
		return nil
	}
	m := &route.HeaderModifier{Remove: f.Remove}
	for _, h := range f.Set {
		m.Set = append(m.Set, route.Header{Name: string(h.Name), Value: h.Value})
	}
	for _, h := range f.Add {
		m.Add = append(m.Add, route.Header{Name: string(h.Name), Value: h.Value})
	}
	return m
}

func pathModifier(p *gwv1.HTTPPathModifier) *route.PathModifier {
	switch {
	case p == nil:
		return nil
	case p.Type == gwv1.PrefixMatchHTTPPathModifier && p.ReplacePrefixMatch != nil:
		return &route.PathModifier{ReplacePrefix: true, Value: *p.ReplacePrefixMatch}
	case p.ReplaceFullPath != nil:
		return &route.PathModifier{Value: *p.ReplaceFullPath}
	}
	return nil
}

func redirect(f *gwv1.HTTPRequestRedirectFilter) *route.Redirect {
	if f == nil {
		return nil
	}
	r := &route.Redirect{Path: pathModifier(f.Path)}
	if f.Scheme != nil {
		r.Scheme = *f.Scheme
	}
	if f.Hostname != nil {
		r.Hostname = string(*f.Hostname)
	}
	if f.Port != nil {
		r.Port = int(*f.Port)
	}
	if f.StatusCode != nil {
		r.StatusCode = *f.StatusCode
	}
	return r
}

func rewrite(f *gwv1.HTTPURLRewriteFilter) *route.Rewrite {
	if f == nil {
		return nil
	}
	r := &route.Rewrite{Path: pathModifier(f.Path)}
	if f.Hostname != nil {
		r.Hostname = string(*f.Hostname)
	}
	return r
}

// duration parses a Gateway API duration (Go's syntax is a superset of
// GEP-2257's); zero when absent or not a duration (the API server's
// validation refuses those).
func duration(d *gwv1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil {
		return 0
	}
	return v
}

// shadowed finds the matches that two routes share exactly, on the same
// listener and host (the same path, method, header and query matches):
// the spec's precedence gives each to the earlier route (older, then by
// namespace/name), and the later one is told, by route
// ("namespace/name"), which of its matches never reach it. rules are in
// that order already (Translate appends them route by route, older
// first).
func shadowed(rules []route.Rule[string]) map[string]string {
	type taken struct{ listener, host, match string }
	owner := map[taken]string{}
	lost := map[string][]string{}
	for i := range rules {
		r := &rules[i]
		hosts := r.Hostnames
		if len(hosts) == 0 {
			hosts = []string{""}
		}
		matches := r.Matches
		if len(matches) == 0 {
			matches = []route.Match{{Path: route.PathMatch{Type: route.PathPrefix, Value: "/"}}}
		}
		for mi := range matches {
			m := matchKey(&matches[mi])
			for _, h := range hosts {
				h = strings.ToLower(h)
				k := taken{r.Listener, h, m}
				first, ok := owner[k]
				switch {
				case !ok:
					owner[k] = r.Order.Route
				case first != r.Order.Route:
					host := h
					if host == "" {
						host = "any host"
					}
					lost[r.Order.Route] = append(lost[r.Order.Route], fmt.Sprintf("rule %d match %d on %s: route %s takes it first", r.Order.Index, mi, host, first))
				}
			}
		}
	}
	out := make(map[string]string, len(lost))
	for rkey, l := range lost {
		l = slices.Compact(l)
		msg := strings.Join(l[:min(len(l), 5)], "; ")
		if len(l) > 5 {
			msg += fmt.Sprintf("; and %d more", len(l)-5)
		}
		out[rkey] = msg
	}
	return out
}

// matchKey is a match as a string, equal for matches that take the same
// requests by their form: a prefix with or without its trailing slash,
// header names in any case and order, query parameters in any order.
func matchKey(m *route.Match) string {
	v := m.Path.Value
	if m.Path.Type == route.PathPrefix && v != "/" {
		v = strings.TrimSuffix(v, "/")
	}
	head := strconv.Itoa(int(m.Path.Type)) + " " + strconv.Quote(v) + " " + strconv.Quote(m.Method)
	if len(m.Headers) == 0 && len(m.Query) == 0 {
		return head // most matches: no fmt, one string
	}
	var b strings.Builder
	b.WriteString(head)
	values := func(kind string, vs []route.ValueMatch, fold bool) {
		keys := make([]string, len(vs))
		for i, x := range vs {
			name := x.Name
			if fold {
				name = strings.ToLower(name)
			}
			keys[i] = strconv.Quote(name) + "=" + strconv.Quote(x.Value) + "/" + strconv.FormatBool(x.Regex)
		}
		slices.Sort(keys)
		b.WriteString(" " + kind + strings.Join(keys, ","))
	}
	values("h:", m.Headers, true)
	values("q:", m.Query, false)
	return b.String()
}

// grpcAsHTTP is the HTTPRoute a GRPCRoute amounts to (GEP-1016): a gRPC
// call is an HTTP/2 POST to /service/method, so its method match is a
// path match, its header matches and filters are HTTPRoute's, and its
// backends are spoken to over HTTP/2 (translator.backend).
func grpcAsHTTP(g *gwv1.GRPCRoute) *gwv1.HTTPRoute {
	r := &gwv1.HTTPRoute{ObjectMeta: g.ObjectMeta}
	r.Spec.ParentRefs, r.Spec.Hostnames = g.Spec.ParentRefs, g.Spec.Hostnames
	for _, gr := range g.Spec.Rules {
		hr := gwv1.HTTPRouteRule{Name: gr.Name}
		for _, m := range gr.Matches {
			hr.Matches = append(hr.Matches, grpcMatch(&m))
		}
		for _, f := range gr.Filters {
			switch f.Type {
			case gwv1.GRPCRouteFilterRequestHeaderModifier:
				hr.Filters = append(hr.Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: f.RequestHeaderModifier})
			case gwv1.GRPCRouteFilterResponseHeaderModifier:
				hr.Filters = append(hr.Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: f.ResponseHeaderModifier})
			case gwv1.GRPCRouteFilterRequestMirror:
				hr.Filters = append(hr.Filters, gwv1.HTTPRouteFilter{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: f.RequestMirror})
			}
		}
		for _, br := range gr.BackendRefs {
			hr.BackendRefs = append(hr.BackendRefs, gwv1.HTTPBackendRef{BackendRef: br.BackendRef})
		}
		r.Spec.Rules = append(r.Spec.Rules, hr)
	}
	return r
}

// grpcMatch is the HTTPRoute match of a GRPCRoute match. Of type Exact
// (the default), service and method make an exact path, a service alone
// the prefix /service (by segments), a method alone a path of any
// service; of type RegularExpression, both are expressions of a path
// /service/method, an absent one any segment.
func grpcMatch(m *gwv1.GRPCRouteMatch) gwv1.HTTPRouteMatch {
	var out gwv1.HTTPRouteMatch
	if mm := m.Method; mm != nil {
		svc, meth := "", ""
		if mm.Service != nil {
			svc = *mm.Service
		}
		if mm.Method != nil {
			meth = *mm.Method
		}
		exact := mm.Type == nil || *mm.Type == gwv1.GRPCMethodMatchExact
		path := gwv1.HTTPPathMatch{Type: ptrTo(gwv1.PathMatchRegularExpression)}
		switch {
		case exact && svc != "" && meth != "":
			path.Type, path.Value = ptrTo(gwv1.PathMatchExact), ptrTo("/"+svc+"/"+meth)
		case exact && svc != "":
			path.Type, path.Value = ptrTo(gwv1.PathMatchPathPrefix), ptrTo("/"+svc)
		case exact && meth != "":
			path.Value = ptrTo("/[^/]+/" + regexp.QuoteMeta(meth))
		default:
			path.Value = ptrTo("/" + cmp.Or(svc, "[^/]+") + "/" + cmp.Or(meth, "[^/]+"))
		}
		out.Path = &path
	}
	for _, h := range m.Headers {
		typ := gwv1.HeaderMatchExact
		if h.Type != nil && *h.Type == gwv1.GRPCHeaderMatchRegularExpression {
			typ = gwv1.HeaderMatchRegularExpression
		}
		out.Headers = append(out.Headers, gwv1.HTTPHeaderMatch{Type: &typ, Name: gwv1.HTTPHeaderName(h.Name), Value: h.Value})
	}
	return out
}

// streamRule is a TLSRoute's or a TCPRoute's rule (the same fields).
type streamRule interface {
	gwv1.TLSRouteRule | gwv1.TCPRouteRule
}

// streamAsHTTP is the HTTPRoute a TLSRoute or a TCPRoute amounts to: a
// route of the stream's listener whose hostnames a connection's server
// name must match (a TCPRoute has none), and whose rule (one at most,
// the API says) has no match, so that it takes every connection; its
// backends take whole connections, their weights splitting connections
// as an HTTPRoute's split requests.
func streamAsHTTP[R streamRule](meta *metav1.ObjectMeta, spec *gwv1.CommonRouteSpec, hostnames []gwv1.Hostname, rules []R) *gwv1.HTTPRoute {
	r := &gwv1.HTTPRoute{ObjectMeta: *meta}
	r.Spec.CommonRouteSpec, r.Spec.Hostnames = *spec, hostnames
	for _, rule := range rules {
		var refs []gwv1.BackendRef
		switch rule := any(rule).(type) {
		case gwv1.TLSRouteRule:
			refs = rule.BackendRefs
		case gwv1.TCPRouteRule:
			refs = rule.BackendRefs
		}
		var hr gwv1.HTTPRouteRule
		for _, br := range refs {
			hr.BackendRefs = append(hr.BackendRefs, gwv1.HTTPBackendRef{BackendRef: br})
		}
		r.Spec.Rules = append(r.Spec.Rules, hr)
	}
	return r
}
