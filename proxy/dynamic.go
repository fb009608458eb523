package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/route"
)

// ApplyRouting serves a route provider's routing (config.Routing, from
// the supervisor: ipc.Worker.OnRouting) beside the config's own routes and
// backends, without a new generation: its backends are made (or kept, with
// their pools, when their config did not change), its rules compiled with
// the config's into a new table, which replaces the old one at once. A
// request in flight finishes on the rule it matched. A backend that is
// gone has its idle connections closed. Problems (a backend whose name the
// config has, a rule that does not compile) leave their part out and are
// returned; the rest serves.
func (p *Proxy) ApplyRouting(payload []byte) error {
	var r config.Routing
	if err := json.Unmarshal(payload, &r); err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	p.routingMu.Lock()
	defer p.routingMu.Unlock()
	old := p.dynamicBackends()
	next := make(map[string]*backend, len(r.Backends))
	var errs []error
	for _, bc := range r.Backends {
		if p.backends[bc.Name] != nil || next[bc.Name] != nil {
			errs = append(errs, fmt.Errorf("routing: backend %q: the name is taken", bc.Name))
			continue
		}
		if bc.Kubernetes != nil {
			// Not yet: the Kubernetes watches are the config's, fixed at
			// the worker's start.
			errs = append(errs, fmt.Errorf("routing: backend %q: Kubernetes backends of a routing are not watched yet", bc.Name))
			continue
		}
		bc.SetDefaults()
		if b := old[bc.Name]; b != nil && reflect.DeepEqual(b.cfg, bc) {
			next[bc.Name] = b
			continue
		}
		next[bc.Name] = newBackend(bc, p.cfg.HTTP.MaxHeaderBytes)
	}
	find := func(name string) (*backend, bool) {
		if b := next[name]; b != nil {
			return b, true
		}
		b := p.backends[name]
		return b, b != nil
	}
	rules := yamlRules(p.cfg, p.backends)
	for _, rr := range r.Rules {
		rules = append(rules, route.Resolve(rr, find))
	}
	table, err := route.Compile(rules)
	if err != nil {
		errs = append(errs, err)
	}
	p.dynamic.Store(&next)
	p.routes.Store(table)
	for name, b := range old {
		if next[name] != b {
			b.retire()
		}
	}
	return errors.Join(errs...)
}

// dynamicBackends returns the routing's backends by name (none before a
// routing came).
func (p *Proxy) dynamicBackends() map[string]*backend {
	if m := p.dynamic.Load(); m != nil {
		return *m
	}
	return nil
}

// eachBackend calls fn with every backend: the config's, then the
// routing's.
func (p *Proxy) eachBackend(fn func(*backend)) {
	for _, b := range p.backends {
		fn(b)
	}
	for _, b := range p.dynamicBackends() {
		fn(b)
	}
}
