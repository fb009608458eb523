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
	"sort"
	"strings"
	"sync"

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
	Backend    string
	Namespace  string
	Service    string
	PortName   string // the Service port by name, or
	PortNumber int32  // by number
	Mode       string
}

func (t *Target) key() string { return t.Namespace + "/" + t.Service }

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
	source  Source
	targets []Target
	apply   func([]Update)
	log     *zap.Logger

	byService map[string][]*Target // namespace/name to targets
	caches    map[string]*nsCache  // by namespace

	mu     sync.Mutex // protects dirty
	dirty  map[string]struct{}
	notify chan struct{} // capacity 1: something is dirty

	last map[string]string // backend to a fingerprint of its last update

	errMu   sync.Mutex       // protects lastErr
	lastErr map[string]error // "namespace kind" to its informer's last list or watch error
}

// nsCache is the informers of one namespace: every Service, and the
// EndpointSlices of the Services the targets name.
type nsCache struct {
	informers []cache.SharedIndexInformer
	services  cache.Indexer
	slices    cache.Indexer
	synced    []cache.InformerSynced
}

// New returns a watcher of targets; apply receives every batch of updates,
// from Run's goroutine, the first (every target) once the caches have
// synced.
func New(source Source, targets []Target, apply func([]Update), log *zap.Logger) *Watcher {
	w := &Watcher{
		source:    source,
		targets:   targets,
		apply:     apply,
		log:       log.Named("kube"),
		byService: make(map[string][]*Target),
		caches:    make(map[string]*nsCache),
		dirty:     make(map[string]struct{}),
		notify:    make(chan struct{}, 1),
		last:      make(map[string]string),
		lastErr:   make(map[string]error),
	}
	names := make(map[string][]string)
	for i := range w.targets {
		t := &w.targets[i]
		if len(w.byService[t.key()]) == 0 {
			names[t.Namespace] = append(names[t.Namespace], t.Service)
		}
		w.byService[t.key()] = append(w.byService[t.key()], t)
	}
	for ns, svcs := range names {
		w.caches[ns] = w.newNSCache(ns, svcs)
	}
	return w
}

func (w *Watcher) newNSCache(ns string, services []string) *nsCache {
	sort.Strings(services)
	selector := fmt.Sprintf("%s in (%s)", serviceNameLabel, strings.Join(services, ","))
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
	for ns, c := range w.caches {
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
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
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
	if _, ours := w.byService[key]; !ours {
		return
	}
	w.mu.Lock()
	w.dirty[key] = struct{}{}
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Run starts the informers, waits for their caches, applies every target's
// endpoints, reports on synced (nil, or the reason it could not sync), and
// then applies changes until ctx ends, when it stops the informers.
func (w *Watcher) Run(ctx context.Context, synced chan<- error) {
	var running sync.WaitGroup
	defer running.Wait() // the informers end with ctx
	for _, c := range w.caches {
		for _, inf := range c.informers {
			running.Go(func() { inf.RunWithContext(ctx) })
		}
	}
	for ns, c := range w.caches {
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.notify:
			w.flush()
		}
	}
}

// flush recomputes the dirty Services and applies what changed.
func (w *Watcher) flush() {
	w.mu.Lock()
	dirty := w.dirty
	w.dirty = make(map[string]struct{})
	w.mu.Unlock()
	var batch []Update
	for key := range dirty {
		for _, t := range w.byService[key] {
			u := w.compute(t)
			fp := fingerprint(u)
			if w.last[t.Backend] == fp {
				continue
			}
			w.last[t.Backend] = fp
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
	if t.Mode == ModeClusterIP {
		u.Endpoints, u.Err = clusterIPMode(svc, t)
		return u
	}
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
		fmt.Fprintf(&b, "%s/%t/%t/%t;", e.Address, e.Ready, e.Serving, e.Terminating)
	}
	return b.String()
}

// Headless reports whether err says a Service is headless in clusterIP mode:
// a configuration error, which fails the worker instead of serving 503s.
func Headless(err error) bool { return errors.Is(err, ErrHeadless) }
