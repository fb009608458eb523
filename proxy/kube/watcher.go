// Package kube turns Kubernetes Services and EndpointSlices into the
// addresses of baton's backends, through client-go shared informers scoped
// to the namespaces (and, for EndpointSlices, the Services) the config
// names.
//
// One goroutine, Run's, turns changes into updates: informer callbacks only
// mark a Service dirty; the goroutine recomputes the dirty Services, drops
// updates that change nothing, and hands the rest over in one batch. A burst
// of changes to a Service becomes one update.
package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Modes.
const (
	ModeEndpoints = "endpoints"
	ModeClusterIP = "clusterIP"
)

// serviceNameLabel links an EndpointSlice to its Service.
const serviceNameLabel = discoveryv1.LabelServiceName

// Target is one backend's Service.
type Target struct {
	Backend string
	// Instance tells apart the backends made under one name: a new one
	// (its config changed) gets its endpoints applied afresh, even when
	// they are the last ones the name had.
	Instance   uint64
	Namespace  string
	Service    string
	PortName   string // the Service port by name, or
	PortNumber int32  // by number
	Mode       string
}

func (t *Target) key() string { return t.Namespace + "/" + t.Service }

// lastKey keys the last update applied to t's backend instance.
func (t *Target) lastKey() string { return t.Backend + "#" + strconv.FormatUint(t.Instance, 10) }

func (t *Target) port() string {
	if t.PortName != "" {
		return t.PortName
	}
	return fmt.Sprint(t.PortNumber)
}

// Update is a backend's new set of endpoints, or why it has none.
type Update struct {
	Backend   string
	Endpoints []Endpoint
	Err       error
}

// Watcher watches the Services of its targets.
type Watcher struct {
	source Source
	apply  func([]Update)
	log    *zap.Logger

	// Run's goroutine changes them (SetTargets); the informers' callbacks
	// read byService, Waiting reads caches.
	mu        sync.Mutex           // protects dirty and byService
	byService map[string][]*Target // namespace/name to targets
	dirty     map[string]struct{}
	notify    chan struct{} // capacity 1: something is dirty

	cachesMu sync.Mutex          // protects caches and pending
	caches   map[string]*nsCache // by namespace
	pending  map[string]*nsCache // a retarget's caches, until they sync

	retarget chan retarget // capacity 1: the last SetTargets not taken yet

	last map[string]string // backend to a fingerprint of its last update

	errMu   sync.Mutex       // protects lastErr
	lastErr map[string]error // "namespace kind" to its informer's last list or watch error
}

// nsCache is the informers of one namespace: every Service, and the
// EndpointSlices of the Services the targets name.
type nsCache struct {
	names     string // the Services, sorted, joined with ","
	informers []cache.SharedIndexInformer
	services  cache.Indexer
	slices    cache.Indexer
	synced    []cache.InformerSynced
	stop      context.CancelFunc // ends the informers, once started
	running   sync.WaitGroup
}

// start runs c's informers until parent ends or c.stop is called.
func (c *nsCache) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	c.stop = cancel
	for _, inf := range c.informers {
		c.running.Go(func() { inf.RunWithContext(ctx) })
	}
}

// end stops c's informers and waits for them.
func (c *nsCache) end() {
	if c.stop != nil {
		c.stop()
	}
	c.running.Wait()
}

// retarget is a SetTargets to apply, and who waits for it; prepare fills
// in the rest.
type retarget struct {
	targets []Target
	done    chan<- error

	byService map[string][]*Target
	names     map[string][]string // namespace to its Services, sorted
	fresh     map[string]*nsCache // the caches made for it, by namespace
}

// New returns a watcher of targets; apply receives every batch of updates,
// from Run's goroutine, the first (every target) once the caches have
// synced.
func New(source Source, targets []Target, apply func([]Update), log *zap.Logger) *Watcher {
	w := &Watcher{
		source:   source,
		apply:    apply,
		log:      log.Named("kube"),
		caches:   make(map[string]*nsCache),
		dirty:    make(map[string]struct{}),
		notify:   make(chan struct{}, 1),
		retarget: make(chan retarget, 1),
		last:     make(map[string]string),
		lastErr:  make(map[string]error),
	}
	byService, names := plan(targets)
	w.byService = byService
	for ns, svcs := range names {
		w.caches[ns] = w.newNSCache(ns, svcs)
	}
	return w
}

// plan indexes targets by their Service, and lists the Services of each
// namespace, sorted.
func plan(targets []Target) (map[string][]*Target, map[string][]string) {
	byService := make(map[string][]*Target)
	names := make(map[string][]string)
	for i := range targets {
		t := &targets[i]
		if len(byService[t.key()]) == 0 {
			names[t.Namespace] = append(names[t.Namespace], t.Service)
		}
		byService[t.key()] = append(byService[t.key()], t)
	}
	for _, svcs := range names {
		sort.Strings(svcs)
	}
	return byService, names
}

func (w *Watcher) newNSCache(ns string, services []string) *nsCache {
	joined := strings.Join(services, ",")
	selector := fmt.Sprintf("%s in (%s)", serviceNameLabel, joined)
	svcInf := cache.NewSharedIndexInformer(w.recording("namespace "+ns+" Services", w.source.Services(ns)), &corev1.Service{}, 0, cache.Indexers{})
	// Slices are kept per slice name by the informer (an endpoint may move
	// between slices), and indexed by their Service.
	sliceInf := cache.NewSharedIndexInformer(w.recording("namespace "+ns+" EndpointSlices", w.source.EndpointSlices(ns, selector)), &discoveryv1.EndpointSlice{}, 0,
		cache.Indexers{"service": func(obj any) ([]string, error) {
			if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
				return []string{s.Labels[serviceNameLabel]}, nil
			}
			return nil, nil
		}})
	handler := func(label bool) cache.ResourceEventHandlerFuncs {
		mark := func(obj any) { w.markObj(obj, label) }
		return cache.ResourceEventHandlerFuncs{
			AddFunc: mark,
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(metav1.Object)
				c, ok2 := cur.(metav1.Object)
				if ok1 && ok2 && o.GetResourceVersion() != "" && o.GetResourceVersion() == c.GetResourceVersion() {
					return // a resync: nothing changed
				}
				mark(cur)
			},
			DeleteFunc: mark,
		}
	}
	svcInf.AddEventHandler(handler(false))
	sliceInf.AddEventHandler(handler(true))

	return &nsCache{
		names:     joined,
		informers: []cache.SharedIndexInformer{svcInf, sliceInf},
		services:  svcInf.GetIndexer(),
		slices:    sliceInf.GetIndexer(),
		synced:    []cache.InformerSynced{svcInf.HasSynced, sliceInf.HasSynced},
	}
}

// recording wraps lw so that each list and watch notes its error under
// key. The informers retry a failed list or watch forever, some errors
// (a connection refused) without a word: this is how baton learns why.
func (w *Watcher) recording(key string, lw cache.ListerWatcher) cache.ListerWatcher {
	lwc := cache.ToListerWatcherWithContext(lw)
	// The wrapper keeps lw's word on the streaming list (a fake clientset
	// says it cannot serve one).
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			obj, err := lwc.ListWithContext(ctx, opts)
			w.noteErr(key, "list", err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			wi, err := lwc.WatchWithContext(ctx, opts)
			w.noteErr(key, "watch", err)
			return wi, err
		},
	}, lw)
}

// noteErr records the outcome of a list or watch, and logs an error the
// first time it differs from the last one (a retry loop logs once).
func (w *Watcher) noteErr(key, op string, err error) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	last := w.lastErr[key]
	if err == nil {
		if last != nil {
			w.log.Info("kubernetes list or watch works again", zap.String("what", key))
			delete(w.lastErr, key)
		}
		return
	}
	if last == nil || last.Error() != err.Error() {
		w.log.Warn("kubernetes list or watch failed; retrying", zap.String("what", key), zap.String("op", op), zap.Error(err))
	}
	w.lastErr[key] = err
}

// Waiting says what the caches wait for, before they have synced: the
// namespaces not synced yet, and the last error of their lists and
// watches (the API server unreachable, a permission missing).
func (w *Watcher) Waiting() string {
	var parts []string
	w.cachesMu.Lock()
	defer w.cachesMu.Unlock()
	for ns, c := range w.caches {
		if p := w.pending[ns]; p != nil {
			c = p // its Services changed: the new cache is the one waited for
		}
		parts = c.waiting(w, ns, parts)
	}
	for ns, c := range w.pending {
		if w.caches[ns] == nil {
			parts = c.waiting(w, ns, parts)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// waiting appends to parts what c, the cache of namespace ns, waits for.
func (c *nsCache) waiting(w *Watcher, ns string, parts []string) []string {
	for i, synced := range c.synced {
		if synced() {
			continue
		}
		kind := []string{"Services", "EndpointSlices"}[i]
		key := "namespace " + ns + " " + kind
		w.errMu.Lock()
		err := w.lastErr[key]
		w.errMu.Unlock()
		if err != nil {
			parts = append(parts, fmt.Sprintf("kubernetes: %s: %v", key, err))
		} else {
			parts = append(parts, fmt.Sprintf("kubernetes: %s: waiting for the first list", key))
		}
	}
	return parts
}

// markObj marks the Service of obj (a Service, or with label an
// EndpointSlice naming its Service) dirty.
func (w *Watcher) markObj(obj any, label bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	name := m.GetName()
	if label {
		name = m.GetLabels()[serviceNameLabel]
	}
	key := m.GetNamespace() + "/" + name
	w.mu.Lock()
	_, ours := w.byService[key]
	if ours {
		w.dirty[key] = struct{}{}
	}
	w.mu.Unlock()
	if !ours {
		return
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Run starts the informers, waits for their caches, applies every target's
// endpoints, reports on synced (nil, or the reason it could not sync), and
// then applies changes until ctx ends, when it stops the informers.
func (w *Watcher) Run(ctx context.Context, synced chan<- error) {
	defer func() { // the informers end with ctx
		w.cachesMu.Lock()
		defer w.cachesMu.Unlock()
		for _, c := range w.caches {
			c.end()
		}
	}()
	w.cachesMu.Lock()
	for _, c := range w.caches {
		c.start(ctx)
	}
	w.cachesMu.Unlock()
	for ns, c := range w.caches { // only Run's goroutine changes caches
		if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
			synced <- fmt.Errorf("kube: caches of namespace %s did not sync: %w", ns, ctx.Err())
			return
		}
	}
	w.mu.Lock()
	for key := range w.byService {
		w.dirty[key] = struct{}{}
	}
	w.mu.Unlock()
	w.flush()
	synced <- nil
	// A retarget whose new caches have not all synced goes in effect a
	// namespace at a time, beside the loop: the endpoints of the targets
	// in effect go on being applied, however long a namespace takes (a
	// permission missing makes it forever), and only that namespace's
	// targets wait for it.
	var pending *retarget
	var poll <-chan time.Time
	every := syncPoll
	defer func() {
		if pending != nil {
			w.abandon(pending, fmt.Errorf("kube: the watch ended: %w", ctx.Err()))
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.notify:
			w.flush()
		case rt := <-w.retarget:
			w.prepare(ctx, &rt, pending)
			pending, every = &rt, syncPoll
		case <-poll:
		}
		if pending != nil && w.advance(pending) {
			if pending.done != nil {
				pending.done <- nil
			}
			pending = nil
		}
		poll = nil
		if pending != nil {
			poll = time.After(every)
			every = min(2*every, maxSyncPoll) // a namespace that does not sync soon is looked at less
		}
	}
}

// maxSyncPoll is the longest wait between two looks at a namespace that
// has not synced.
const maxSyncPoll = time.Second

// syncPoll is how often a retarget's new caches are checked for sync (as
// client-go's WaitForCacheSync polls, but more often: a route to a
// Service of a new namespace waits for it).
const syncPoll = 10 * time.Millisecond

// SetTargets replaces the watcher's targets, once Run runs: the
// namespaces and Services newly named are watched, and each namespace's
// targets take effect once its caches have synced (every one's endpoints
// applied), those of namespaces in place at once; those no longer named
// are let go. done, when set, gets nil once all of it is in effect, or why
// not (it has room for the answer). A SetTargets not taken yet, or not
// wholly in effect, is replaced by the next.
func (w *Watcher) SetTargets(targets []Target, done chan<- error) {
	rt := retarget{targets: append([]Target(nil), targets...), done: done}
	for {
		select {
		case w.retarget <- rt:
			return
		default:
		}
		select {
		case old := <-w.retarget: // replaced: it is answered as this one
			if old.done != nil {
				old.done <- errors.New("kube: targets replaced before they took effect")
			}
		default:
		}
	}
}

// prepare starts rt's work in Run's goroutine: the caches rt needs that
// the watcher does not have (a namespace newly named, or whose Services
// changed: the EndpointSlices' label selector names them) are made and
// started, or taken from prev, the retarget rt replaces before it took
// effect; prev is answered so, and its other caches end.
func (w *Watcher) prepare(ctx context.Context, rt *retarget, prev *retarget) {
	rt.byService, rt.names = plan(rt.targets)
	rt.fresh = make(map[string]*nsCache)
	for ns, svcs := range rt.names {
		joined := strings.Join(svcs, ",")
		if c := w.caches[ns]; c != nil && c.names == joined {
			continue
		}
		if prev != nil {
			if c := prev.fresh[ns]; c != nil && c.names == joined {
				rt.fresh[ns] = c
				delete(prev.fresh, ns)
				continue
			}
		}
		c := w.newNSCache(ns, svcs)
		c.start(ctx)
		rt.fresh[ns] = c
	}
	w.cachesMu.Lock()
	w.pending = rt.fresh
	w.cachesMu.Unlock()
	if prev != nil {
		w.abandon(prev, errors.New("kube: targets replaced before they took effect"))
	}
}

// isSynced reports whether c's informers have synced.
func (c *nsCache) isSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// abandon ends the caches rt made and answers it with err.
func (w *Watcher) abandon(rt *retarget, err error) {
	for _, c := range rt.fresh {
		c.end()
	}
	if rt.done != nil {
		rt.done <- err
	}
}

// advance puts in effect what of rt can be: the targets of the
// namespaces whose caches are in place (kept, or new and synced now:
// those replace the old caches of their namespaces, and the caches of
// namespaces no longer named end). A namespace whose new cache has not
// synced keeps its old cache and targets, if it had them, meanwhile. The
// endpoints of what changed are applied; it reports whether all of rt is
// in effect.
func (w *Watcher) advance(rt *retarget) bool {
	swapped := map[string]bool{}
	for ns, c := range rt.fresh {
		if c.isSynced() {
			swapped[ns] = true
		}
	}
	w.cachesMu.Lock()
	var gone []*nsCache
	for ns, c := range w.caches {
		if _, kept := rt.names[ns]; !kept || swapped[ns] {
			gone = append(gone, c)
			delete(w.caches, ns)
		}
	}
	for ns := range swapped {
		w.caches[ns] = rt.fresh[ns]
		delete(rt.fresh, ns) // in effect: no longer rt's to end
	}
	w.pending = maps.Clone(rt.fresh)
	w.cachesMu.Unlock()
	for _, c := range gone {
		c.end()
	}
	// Recomputed: the Services of a cache new in effect, and those whose
	// targets changed. The others' endpoints are applied already: a
	// routing change (a thousand routes to ten Services of a thousand
	// endpoints) costs no pass over every endpoint.
	w.mu.Lock()
	prev := w.byService
	next := make(map[string][]*Target, len(rt.byService))
	for key, ts := range rt.byService {
		if rt.fresh[ts[0].Namespace] == nil {
			next[key] = ts
		}
	}
	for key, ts := range prev { // a namespace still waiting keeps what it had
		if ns := ts[0].Namespace; rt.fresh[ns] != nil && w.caches[ns] != nil {
			next[key] = ts
		}
	}
	for key, ts := range next {
		if swapped[ts[0].Namespace] || !slices.EqualFunc(prev[key], ts, func(a, b *Target) bool { return *a == *b }) {
			w.dirty[key] = struct{}{}
		}
	}
	w.byService = next
	w.mu.Unlock()
	inEffect := make(map[string]bool)
	for _, ts := range next {
		for _, t := range ts {
			inEffect[t.lastKey()] = true
		}
	}
	for k := range w.last {
		if !inEffect[k] {
			delete(w.last, k)
		}
	}
	w.flush()
	return len(rt.fresh) == 0
}

// flush recomputes the dirty Services and applies what changed.
func (w *Watcher) flush() {
	w.mu.Lock()
	dirty := w.dirty
	w.dirty = make(map[string]struct{})
	byService := w.byService
	w.mu.Unlock()
	var batch []Update
	for key := range dirty {
		for _, t := range byService[key] {
			u := w.compute(t)
			fp := fingerprint(u)
			if w.last[t.lastKey()] == fp {
				continue
			}
			w.last[t.lastKey()] = fp
			if u.Err != nil {
				w.log.Warn("backend has no endpoints", zap.String("backend", t.Backend), zap.String("service", key), zap.Error(u.Err))
			}
			batch = append(batch, u)
		}
	}
	if len(batch) > 0 {
		w.apply(batch)
	}
}

func (w *Watcher) compute(t *Target) Update {
	c := w.caches[t.Namespace]
	var svc *corev1.Service
	obj, exists, err := c.services.GetByKey(t.key())
	if err != nil {
		return Update{Backend: t.Backend, Err: err}
	}
	if exists {
		svc, _ = obj.(*corev1.Service)
	}
	u := Update{Backend: t.Backend}
	objs, err := c.slices.ByIndex("service", t.Service)
	if err != nil {
		return Update{Backend: t.Backend, Err: err}
	}
	slices := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			slices = append(slices, s)
		}
	}
	if t.Mode == ModeClusterIP {
		u.Endpoints, u.Err = clusterIPMode(svc, t, anyDraining(slices))
		return u
	}
	u.Endpoints, u.Err = endpointsMode(svc, slices, t)
	return u
}

// fingerprint summarises an update, to drop those that change nothing.
func fingerprint(u Update) string {
	var b strings.Builder
	if u.Err != nil {
		b.WriteString("error:" + u.Err.Error())
	}
	for _, e := range u.Endpoints {
		fmt.Fprintf(&b, "%s/%t/%t/%t/%t;", e.Address, e.Ready, e.Serving, e.Terminating, e.NoReuse)
	}
	return b.String()
}

// Headless reports whether err says a Service is headless in clusterIP mode:
// a configuration error, which fails the worker instead of serving 503s.
func Headless(err error) bool { return errors.Is(err, ErrHeadless) }
