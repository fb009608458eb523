package kube

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Endpoint is one address a backend may send requests to, with its
// EndpointSlice conditions as the API defines them.
type Endpoint struct {
	// Address is host:port: a pod IP, a ClusterIP, or an ExternalName.
	Address string
	// Ready: unset in the API means ready.
	Ready bool
	// Serving: unset means the value of Ready.
	Serving bool
	// Terminating: unset means not terminating.
	Terminating bool
	// NoReuse: a connection to it serves one request, then closes. A
	// ClusterIP is so while a pod behind it is terminating and still
	// serving (its grace period): a pooled
	// connection that kube-proxy sent to that pod would meet its close,
	// which a request sent at that moment cannot survive.
	NoReuse bool
}

// anyDraining reports whether an endpoint of slices is terminating and
// still serving: a pod in its grace period, which will close the
// connections it has. (One that no longer serves has closed them, or
// died: not reusing connections then would only send more new ones
// through kube-proxy's view, which may still include it.)
func anyDraining(slices []*discoveryv1.EndpointSlice) bool {
	for _, s := range slices {
		for _, e := range s.Endpoints {
			c := e.Conditions
			serving := c.Serving != nil && *c.Serving || c.Serving == nil && (c.Ready == nil || *c.Ready)
			if c.Terminating != nil && *c.Terminating && serving {
				return true
			}
		}
	}
	return false
}

// Errors a Service can be in; the backend answers 503 meanwhile.
var (
	ErrNoService   = errors.New("kube: service not found")
	ErrNoPort      = errors.New("kube: service has no such port")
	ErrHeadless    = errors.New("kube: headless service (clusterIP: None) cannot be reached in clusterIP mode; use mode: endpoints")
	ErrNoClusterIP = errors.New("kube: service has no cluster IP yet")
)

// servicePort finds the Service port a Target names.
func servicePort(svc *corev1.Service, t *Target) (*corev1.ServicePort, error) {
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if (t.PortName != "" && p.Name == t.PortName) || (t.PortName == "" && p.Port == t.PortNumber) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %s in %s/%s", ErrNoPort, t.port(), svc.Namespace, svc.Name)
}

// endpointsMode computes the endpoints of t from its Service and
// EndpointSlices: the slices' port named like the Service port (named
// target ports resolve per slice), every address family, de-duplicated by
// address and port, sorted.
func endpointsMode(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, t *Target) ([]Endpoint, error) {
	if svc == nil {
		return nil, ErrNoService
	}
	sp, err := servicePort(svc, t)
	if err != nil {
		return nil, err
	}
	byAddr := make(map[string]Endpoint)
	for _, s := range eps {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices are not pods
		}
		var port int32 = -1
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == sp.Name && p.Port != nil {
				port = *p.Port
				break
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			ep := Endpoint{
				Address:     net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(port))),
				Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
				Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
			}
			ep.Serving = ep.Ready
			if e.Conditions.Serving != nil {
				ep.Serving = *e.Conditions.Serving
			}
			if old, dup := byAddr[ep.Address]; dup {
				// An endpoint moving between slices shows up twice for a
				// moment: keep its better view.
				ep = better(old, ep)
			}
			byAddr[ep.Address] = ep
		}
	}
	out := make([]Endpoint, 0, len(byAddr))
	for _, ep := range byAddr {
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return cmp.Compare(a.Address, b.Address) })
	return out, nil
}

func better(a, b Endpoint) Endpoint {
	rank := func(e Endpoint) int {
		switch {
		case e.Ready && !e.Terminating:
			return 3
		case e.Ready:
			return 2
		case e.Serving:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// clusterIPMode computes the one backend of t in clusterIP mode: the
// Service's cluster IPs (both families; the first is primary) on the
// Service port, or its ExternalName.
func clusterIPMode(svc *corev1.Service, t *Target, draining bool) ([]Endpoint, error) {
	if svc == nil {
		return nil, ErrNoService
	}
	sp, err := servicePort(svc, t)
	if err != nil && svc.Spec.Type != corev1.ServiceTypeExternalName {
		return nil, err
	}
	port := t.PortNumber
	if sp != nil {
		port = sp.Port
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if port == 0 {
			return nil, fmt.Errorf("%w: name a port number for ExternalName service %s/%s", ErrNoPort, svc.Namespace, svc.Name)
		}
		return []Endpoint{{Address: net.JoinHostPort(svc.Spec.ExternalName, strconv.Itoa(int(port))), Ready: true, Serving: true}}, nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if len(ips) > 0 && ips[0] == corev1.ClusterIPNone {
		return nil, ErrHeadless
	}
	if len(ips) == 0 {
		return nil, ErrNoClusterIP
	}
	var out []Endpoint
	for _, ip := range ips {
		out = append(out, Endpoint{Address: net.JoinHostPort(ip, strconv.Itoa(int(port))), Ready: true, Serving: true, NoReuse: draining})
	}
	return out, nil
}
