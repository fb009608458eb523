package main

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"

	"github.com/baton-proxy/baton/gateway"
	"github.com/baton-proxy/baton/ingress"
	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/supervisor"
	"go.uber.org/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// providerSink serves the route providers' results (the Gateway API
// controller's, the Ingress controller's) through the supervisor, which
// learns neither: their routings go to the workers as one opaque payload
// (at once, no generation), and their listeners join the config's
// (loadSupervisorConfig merges them) and go live by a handoff when they
// change.
type providerSink struct {
	sup *supervisor.Supervisor

	serveMu sync.Mutex // serializes serve: one routing, one handoff at a time

	mu        sync.Mutex // protects listeners and routings
	listeners map[string][]config.Listener
	routings  map[string]providerRouting
}

// providerRouting is one provider's routing: its backends, the
// certificates of its TLS listeners, and its rules encoded a line each
// (config.RoutingPayload).
type providerRouting struct {
	backends []config.Backend
	certs    map[string][]config.Certificate
	auth     map[string][]config.ClientAuth // of clients, by listener
	lines    [][]byte
}

// Providers, in the order their routings are merged.
var providers = []string{config.ProviderGateway, config.ProviderIngress}

// serve sends the routing of every provider, provider's replaced by r,
// then, when provider's listeners changed, reloads and waits for the
// handoff: the routing first, so that the new generation's workers have
// the routes of the listeners they open.
func (p *providerSink) serve(provider string, ls []config.Listener, r providerRouting) error {
	p.serveMu.Lock()
	defer p.serveMu.Unlock()
	p.mu.Lock()
	if p.routings == nil {
		p.routings, p.listeners = map[string]providerRouting{}, map[string][]config.Listener{}
	}
	p.routings[provider] = r
	payload := p.payloadLocked()
	prev := p.listeners[provider]
	changed := !reflect.DeepEqual(ls, prev)
	p.listeners[provider] = ls // what the reload's config takes (provided)
	p.mu.Unlock()
	if err := p.sup.SetRouting(payload); err != nil {
		return fmt.Errorf("%s routing: %w", provider, err)
	}
	if !changed {
		return nil
	}
	h := p.sup.Reload(provider)
	if h.Outcome != supervisor.OutcomeOK {
		// The running generation serves the listeners it had: so does
		// the next reload, until a serve puts these live.
		p.mu.Lock()
		p.listeners[provider] = prev
		p.mu.Unlock()
		return fmt.Errorf("the handoff for the %s listeners: %s: %s", provider, h.Outcome, h.Reason)
	}
	return nil
}

// payloadLocked merges the providers' routings: their backends (one of a
// name: the providers name a Service's backend alike) and rules.
func (p *providerSink) payloadLocked() []byte {
	var head config.RoutingHead
	var lines [][]byte
	for _, name := range providers {
		r := p.routings[name]
		for _, b := range r.backends {
			if !slices.ContainsFunc(head.Backends, func(x config.Backend) bool { return x.Name == b.Name }) {
				head.Backends = append(head.Backends, b)
			}
		}
		for l, cs := range r.certs { // listener names are the provider's own
			if head.Certificates == nil {
				head.Certificates = map[string][]config.Certificate{}
			}
			head.Certificates[l] = cs
		}
		for l, as := range r.auth {
			if head.ClientAuth == nil {
				head.ClientAuth = map[string][]config.ClientAuth{}
			}
			head.ClientAuth[l] = as
		}
		lines = append(lines, r.lines...)
	}
	return config.RoutingPayload(head, lines)
}

// provided returns the providers' listeners, for loadSupervisorConfig.
func (p *providerSink) provided() []config.Listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ls []config.Listener
	for _, name := range providers {
		ls = append(ls, p.listeners[name]...)
	}
	return ls
}

// gatewaySink is the Gateway API controller's way to the providerSink.
type gatewaySink struct{ p *providerSink }

// Serve serves res's listeners and routing.
func (g gatewaySink) Serve(ctx context.Context, res *gateway.Result) error {
	ls, certs := gatewayListeners(res)
	return g.p.serve(config.ProviderGateway, ls, providerRouting{backends: res.Routing.Backends, certs: certs, lines: res.Lines})
}

// gatewayListeners are res's listeners as the config's: a reuseport group
// per Gateway and port, bound whether or not an interface has the
// address (tcp for TLS and TCP listeners, TLS passthrough for a TLS one
// that does not terminate); and the certificates of those that terminate, which travel with the
// routing (a rotated Secret is no handoff; a listener added is).
func gatewayListeners(res *gateway.Result) ([]config.Listener, map[string][]config.Certificate) {
	var ls []config.Listener
	var certs map[string][]config.Certificate
	for _, l := range res.Listeners {
		cl := config.Listener{Name: l.Name, Address: l.Address.String(), Protocol: config.ProtocolHTTP, ReusePort: true, FreeBind: true, Provider: config.ProviderGateway}
		if l.Protocol == gwv1.TLSProtocolType || l.Protocol == gwv1.TCPProtocolType {
			cl.Protocol = config.ProtocolTCP // TLSRoutes and TCPRoutes: streams
		}
		if l.Passthrough {
			cl.TLS = &config.ListenerTLS{Mode: config.TLSPassthrough}
		} else if l.Protocol == gwv1.HTTPSProtocolType || len(l.Certificates) > 0 {
			cl.TLS = &config.ListenerTLS{MinVersion: config.DefaultTLSMinVersion}
			for _, c := range l.Certificates {
				if certs == nil {
					certs = map[string][]config.Certificate{}
				}
				certs[l.Name] = append(certs[l.Name], config.Certificate{CertPEM: c.CertPEM, KeyPEM: c.KeyPEM})
			}
		}
		ls = append(ls, cl)
	}
	return ls, certs
}

// startGateway starts the Gateway API controller of cfg's gateway
// section, serving through sink, until ctx ends; the returned function
// waits for it.
func startGateway(ctx context.Context, cfg *config.Config, sink *providerSink, log *zap.Logger) (func(), error) {
	client, err := gateway.NewClient(cfg.Kubernetes.Kubeconfig, "baton")
	if err != nil {
		return nil, err
	}
	var pool []netip.Prefix
	for _, a := range cfg.Gateway.Addresses {
		p, err := config.ParsePrefix(a)
		if err != nil {
			return nil, err // validated
		}
		pool = append(pool, p)
	}
	ctl := gateway.New(client, gateway.Options{ControllerName: cfg.Gateway.ControllerName, Addresses: pool}, gatewaySink{sink}, log)
	return runController(ctx, "gateway controller", ctl.Run, log), nil
}

// runController runs a controller's run until ctx ends; the returned
// function waits for it.
func runController(ctx context.Context, what string, run func(context.Context) error, log *zap.Logger) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			log.Error(what, zap.Error(err))
		}
	}()
	return func() { <-done }
}

// The Ingress controller's listeners.
const (
	ingressHTTP  = "ingress/http"
	ingressHTTPS = "ingress/https"
)

// ingressSink is the Ingress controller's way to the providerSink: its
// two listeners, always the same (one handoff puts them live, at the
// first serve), and its routing, with the HTTPS listener's certificates:
// a new or rotated certificate goes live inside the workers, as a route
// does.
type ingressSink struct {
	p   *providerSink
	cfg *config.Ingress
}

// Serve serves res's routing and certificates on the Ingress listeners.
func (s ingressSink) Serve(ctx context.Context, res *ingress.Result) error {
	var certs []config.Certificate
	for _, c := range res.Certificates {
		certs = append(certs, config.Certificate{CertPEM: c.CertPEM, KeyPEM: c.KeyPEM})
	}
	r := providerRouting{backends: res.Routing.Backends, lines: res.Lines}
	if len(certs) > 0 {
		r.certs = map[string][]config.Certificate{ingressHTTPS: certs}
	}
	if len(res.ClientAuth) > 0 {
		r.auth = map[string][]config.ClientAuth{ingressHTTPS: res.ClientAuth}
	}
	return s.p.serve(config.ProviderIngress, s.listeners(), r)
}

func (s ingressSink) listeners() []config.Listener {
	return []config.Listener{
		{Name: ingressHTTP, Address: s.cfg.Address, Protocol: config.ProtocolHTTP, ReusePort: true, FreeBind: true, Provider: config.ProviderIngress},
		{Name: ingressHTTPS, Address: s.cfg.TLSAddress, Protocol: config.ProtocolHTTP, ReusePort: true, FreeBind: true, Provider: config.ProviderIngress,
			TLS: &config.ListenerTLS{MinVersion: config.DefaultTLSMinVersion}},
	}
}

// startIngress starts the Ingress controller of cfg's ingress section,
// serving through sink, until ctx ends; the returned function waits for
// it.
func startIngress(ctx context.Context, cfg *config.Config, sink *providerSink, log *zap.Logger) (func(), error) {
	in := cfg.Ingress
	tls, _ := netip.ParseAddrPort(in.TLSAddress) // validated
	ctl, err := ingress.New(cfg.Kubernetes.Kubeconfig, ingress.Config{
		Options:        ingress.Options{HTTPListener: ingressHTTP, HTTPSListener: ingressHTTPS, HTTPSPort: int(tls.Port())},
		Address:        in.Address,
		PublishService: in.PublishService,
	}, ingressSink{sink, in}, log)
	if err != nil {
		return nil, err
	}
	return runController(ctx, "ingress controller", ctl.Run, log), nil
}
