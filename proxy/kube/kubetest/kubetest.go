// Package kubetest is the tests' kube.Source: client-go's fake clientset,
// for the watchers of packages kube and proxy. It is for tests only (the
// binary does not import it).
package kubetest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// Source lists and watches on a fake clientset. The fake cannot stream a
// list through a watch: its ListerWatchers say so, and the reflector lists
// instead.
type Source struct{ C *fake.Clientset }

// Services lists and watches the Services of ns.
func (f Source) Services(ns string) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return f.C.CoreV1().Services(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return f.C.CoreV1().Services(ns).Watch(ctx, o)
		},
	}, f.C)
}

// EndpointSlices lists and watches the EndpointSlices of ns that selector
// selects.
func (f Source) EndpointSlices(ns, selector string) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return f.C.DiscoveryV1().EndpointSlices(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return f.C.DiscoveryV1().EndpointSlices(ns).Watch(ctx, o)
		},
	}, f.C)
}
