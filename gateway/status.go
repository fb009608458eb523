package gateway

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ConditionShadowed is baton's condition of a route's parent when an
// earlier route (in the spec's order of precedence: older, then by
// namespace/name) takes some of its matches exactly as they are, on the
// same listener and host: those requests never reach this route. The
// Gateway API resolves such conflicts by precedence and names no
// condition for them; this one says which route lost, and what. Its
// reason is ReasonMatchesTaken.
const (
	ConditionShadowed  gwv1.RouteConditionType   = "baton-proxy.github.io/Shadowed"
	ReasonMatchesTaken gwv1.RouteConditionReason = "MatchesTakenByEarlierRoute"
)

// SupportedFeatures are the Gateway API features baton implements, as
// GatewayClass status lists them (and the conformance suite reads them).
var SupportedFeatures = []gwv1.FeatureName{
	"Gateway",
	"HTTPRoute",
	"GRPCRoute",
	"TLSRoute",
	"TLSRouteModeTerminate",
	"TCPRoute",
	"ReferenceGrant",
	"HTTPRouteQueryParamMatching",
	"HTTPRouteMethodMatching",
	"HTTPRouteResponseHeaderModification",
	"HTTPRoutePortRedirect",
	"HTTPRouteSchemeRedirect",
	"HTTPRoutePathRedirect",
	"HTTPRouteHostRewrite",
	"HTTPRoutePathRewrite",
	"HTTPRouteRequestTimeout",
	"HTTPRouteBackendTimeout",
	"HTTPRouteRequestMirror",
	"GatewayPort8080",
	"HTTPRouteBackendProtocolH2C",
	"HTTPRouteBackendProtocolWebSocket",
}

// writeStatuses writes the statuses that differ from what the objects
// have, and returns how many it wrote; conflicts says whether a write
// found its object changed since s. Status is written only when it
// changes: an object's write is an event, and the next reconcile finds it
// equal, so there is no loop of writes. served is the outcome of serving
// the result (a Gateway is Programmed only when its sockets listen).
func (c *Controller) writeStatuses(ctx context.Context, s *Snapshot, res *Result, served error, conflicts *bool) int {
	n := 0
	write := func(resource, ns, name string, obj runtime.Object) {
		if err := c.client.updateStatus(ctx, resource, ns, name, obj); err != nil {
			// A conflict: the object changed since the snapshot (another
			// controller wrote its part of a route's status, say). The
			// writer tries again once the cache has the change.
			*conflicts = *conflicts || apierrors.IsConflict(err)
			c.log.Debug("status not written", zap.String("resource", resource), zap.String("name", ns+"/"+name), zap.Error(err))
			return
		}
		n++
	}
	for i := range s.Classes {
		gc := &s.Classes[i]
		if string(gc.Spec.ControllerName) != c.opts.ControllerName {
			continue
		}
		st := gc.Status.DeepCopy()
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: string(gwv1.GatewayClassConditionStatusAccepted), Status: metav1.ConditionTrue,
			Reason: string(gwv1.GatewayClassReasonAccepted), Message: "baton serves Gateways of this class", ObservedGeneration: gc.Generation})
		st.SupportedFeatures = supported()
		if !reflect.DeepEqual(st, &gc.Status) {
			out := gc.DeepCopy()
			out.Status = *st
			write("gatewayclasses", "", gc.Name, out)
		}
	}
	ours := map[string]bool{}
	for _, gc := range s.Classes {
		if string(gc.Spec.ControllerName) == c.opts.ControllerName {
			ours[gc.Name] = true
		}
	}
	for i := range s.Gateways {
		g := &s.Gateways[i]
		if !ours[string(g.Spec.GatewayClassName)] {
			continue
		}
		st := gatewayStatus(g, res, served)
		if !reflect.DeepEqual(st, &g.Status) {
			out := g.DeepCopy()
			out.Status = *st
			write("gateways", g.Namespace, g.Name, out)
		}
	}
	routeStatuses(c, res, "httproutes", kindRoute, s.HTTPRoutes, func(r *gwv1.HTTPRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus }, write)
	routeStatuses(c, res, "grpcroutes", kindGRPCRoute, s.GRPCRoutes, func(r *gwv1.GRPCRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus }, write)
	routeStatuses(c, res, "tlsroutes", kindTLSRoute, s.TLSRoutes, func(r *gwv1.TLSRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus }, write)
	routeStatuses(c, res, "tcproutes", kindTCPRoute, s.TCPRoutes, func(r *gwv1.TCPRoute) *gwv1.RouteStatus { return &r.Status.RouteStatus }, write)
	return n
}

// routeObject is a route kind's object, *R.
type routeObject[R any] interface {
	*R
	runtime.Object
	metav1.Object
	DeepCopy() *R
}

// routeStatuses writes, with write, the statuses of routes (of kind, the
// API's resource) that differ from what they should say; status returns
// a route's RouteStatus.
func routeStatuses[R any, P routeObject[R]](c *Controller, res *Result, resource string, kind gwv1.Kind, routes []R, status func(P) *gwv1.RouteStatus, write func(resource, ns, name string, obj runtime.Object)) {
	for i := range routes {
		r := P(&routes[i])
		parents, ok := res.Routes[routeKey(kind, r)]
		if !ok {
			continue
		}
		rs := status(r)
		if st := c.routeStatus(r.GetGeneration(), rs, parents); !reflect.DeepEqual(st, rs) {
			out := P(r.DeepCopy())
			*status(out) = *st
			write(resource, r.GetNamespace(), r.GetName(), out)
		}
	}
}

func supported() []gwv1.SupportedFeature {
	out := make([]gwv1.SupportedFeature, len(SupportedFeatures))
	for i, f := range SupportedFeatures {
		out[i] = gwv1.SupportedFeature{Name: f}
	}
	return out
}

// gatewayStatus is what g's status should say.
func gatewayStatus(g *gwv1.Gateway, res *Result, served error) *gwv1.GatewayStatus {
	st := g.Status.DeepCopy()
	gen := g.Generation
	addr, hasAddr := res.Addresses[key(&g.ObjectMeta)]
	st.Addresses = nil
	if hasAddr {
		st.Addresses = []gwv1.GatewayStatusAddress{{Type: ptrTo(gwv1.IPAddressType), Value: addr.String()}}
	}
	// Accepted unless no listener is; ListenersNotValid when one is not
	// (accepted, and free of conflict).
	accepted := metav1.Condition{Type: string(gwv1.GatewayConditionAccepted), Status: metav1.ConditionTrue,
		Reason: string(gwv1.GatewayReasonAccepted), ObservedGeneration: gen}
	valid := 0
	for _, l := range g.Spec.Listeners {
		if lc := res.ListenerStatus[key(&g.ObjectMeta)+"/"+string(l.Name)]; lc.Accepted && !lc.Conflicted {
			valid++
		}
	}
	if valid < len(g.Spec.Listeners) {
		accepted.Reason, accepted.Message = string(gwv1.GatewayReasonListenersNotValid), fmt.Sprintf("%d of %d listeners are not valid: see their conditions", len(g.Spec.Listeners)-valid, len(g.Spec.Listeners))
		if valid == 0 {
			accepted.Status = metav1.ConditionFalse
		}
	}
	apimeta.SetStatusCondition(&st.Conditions, accepted)
	programmed := metav1.Condition{Type: string(gwv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue, Reason: string(gwv1.GatewayReasonProgrammed), ObservedGeneration: gen}
	switch {
	case !hasAddr:
		programmed.Status, programmed.Reason, programmed.Message = metav1.ConditionFalse, string(gwv1.GatewayReasonAddressNotAssigned), "the address pool (gateway.addresses) is spent"
	case served != nil:
		programmed.Status, programmed.Reason, programmed.Message = metav1.ConditionFalse, string(gwv1.GatewayReasonInvalid), served.Error()
	}
	apimeta.SetStatusCondition(&st.Conditions, programmed)
	var ls []gwv1.ListenerStatus
	for _, l := range g.Spec.Listeners {
		var prev []metav1.Condition
		if i := slices.IndexFunc(st.Listeners, func(s gwv1.ListenerStatus) bool { return s.Name == l.Name }); i >= 0 {
			prev = st.Listeners[i].Conditions
		}
		ls = append(ls, listenerStatus(g, &l, prev, res, programmed.Status == metav1.ConditionTrue))
	}
	st.Listeners = ls
	return st
}

// listenerStatus is what listener l's status should say.
func listenerStatus(g *gwv1.Gateway, l *gwv1.Listener, prev []metav1.Condition, res *Result, programmed bool) gwv1.ListenerStatus {
	gen := g.Generation
	lkey := key(&g.ObjectMeta) + "/" + string(l.Name)
	lc := res.ListenerStatus[lkey]
	conds := slices.Clone(prev)
	ls := gwv1.ListenerStatus{Name: l.Name, AttachedRoutes: int32(res.Attached[lkey]), SupportedKinds: []gwv1.RouteGroupKind{}}
	set := func(t gwv1.ListenerConditionType, ok bool, reason, msg string) {
		s := metav1.ConditionTrue
		if !ok {
			s = metav1.ConditionFalse
		}
		apimeta.SetStatusCondition(&conds, metav1.Condition{Type: string(t), Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
	}
	if lc.Kinds != nil {
		ls.SupportedKinds = lc.Kinds
	}
	set(gwv1.ListenerConditionAccepted, lc.Accepted, lc.AcceptedReason, lc.AcceptedMsg)
	set(gwv1.ListenerConditionResolvedRefs, lc.ResolvedRefs, lc.ResolvedReason, lc.ResolvedMsg)
	set(gwv1.ListenerConditionConflicted, lc.Conflicted, lc.ConflictReason, lc.ConflictedMsg)
	served := slices.ContainsFunc(res.Listeners, func(bl Listener) bool { return bl.Name == listenerName(g, l.Port) })
	switch {
	case !lc.Accepted || lc.Conflicted:
		set(gwv1.ListenerConditionProgrammed, false, string(gwv1.ListenerReasonInvalid), "not accepted, or in conflict")
	case !served:
		set(gwv1.ListenerConditionProgrammed, false, string(gwv1.ListenerReasonInvalid), "nothing to serve it with (no address, or no valid certificate)")
	case !programmed:
		set(gwv1.ListenerConditionProgrammed, false, string(gwv1.ListenerReasonPending), "the Gateway is not programmed")
	default:
		set(gwv1.ListenerConditionProgrammed, true, string(gwv1.ListenerReasonProgrammed), "")
	}
	ls.Conditions = conds
	return ls
}

// routeStatus is what a route's status (now rs, at generation gen)
// should say: its parents of other controllers as they are, and one entry
// per parent reference of ours.
func (c *Controller) routeStatus(gen int64, rs *gwv1.RouteStatus, parents []ParentStatus) *gwv1.RouteStatus {
	st := rs.DeepCopy()
	var keep []gwv1.RouteParentStatus
	prev := map[string][]metav1.Condition{}
	for _, p := range st.Parents {
		if string(p.ControllerName) != c.opts.ControllerName {
			keep = append(keep, p)
			continue
		}
		prev[refKey(&p.ParentRef)] = p.Conditions
	}
	for _, ps := range parents {
		if ps.AcceptedReason == "" {
			continue // not a parent of ours
		}
		conds := slices.Clone(prev[refKey(&ps.Ref)])
		cond := func(t gwv1.RouteConditionType, ok bool, reason, msg string) {
			s := metav1.ConditionTrue
			if !ok {
				s = metav1.ConditionFalse
			}
			apimeta.SetStatusCondition(&conds, metav1.Condition{Type: string(t), Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
		}
		cond(gwv1.RouteConditionAccepted, ps.Accepted, ps.AcceptedReason, ps.AcceptedMessage)
		cond(gwv1.RouteConditionResolvedRefs, ps.ResolvedRefs, ps.ResolvedReason, ps.ResolvedRefMessage)
		if ps.Accepted && ps.Shadowed != "" {
			cond(ConditionShadowed, true, string(ReasonMatchesTaken), ps.Shadowed)
		} else {
			apimeta.RemoveStatusCondition(&conds, string(ConditionShadowed))
		}
		keep = append(keep, gwv1.RouteParentStatus{ParentRef: ps.Ref, ControllerName: gwv1.GatewayController(c.opts.ControllerName), Conditions: conds})
	}
	st.Parents = keep
	return st
}

func refKey(r *gwv1.ParentReference) string {
	k := string(r.Name)
	if r.Namespace != nil {
		k = string(*r.Namespace) + "/" + k
	}
	if r.SectionName != nil {
		k += "#" + string(*r.SectionName)
	}
	if r.Port != nil {
		k += fmt.Sprintf(":%d", *r.Port)
	}
	return k
}

func ptrTo[T any](v T) *T { return &v }
