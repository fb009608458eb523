package gateway

import (
	"bytes"
	"k8s.io/apimachinery/pkg/types"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/proxy/route"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func ptr[T any](v T) *T { return &v }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func meta(ns, name string, age int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}
}

func class(name, controller string) gwv1.GatewayClass {
	return gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: gwv1.GatewayClassSpec{ControllerName: gwv1.GatewayController(controller)}}
}

func gateway(ns, name, class string, age int, ls ...gwv1.Listener) gwv1.Gateway {
	return gwv1.Gateway{ObjectMeta: meta(ns, name, age), Spec: gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(class), Listeners: ls}}
}

func listener(name string, port int32, host string) gwv1.Listener {
	l := gwv1.Listener{Name: gwv1.SectionName(name), Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType}
	if host != "" {
		l.Hostname = ptr(gwv1.Hostname(host))
	}
	return l
}

func service(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// httpRoute attaches to gateway gw (namespace/name) with hostnames, one
// rule of a PathPrefix match to a Service backend of port 8080.
func httpRoute(ns, name string, age int, gw string, hosts []string, prefix, svc string) gwv1.HTTPRoute {
	gns, gname := splitKey(gw)
	r := gwv1.HTTPRoute{ObjectMeta: meta(ns, name, age)}
	r.Spec.ParentRefs = []gwv1.ParentReference{{Namespace: ptr(gwv1.Namespace(gns)), Name: gwv1.ObjectName(gname)}}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	r.Spec.Rules = []gwv1.HTTPRouteRule{{
		Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr(gwv1.PathMatchPathPrefix), Value: ptr(prefix)}}},
		BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptr(gwv1.PortNumber(8080))}}}},
	}}
	return r
}

func splitKey(k string) (string, string) {
	for i := range len(k) {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return "", k
}

var opts = Options{ControllerName: DefaultControllerName, Addresses: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/30")}}

// table compiles a result's rules as a worker does (backend names as
// targets) and answers which backend a request on a listener reaches.
func table(t *testing.T, res *Result) func(listener, host, path string) string {
	t.Helper()
	tb, err := route.Compile(res.Routing.Rules)
	if err != nil {
		t.Fatal(err)
	}
	return func(listener, host, path string) string {
		c, _ := tb.Match(listener, &route.Request{Host: []byte(host), Path: []byte(path), Method: []byte("GET"), Fields: noFields{}})
		if c == nil {
			return "404"
		}
		b, ok := c.Pick()
		if !ok {
			return "500"
		}
		return b
	}
}

type noFields struct{}

func (noFields) Field(string) []byte { return nil }

// Only GatewayClasses that name baton's controller count; each of their
// Gateways gets an address of the pool (the one its status has, when it
// is free, else the first free, older Gateways first), and one baton
// listener per port.
func TestGatewaysAndAddresses(t *testing.T) {
	kept := gateway("infra", "kept", "baton", 3, listener("http", 80, ""), listener("other", 8080, ""))
	kept.Status.Addresses = []gwv1.GatewayStatusAddress{{Value: "198.18.64.2"}}
	s := &Snapshot{
		Classes: []gwv1.GatewayClass{class("baton", DefaultControllerName), class("other", "example.com/other")},
		Gateways: []gwv1.Gateway{
			kept,
			gateway("infra", "new", "baton", 1, listener("http", 80, "")),
			gateway("infra", "theirs", "other", 0, listener("http", 80, "")),
		},
	}
	res := Translate(s, opts)
	if got := res.Addresses["infra/kept"].String(); got != "198.18.64.2" {
		t.Errorf("kept Gateway got %s, want its status's 198.18.64.2", got)
	}
	// The pool's third address goes to a third Gateway; a fourth finds it
	// spent (the network address is not given).
	more := Translate(&Snapshot{Classes: s.Classes, Gateways: append(s.Gateways,
		gateway("infra", "third", "baton", 4, listener("http", 80, "")), gateway("infra", "fourth", "baton", 5, listener("http", 80, "")))}, opts)
	if got := more.Addresses["infra/third"].String(); got != "198.18.64.3" {
		t.Errorf("third Gateway got %s", got)
	}
	if a, ok := more.Addresses["infra/fourth"]; ok {
		t.Errorf("a fourth Gateway got %s from a pool of three", a)
	}
	if got := res.Addresses["infra/new"].String(); got != "198.18.64.1" {
		t.Errorf("new Gateway got %s, want the first free", got)
	}
	if _, ok := res.Addresses["infra/theirs"]; ok {
		t.Error("a Gateway of another controller's class got an address")
	}
	// A Gateway created in the same second as "new" whose name sorts
	// before it, while "new"'s status does not say its address yet:
	// "new" keeps the address it was served on (the last result's).
	sameSecond := gateway("infra", "a-first", "baton", 1, listener("http", 80, ""))
	later := Translate(&Snapshot{Classes: s.Classes, Gateways: append(slices.Clone(s.Gateways), sameSecond), Assigned: res.Addresses}, opts)
	if got := later.Addresses["infra/new"]; got != res.Addresses["infra/new"] {
		t.Errorf("Gateway new moved from %s to %s when another came", res.Addresses["infra/new"], got)
	}
	if got := later.Addresses["infra/a-first"].String(); got != "198.18.64.3" {
		t.Errorf("the newcomer got %s, want the first free, 198.18.64.3", got)
	}
	names := map[string]string{}
	for _, l := range res.Listeners {
		names[l.Name] = l.Address.String()
	}
	want := map[string]string{"gw/infra/kept:80": "198.18.64.2:80", "gw/infra/kept:8080": "198.18.64.2:8080", "gw/infra/new:80": "198.18.64.1:80"}
	if len(names) != len(want) {
		t.Fatalf("listeners %v, want %v", names, want)
	}
	for n, a := range want {
		if names[n] != a {
			t.Errorf("listener %s at %s, want %s", n, names[n], a)
		}
	}
}

// Hostname intersection (HTTPRouteSpec.Hostnames; conformance test
// HTTPRouteHostnameIntersection): the listener's takes the route's exact
// names under it and narrower wildcards; a wider wildcard of the route's
// narrows to the listener's.
func TestIntersect(t *testing.T) {
	for _, tc := range []struct {
		listener string
		route    []string
		want     []string
		ok       bool
	}{
		{"very.specific.com", []string{"non.matching.com", "*.nonmatchingwildcard.io", "very.specific.com"}, []string{"very.specific.com"}, true},
		{"*.wildcard.io", []string{"non.matching.com", "wildcard.io", "foo.wildcard.io", "foo.bar.wildcard.io"}, []string{"foo.wildcard.io", "foo.bar.wildcard.io"}, true},
		{"very.specific.com", []string{"*.specific.com"}, []string{"very.specific.com"}, true},
		{"*.anotherwildcard.io", []string{"*.anotherwildcard.io"}, []string{"*.anotherwildcard.io"}, true},
		{"*.example.com", []string{"*.foo.example.com"}, []string{"*.foo.example.com"}, true},
		{"*.foo.example.com", []string{"*.example.com"}, []string{"*.foo.example.com"}, true},
		{"a.example.com", nil, []string{"a.example.com"}, true},
		{"", []string{"x.test"}, []string{"x.test"}, true},
		{"a.example.com", []string{"b.example.com", "example.com"}, nil, false},
	} {
		var l *gwv1.Hostname
		if tc.listener != "" {
			l = ptr(gwv1.Hostname(tc.listener))
		}
		var hs []gwv1.Hostname
		for _, h := range tc.route {
			hs = append(hs, gwv1.Hostname(h))
		}
		got, ok := intersect(l, hs)
		if ok != tc.ok || len(got) != len(tc.want) {
			t.Errorf("%q ∩ %q = %q %v, want %q %v", tc.listener, tc.route, got, ok, tc.want, tc.ok)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q ∩ %q = %q, want %q", tc.listener, tc.route, got, tc.want)
			}
		}
	}
}

// Attachment and its conditions (RouteConditionReason): a route attaches
// to the listeners its parent reference names (sectionName, port) that
// allow it (allowedRoutes: Same by default, All, a namespace selector) and
// whose hostnames intersect its own; otherwise it is not accepted, with the
// reason. What attaches is served on the Gateway's baton listener.
func TestAttachment(t *testing.T) {
	all := listener("all", 80, "")
	all.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: ptr(gwv1.NamespacesFromAll)}}
	sel := listener("selected", 8080, "")
	sel.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: ptr(gwv1.NamespacesFromSelector),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "web"}}}}
	gw := gateway("infra", "gw", "baton", 0, listener("same", 80, "a.example"), all, sel)
	wrongSection := httpRoute("infra", "wrong-section", 1, "infra/gw", nil, "/", "svc")
	wrongSection.Spec.ParentRefs[0].SectionName = ptr(gwv1.SectionName("nope"))
	sameOnly := httpRoute("apps", "same-only", 2, "infra/gw", nil, "/", "svc")
	sameOnly.Spec.ParentRefs[0].SectionName = ptr(gwv1.SectionName("same"))
	badHost := httpRoute("infra", "bad-host", 3, "infra/gw", []string{"b.example"}, "/", "svc")
	badHost.Spec.ParentRefs[0].SectionName = ptr(gwv1.SectionName("same"))
	viaSelector := httpRoute("web", "via-selector", 4, "infra/gw", nil, "/sel", "svc")
	viaSelector.Spec.ParentRefs[0].Port = ptr(gwv1.PortNumber(8080))
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{wrongSection, sameOnly, badHost, viaSelector, httpRoute("apps", "everywhere", 5, "infra/gw", nil, "/all", "svc")},
		Services:   map[string]*corev1.Service{"apps/svc": service("apps", "svc"), "infra/svc": service("infra", "svc"), "web/svc": service("web", "svc")},
		Namespaces: map[string]*corev1.Namespace{"web": {ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"team": "web"}}}, "apps": {ObjectMeta: metav1.ObjectMeta{Name: "apps"}}},
	}
	res := Translate(s, opts)
	for route, want := range map[string]string{
		"infra/wrong-section": string(gwv1.RouteReasonNoMatchingParent),
		"apps/same-only":      string(gwv1.RouteReasonNotAllowedByListeners),
		"infra/bad-host":      string(gwv1.RouteReasonNoMatchingListenerHostname),
		"web/via-selector":    string(gwv1.RouteReasonAccepted),
		"apps/everywhere":     string(gwv1.RouteReasonAccepted),
	} {
		ps := res.Routes[route]
		if len(ps) != 1 || ps[0].AcceptedReason != want || ps[0].Accepted != (want == string(gwv1.RouteReasonAccepted)) {
			t.Errorf("%s: %+v, want %s", route, ps, want)
		}
	}
	if n := res.Attached["infra/gw/all"]; n != 1 {
		t.Errorf("listener all has %d routes, want 1", n)
	}
	at := table(t, res)
	if got := at("gw/infra/gw:80", "x.example", "/all/x"); got != "k8s/apps/svc:8080" {
		t.Errorf("/all/x on :80: %s", got)
	}
	if got := at("gw/infra/gw:8080", "x.example", "/sel"); got != "k8s/web/svc:8080" {
		t.Errorf("/sel on :8080: %s", got)
	}
}

// Backend references (HTTPBackendRef): a Service of the route's namespace,
// or of another whose ReferenceGrant lets the route's reach it; a missing
// Service, an unknown kind, a reference no grant allows are invalid:
// ResolvedRefs false with the spec's reason, and 500 for their share.
func TestBackendRefs(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, func() gwv1.Listener {
		l := listener("http", 80, "")
		l.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: ptr(gwv1.NamespacesFromAll)}}
		return l
	}())
	granted := httpRoute("apps", "granted", 1, "infra/gw", []string{"granted.example"}, "/", "db")
	granted.Spec.Rules[0].BackendRefs[0].Namespace = ptr(gwv1.Namespace("data"))
	denied := httpRoute("other", "denied", 2, "infra/gw", []string{"denied.example"}, "/", "db")
	denied.Spec.Rules[0].BackendRefs[0].Namespace = ptr(gwv1.Namespace("data"))
	missing := httpRoute("apps", "missing", 3, "infra/gw", []string{"missing.example"}, "/", "nope")
	kind := httpRoute("apps", "kind", 4, "infra/gw", []string{"kind.example"}, "/", "svc")
	kind.Spec.Rules[0].BackendRefs[0].Kind = ptr(gwv1.Kind("Bucket"))
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{granted, denied, missing, kind},
		Services:   map[string]*corev1.Service{"data/db": service("data", "db"), "apps/svc": service("apps", "svc")},
		Grants: []gwv1.ReferenceGrant{{ObjectMeta: metav1.ObjectMeta{Namespace: "data", Name: "apps-to-db"}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "HTTPRoute", Namespace: "apps"}},
			To:   []gwv1.ReferenceGrantTo{{Kind: "Service", Name: ptr(gwv1.ObjectName("db"))}},
		}}},
	}
	res := Translate(s, opts)
	for route, want := range map[string]string{
		"apps/granted": string(gwv1.RouteReasonResolvedRefs),
		"other/denied": string(gwv1.RouteReasonRefNotPermitted),
		"apps/missing": string(gwv1.RouteReasonBackendNotFound),
		"apps/kind":    string(gwv1.RouteReasonInvalidKind),
	} {
		ps := res.Routes[route]
		if len(ps) != 1 || ps[0].ResolvedReason != want || ps[0].ResolvedRefs != (want == string(gwv1.RouteReasonResolvedRefs)) || !ps[0].Accepted {
			t.Errorf("%s: %+v, want accepted and %s", route, ps, want)
		}
	}
	at := table(t, res)
	for host, want := range map[string]string{"granted.example": "k8s/data/db:8080", "denied.example": "500", "missing.example": "500", "kind.example": "500"} {
		if got := at("gw/infra/gw:80", host, "/"); got != want {
			t.Errorf("%s: %s, want %s", host, got, want)
		}
	}
	if len(res.Routing.Backends) != 1 || res.Routing.Backends[0].Kubernetes.Service != "data/db" || res.Routing.Backends[0].Kubernetes.Port.Number != 8080 {
		t.Errorf("backends %+v, want the granted Service only", res.Routing.Backends)
	}
}

// Rules keep the Gateway API's meaning: their matches, filters and
// timeouts, and the order of precedence between routes (the older first,
// HTTPRouteRule.Matches).
func TestRuleTranslation(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	older := httpRoute("infra", "older", 1, "infra/gw", nil, "/same", "a")
	newer := httpRoute("infra", "newer", 2, "infra/gw", nil, "/same", "b")
	filtered := httpRoute("infra", "filtered", 3, "infra/gw", nil, "/f", "a")
	rr := &filtered.Spec.Rules[0]
	rr.Matches[0].Method = ptr(gwv1.HTTPMethodPost)
	rr.Matches[0].Headers = []gwv1.HTTPHeaderMatch{{Name: "X-Env", Value: "stag.*", Type: ptr(gwv1.HeaderMatchRegularExpression)}}
	rr.Filters = []gwv1.HTTPRouteFilter{
		{Type: gwv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "X-A", Value: "1"}}, Remove: []string{"X-B"}}},
		{Type: gwv1.HTTPRouteFilterURLRewrite, URLRewrite: &gwv1.HTTPURLRewriteFilter{Hostname: ptr(gwv1.PreciseHostname("in.example")),
			Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/v2")}}},
		{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{BackendRef: gwv1.BackendObjectReference{Name: "b", Port: ptr(gwv1.PortNumber(8080))}, Percent: ptr(int32(25))}},
	}
	rr.Timeouts = &gwv1.HTTPRouteTimeouts{Request: ptr(gwv1.Duration("10s")), BackendRequest: ptr(gwv1.Duration("500ms"))}
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{newer, older, filtered},
		Services:   map[string]*corev1.Service{"infra/a": service("infra", "a"), "infra/b": service("infra", "b")},
	}
	res := Translate(s, opts)
	if got := table(t, res)("gw/infra/gw:80", "x", "/same"); got != "k8s/infra/a:8080" {
		t.Errorf("two routes alike: %s, want the older's", got)
	}
	var f *route.Rule[string]
	for i := range res.Routing.Rules {
		if res.Routing.Rules[i].Name == "httproute infra/filtered rule 0" {
			f = &res.Routing.Rules[i]
		}
	}
	if f == nil {
		t.Fatal("no rule for the filtered route")
	}
	m := f.Matches[0]
	if m.Method != "POST" || len(m.Headers) != 1 || !m.Headers[0].Regex || m.Path.Type != route.PathPrefix || m.Path.Value != "/f" {
		t.Errorf("match %+v", m)
	}
	fl := f.Filters
	if fl.RequestHeaders == nil || fl.RequestHeaders.Set[0].Name != "X-A" || fl.RequestHeaders.Remove[0] != "X-B" ||
		fl.Rewrite == nil || fl.Rewrite.Hostname != "in.example" || !fl.Rewrite.Path.ReplacePrefix || fl.Rewrite.Path.Value != "/v2" ||
		len(fl.Mirrors) != 1 || fl.Mirrors[0].Target != "k8s/infra/b:8080" || fl.Mirrors[0].Percent != 25 {
		t.Errorf("filters %+v", fl)
	}
	if f.Timeouts.Request != 10*time.Second || f.Timeouts.BackendRequest != 500*time.Millisecond {
		t.Errorf("timeouts %+v", f.Timeouts)
	}
	if _, err := route.Compile(res.Routing.Rules); err != nil {
		t.Errorf("the rules do not compile: %v", err)
	}
}

// A Service annotated baton-proxy.github.io/service-upstream: "true" is
// reached through its ClusterIP (kube-proxy balances) from every route
// that names it; the others through their endpoints.
func TestServiceUpstream(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	vip := service("infra", "vip")
	vip.Annotations = map[string]string{ServiceUpstream: "true"}
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{httpRoute("infra", "a", 1, "infra/gw", []string{"a.example"}, "/", "vip"), httpRoute("infra", "b", 2, "infra/gw", []string{"b.example"}, "/", "pods")},
		Services:   map[string]*corev1.Service{"infra/vip": vip, "infra/pods": service("infra", "pods")},
	}
	res := Translate(s, opts)
	modes := map[string]string{}
	for _, b := range res.Routing.Backends {
		modes[b.Kubernetes.Service] = b.Kubernetes.Mode
	}
	if modes["infra/vip"] != "clusterIP" || modes["infra/pods"] != "endpoints" {
		t.Errorf("modes %v", modes)
	}
}

// A Service port whose appProtocol is kubernetes.io/h2c (GEP-1911,
// BackendProtocolH2C) or grpc is spoken to over HTTP/2 in the clear; any
// other, over HTTP/1.1.
func TestBackendProtocol(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	svc := func(name, appProtocol string) *corev1.Service {
		s := service("infra", name)
		s.Spec.Ports = []corev1.ServicePort{{Port: 8080, AppProtocol: ptr(appProtocol)}, {Port: 81}}
		return s
	}
	s := &Snapshot{
		Classes:  []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways: []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{httpRoute("infra", "a", 1, "infra/gw", []string{"a.example"}, "/", "h2c"),
			httpRoute("infra", "b", 2, "infra/gw", []string{"b.example"}, "/", "grpc"),
			httpRoute("infra", "c", 3, "infra/gw", []string{"c.example"}, "/", "ws")},
		Services: map[string]*corev1.Service{"infra/h2c": svc("h2c", "kubernetes.io/h2c"), "infra/grpc": svc("grpc", "grpc"), "infra/ws": svc("ws", "kubernetes.io/ws")},
	}
	res := Translate(s, opts)
	got := map[string]string{}
	for _, b := range res.Routing.Backends {
		got[b.Kubernetes.Service] = b.Protocol
	}
	if got["infra/h2c"] != "h2c" || got["infra/grpc"] != "h2c" || got["infra/ws"] != "" {
		t.Errorf("protocols %v", got)
	}
}

// A route attached to two listeners of one port, one for any host and one
// for a hostname, serves any host: the hostname's listener does not narrow
// what the other takes (conformance: HTTPRouteRedirectPortAndScheme, whose
// HTTPS Gateway has listeners "https" and "https-with-hostname" on 443).
func TestAttachmentAnyHostWins(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("any", 80, ""), listener("named", 80, "second.example"))
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{httpRoute("infra", "r", 1, "infra/gw", nil, "/", "svc")},
		Services:   map[string]*corev1.Service{"infra/svc": service("infra", "svc")},
	}
	res := Translate(s, opts)
	at := table(t, res)
	for _, host := range []string{"example.org", "second.example"} {
		if got := at("gw/infra/gw:80", host, "/"); got != "k8s/infra/svc:8080" {
			t.Errorf("%s: %s, want the route's backend", host, got)
		}
	}
	if res.Attached["infra/gw/any"] != 1 || res.Attached["infra/gw/named"] != 1 {
		t.Errorf("attached: %v, want the route on both listeners", res.Attached)
	}
}

// Listener conditions the spec gives for what baton does not serve
// (Gateway API v1.6, ListenerConditionReason; conformance
// GatewayInvalidRouteKind and GatewayListenerUnsupportedProtocol): a kind
// of route that is not HTTPRoute makes ResolvedRefs false
// (InvalidRouteKinds), supportedKinds listing only what is served; a
// protocol that is not HTTP or HTTPS is not Accepted (UnsupportedProtocol)
// and has no supportedKinds; a Gateway with no valid listener is not
// Accepted (ListenersNotValid), one with some is, for that reason.
func TestListenerKindsAndProtocols(t *testing.T) {
	onlyInvalid := listener("only-invalid", 80, "")
	onlyInvalid.AllowedRoutes = &gwv1.AllowedRoutes{Kinds: []gwv1.RouteGroupKind{{Kind: "InvalidRoute"}}}
	mixed := listener("mixed", 81, "")
	mixed.AllowedRoutes = &gwv1.AllowedRoutes{Kinds: []gwv1.RouteGroupKind{{Kind: "InvalidRoute"}, {Kind: kindRoute}}}
	unsupported := listener("invalid", 1111, "")
	unsupported.Protocol = "INVALID"
	some := gateway("infra", "some", "baton", 0, listener("http", 80, ""), unsupported)
	none := gateway("infra", "none", "baton", 1, unsupported)
	kinds := gateway("infra", "kinds", "baton", 2, onlyInvalid, mixed)
	s := &Snapshot{Classes: []gwv1.GatewayClass{class("baton", DefaultControllerName)}, Gateways: []gwv1.Gateway{some, none, kinds}}
	res := Translate(s, Options{ControllerName: DefaultControllerName, Addresses: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/24")}})

	httpRoute := []gwv1.RouteGroupKind{{Group: ptr(gwv1.Group(gwv1.GroupName)), Kind: kindRoute}}
	both := append(slices.Clone(httpRoute), gwv1.RouteGroupKind{Group: ptr(gwv1.Group(gwv1.GroupName)), Kind: kindGRPCRoute})
	for _, tc := range []struct {
		gw       *gwv1.Gateway
		listener string
		accepted bool
		reason   gwv1.ListenerConditionReason // of ResolvedRefs when accepted, else of Accepted
		kinds    []gwv1.RouteGroupKind
	}{
		{&some, "http", true, gwv1.ListenerReasonResolvedRefs, both},
		{&some, "invalid", false, gwv1.ListenerReasonUnsupportedProtocol, nil},
		{&kinds, "only-invalid", true, gwv1.ListenerReasonInvalidRouteKinds, []gwv1.RouteGroupKind{}},
		{&kinds, "mixed", true, gwv1.ListenerReasonInvalidRouteKinds, httpRoute},
	} {
		l := gwv1.Listener{}
		for _, x := range tc.gw.Spec.Listeners {
			if string(x.Name) == tc.listener {
				l = x
			}
		}
		ls := listenerStatus(tc.gw, &l, nil, res, true)
		cond := apimeta.FindStatusCondition(ls.Conditions, string(gwv1.ListenerConditionResolvedRefs))
		if !tc.accepted {
			cond = apimeta.FindStatusCondition(ls.Conditions, string(gwv1.ListenerConditionAccepted))
		}
		if cond == nil || cond.Reason != string(tc.reason) {
			t.Errorf("%s/%s: %+v, want reason %s", tc.gw.Name, tc.listener, ls.Conditions, tc.reason)
		}
		if !slices.EqualFunc(ls.SupportedKinds, tc.kinds, func(a, b gwv1.RouteGroupKind) bool { return a.Kind == b.Kind && *a.Group == *b.Group }) {
			t.Errorf("%s/%s: supportedKinds %v, want %v", tc.gw.Name, tc.listener, ls.SupportedKinds, tc.kinds)
		}
	}
	for _, tc := range []struct {
		gw     *gwv1.Gateway
		status metav1.ConditionStatus
		reason gwv1.GatewayConditionReason
	}{
		{&some, metav1.ConditionTrue, gwv1.GatewayReasonListenersNotValid},
		{&none, metav1.ConditionFalse, gwv1.GatewayReasonListenersNotValid},
		{&kinds, metav1.ConditionTrue, gwv1.GatewayReasonAccepted},
	} {
		st := gatewayStatus(tc.gw, res, nil)
		c := apimeta.FindStatusCondition(st.Conditions, string(gwv1.GatewayConditionAccepted))
		if c == nil || c.Status != tc.status || c.Reason != string(tc.reason) {
			t.Errorf("Gateway %s: Accepted %+v, want %s %s", tc.gw.Name, c, tc.status, tc.reason)
		}
	}
}

// Two routes with the same match on the same listener and host: the
// spec's precedence gives it to the older route, and the newer one says
// so (baton's Shadowed condition on its parent); a route that shares
// nothing says nothing, and a match of another host or path is no
// conflict (the issue: conflicts "reported on the route that lost").
func TestShadowedRoutes(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	older := httpRoute("infra", "older", 1, "infra/gw", []string{"a.example"}, "/api", "svc")
	newer := httpRoute("infra", "newer", 2, "infra/gw", []string{"A.example", "b.example"}, "/api/", "svc") // the same prefix on a.example
	other := httpRoute("infra", "other", 3, "infra/gw", []string{"a.example"}, "/web", "svc")
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{newer, other, older},
		Services:   map[string]*corev1.Service{"infra/svc": service("infra", "svc")},
	}
	res := Translate(s, opts)
	if msg := res.Routes["infra/newer"][0].Shadowed; !strings.Contains(msg, "route infra/older takes it first") || !strings.Contains(msg, "a.example") || strings.Contains(msg, "b.example") {
		t.Errorf("the newer route: Shadowed %q, want a.example's match taken by infra/older", msg)
	}
	for _, r := range []string{"infra/older", "infra/other"} {
		if msg := res.Routes[r][0].Shadowed; msg != "" {
			t.Errorf("%s: Shadowed %q, want none", r, msg)
		}
	}
	c := &Controller{opts: Options{ControllerName: DefaultControllerName}}
	st := c.routeStatus(newer.Generation, &newer.Status.RouteStatus, res.Routes["infra/newer"])
	if cond := apimeta.FindStatusCondition(st.Parents[0].Conditions, string(ConditionShadowed)); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != string(ReasonMatchesTaken) {
		t.Errorf("the newer route's parent conditions: %+v", st.Parents[0].Conditions)
	}
	// Once the older route is gone, the condition goes too.
	newer.Status.RouteStatus = *st
	s.HTTPRoutes = []gwv1.HTTPRoute{newer, other}
	res = Translate(s, opts)
	st = c.routeStatus(newer.Generation, &newer.Status.RouteStatus, res.Routes["infra/newer"])
	if cond := apimeta.FindStatusCondition(st.Parents[0].Conditions, string(ConditionShadowed)); cond != nil {
		t.Errorf("the condition outlived the conflict: %+v", cond)
	}
}

// A translation keeps each route's translation for the next: a route
// whose object (UID, generation) and world (everything but the
// HTTPRoutes, Snapshot.World) are as they were is not translated again,
// and the result is what a translation from nothing gives.
func TestTranslationsKept(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	routes := []gwv1.HTTPRoute{
		httpRoute("infra", "a", 1, "infra/gw", []string{"a.example"}, "/", "svc"),
		httpRoute("infra", "b", 2, "infra/gw", []string{"b.example"}, "/", "other"),
		httpRoute("infra", "c", 3, "infra/gw", []string{"a.example"}, "/", "svc"), // shadowed by a
	}
	for i := range routes {
		routes[i].UID, routes[i].Generation = types.UID(routes[i].Name), 1
	}
	snap := func(world uint64, prev *Result) *Snapshot {
		s := &Snapshot{
			Classes: []gwv1.GatewayClass{class("baton", DefaultControllerName)}, Gateways: []gwv1.Gateway{gw}, HTTPRoutes: slices.Clone(routes),
			Services: map[string]*corev1.Service{"infra/svc": service("infra", "svc"), "infra/other": service("infra", "other")}, World: world,
		}
		if prev != nil {
			s.Routes = prev.Translations
		}
		return s
	}
	same := func(what string, got, want *Result) {
		t.Helper()
		if !reflect.DeepEqual(got.Routing, want.Routing) || !reflect.DeepEqual(got.Routes, want.Routes) ||
			!reflect.DeepEqual(got.Attached, want.Attached) || !slices.EqualFunc(got.Lines, want.Lines, bytes.Equal) {
			t.Errorf("%s: the result differs from a translation from nothing", what)
		}
	}
	first := Translate(snap(1, nil), opts)
	same("first", first, Translate(snap(0, nil), opts))

	// Route b changes (a new generation): only b is translated again.
	routes[1].Generation = 2
	routes[1].Spec.Hostnames = []gwv1.Hostname{"b2.example"}
	second := Translate(snap(1, first), opts)
	same("a route changed", second, Translate(snap(0, nil), opts))
	if second.Translations["infra/a"] != first.Translations["infra/a"] || second.Translations["infra/b"] == first.Translations["infra/b"] {
		t.Error("kept the changed route, or translated an unchanged one again")
	}
	if !strings.Contains(second.Routes["infra/c"][0].Shadowed, "infra/a") {
		t.Errorf("a kept route's Shadowed: %q", second.Routes["infra/c"][0].Shadowed)
	}

	// The world changes (Service other is gone): every route again.
	s := snap(2, second)
	delete(s.Services, "infra/other")
	third := Translate(s, opts)
	if third.Translations["infra/a"] == second.Translations["infra/a"] {
		t.Error("a change of the world kept a route's translation")
	}
	if ps := third.Routes["infra/b"][0]; ps.ResolvedRefs {
		t.Errorf("route b after its Service went: %+v", ps)
	}
}

// A header filter that writes a field baton frames messages with
// (Content-Length here: a second one would let the next hop read the
// message two ways, RFC 9112 section 6.3) is not served: the route says
// so (ResolvedRefs False, UnsupportedValue, naming the field), and the
// rule is left out of the worker's table; the route's other rules serve.
func TestFramingHeaderFilterRefused(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	r := httpRoute("infra", "smuggle", 1, "infra/gw", []string{"s.example"}, "/", "svc")
	r.Spec.Rules[0].Filters = []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestHeaderModifier,
		RequestHeaderModifier: &gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "Content-Length", Value: "0"}}}}}
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{r},
		Services:   map[string]*corev1.Service{"infra/svc": service("infra", "svc")},
	}
	res := Translate(s, opts)
	ps := res.Routes["infra/smuggle"]
	if len(ps) != 1 || ps[0].ResolvedRefs || ps[0].ResolvedReason != string(gwv1.RouteReasonUnsupportedValue) || !strings.Contains(ps[0].ResolvedRefMessage, "Content-Length") {
		t.Errorf("status: %+v", ps)
	}
	if _, err := route.Compile(res.Routing.Rules); err == nil || !strings.Contains(err.Error(), "baton's to write") {
		t.Errorf("the rule compiled: %v", err)
	}
}

// A GRPCRoute is served as the HTTPRoute it amounts to (GEP-1016): its
// method matches are paths /service/method (Exact: both, a service alone,
// a method alone; RegularExpression), its backends are spoken to over
// HTTP/2 whatever their appProtocol, its status is its own (an HTTPRoute
// of the same name is another route), and a listener that allows only
// HTTPRoutes does not take it.
func TestGRPCRoute(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0, listener("http", 80, ""))
	httpOnly := listener("http-only", 81, "")
	httpOnly.AllowedRoutes = &gwv1.AllowedRoutes{Kinds: []gwv1.RouteGroupKind{{Kind: kindRoute}}}
	gw.Spec.Listeners = append(gw.Spec.Listeners, httpOnly)
	method := func(typ gwv1.GRPCMethodMatchType, svc, meth string, backend string) gwv1.GRPCRouteRule {
		m := &gwv1.GRPCMethodMatch{Type: ptr(typ)}
		if svc != "" {
			m.Service = ptr(svc)
		}
		if meth != "" {
			m.Method = ptr(meth)
		}
		return gwv1.GRPCRouteRule{Matches: []gwv1.GRPCRouteMatch{{Method: m}},
			BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(backend), Port: ptr(gwv1.PortNumber(8080))}}}}}
	}
	g := gwv1.GRPCRoute{ObjectMeta: meta("infra", "a", 1)}
	g.Spec.ParentRefs = []gwv1.ParentReference{{Name: "gw"}}
	g.Spec.Hostnames = []gwv1.Hostname{"grpc.example"}
	g.Spec.Rules = []gwv1.GRPCRouteRule{
		method(gwv1.GRPCMethodMatchExact, "echo.Echo", "Echo", "both"),
		method(gwv1.GRPCMethodMatchExact, "echo.Other", "", "service"),
		method(gwv1.GRPCMethodMatchExact, "", "Lonely", "method"),
		method(gwv1.GRPCMethodMatchRegularExpression, "re\\..*", "Get.+", "regex"),
	}
	s := &Snapshot{
		Classes:    []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways:   []gwv1.Gateway{gw},
		HTTPRoutes: []gwv1.HTTPRoute{httpRoute("infra", "a", 2, "infra/gw", []string{"http.example"}, "/", "both")},
		GRPCRoutes: []gwv1.GRPCRoute{g},
		Services:   map[string]*corev1.Service{},
	}
	for _, n := range []string{"both", "service", "method", "regex"} {
		s.Services["infra/"+n] = service("infra", n)
	}
	res := Translate(s, opts)
	lookup := table(t, res)
	l := listenerName(&gw, 80)
	b := func(n string) string { return "k8s/infra/" + n + ":8080/h2c" }
	for _, tc := range []struct{ path, want string }{
		{"/echo.Echo/Echo", b("both")},
		{"/echo.Echo/EchoTwo", "404"},
		{"/echo.Other/Anything", b("service")},
		{"/echo.OtherX/Anything", "404"},
		{"/any.Service/Lonely", b("method")},
		{"/re.x/GetThing", b("regex")},
		{"/re.x/Put", "404"},
	} {
		if got := lookup(l, "grpc.example", tc.path); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.path, got, tc.want)
		}
	}
	if got := lookup(l, "http.example", "/x"); got != "k8s/infra/both:8080" {
		t.Errorf("the HTTPRoute of the same name and Service: %s (its backend speaks HTTP/1.1)", got)
	}
	for _, bc := range res.Routing.Backends {
		if strings.HasSuffix(bc.Name, "/h2c") != (bc.Protocol == "h2c") {
			t.Errorf("backend %s: protocol %q", bc.Name, bc.Protocol)
		}
	}
	ps := res.Routes["GRPCRoute infra/a"]
	if len(ps) != 1 || !ps[0].Accepted || !ps[0].ResolvedRefs || len(res.Routes["infra/a"]) != 1 {
		t.Fatalf("statuses: GRPCRoute %+v, HTTPRoute %+v", ps, res.Routes["infra/a"])
	}
	if n := res.Attached["infra/gw/http-only"]; n != 1 {
		t.Errorf("the HTTPRoute-only listener has %d routes attached, want 1 (the HTTPRoute)", n)
	}
}
