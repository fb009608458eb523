package gateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/baton-proxy/baton/proxy/kube"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Client reads the cluster for the controller and writes its statuses,
// with REST clients for core/v1 and gateway.networking.k8s.io/v1 only (as
// package proxy/kube's: client-go's Clientset registers every API group
// when the program starts, which the supervisor's process should not pay
// for).
type Client struct {
	core, gw, coord *rest.RESTClient
	params          runtime.ParameterCodec
}

// NewClient connects to the API server: with the kubeconfig file when one
// is named; else in-cluster when running in a pod; else with $KUBECONFIG
// or ~/.kube/config.
func NewClient(kubeconfig, userAgent string) (*Client, error) {
	cfg, err := kube.RESTConfig(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, gwv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	codecs := serializer.NewCodecFactory(scheme)
	core, err := kube.RESTClient(cfg, codecs, "/api", &corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	gw, err := kube.RESTClient(cfg, codecs, "/apis", &gwv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	coord, err := kube.RESTClient(cfg, codecs, "/apis", &coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &Client{core: core, gw: gw, coord: coord, params: runtime.NewParameterCodec(scheme)}, nil
}

// The resources the controller reads, and how to make their lists.
var resources = []struct {
	name      string
	gateway   bool // gateway.networking.k8s.io, else core
	clustered bool
	// optional: a route kind whose CRD a cluster may not have (an older
	// release of the Gateway API's): without it, none is served.
	optional bool
	// route: a route kind, whose objects are translated one by one: a
	// change of one does not turn the world (Snapshot.World).
	route bool
	obj   runtime.Object
	list  func() runtime.Object
}{
	{"gatewayclasses", true, true, false, false, &gwv1.GatewayClass{}, func() runtime.Object { return &gwv1.GatewayClassList{} }},
	{"gateways", true, false, false, false, &gwv1.Gateway{}, func() runtime.Object { return &gwv1.GatewayList{} }},
	{"httproutes", true, false, false, true, &gwv1.HTTPRoute{}, func() runtime.Object { return &gwv1.HTTPRouteList{} }},
	{"grpcroutes", true, false, true, true, &gwv1.GRPCRoute{}, func() runtime.Object { return &gwv1.GRPCRouteList{} }},
	{"tlsroutes", true, false, true, true, &gwv1.TLSRoute{}, func() runtime.Object { return &gwv1.TLSRouteList{} }},
	{"tcproutes", true, false, true, true, &gwv1.TCPRoute{}, func() runtime.Object { return &gwv1.TCPRouteList{} }},
	{"referencegrants", true, false, false, false, &gwv1.ReferenceGrant{}, func() runtime.Object { return &gwv1.ReferenceGrantList{} }},
	{"services", false, false, false, false, &corev1.Service{}, func() runtime.Object { return &corev1.ServiceList{} }},
	{"namespaces", false, true, false, false, &corev1.Namespace{}, func() runtime.Object { return &corev1.NamespaceList{} }},
	{"secrets", false, false, false, false, &corev1.Secret{}, func() runtime.Object { return &corev1.SecretList{} }},
}

// served returns the resources the API server serves of the Gateway
// API's version baton reads (gateway.networking.k8s.io/v1): those whose
// CRD, at a release that serves v1, is installed.
func (c *Client) served(ctx context.Context) (map[string]bool, error) {
	raw, err := c.gw.Get().AbsPath("/apis", gwv1.GroupName, gwv1.GroupVersion.Version).Do(ctx).Raw()
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", gwv1.GroupVersion, err)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("discover %s: %w", gwv1.GroupVersion, err)
	}
	out := make(map[string]bool, len(list.APIResources))
	for _, r := range list.APIResources {
		out[r.Name] = true
	}
	return out, nil
}

// fieldSelector narrows what is read of a resource: of Secrets, only
// those of type kubernetes.io/tls, the only ones a listener can use, so
// that baton holds no other Secret of the cluster in memory.
func fieldSelector(resource string) string {
	if resource == "secrets" {
		return "type=" + string(corev1.SecretTypeTLS)
	}
	return ""
}

// listWatch lists and watches a resource in every namespace.
func (c *Client) listWatch(resource string, gateway bool, newList func() runtime.Object) cache.ListerWatcher {
	rc := c.core
	if gateway {
		rc = c.gw
	}
	return kube.ListWatchAll(rc, c.params, resource, fieldSelector(resource), newList)
}

// updateStatus writes obj's status (its status subresource), as obj's
// resourceVersion says it was read: a conflict means the object changed
// since, and the status writer tries again.
func (c *Client) updateStatus(ctx context.Context, resource, namespace, name string, obj runtime.Object) error {
	req := c.gw.Put().Resource(resource).Name(name).SubResource("status").Body(obj)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	return req.Do(ctx).Error()
}
