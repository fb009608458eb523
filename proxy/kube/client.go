package kube

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Source lists and watches the two resources the watcher reads.
type Source interface {
	Services(namespace string) cache.ListerWatcher
	EndpointSlices(namespace, labelSelector string) cache.ListerWatcher
}

// Client is a Source on an API server, with REST clients for core/v1 and
// discovery/v1 only. client-go's Clientset registers every API group of
// Kubernetes when the program starts, which would cost the supervisor
// (the same binary) some 20 MiB and every worker its start-up time.
type Client struct {
	core, discovery *rest.RESTClient
	params          runtime.ParameterCodec
}

// NewClient connects to the API server: with the kubeconfig file when one
// is named; else in-cluster when running in a pod; else with $KUBECONFIG
// or ~/.kube/config.
func NewClient(kubeconfig, userAgent string) (*Client, error) {
	cfg, err := RESTConfig(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	return newClient(cfg)
}

// RESTConfig is the API server's config as NewClient finds it (the
// kubeconfig file when one is named; else in-cluster in a pod; else
// $KUBECONFIG or ~/.kube/config), with userAgent and baton's limits.
func RESTConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		cfg, err = rest.InClusterConfig()
	default:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	cfg.UserAgent = userAgent
	// Informers list once and then watch; the limits matter only for the
	// first list of a big cluster.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// RESTClient is a REST client of cfg for one group version (under
// apiPath: "/api" for core, else "/apis"), decoding with codecs.
func RESTClient(cfg *rest.Config, codecs serializer.CodecFactory, apiPath string, gv *schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = apiPath
	c.GroupVersion = gv
	c.NegotiatedSerializer = codecs.WithoutConversion()
	return rest.RESTClientFor(c)
}

// ListWatchAll lists and watches resource in every namespace through rc,
// narrowed by fieldSelector (none when empty), decoding lists into what
// newList makes.
func ListWatchAll(rc *rest.RESTClient, params runtime.ParameterCodec, resource, fieldSelector string, newList func() runtime.Object) cache.ListerWatcher {
	return ListWatchIn(rc, params, "", resource, fieldSelector, newList)
}

// ListWatchIn is ListWatchAll in one namespace ("": every one).
func ListWatchIn(rc *rest.RESTClient, params runtime.ParameterCodec, namespace, resource, fieldSelector string, newList func() runtime.Object) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = fieldSelector
			out := newList()
			err := rc.Get().Namespace(namespace).Resource(resource).VersionedParams(&opts, params).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			opts.FieldSelector = fieldSelector
			return rc.Get().Namespace(namespace).Resource(resource).VersionedParams(&opts, params).Watch(ctx)
		},
	}
}

func newClient(cfg *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, discoveryv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(scheme)
	core, err := RESTClient(cfg, codecs, "/api", &corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	disc, err := RESTClient(cfg, codecs, "/apis", &discoveryv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{core: core, discovery: disc, params: runtime.NewParameterCodec(scheme)}, nil
}

// Services lists and watches the Services of a namespace.
func (c *Client) Services(namespace string) cache.ListerWatcher {
	return c.listWatch(c.core, namespace, "services", "", func() runtime.Object { return &corev1.ServiceList{} })
}

// EndpointSlices lists and watches the EndpointSlices of a namespace that
// match labelSelector.
func (c *Client) EndpointSlices(namespace, labelSelector string) cache.ListerWatcher {
	return c.listWatch(c.discovery, namespace, "endpointslices", labelSelector, func() runtime.Object { return &discoveryv1.EndpointSliceList{} })
}

func (c *Client) listWatch(rc *rest.RESTClient, ns, resource, selector string, newList func() runtime.Object) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			out := newList()
			err := rc.Get().Namespace(ns).Resource(resource).VersionedParams(&opts, c.params).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			opts.Watch = true
			return rc.Get().Namespace(ns).Resource(resource).VersionedParams(&opts, c.params).Watch(ctx)
		},
	}
}
