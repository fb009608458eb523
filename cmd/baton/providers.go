package main

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"sync"

	"github.com/baton-proxy/baton/gateway"
	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/supervisor"
	"go.uber.org/zap"
)

// gatewaySink serves the Gateway API controller's results through the
// supervisor, which learns no Gateway API: the routing goes to the
// workers as an opaque payload (at once, no generation), and the
// Gateways' listeners join the config's (loadSupervisorConfig merges
// them) and go live by a handoff when they change.
type gatewaySink struct {
	sup *supervisor.Supervisor

	mu        sync.Mutex // protects listeners
	listeners []config.Listener
}

// Serve sends res's routing, then, when the listeners changed, reloads and
// waits for the handoff: the routing first, so that the new generation's
// workers have the routes of the listeners they open.
func (g *gatewaySink) Serve(ctx context.Context, res *gateway.Result) error {
	if err := g.sup.SetRouting(res.RoutingPayload); err != nil {
		return fmt.Errorf("gateway routing: %w", err)
	}
	ls := gatewayListeners(res)
	g.mu.Lock()
	prev := g.listeners
	changed := !reflect.DeepEqual(ls, prev)
	g.listeners = ls // what the reload's config takes (provided)
	g.mu.Unlock()
	if !changed {
		return nil
	}
	h := g.sup.Reload("gateway")
	if h.Outcome != supervisor.OutcomeOK {
		// The running generation serves the listeners it had: so does
		// the next reload, until a Serve puts these live.
		g.mu.Lock()
		g.listeners = prev
		g.mu.Unlock()
		return fmt.Errorf("the handoff for the Gateways' listeners: %s: %s", h.Outcome, h.Reason)
	}
	return nil
}

// provided returns the Gateways' listeners, for loadSupervisorConfig.
func (g *gatewaySink) provided() []config.Listener {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.listeners
}

// gatewayListeners are res's listeners as the config's: a reuseport group
// per Gateway and port, bound whether or not an interface has the
// address.
func gatewayListeners(res *gateway.Result) []config.Listener {
	var ls []config.Listener
	for _, l := range res.Listeners {
		cl := config.Listener{Name: l.Name, Address: l.Address.String(), Protocol: config.ProtocolHTTP, ReusePort: true, FreeBind: true, Provider: config.ProviderGateway}
		if len(l.Certificates) > 0 {
			cl.TLS = &config.ListenerTLS{MinVersion: config.DefaultTLSMinVersion}
			for _, c := range l.Certificates {
				cl.TLS.Certificates = append(cl.TLS.Certificates, config.Certificate{CertPEM: c.CertPEM, KeyPEM: c.KeyPEM})
			}
		}
		ls = append(ls, cl)
	}
	return ls
}

// startGateway starts the Gateway API controller of cfg's gateway
// section, serving through sink, until ctx ends; the returned function
// waits for it.
func startGateway(ctx context.Context, cfg *config.Config, sink *gatewaySink, log *zap.Logger) (func(), error) {
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
	ctl := gateway.New(client, gateway.Options{ControllerName: cfg.Gateway.ControllerName, Addresses: pool}, sink, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctl.Run(ctx); err != nil {
			log.Error("gateway controller", zap.Error(err))
		}
	}()
	return func() { <-done }, nil
}
