package gateway

import (
	"context"

	"github.com/baton-proxy/baton/proxy/kube"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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
	obj       runtime.Object
	list      func() runtime.Object
}{
	{"gatewayclasses", true, true, &gwv1.GatewayClass{}, func() runtime.Object { return &gwv1.GatewayClassList{} }},
	{"gateways", true, false, &gwv1.Gateway{}, func() runtime.Object { return &gwv1.GatewayList{} }},
	{"httproutes", true, false, &gwv1.HTTPRoute{}, func() runtime.Object { return &gwv1.HTTPRouteList{} }},
	{"grpcroutes", true, false, &gwv1.GRPCRoute{}, func() runtime.Object { return &gwv1.GRPCRouteList{} }},
	{"referencegrants", true, false, &gwv1.ReferenceGrant{}, func() runtime.Object { return &gwv1.ReferenceGrantList{} }},
	{"services", false, false, &corev1.Service{}, func() runtime.Object { return &corev1.ServiceList{} }},
	{"namespaces", false, true, &corev1.Namespace{}, func() runtime.Object { return &corev1.NamespaceList{} }},
	{"secrets", false, false, &corev1.Secret{}, func() runtime.Object { return &corev1.SecretList{} }},
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
