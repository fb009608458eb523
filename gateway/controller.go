package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/latest"
	"github.com/baton-proxy/baton/internal/lease"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// something changed, so a burst of changes is one translation. Another
// writes status, from the latest translation when it is free: a burst of
// status writes (a thousand routes at the client's rate) never holds up
// serving the next change.
type Controller struct {
	client *Client
	opts   Options
	sink   Sink
	log    *zap.Logger

	stores map[string]cache.Store // by resource
	infs   []informer
	notify chan struct{} // capacity 1: something changed

	mu   sync.Mutex // protects last
	last *Result    // the last result served
	// lastServed is servingKey of the last result served (Run's goroutine
	// only).
	lastServed string

	elector *lease.Elector // whether this replica writes status
	// statuses holds the latest translation whose statuses are to be
	// written (capacity 1: a newer one replaces it).
	statuses chan statusWork
	// world counts the events of every resource but the routes, from 1
	// (Snapshot.World: 0 would keep nothing).
	world atomic.Uint64
}

// informer is a resource's informer.
type informer struct {
	resource string
	optional bool // see resources
	cache.SharedIndexInformer
}

// LeaseName is the Lease the replicas share, in their namespace: its
// holder writes the Gateway API's statuses.
const LeaseName = "baton-gateway-status"

// statusDelay is how long the status writer lets a translation settle
// before it writes its statuses.
const statusDelay = 50 * time.Millisecond

// conflictRetry is how long the status writer waits, after a write that
// conflicted, before it tries again from the cache.
const conflictRetry = 200 * time.Millisecond

// statusWork is what the status writer writes from.
type statusWork struct {
	s      *Snapshot
	res    *Result
	served error
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
		opts.LeaseDuration = lease.DefaultDuration
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = lease.DefaultRetryPeriod
	}
	c := &Controller{client: client, opts: opts, sink: sink, log: log.Named("gateway"), stores: map[string]cache.Store{}, notify: make(chan struct{}, 1),
		statuses: make(chan statusWork, 1)}
	c.world.Store(1)
	c.elector = &lease.Elector{Client: client.coord, Namespace: opts.Namespace, Name: LeaseName, Identity: opts.Identity,
		Duration: opts.LeaseDuration, RetryPeriod: opts.RetryPeriod, Log: c.log, OnChange: c.changed}
	for _, r := range resources {
		inf := cache.NewSharedIndexInformer(client.listWatch(r.name, r.gateway, r.list), r.obj, 0, cache.Indexers{})
		// A change of anything but a route is a change of every route's
		// world: each is translated again.
		changed := c.changed
		if !r.route {
			changed = func() {
				c.world.Add(1)
				c.changed()
			}
		}
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { changed() },
			UpdateFunc: func(old, cur any) {
				if !statusOnly(old, cur) {
					changed()
				}
			},
			DeleteFunc: func(any) { changed() },
		})
		c.stores[r.name] = inf.GetStore()
		c.infs = append(c.infs, informer{r.name, r.optional, inf})
	}
	return c
}

// statusOnly reports whether an update of a Gateway API object changed
// only its status (its generation, labels and annotations are as they
// were): a status write, most often the controller's own, which changes
// nothing the translation reads but a Gateway's addresses, which the
// controller wrote from the translation itself. A status write that
// conflicts is tried again by the writer (writeStatuses), not by this
// event.
func statusOnly(old, cur any) bool {
	o, ok1 := old.(metav1.Object)
	n, ok2 := cur.(metav1.Object)
	if !ok1 || !ok2 || n.GetGeneration() == 0 {
		return false // Services, Namespaces and Secrets have no generation
	}
	return o.GetGeneration() == n.GetGeneration() && o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) &&
		maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(o.GetAnnotations(), n.GetAnnotations())
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
	// A route kind whose CRD the cluster lacks is not watched (its store
	// stays empty): the informer would wait for it for ever, and every
	// other kind with it.
	served, err := c.client.served(ctx)
	if err != nil {
		c.log.Warn("the API server's Gateway API resources unknown: watching every kind", zap.Error(err))
	}
	var synced []cache.InformerSynced
	var absent []informer
	for _, inf := range c.infs {
		if inf.optional && served != nil && !served[inf.resource] {
			c.log.Warn("no CRD of this route kind at gateway.networking.k8s.io/v1: none is served until it is installed", zap.String("resource", inf.resource))
			absent = append(absent, inf)
			continue
		}
		synced = append(synced, inf.HasSynced)
		running.Go(func() { inf.RunWithContext(ctx) })
	}
	running.Go(func() { c.elector.Run(ctx) })
	running.Go(func() { c.writeLoop(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("gateway: caches did not sync: %w", ctx.Err())
	}
	c.changed()
	var discover <-chan time.Time
	if len(absent) > 0 {
		tick := time.NewTicker(cmp.Or(c.opts.DiscoveryEvery, defaultDiscoveryEvery))
		defer tick.Stop()
		discover = tick.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.notify:
			c.reconcile(ctx)
		case <-discover:
			absent = c.watchInstalled(ctx, absent, &running)
			if len(absent) == 0 {
				discover = nil
			}
		}
	}
}

// defaultDiscoveryEvery is Options.DiscoveryEvery's default.
const defaultDiscoveryEvery = 30 * time.Second

// watchInstalled starts the informers of the kinds of absent whose CRD
// the API server serves now, and returns the others. A reconcile follows
// each one's first list (its events ask for one too).
func (c *Controller) watchInstalled(ctx context.Context, absent []informer, running *sync.WaitGroup) []informer {
	served, err := c.client.served(ctx)
	if err != nil {
		return absent
	}
	var still []informer
	for _, inf := range absent {
		if !served[inf.resource] {
			still = append(still, inf)
			continue
		}
		c.log.Info("the CRD of this route kind is installed: served from now on", zap.String("resource", inf.resource))
		running.Go(func() { inf.RunWithContext(ctx) })
		running.Go(func() {
			if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				c.changed()
			}
		})
	}
	return still
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
	var serveErr error
	served := servingKey(res)
	if served != c.lastServed {
		serveErr = c.sink.Serve(ctx, res)
		if serveErr != nil {
			// Not served: the next translation serves it again (and
			// its status says why it is not Programmed meanwhile).
			c.log.Warn("serving the Gateway API's routes", zap.Error(serveErr))
			served = ""
		}
		c.lastServed = served
	}
	c.mu.Lock()
	c.last = res
	c.mu.Unlock()
	if c.elector.Leader() {
		latest.Put(c.statuses, statusWork{s, res, serveErr})
	}
	c.log.Debug("reconciled", zap.Duration("took", time.Since(start)), zap.Int("listeners", len(res.Listeners)),
		zap.Int("rules", len(res.Routing.Rules)))
}

// writeLoop writes the statuses of each translation queued, until ctx
// ends. A write that conflicts (the object changed since the snapshot)
// is written again from the translation of that change.
func (c *Controller) writeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-c.statuses:
			// A moment first: the writes (and the API server's work on
			// them) come after the workers have the routing, not while
			// they compile it, and a burst of changes is one pass.
			select {
			case <-ctx.Done():
				return
			case <-time.After(statusDelay):
			}
			select {
			case w = <-c.statuses: // a newer one came meanwhile
			default:
			}
			if !c.elector.Leader() {
				continue
			}
			start := time.Now()
			conflicts := false
			n := c.writeStatuses(ctx, w.s, w.res, w.served, &conflicts)
			c.log.Debug("statuses written", zap.Int("written", n), zap.Bool("conflicts", conflicts), zap.Duration("took", time.Since(start)))
			if conflicts {
				// Once the cache has what the writes conflicted with (a
				// status write of another controller is no event of
				// ours: statusOnly), translate and write again.
				select {
				case <-ctx.Done():
					return
				case <-time.After(conflictRetry):
				}
				c.changed()
			}
		}
	}
}

// snapshot copies what the caches hold.
func (c *Controller) snapshot() *Snapshot {
	// The world first: a change that lands while the caches are read
	// counts for the next translation, which it triggers.
	s := &Snapshot{World: c.world.Load(), Services: map[string]*corev1.Service{}, Namespaces: map[string]*corev1.Namespace{}, Secrets: map[string]*corev1.Secret{}}
	if last := c.Last(); last != nil {
		s.Good, s.Routes, s.Assigned = last.Good, last.Translations, last.Addresses
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
	for _, o := range c.stores["grpcroutes"].List() {
		s.GRPCRoutes = append(s.GRPCRoutes, *o.(*gwv1.GRPCRoute))
	}
	for _, o := range c.stores["tlsroutes"].List() {
		s.TLSRoutes = append(s.TLSRoutes, *o.(*gwv1.TLSRoute))
	}
	for _, o := range c.stores["tcproutes"].List() {
		s.TCPRoutes = append(s.TCPRoutes, *o.(*gwv1.TCPRoute))
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
	for _, o := range c.stores["secrets"].List() { // of type TLS only (fieldSelector)
		sec := o.(*corev1.Secret)
		s.Secrets[sec.Namespace+"/"+sec.Name] = sec
	}
	return s
}

// servingKey is what a result serves, listeners and routing (statuses
// aside), as a string to compare with the last one served.
func servingKey(r *Result) string {
	b, _ := json.Marshal(struct {
		Listeners []Listener
		Backends  []config.Backend
	}{r.Listeners, r.Routing.Backends})
	return string(b) + "\n" + string(bytes.Join(r.Lines, []byte("\n")))
}
