package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/proxy/kube"
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
func (p *Proxy) ApplyRouting(ctx context.Context, payload []byte) error {
	p.routingMu.Lock()
	defer p.routingMu.Unlock()
	head, lines, err := config.RoutingLines(payload)
	if err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	var errs []error
	if err := p.applyCertificates(head.Certificates, head.ClientAuth); err != nil {
		errs = append(errs, err)
	}
	old := p.dynamicBackends()
	next := make(map[string]*backend, len(head.Backends))
	for _, bc := range head.Backends {
		if p.backends[bc.Name] != nil || next[bc.Name] != nil {
			errs = append(errs, fmt.Errorf("routing: backend %q: the name is taken", bc.Name))
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
	table, cerr := p.buildRoutes(lines, find)
	if cerr != nil {
		errs = append(errs, cerr)
	}
	// The new backends first (the routes still lead to the old ones):
	// their Kubernetes endpoints are in place before a route leads to
	// them.
	p.dynamic.Store(&next)
	if err := p.watchKubeBounded(ctx, p.kubeTargets(next)); err != nil {
		errs = append(errs, err)
	}
	p.routes.Store(table)
	for name, b := range old {
		if next[name] != b {
			b.retire()
		}
	}
	return errors.Join(errs...)
}

// appliedRouting is the last routing a worker applied: its version
// (ipc.Routing.Version) and, when it applied it only in part, why.
type appliedRouting struct {
	version uint64
	err     string
}

// applyRouting applies the routing of version (ApplyRouting) and has the
// worker report what came of it at once (Stats.RoutingVersion and
// RoutingError).
func (p *Proxy) applyRouting(ctx context.Context, payload []byte, version uint64) error {
	err := p.ApplyRouting(ctx, payload)
	applied := &appliedRouting{version: version}
	if err != nil {
		applied.err = err.Error()
	}
	p.routing.Store(applied)
	p.statsChanged()
	return err
}

// preparedRule is one rule of a routing, compiled, by its line of the
// routing payload (config.MarshalRouting): kept from one routing to the
// next while its line and the backends it resolved to stay the same.
type preparedRule struct {
	line string
	prep *route.Prepared[*backend]
	// names are its backends' and mirrors' names, in order, and targets
	// what they resolved to.
	names   []string
	targets []*backend
}

// buildRoutes compiles a routing's rule lines, with the config's own
// routes, into a new table. A line the last routing had, whose backends
// are the same, is not decoded nor compiled again: a change of one route
// of a thousand compiles that route's rules only. A line that does not
// decode or compile is left out and named in the error. routingMu held.
func (p *Proxy) buildRoutes(lines [][]byte, find func(string) (*backend, bool)) (*routeTable, error) {
	ps := slices.Clone(p.yamlPrepared)
	next := make(map[string]preparedRule, len(lines))
	var errs []error
	for i, line := range lines {
		if pr, ok := p.prepared[string(line)]; ok && pr.resolvesTo(find) {
			ps = append(ps, pr.prep)
			next[pr.line] = pr
			continue
		}
		var rr route.Rule[string]
		if err := json.Unmarshal(line, &rr); err != nil {
			errs = append(errs, fmt.Errorf("routing: rule %d: %w", i, err))
			continue
		}
		rule := route.Resolve(rr, find)
		prep, err := route.Prepare(&rule)
		if err != nil {
			errs = append(errs, fmt.Errorf("routing: %w", err))
			continue
		}
		pr := preparedRule{line: string(line), prep: prep}
		pr.names, pr.targets = ruleTargets(&rr, find)
		ps = append(ps, prep)
		next[pr.line] = pr
	}
	p.prepared = next
	return route.Build(ps, p.routes.Load()), errors.Join(errs...)
}

// ruleTargets are the names of r's backends and mirrors, in order, and
// what they resolve to through find (nil: not found).
func ruleTargets(r *route.Rule[string], find func(string) (*backend, bool)) ([]string, []*backend) {
	names := make([]string, 0, len(r.Backends)+len(r.Filters.Mirrors))
	for _, b := range r.Backends {
		names = append(names, b.Target)
	}
	for _, m := range r.Filters.Mirrors {
		names = append(names, m.Target)
	}
	targets := make([]*backend, len(names))
	for i, n := range names {
		targets[i], _ = find(n)
	}
	return names, targets
}

// resolvesTo reports whether pr's rule resolves through find to the
// backends it was compiled with: a backend made again (its config
// changed) makes the rule compiled again, with the new one.
func (pr preparedRule) resolvesTo(find func(string) (*backend, bool)) bool {
	for i, n := range pr.names {
		if t, _ := find(n); t != pr.targets[i] {
			return false
		}
	}
	return true
}

// kubeTargets are the Kubernetes Services of the config's backends and of
// a routing's.
func (p *Proxy) kubeTargets(dynamic map[string]*backend) []kube.Target {
	var ts []kube.Target
	for _, bc := range p.cfg.Backends {
		if t, ok := kubeTarget(p.backends[bc.Name]); ok {
			ts = append(ts, t)
		}
	}
	names := slices.Sorted(maps.Keys(dynamic)) // an order that holds from one routing to the next
	for _, name := range names {
		if t, ok := kubeTarget(dynamic[name]); ok {
			ts = append(ts, t)
		}
	}
	return ts
}

// kubeTarget is b's Kubernetes Service, if it has one. The target names
// b's instance: a backend made again under its name (its config changed)
// gets its endpoints afresh.
func kubeTarget(b *backend) (kube.Target, bool) {
	k := b.cfg.Kubernetes
	if k == nil {
		return kube.Target{}, false
	}
	return kube.Target{Backend: b.name, Instance: b.instance, Namespace: k.Namespace(), Service: k.Name(), PortName: k.Port.Name, PortNumber: k.Port.Number, Mode: k.Mode}, true
}

// defaultKubeSyncWait bounds how long a routing waits for the endpoints of the
// Services it newly names: a namespace that cannot be listed (a
// permission missing, the API server away) holds up no other route. Its
// routes serve once the wait ends, 503 until their endpoints are in
// place; the watch goes on and puts them in place when it can.
const defaultKubeSyncWait = 5 * time.Second

// watchKubeBounded is watchKube, waiting at most p.kubeSyncWait.
func (p *Proxy) watchKubeBounded(ctx context.Context, targets []kube.Target) error {
	wait := p.kubeSyncWait
	if wait == 0 {
		wait = defaultKubeSyncWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := p.watchKube(wctx, targets)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		waiting := "no reason known"
		if w := p.kubeWatch(); w != nil {
			if s := w.Waiting(); s != "" {
				waiting = s
			}
		}
		return fmt.Errorf("routing: Kubernetes endpoints not in place after %s (%s): routes to them answer 503 until they are", wait, waiting)
	}
	return err
}

// kubeWatch returns the worker's Kubernetes watch, or nil.
func (p *Proxy) kubeWatch() *kube.Watcher {
	p.kubeMu.Lock()
	defer p.kubeMu.Unlock()
	return p.kube
}

// watchKube makes targets what the worker's Kubernetes watch watches, and
// waits (until ctx ends) for their endpoints to be applied: it starts the
// watch when none runs (the config named no Service). With no target and
// no watch, it does nothing.
func (p *Proxy) watchKube(ctx context.Context, targets []kube.Target) error {
	p.kubeMu.Lock()
	w, ended := p.kube, p.kubeDone
	if w == nil {
		defer p.kubeMu.Unlock()
		if len(targets) == 0 {
			return nil
		}
		return p.startKubeLocked(ctx, targets)
	}
	p.kubeMu.Unlock()
	done := make(chan error, 1)
	w.SetTargets(targets, done)
	select {
	case err := <-done:
		return err
	case <-ended:
		return errors.New("kube: the watch ended")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startKubeLocked starts the worker's Kubernetes watch on targets, and
// waits (until ctx ends) for it to sync. It runs until StopKube.
func (p *Proxy) startKubeLocked(ctx context.Context, targets []kube.Target) error {
	src, err := p.kubeSource()
	if err != nil {
		return fmt.Errorf("kube: %w", err)
	}
	w := kube.New(src, targets, p.ApplyKube, p.log)
	kctx, cancel := context.WithCancel(context.Background())
	synced := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(kctx, synced)
	}()
	p.kube, p.kubeStop, p.kubeDone = w, cancel, done
	select {
	case err := <-synced:
		return err
	case <-done:
		return errors.New("kube: the watch ended before it synced")
	case <-ctx.Done():
		return ctx.Err() // the watch goes on; StopKube ends it
	}
}

// kubeSource is where the watch lists and watches: the API server of the
// config's kubernetes section, unless a test set one.
func (p *Proxy) kubeSource() (kube.Source, error) {
	if p.testKubeSource != nil {
		return p.testKubeSource, nil
	}
	kube.RouteKlog(p.log)
	return kube.NewClient(p.cfg.Kubernetes.Kubeconfig, "baton")
}

// adoptKube makes w, started by the worker for the config's Services, the
// watch that routings change; stop ends it.
func (p *Proxy) adoptKube(w *kube.Watcher, stop func(), done <-chan struct{}) {
	p.kubeMu.Lock()
	defer p.kubeMu.Unlock()
	p.kube, p.kubeStop, p.kubeDone = w, stop, done
}

// StopKube ends the Kubernetes watch, if one runs, and waits for it.
func (p *Proxy) StopKube() {
	p.kubeMu.Lock()
	defer p.kubeMu.Unlock()
	if p.kube != nil {
		p.kubeStop()
		<-p.kubeDone
		p.kube = nil
	}
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
