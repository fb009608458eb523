package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Sink is what the controller's results go to: baton's supervisor, in
// `baton run`.
type Sink interface {
	// Serve makes baton serve res (its listeners, by a handoff when they
	// changed; its routing, at once) and returns once the listeners
	// listen, or why they do not.
	Serve(ctx context.Context, res *Result) error
}

// Controller watches the Gateway API objects and the Services and
// Namespaces they name, and hands what they ask for to a Sink. One
// goroutine (Run's) translates: informer callbacks only say that
// something changed, so a burst of changes is one translation.
type Controller struct {
	client *Client
	opts   Options
	sink   Sink
	log    *zap.Logger

	stores map[string]cache.Store // by resource
	synced []cache.InformerSynced
	infs   []cache.SharedIndexInformer
	notify chan struct{} // capacity 1: something changed

	mu   sync.Mutex // protects last
	last *Result    // the last result served

	elector *elector // whether this replica writes status
}

// New returns a controller on client; Run runs it.
func New(client *Client, opts Options, sink Sink, log *zap.Logger) *Controller {
	if opts.ControllerName == "" {
		opts.ControllerName = DefaultControllerName
	}
	if opts.Namespace == "" {
		opts.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Identity == "" {
		host, _ := os.Hostname()
		opts.Identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	c := &Controller{client: client, opts: opts, sink: sink, log: log.Named("gateway"), stores: map[string]cache.Store{}, notify: make(chan struct{}, 1)}
	c.elector = &elector{c: client, namespace: opts.Namespace, identity: opts.Identity, duration: opts.LeaseDuration, retry: opts.RetryPeriod,
		log: c.log, onChange: c.changed}
	for _, r := range resources {
		inf := cache.NewSharedIndexInformer(client.listWatch(r.name, r.gateway, r.list), r.obj, 0, cache.Indexers{})
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.changed() },
			UpdateFunc: func(any, any) { c.changed() },
			DeleteFunc: func(any) { c.changed() },
		})
		c.stores[r.name] = inf.GetStore()
		c.synced = append(c.synced, inf.HasSynced)
		c.infs = append(c.infs, inf)
	}
	return c
}

func (c *Controller) changed() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends: it serves a first result once the caches
// synced, then one after every change that changes it, and writes the
// statuses that changed.
func (c *Controller) Run(ctx context.Context) error {
	var running sync.WaitGroup
	defer running.Wait()
	for _, inf := range c.infs {
		running.Go(func() { inf.RunWithContext(ctx) })
	}
	running.Go(func() { c.elector.run(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("gateway: caches did not sync: %w", ctx.Err())
	}
	c.changed()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.notify:
			c.reconcile(ctx)
		}
	}
}

// Last returns the last result served, or nil.
func (c *Controller) Last() *Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// reconcile translates what the caches hold, serves it when it changed,
// and writes the statuses.
func (c *Controller) reconcile(ctx context.Context) {
	start := time.Now()
	s := c.snapshot()
	res := Translate(s, c.opts)
	prev := c.Last()
	var serveErr error
	if prev == nil || !sameServing(prev, res) {
		serveErr = c.sink.Serve(ctx, res)
		if serveErr != nil {
			c.log.Warn("serving the Gateway API's routes", zap.Error(serveErr))
		}
	}
	c.mu.Lock()
	c.last = res
	c.mu.Unlock()
	n := 0
	if c.elector.Leader() {
		n = c.writeStatuses(ctx, s, res, serveErr)
	}
	c.log.Debug("reconciled", zap.Duration("took", time.Since(start)), zap.Int("listeners", len(res.Listeners)),
		zap.Int("rules", len(res.Routing.Rules)), zap.Int("statusesWritten", n))
}

// snapshot copies what the caches hold.
func (c *Controller) snapshot() *Snapshot {
	s := &Snapshot{Services: map[string]*corev1.Service{}, Namespaces: map[string]*corev1.Namespace{}, Secrets: map[string]*corev1.Secret{}}
	if last := c.Last(); last != nil {
		s.Good = last.Good
	}
	for _, o := range c.stores["gatewayclasses"].List() {
		s.Classes = append(s.Classes, *o.(*gwv1.GatewayClass))
	}
	for _, o := range c.stores["gateways"].List() {
		s.Gateways = append(s.Gateways, *o.(*gwv1.Gateway))
	}
	for _, o := range c.stores["httproutes"].List() {
		s.HTTPRoutes = append(s.HTTPRoutes, *o.(*gwv1.HTTPRoute))
	}
	for _, o := range c.stores["referencegrants"].List() {
		s.Grants = append(s.Grants, *o.(*gwv1.ReferenceGrant))
	}
	for _, o := range c.stores["services"].List() {
		svc := o.(*corev1.Service)
		s.Services[svc.Namespace+"/"+svc.Name] = svc
	}
	for _, o := range c.stores["namespaces"].List() {
		ns := o.(*corev1.Namespace)
		s.Namespaces[ns.Name] = ns
	}
	for _, o := range c.stores["secrets"].List() {
		if sec := o.(*corev1.Secret); sec.Type == corev1.SecretTypeTLS {
			s.Secrets[sec.Namespace+"/"+sec.Name] = sec
		}
	}
	return s
}

// sameServing reports whether two results serve the same: listeners and
// routing (statuses aside).
func sameServing(a, b *Result) bool {
	ja, _ := json.Marshal(struct {
		L any
		R any
	}{a.Listeners, a.Routing})
	jb, _ := json.Marshal(struct {
		L any
		R any
	}{b.Listeners, b.Routing})
	return string(ja) == string(jb)
}
