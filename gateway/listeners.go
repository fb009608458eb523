package gateway

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// listeners translates g's listeners into baton listeners (one per port)
// and says what became of each (res.ListenerStatus). A port's listeners
// share one socket, so they must share its protocol (and for TLS its
// mode): where they do not, none of the port's is accepted, and the port
// is not served (ProtocolConflict: "its network port should not be
// configured", the API says); a listener whose hostname another of the
// port has is Conflicted (HostnameConflict), the first one served.
func listeners(s *Snapshot, g *gwv1.Gateway, res *Result) {
	addr, hasAddr := res.Addresses[key(&g.ObjectMeta)]
	ports := map[gwv1.PortNumber]*Listener{}
	var order []gwv1.PortNumber
	hosts := map[gwv1.PortNumber][]string{}
	protocols := map[gwv1.PortNumber][]string{}
	for _, l := range g.Spec.Listeners {
		if proto := protocolOf(&l); proto != "" && !slices.Contains(protocols[l.Port], proto) {
			protocols[l.Port] = append(protocols[l.Port], proto)
		}
	}
	for _, l := range g.Spec.Listeners {
		lkey := key(&g.ObjectMeta) + "/" + string(l.Name)
		lc := ListenerConditions{Accepted: true, AcceptedReason: string(gwv1.ListenerReasonAccepted),
			ResolvedRefs: true, ResolvedReason: string(gwv1.ListenerReasonResolvedRefs), ConflictReason: string(gwv1.ListenerReasonNoConflicts)}
		mode := tlsMode(&l)
		if ps := protocols[l.Port]; len(ps) > 1 && protocolOf(&l) != "" {
			msg := fmt.Sprintf("port %d has listeners of %s: one socket serves one protocol", l.Port, strings.Join(ps, " and "))
			lc.Accepted, lc.AcceptedReason, lc.AcceptedMsg = false, string(gwv1.ListenerReasonProtocolConflict), msg
			lc.Conflicted, lc.ConflictReason, lc.ConflictedMsg = true, string(gwv1.ListenerReasonProtocolConflict), msg
			res.ListenerStatus[lkey] = lc
			continue
		}
		var certs []Certificate
		switch l.Protocol {
		case gwv1.HTTPProtocolType, gwv1.TCPProtocolType:
		case gwv1.HTTPSProtocolType, gwv1.TLSProtocolType:
			if l.Protocol == gwv1.HTTPSProtocolType && mode != gwv1.TLSModeTerminate {
				lc.Accepted, lc.AcceptedReason, lc.AcceptedMsg = false, string(gwv1.ListenerReasonUnsupportedValue), "an HTTPS listener terminates TLS"
				break
			}
			if mode == gwv1.TLSModePassthrough {
				break // baton holds no key: the backends terminate TLS
			}
			certs, lc.ResolvedRefs, lc.ResolvedReason, lc.ResolvedMsg = certificates(s, g, &l, res)
			if len(certs) == 0 && lc.ResolvedRefs {
				lc.ResolvedRefs, lc.ResolvedReason, lc.ResolvedMsg = false, string(gwv1.ListenerReasonInvalidCertificateRef), "no certificateRefs"
			}
		default:
			lc.Accepted, lc.AcceptedReason, lc.AcceptedMsg = false, string(gwv1.ListenerReasonUnsupportedProtocol), fmt.Sprintf("baton serves HTTP, HTTPS, TLS and TCP listeners, not %s", l.Protocol)
		}
		if lc.Accepted {
			var all bool
			lc.Kinds, all = routeKinds(&l)
			if !all {
				lc.ResolvedRefs, lc.ResolvedReason, lc.ResolvedMsg = false, string(gwv1.ListenerReasonInvalidRouteKinds), fmt.Sprintf("a %s listener takes %s, and no other kind", l.Protocol, kindNames(servedKinds(l.Protocol)))
			}
		}
		host := ""
		if l.Hostname != nil {
			host = string(*l.Hostname)
		}
		// Conflicts are between the accepted listeners of a port, whether
		// or not they can be served yet (an address, a certificate): a
		// listener's status does not turn when another's certificate
		// comes.
		if lc.Accepted && slices.Contains(hosts[l.Port], host) {
			lc.Conflicted, lc.ConflictReason, lc.ConflictedMsg = true, string(gwv1.ListenerReasonHostnameConflict), fmt.Sprintf("another listener of port %d has hostname %q", l.Port, host)
		}
		res.ListenerStatus[lkey] = lc
		if !lc.Accepted || lc.Conflicted {
			continue
		}
		hosts[l.Port] = append(hosts[l.Port], host)
		terminates := l.Protocol == gwv1.HTTPSProtocolType || l.Protocol == gwv1.TLSProtocolType && mode == gwv1.TLSModeTerminate
		if !hasAddr || terminates && len(certs) == 0 {
			continue
		}
		p := ports[l.Port]
		if p == nil {
			p = &Listener{Name: listenerName(g, l.Port), Address: netip.AddrPortFrom(addr, uint16(l.Port)), Protocol: l.Protocol,
				Passthrough: l.Protocol == gwv1.TLSProtocolType && mode == gwv1.TLSModePassthrough}
			ports[l.Port] = p
			order = append(order, l.Port)
		}
		p.Certificates = append(p.Certificates, certs...)
	}
	for _, port := range order {
		res.Listeners = append(res.Listeners, *ports[port])
	}
}

// protocolOf is what listener l asks of its port's socket: its
// protocol, and for TLS its mode ("TLS Passthrough"); "" for a protocol
// baton does not serve, which conflicts with none.
func protocolOf(l *gwv1.Listener) string {
	switch l.Protocol {
	case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType, gwv1.TCPProtocolType:
		return string(l.Protocol)
	case gwv1.TLSProtocolType:
		return string(l.Protocol) + " " + string(tlsMode(l))
	}
	return ""
}

// tlsMode is listener l's TLS mode: Terminate unless it says otherwise.
func tlsMode(l *gwv1.Listener) gwv1.TLSModeType {
	if l.TLS != nil && l.TLS.Mode != nil {
		return *l.TLS.Mode
	}
	return gwv1.TLSModeTerminate
}

// routeKinds returns the route kinds listener l takes that baton serves
// (its supportedKinds), and whether it serves all that l names: with no
// kinds named, those its protocol carries (servedKinds).
func routeKinds(l *gwv1.Listener) ([]gwv1.RouteGroupKind, bool) {
	served := servedKinds(l.Protocol)
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return served, true
	}
	kinds, all := []gwv1.RouteGroupKind{}, true
	for _, k := range l.AllowedRoutes.Kinds {
		i := slices.IndexFunc(served, func(s gwv1.RouteGroupKind) bool { return isKind(k, s.Kind) })
		switch {
		case i < 0:
			all = false
		case !slices.Contains(kinds, served[i]):
			kinds = append(kinds, served[i])
		}
	}
	return kinds, all
}

// servedKinds are the route kinds a listener of protocol carries: HTTP
// and HTTPS, HTTPRoutes and GRPCRoutes; TLS, TLSRoutes; TCP, TCPRoutes.
func servedKinds(protocol gwv1.ProtocolType) []gwv1.RouteGroupKind {
	group := ptrTo(gwv1.Group(gatewayGroup))
	switch protocol {
	case gwv1.TLSProtocolType:
		return []gwv1.RouteGroupKind{{Group: group, Kind: kindTLSRoute}}
	case gwv1.TCPProtocolType:
		return []gwv1.RouteGroupKind{{Group: group, Kind: kindTCPRoute}}
	}
	return []gwv1.RouteGroupKind{{Group: group, Kind: kindRoute}, {Group: group, Kind: kindGRPCRoute}}
}

// kindNames lists kinds for a message: "HTTPRoutes and GRPCRoutes".
func kindNames(kinds []gwv1.RouteGroupKind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k.Kind) + "s"
	}
	return strings.Join(names, " and ")
}

// isKind reports whether k is the Gateway API's route kind kind.
func isKind(k gwv1.RouteGroupKind, kind gwv1.Kind) bool {
	return k.Kind == kind && (k.Group == nil || *k.Group == gatewayGroup)
}

// certificates resolves an HTTPS listener's certificateRefs: Secrets of
// type kubernetes.io/tls, in the Gateway's namespace or in one whose
// ReferenceGrant opens it to Gateways of the Gateway's. A Secret that is
// not a valid certificate keeps its last good content serving, if it
// had one; either way ResolvedRefs says so (InvalidCertificateRef,
// RefNotPermitted).
func certificates(s *Snapshot, g *gwv1.Gateway, l *gwv1.Listener, res *Result) ([]Certificate, bool, string, string) {
	ok, reason, msg := true, string(gwv1.ListenerReasonResolvedRefs), ""
	fail := func(r gwv1.ListenerConditionReason, m string) {
		if ok {
			ok, reason, msg = false, string(r), m
		}
	}
	if l.TLS == nil {
		return nil, false, string(gwv1.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs"
	}
	var out []Certificate
	for _, ref := range l.TLS.CertificateRefs {
		if ref.Group != nil && *ref.Group != "" && *ref.Group != "core" || ref.Kind != nil && *ref.Kind != "Secret" {
			fail(gwv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("certificateRef %s: only Secrets", ref.Name))
			continue
		}
		ns := g.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		if ns != g.Namespace && !secretGranted(s, g.Namespace, ns, string(ref.Name)) {
			fail(gwv1.ListenerReasonRefNotPermitted, fmt.Sprintf("certificateRef %s/%s: no ReferenceGrant in %s allows it", ns, ref.Name, ns))
			continue
		}
		skey := ns + "/" + string(ref.Name)
		sec := s.Secrets[skey]
		var c Certificate
		valid := false
		if sec != nil && sec.Type == corev1.SecretTypeTLS {
			c = Certificate{CertPEM: sec.Data[corev1.TLSCertKey], KeyPEM: sec.Data[corev1.TLSPrivateKeyKey]}
			_, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
			valid = err == nil
		}
		if !valid {
			what := "is not a certificate and key (type kubernetes.io/tls)"
			if sec == nil {
				what = "does not exist"
			}
			fail(gwv1.ListenerReasonInvalidCertificateRef, fmt.Sprintf("certificateRef %s %s", skey, what))
			good, had := s.Good[skey]
			if !had {
				continue
			}
			c = good // the last good one serves on
		}
		res.Good[skey] = c
		out = append(out, c)
	}
	return out, ok, reason, msg
}

// secretGranted reports whether a ReferenceGrant in namespace to lets
// Gateways of namespace from use the Secret name.
func secretGranted(s *Snapshot, from, to, name string) bool {
	for _, g := range s.Grants {
		if g.Namespace != to {
			continue
		}
		okFrom := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return f.Group == gatewayGroup && f.Kind == kindGateway && string(f.Namespace) == from
		})
		okTo := slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return (t.Group == "" || t.Group == "core") && t.Kind == "Secret" && (t.Name == nil || string(*t.Name) == name)
		})
		if okFrom && okTo {
			return true
		}
	}
	return false
}
