package ingress

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/latest"
	"github.com/baton-proxy/baton/internal/lease"
	"github.com/baton-proxy/baton/proxy/kube"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Sink is what the controller's results go to: baton's supervisor, in
// `baton run`.
type Sink interface {
	// Serve makes baton serve res (its routing at once; its certificates,
	// by a handoff when they changed) and returns once it does, or why
	// not.
	Serve(ctx context.Context, res *Result) error
}

// Config is the controller's part of baton's config.
type Config struct {
	Options
	// Address is the HTTP listener's address, for the status;
	// PublishService the namespace/name of the Service that fronts baton.
	Address, PublishService string
	// The status writer's Lease (LeaseName, in $POD_NAMESPACE, else
	// "default"): held for LeaseDuration, looked at every RetryPeriod
	// (defaults lease.DefaultDuration, lease.DefaultRetryPeriod).
	LeaseDuration, RetryPeriod time.Duration
}

// LeaseName is the Lease the replicas share: its holder writes the
// Ingresses' status and Events.
const LeaseName = "baton-ingress-status"

// Controller watches IngressClasses, Ingresses, Services, TLS Secrets and
// the Secrets Ingresses name for client CAs (auth-tls-secret),
// and hands what baton's Ingresses ask for to a Sink. One goroutine
// (Run's) translates: informer callbacks only say that something changed,
// so a burst of changes is one translation.
type Controller struct {
	core, net *rest.RESTClient
	params    runtime.ParameterCodec
	cfg       Config
	sink      Sink
	log       *zap.Logger

	stores map[string]cache.Store
	infs   []cache.SharedIndexInformer
	synced []cache.InformerSynced
	notify chan struct{} // capacity 1
	// world counts the events of Secrets and IngressClasses, from 1
	// (Snapshot.World).
	world atomic.Uint64
	// statuses holds the latest statuses to write (capacity 1: a newer
	// one replaces it); the status writer writes them.
	statuses chan statusWork
	// elector says whether this replica writes status and Events.
	elector *lease.Elector

	// Run's goroutine only: what was served and said last, and the last
	// translation's good versions of the Ingresses.
	served   *Result
	problems map[string]string
	good     map[string]*Translation
	// caWatches watch the Secrets that Ingresses name for client CAs
	// (auth-tls-secret), by "namespace/name": those are of any type,
	// and the watch of every Secret takes only TLS ones.
	caWatches map[string]*caWatch
	caRunning sync.WaitGroup
}

// caWatch is the watch of one Secret.
type caWatch struct {
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc
}

// caSyncWait bounds the wait for a new CA Secret's watch to sync before
// a translation that needs it (one forbidden never syncs: the Ingress
// is refused, "not found").
const caSyncWait = 2 * time.Second

// resources are what the controller reads.
var resources = []struct {
	name    string
	network bool // networking.k8s.io, else core
	obj     runtime.Object
	list    func() runtime.Object
}{
	{"ingressclasses", true, &networkingv1.IngressClass{}, func() runtime.Object { return &networkingv1.IngressClassList{} }},
	{"ingresses", true, &networkingv1.Ingress{}, func() runtime.Object { return &networkingv1.IngressList{} }},
	{"services", false, &corev1.Service{}, func() runtime.Object { return &corev1.ServiceList{} }},
	{"secrets", false, &corev1.Secret{}, func() runtime.Object { return &corev1.SecretList{} }},
	{"configmaps", false, &corev1.ConfigMap{}, func() runtime.Object { return &corev1.ConfigMapList{} }},
}

// New returns a controller on the API server of kubeconfig (in-cluster
// when empty, as package proxy/kube connects); Run runs it.
func New(kubeconfig string, cfg Config, sink Sink, log *zap.Logger) (*Controller, error) {
	rc, err := kube.RESTConfig(kubeconfig, "baton")
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(scheme)
	c := &Controller{params: runtime.NewParameterCodec(scheme), cfg: cfg, sink: sink, log: log.Named("ingress"),
		stores: map[string]cache.Store{}, notify: make(chan struct{}, 1), problems: map[string]string{}, statuses: make(chan statusWork, 1)}
	c.world.Store(1)
	if c.core, err = kube.RESTClient(rc, codecs, "/api", &corev1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	if c.net, err = kube.RESTClient(rc, codecs, "/apis", &networkingv1.SchemeGroupVersion); err != nil {
		return nil, err
	}
	coord, err := kube.RESTClient(rc, codecs, "/apis", &coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	ns := cmp.Or(os.Getenv("POD_NAMESPACE"), "default")
	host, _ := os.Hostname()
	c.elector = &lease.Elector{Client: coord, Namespace: ns, Name: LeaseName, Identity: fmt.Sprintf("%s-%d", host, os.Getpid()),
		Duration: cfg.LeaseDuration, RetryPeriod: cfg.RetryPeriod, Log: c.log, OnChange: c.changed}
	for _, r := range resources {
		inf := cache.NewSharedIndexInformer(c.listWatch(r.name, r.network, r.list), r.obj, 0, cache.Indexers{})
		var changed func(old, cur any)
		switch r.name {
		case "ingresses":
			changed = func(old, cur any) {
				if !statusOnly(old, cur) {
					c.changed()
				}
			}
		case "configmaps":
			// Those an Ingress names (custom-headers) are in its
			// translation's key by version: no world of every Ingress.
			changed = func(any, any) { c.changed() }
		case "services":
			// Only the Service that fronts baton matters (its address
			// goes to the status); no translation reads Services.
			changed = func(_, cur any) {
				if svc, ok := cur.(*corev1.Service); ok && svc.Namespace+"/"+svc.Name == cfg.PublishService {
					c.changed()
				}
			}
		default: // Secrets and IngressClasses: every Ingress's world
			changed = func(any, any) {
				c.world.Add(1)
				c.changed()
			}
		}
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(cur any) { changed(nil, cur) },
			UpdateFunc: changed,
			DeleteFunc: func(cur any) {
				if d, ok := cur.(cache.DeletedFinalStateUnknown); ok {
					cur = d.Obj
				}
				changed(nil, cur)
			},
		})
		c.stores[r.name] = inf.GetStore()
		c.infs = append(c.infs, inf)
		c.synced = append(c.synced, inf.HasSynced)
	}
	return c, nil
}

// listWatch lists and watches a resource in every namespace: of Secrets,
// only those of type kubernetes.io/tls, so that baton holds no other
// Secret of the cluster.
func (c *Controller) listWatch(resource string, network bool, newList func() runtime.Object) cache.ListerWatcher {
	rc := c.core
	if network {
		rc = c.net
	}
	selector := ""
	if resource == "secrets" {
		selector = "type=" + string(corev1.SecretTypeTLS)
	}
	return kube.ListWatchAll(rc, c.params, resource, selector, newList)
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
	defer c.stopCAWatches()
	for _, inf := range c.infs {
		running.Go(func() { inf.RunWithContext(ctx) })
	}
	running.Go(func() { c.writeLoop(ctx) })
	running.Go(func() { c.elector.Run(ctx) })
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("ingress: caches did not sync: %w", ctx.Err())
	}
	c.changed()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.notify:
		case <-retry:
		}
		retry = nil
		if !c.reconcile(ctx) {
			retry = time.After(serveRetry) // served again after the next change, or then
		}
	}
}

// reconcile translates what the caches hold, serves it when it changed,
// says what could not be served, and writes the statuses.
// It reports whether the result is served (if not, Run tries again in a
// moment).
func (c *Controller) reconcile(ctx context.Context) (served bool) {
	start := time.Now()
	c.watchCASecrets(ctx)
	s := c.snapshot()
	res := Translate(s, c.cfg.Options)
	c.good = res.Good
	served = true
	if c.served == nil || !sameServing(res, c.served) {
		if err := c.sink.Serve(ctx, res); err != nil {
			c.log.Warn("serving the Ingresses", zap.Error(err))
			served = false
		} else {
			c.served = res
		}
	}
	c.sayProblems(ctx, res)
	if c.elector.Leader() { // else another replica writes status and Events
		var publish *corev1.Service
		if c.cfg.PublishService != "" {
			publish = s.Services[c.cfg.PublishService]
		}
		latest.Put(c.statuses, statusWork{ours: res.Ours, want: StatusAddress(c.cfg.Address, publish)})
	}
	c.log.Debug("reconciled", zap.Duration("took", time.Since(start)), zap.Int("ingresses", len(res.Ours)), zap.Int("rules", len(res.Routing.Rules)))
	return served
}

// sayProblems says what of each Ingress could not be served, once per
// change of it: a log line, and a Warning Event on the Ingress for each
// problem (kubectl describe ingress shows them).
func (c *Controller) sayProblems(ctx context.Context, res *Result) {
	for key, ps := range res.Problems {
		var msgs []string
		for _, p := range ps {
			msgs = append(msgs, p.Message)
		}
		said := strings.Join(msgs, "; ")
		if c.problems[key] == said {
			continue
		}
		c.problems[key] = said
		c.log.Warn("ingress served in part", zap.String("ingress", key), zap.Strings("problems", msgs))
		obj, ok, _ := c.stores["ingresses"].GetByKey(key)
		if !ok || !c.elector.Leader() {
			continue
		}
		ing := obj.(*networkingv1.Ingress)
		for _, p := range ps {
			if err := c.event(ctx, ing, p); err != nil {
				c.log.Warn("ingress event", zap.String("ingress", key), zap.Error(err))
			}
		}
	}
	for key := range c.problems {
		if _, ok := res.Problems[key]; !ok {
			delete(c.problems, key)
		}
	}
}

// event writes a Warning Event about ing.
func (c *Controller) event(ctx context.Context, ing *networkingv1.Ingress, p Problem) error {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: ing.Namespace, GenerateName: ing.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Ingress", APIVersion: networkingv1.SchemeGroupVersion.String(), Namespace: ing.Namespace,
			Name: ing.Name, UID: ing.UID, ResourceVersion: ing.ResourceVersion},
		Reason: p.Reason, Message: p.Message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "baton-ingress"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	return c.core.Post().Namespace(ing.Namespace).Resource("events").Body(ev).Do(ctx).Error()
}

// statusWork is what the status writer writes: the address of baton's
// Ingresses.
type statusWork struct {
	ours []string
	want []networkingv1.IngressLoadBalancerIngress
}

// serveRetry is how long a translation that could not be served waits
// to be tried again, when nothing changes meanwhile.
const serveRetry = time.Second

// conflictRetry is how long the status writer waits, after a write that
// conflicted, before a translation queues the statuses again.
const conflictRetry = 200 * time.Millisecond

// writeLoop writes the statuses queued, until ctx ends: apart from the
// translations, so that a thousand status writes (a thousand Ingresses
// created) never hold up serving the next change.
func (c *Controller) writeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-c.statuses:
			if !c.elector.Leader() {
				continue
			}
			if c.writeStatuses(ctx, w) {
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

// writeStatuses writes status.loadBalancer of the Ingresses whose status
// differs from w's address; it reports whether a write failed (a
// conflict: the Ingress changed since the cache had it).
func (c *Controller) writeStatuses(ctx context.Context, w statusWork) (failed bool) {
	for _, key := range w.ours {
		obj, ok, _ := c.stores["ingresses"].GetByKey(key)
		if !ok {
			continue
		}
		ing := obj.(*networkingv1.Ingress)
		if slices.EqualFunc(ing.Status.LoadBalancer.Ingress, w.want, func(a, b networkingv1.IngressLoadBalancerIngress) bool { return reflect.DeepEqual(a, b) }) {
			continue
		}
		up := ing.DeepCopy()
		up.Status.LoadBalancer.Ingress = w.want
		if err := c.net.Put().Namespace(up.Namespace).Resource("ingresses").Name(up.Name).SubResource("status").Body(up).Do(ctx).Error(); err != nil {
			c.log.Debug("ingress status", zap.String("ingress", key), zap.Error(err))
			failed = ctx.Err() == nil
		}
	}
	return failed
}

// statusOnly reports whether an Ingress update changed only what no
// translation reads (its status: baton's own writes among them).
func statusOnly(old, cur any) bool {
	o, ok1 := old.(*networkingv1.Ingress)
	n, ok2 := cur.(*networkingv1.Ingress)
	return ok1 && ok2 && o.Generation == n.Generation && maps.Equal(o.Annotations, n.Annotations)
}

// sameServing reports whether a and b serve the same: routing lines,
// backends, certificates.
func sameServing(a, b *Result) bool {
	return slices.EqualFunc(a.Lines, b.Lines, bytes.Equal) && reflect.DeepEqual(a.Routing.Backends, b.Routing.Backends) && reflect.DeepEqual(a.Certificates, b.Certificates) && reflect.DeepEqual(a.ClientAuth, b.ClientAuth)
}

// watchCASecrets watches the Secrets the Ingresses name in
// auth-tls-secret (of their own namespace: others are refused by the
// translation), and no others. A new watch is waited for (caSyncWait),
// so that the translation reads its Secret.
func (c *Controller) watchCASecrets(ctx context.Context) {
	want := map[string]bool{}
	for _, o := range c.stores["ingresses"].List() {
		ing := o.(*networkingv1.Ingress)
		v, ok := lookup(ing, "auth-tls-secret")
		if !ok {
			continue
		}
		name := v
		if ns, n, found := strings.Cut(v, "/"); found {
			if ns != ing.Namespace {
				continue
			}
			name = n
		}
		if validName(name) {
			want[ing.Namespace+"/"+name] = true
		}
	}
	for key, w := range c.caWatches {
		if !want[key] {
			w.cancel()
			delete(c.caWatches, key)
		}
	}
	var started []cache.InformerSynced
	for key := range want {
		if c.caWatches[key] != nil {
			continue
		}
		if c.caWatches == nil {
			c.caWatches = map[string]*caWatch{}
		}
		ns, name, _ := strings.Cut(key, "/")
		lw := kube.ListWatchIn(c.core, c.params, ns, "secrets", "metadata.name="+name, func() runtime.Object { return &corev1.SecretList{} })
		inf := cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
		changed := func(any) {
			c.world.Add(1)
			c.changed()
		}
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: func(_, cur any) { changed(cur) }, DeleteFunc: changed})
		wctx, cancel := context.WithCancel(ctx)
		c.caWatches[key] = &caWatch{inf: inf, cancel: cancel}
		c.caRunning.Go(func() { inf.RunWithContext(wctx) })
		started = append(started, inf.HasSynced)
	}
	if len(started) > 0 {
		wait, cancel := context.WithTimeout(ctx, caSyncWait)
		defer cancel()
		if !cache.WaitForCacheSync(wait.Done(), started...) {
			c.log.Warn("the watch of a client CA Secret did not sync (may baton list Secrets there?)", zap.Duration("waited", caSyncWait))
		}
	}
}

// stopCAWatches ends the CA Secrets' watches and waits for them.
func (c *Controller) stopCAWatches() {
	for _, w := range c.caWatches {
		w.cancel()
	}
	c.caRunning.Wait()
}

// snapshot copies what the caches hold.
func (c *Controller) snapshot() *Snapshot {
	// The world first: a change that lands while the caches are read
	// counts for the next translation, which it triggers.
	s := &Snapshot{World: c.world.Load(), Services: map[string]*corev1.Service{}, Secrets: map[string]*corev1.Secret{}, Good: c.good}
	for _, o := range c.stores["ingressclasses"].List() {
		s.Classes = append(s.Classes, *o.(*networkingv1.IngressClass))
	}
	for _, o := range c.stores["ingresses"].List() {
		s.Ingresses = append(s.Ingresses, *o.(*networkingv1.Ingress))
	}
	for _, o := range c.stores["services"].List() {
		svc := o.(*corev1.Service)
		s.Services[svc.Namespace+"/"+svc.Name] = svc
	}
	for _, o := range c.stores["secrets"].List() {
		sec := o.(*corev1.Secret)
		s.Secrets[sec.Namespace+"/"+sec.Name] = sec
	}
	for _, w := range c.caWatches {
		for _, o := range w.inf.GetStore().List() {
			sec := o.(*corev1.Secret)
			s.Secrets[sec.Namespace+"/"+sec.Name] = sec
		}
	}
	s.ConfigMaps = func(key string) *corev1.ConfigMap {
		obj, ok, _ := c.stores["configmaps"].GetByKey(key)
		if !ok {
			return nil
		}
		return obj.(*corev1.ConfigMap)
	}
	return s
}
