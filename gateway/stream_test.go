package gateway

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func tlsListener(name string, port int32, host string, mode gwv1.TLSModeType, refs ...gwv1.SecretObjectReference) gwv1.Listener {
	l := listener(name, port, host)
	l.Protocol = gwv1.TLSProtocolType
	l.TLS = &gwv1.ListenerTLSConfig{Mode: &mode, CertificateRefs: refs}
	return l
}

func tcpListener(name string, port int32) gwv1.Listener {
	l := listener(name, port, "")
	l.Protocol = gwv1.TCPProtocolType
	return l
}

func tlsRoute(ns, name string, age int, gw string, hosts []string, svc string, port int32) gwv1.TLSRoute {
	gns, gname := splitKey(gw)
	r := gwv1.TLSRoute{ObjectMeta: meta(ns, name, age)}
	r.Spec.ParentRefs = []gwv1.ParentReference{{Namespace: ptr(gwv1.Namespace(gns)), Name: gwv1.ObjectName(gname)}}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	r.Spec.Rules = []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptr(gwv1.PortNumber(port))}}}}}
	return r
}

func tcpRoute(ns, name string, age int, gw string, backends ...gwv1.BackendRef) gwv1.TCPRoute {
	gns, gname := splitKey(gw)
	r := gwv1.TCPRoute{ObjectMeta: meta(ns, name, age)}
	r.Spec.ParentRefs = []gwv1.ParentReference{{Namespace: ptr(gwv1.Namespace(gns)), Name: gwv1.ObjectName(gname)}}
	r.Spec.Rules = []gwv1.TCPRouteRule{{BackendRefs: backends}}
	return r
}

func weighted(svc string, port, weight int32) gwv1.BackendRef {
	return gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptr(gwv1.PortNumber(port))}, Weight: &weight}
}

// TLS and TCP listeners (Gateway API GEP-2643, TLSRoute; TCPRoute): a TLS
// Passthrough listener is a baton tcp listener with TLS passthrough whose
// TLSRoutes route by server name, the exact name before a wildcard across
// routes and the older route first; a TCP listener's TCPRoutes take every
// connection, the oldest route winning, weights splitting connections;
// a route kind the listener's protocol does not carry is not allowed
// there; and listeners of one port that disagree on protocol or TLS mode
// are none of them accepted, the port not served (ProtocolConflict).
func TestStreamListeners(t *testing.T) {
	gw := gateway("infra", "gw", "baton", 0,
		tlsListener("pass", 443, "*.example.com", gwv1.TLSModePassthrough),
		tcpListener("tcp", 9000),
		listener("http", 80, ""),
	)
	conflict := gateway("infra", "conflict", "baton", 1,
		tlsListener("terminate", 8443, "t.example.com", gwv1.TLSModeTerminate, secretRef("", "t")),
		tlsListener("passthrough", 8443, "p.example.com", gwv1.TLSModePassthrough),
		https("https", 9443, "h.example.com", secretRef("", "t")),
		listener("plain", 9443, "p.example.com"),
		tcpListener("alone", 7000),
	)
	s := &Snapshot{
		Classes:  []gwv1.GatewayClass{class("baton", DefaultControllerName)},
		Gateways: []gwv1.Gateway{gw, conflict},
		TLSRoutes: []gwv1.TLSRoute{
			tlsRoute("infra", "wild", 1, "infra/gw", []string{"*.example.com"}, "wild", 443),
			tlsRoute("infra", "exact", 2, "infra/gw", []string{"abc.example.com"}, "exact", 443),
			tlsRoute("infra", "on-http", 3, "infra/gw", []string{"abc.example.com"}, "exact", 443),
		},
		TCPRoutes: []gwv1.TCPRoute{
			tcpRoute("infra", "first", 1, "infra/gw", weighted("v1", 3000, 70), weighted("v2", 3000, 30), weighted("v3", 3000, 0)),
			tcpRoute("infra", "second", 2, "infra/gw", weighted("late", 3000, 1)),
		},
		Secrets: map[string]*corev1.Secret{"infra/t": tlsSecret(t, "infra", "t", "t.example.com")},
		Services: map[string]*corev1.Service{
			"infra/wild": service("infra", "wild"), "infra/exact": service("infra", "exact"),
			"infra/v1": service("infra", "v1"), "infra/v2": service("infra", "v2"), "infra/v3": service("infra", "v3"), "infra/late": service("infra", "late"),
		},
	}
	// The HTTP listener takes HTTPRoutes only: a TLSRoute naming it is
	// not allowed there.
	s.TLSRoutes[2].Spec.ParentRefs[0].SectionName = ptr(gwv1.SectionName("http"))
	res := Translate(s, opts)

	want := map[string]Listener{
		"gw/infra/gw:443":        {Protocol: gwv1.TLSProtocolType, Passthrough: true},
		"gw/infra/gw:9000":       {Protocol: gwv1.TCPProtocolType},
		"gw/infra/gw:80":         {Protocol: gwv1.HTTPProtocolType},
		"gw/infra/conflict:7000": {Protocol: gwv1.TCPProtocolType},
	}
	if len(res.Listeners) != len(want) {
		t.Errorf("listeners %+v, want %d: the conflicted ports 8443 and 9443 not served", res.Listeners, len(want))
	}
	for _, l := range res.Listeners {
		if w, ok := want[l.Name]; !ok || l.Protocol != w.Protocol || l.Passthrough != w.Passthrough {
			t.Errorf("listener %s: %s passthrough %v, want %+v", l.Name, l.Protocol, l.Passthrough, w)
		}
	}
	for _, name := range []string{"terminate", "passthrough", "https", "plain"} {
		lc := res.ListenerStatus["infra/conflict/"+name]
		if lc.Accepted || lc.AcceptedReason != string(gwv1.ListenerReasonProtocolConflict) || !lc.Conflicted || len(lc.Kinds) != 0 {
			t.Errorf("listener %s of a port in conflict: %+v, want not accepted, ProtocolConflict, no kinds", name, lc)
		}
	}
	if lc := res.ListenerStatus["infra/gw/pass"]; len(lc.Kinds) != 1 || lc.Kinds[0].Kind != kindTLSRoute {
		t.Errorf("TLS listener kinds %v, want TLSRoute", lc.Kinds)
	}

	match := table(t, res)
	for _, tc := range []struct{ listener, sni, want string }{
		{"gw/infra/gw:443", "abc.example.com", "k8s/infra/exact:443"},
		{"gw/infra/gw:443", "other.example.com", "k8s/infra/wild:443"},
		{"gw/infra/gw:443", "example.org", "404"},
		{"gw/infra/gw:443", "", "404"},
		{"gw/infra/gw:9000", "", "k8s/infra/v1:3000 or k8s/infra/v2:3000"},
		{"gw/infra/gw:80", "abc.example.com", "404"},
	} {
		got := match(tc.listener, tc.sni, "/")
		if got != tc.want && !(tc.want == "k8s/infra/v1:3000 or k8s/infra/v2:3000" && (got == "k8s/infra/v1:3000" || got == "k8s/infra/v2:3000")) {
			t.Errorf("%s, server name %q: %s, want %s", tc.listener, tc.sni, got, tc.want)
		}
	}
	for rkey, want := range map[string]string{
		"TLSRoute infra/wild": string(gwv1.RouteReasonAccepted), "TLSRoute infra/exact": string(gwv1.RouteReasonAccepted),
		"TLSRoute infra/on-http": string(gwv1.RouteReasonNotAllowedByListeners),
		"TCPRoute infra/first":   string(gwv1.RouteReasonAccepted), "TCPRoute infra/second": string(gwv1.RouteReasonAccepted),
	} {
		if ps := res.Routes[rkey]; len(ps) != 1 || ps[0].AcceptedReason != want {
			t.Errorf("%s: %+v, want %s", rkey, ps, want)
		}
	}
	if n := res.Attached["infra/gw/tcp"]; n != 2 {
		t.Errorf("TCP listener: %d routes attached, want 2 (both accepted; the older takes the connections)", n)
	}
	for _, b := range res.Routing.Backends {
		if b.Protocol != "" {
			t.Errorf("backend %s of a stream route: protocol %q, want none", b.Name, b.Protocol)
		}
	}
}
