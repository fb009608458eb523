package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/proxy/kube/kubetest"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func ptr[T any](v T) *T { return &v }

func service(name string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec:       corev1.ServiceSpec{Ports: ports, ClusterIP: "198.18.128.10", ClusterIPs: []string{"198.18.128.10", "fd00::10"}},
	}
}

type ep struct {
	ip                          string
	ready, serving, terminating *bool
}

func slice(name, svc string, family discoveryv1.AddressType, portName string, port int32, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr(portName), Port: ptr(port)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating},
		})
	}
	return s
}

var yes, no = ptr(true), ptr(false)

func TestConditionsAsTheAPIDefinesThem(t *testing.T) {
	svc := service("web", corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("web")})
	s := slice("web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080,
		ep{ip: "198.18.0.1"},            // all unset: ready, serving, not terminating
		ep{ip: "198.18.0.2", ready: no}, // serving unset: follows ready
		ep{ip: "198.18.0.3", ready: no, serving: yes, terminating: yes},
		ep{ip: "198.18.0.4", ready: yes, serving: no},
	)
	got, err := endpointsMode(svc, []*discoveryv1.EndpointSlice{s}, &Target{PortName: "http"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Endpoint{
		{Address: "198.18.0.1:8080", Ready: true, Serving: true, Terminating: false},
		{Address: "198.18.0.2:8080", Ready: false, Serving: false, Terminating: false},
		{Address: "198.18.0.3:8080", Ready: false, Serving: true, Terminating: true},
		{Address: "198.18.0.4:8080", Ready: true, Serving: false, Terminating: false},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("endpoints\n got %v\nwant %v", got, want)
	}
}

func TestPortsAndFamiliesAndDuplicates(t *testing.T) {
	svc := service("web",
		corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("web")},
		corev1.ServicePort{Name: "metrics", Port: 9090})
	// Named target ports resolve per slice: two slices, two port numbers.
	a := slice("web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.1"}, ep{ip: "198.18.0.2"})
	b := slice("web-b", "web", discoveryv1.AddressTypeIPv4, "http", 8081, ep{ip: "198.18.0.3"})
	v6 := slice("web-6", "web", discoveryv1.AddressTypeIPv6, "http", 8080, ep{ip: "fd00::1"})
	// An endpoint moving between slices appears twice for a moment.
	moved := slice("web-c", "web", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.2", ready: no})
	other := slice("web-m", "web", discoveryv1.AddressTypeIPv4, "metrics", 9090, ep{ip: "198.18.0.9"})
	fqdn := slice("web-f", "web", discoveryv1.AddressTypeFQDN, "http", 8080, ep{ip: "pod.example"})
	for _, tc := range []struct {
		target Target
		want   string
	}{
		{Target{PortName: "http"}, "[{198.18.0.1:8080 true true false false} {198.18.0.2:8080 true true false false} {198.18.0.3:8081 true true false false} {[fd00::1]:8080 true true false false}]"},
		{Target{PortNumber: 80}, "[{198.18.0.1:8080 true true false false} {198.18.0.2:8080 true true false false} {198.18.0.3:8081 true true false false} {[fd00::1]:8080 true true false false}]"},
		{Target{PortName: "metrics"}, "[{198.18.0.9:9090 true true false false}]"},
	} {
		got, err := endpointsMode(svc, []*discoveryv1.EndpointSlice{a, b, v6, moved, other, fqdn}, &tc.target)
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("port %s: %v %v\nwant %s", tc.target.port(), got, err, tc.want)
		}
	}
	if _, err := endpointsMode(svc, nil, &Target{PortName: "grpc"}); !errors.Is(err, ErrNoPort) {
		t.Errorf("unknown port: %v", err)
	}
	if _, err := endpointsMode(nil, nil, &Target{PortName: "http"}); !errors.Is(err, ErrNoService) {
		t.Errorf("missing service: %v", err)
	}
}

func TestClusterIPMode(t *testing.T) {
	svc := service("web", corev1.ServicePort{Name: "http", Port: 80})
	got, err := clusterIPMode(svc, &Target{PortName: "http"}, false)
	if err != nil || fmt.Sprint(got) != "[{198.18.128.10:80 true true false false} {[fd00::10]:80 true true false false}]" {
		t.Errorf("dual-stack: %v %v", got, err)
	}
	headless := service("db", corev1.ServicePort{Name: "pg", Port: 5432})
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	if _, err := clusterIPMode(headless, &Target{PortName: "pg"}, false); !Headless(err) {
		t.Errorf("headless: %v", err)
	}
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ext"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "api.example.com"}}
	if got, err := clusterIPMode(ext, &Target{PortNumber: 443}, false); err != nil || got[0].Address != "api.example.com:443" {
		t.Errorf("ExternalName: %v %v", got, err)
	}
}

// watch runs a Watcher on a fake clientset and returns the batches it
// applies.
func startWatch(t *testing.T, targets []Target, objs ...any) (*fake.Clientset, chan []Update) {
	client, batches, _ := startWatcher(t, targets, objs...)
	return client, batches
}

// startWatcher is startWatch that returns the Watcher too.
func startWatcher(t *testing.T, targets []Target, objs ...any) (*fake.Clientset, chan []Update, *Watcher) {
	t.Helper()
	var rt []any
	rt = append(rt, objs...)
	client := fake.NewClientset()
	for _, o := range rt {
		switch o := o.(type) {
		case *corev1.Service:
			client.CoreV1().Services(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		case *discoveryv1.EndpointSlice:
			client.DiscoveryV1().EndpointSlices(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
		}
	}
	batches := make(chan []Update, 16)
	w := New(kubetest.Source{C: client}, targets, func(u []Update) { batches <- u }, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	synced := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, synced)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not synced")
	}
	return client, batches, w
}

func next(t *testing.T, c chan []Update) []Update {
	t.Helper()
	select {
	case u := <-c:
		return u
	case <-time.After(10 * time.Second):
		t.Fatal("no update")
		return nil
	}
}

func TestWatcherAppliesChangesOnly(t *testing.T) {
	svc := service("web", corev1.ServicePort{Name: "http", Port: 80})
	s := slice("web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.1"})
	targets := []Target{
		{Backend: "web", Namespace: "shop", Service: "web", PortName: "http", Mode: ModeEndpoints},
		{Backend: "web-vip", Namespace: "shop", Service: "web", PortName: "http", Mode: ModeClusterIP},
		{Backend: "gone", Namespace: "shop", Service: "nope", PortName: "http", Mode: ModeEndpoints},
	}
	client, batches := startWatch(t, targets, svc, s)
	first := next(t, batches)
	got := map[string]Update{}
	for _, u := range first {
		got[u.Backend] = u
	}
	if len(first) != 3 || len(got["web"].Endpoints) != 1 || len(got["web-vip"].Endpoints) != 2 || !errors.Is(got["gone"].Err, ErrNoService) {
		t.Fatalf("first batch: %+v", first)
	}

	// The pod terminates: the endpoints-mode backend has it terminating,
	// and the ClusterIP of its Service is not to be reused meanwhile
	// (Endpoint.NoReuse).
	s2 := s.DeepCopy()
	s2.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}
	client.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), s2, metav1.UpdateOptions{})
	got = map[string]Update{}
	for _, u := range next(t, batches) {
		got[u.Backend] = u
	}
	if len(got) != 2 || !got["web"].Endpoints[0].Terminating || !got["web-vip"].Endpoints[0].NoReuse || !got["web-vip"].Endpoints[0].Ready {
		t.Fatalf("after terminating: %+v", got)
	}

	// A write that changes nothing of ours (a label) applies nothing.
	s3 := s2.DeepCopy()
	s3.Labels["team"] = "shop"
	client.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), s3, metav1.UpdateOptions{})
	// A real change after it proves the no-op was seen and dropped.
	s4 := s3.DeepCopy()
	s4.Endpoints = append(s4.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.0.2"}})
	client.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), s4, metav1.UpdateOptions{})
	u := next(t, batches)
	if len(u) != 1 || len(u[0].Endpoints) != 2 {
		t.Fatalf("after a no-op and a new pod: %+v", u)
	}

	// The Service appears for the backend that had none.
	client.CoreV1().Services("shop").Create(context.Background(), service("nope", corev1.ServicePort{Name: "http", Port: 80}), metav1.CreateOptions{})
	u = next(t, batches)
	if len(u) != 1 || u[0].Backend != "gone" || u[0].Err != nil {
		t.Fatalf("after the service appeared: %+v", u)
	}
}

// SetTargets changes what a running watcher watches: a namespace and a
// Service newly named are watched (synced, their endpoints applied, before
// done says so), one no longer named is let go and its changes apply
// nothing.
func TestWatcherSetTargets(t *testing.T) {
	web := service("web", corev1.ServicePort{Name: "http", Port: 80})
	api := service("api", corev1.ServicePort{Name: "http", Port: 80})
	blog := service("blog", corev1.ServicePort{Name: "http", Port: 80})
	blog.Namespace = "blog"
	webSlice := slice("web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.1"})
	apiSlice := slice("api-a", "api", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.2"})
	blogSlice := slice("blog-a", "blog", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.3"})
	blogSlice.Namespace = "blog"
	target := func(backend, ns, svc string) Target {
		return Target{Backend: backend, Namespace: ns, Service: svc, PortName: "http", Mode: ModeEndpoints}
	}
	client, batches, w := startWatcher(t, []Target{target("web", "shop", "web")}, web, api, blog, webSlice, apiSlice, blogSlice)
	if u := next(t, batches); len(u) != 1 || u[0].Backend != "web" {
		t.Fatalf("first batch: %+v", u)
	}
	done := make(chan error, 1)
	w.SetTargets([]Target{target("web", "shop", "web"), target("api", "shop", "api"), target("blog", "blog", "blog")}, done)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A namespace at a time: the batches are applied by the time done
	// says so, one per namespace or one for both.
	got := map[string]Update{}
	for more := true; more; {
		select {
		case b := <-batches:
			for _, u := range b {
				got[u.Backend] = u
			}
		default:
			more = false
		}
	}
	if len(got) != 2 || len(got["api"].Endpoints) != 1 || got["api"].Endpoints[0].Address != "198.18.0.2:8080" || len(got["blog"].Endpoints) != 1 {
		t.Fatalf("after the new targets (web unchanged, so not again): %+v", got)
	}
	if why := w.Waiting(); why != "" {
		t.Fatalf("waiting for %q after the sync", why)
	}
	// shop's Services leave: a change there applies nothing; blog's does.
	w.SetTargets([]Target{target("blog", "blog", "blog")}, done)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s := apiSlice.DeepCopy()
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.0.9"}})
	client.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), s, metav1.UpdateOptions{})
	b := blogSlice.DeepCopy()
	b.Endpoints = append(b.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.0.4"}})
	client.DiscoveryV1().EndpointSlices("blog").Update(context.Background(), b, metav1.UpdateOptions{})
	if u := next(t, batches); len(u) != 1 || u[0].Backend != "blog" || len(u[0].Endpoints) != 2 {
		t.Fatalf("after shop left: %+v", u)
	}
}

// A namespace that cannot be listed (RBAC forbids it: the informer retries
// forever) holds up nothing else: the targets of other namespaces go in
// effect at once, the endpoints of those in effect go on being applied,
// only the namespace's own targets wait, Waiting says why, and the next
// SetTargets replaces the waiting one.
func TestWatcherSetTargetsNeverSyncing(t *testing.T) {
	web := service("web", corev1.ServicePort{Name: "http", Port: 80})
	api := service("api", corev1.ServicePort{Name: "http", Port: 80})
	webSlice := slice("web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.1"})
	apiSlice := slice("api-a", "api", discoveryv1.AddressTypeIPv4, "http", 8080, ep{ip: "198.18.0.2"})
	target := func(backend, ns, svc string) Target {
		return Target{Backend: backend, Namespace: ns, Service: svc, PortName: "http", Mode: ModeEndpoints}
	}
	client, batches, w := startWatcher(t, []Target{target("web", "shop", "web")}, web, api, webSlice, apiSlice)
	next(t, batches)
	client.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "locked" {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("RBAC: not allowed"))
	})
	stuck := make(chan error, 1)
	w.SetTargets([]Target{target("web", "shop", "web"), target("x", "locked", "x"), target("api", "shop", "api")}, stuck)
	// What does not wait for the locked namespace is in effect at once:
	// api's endpoints (shop's cache is made again, its Services changed).
	first := map[string]Update{}
	for _, u := range next(t, batches) {
		first[u.Backend] = u
	}
	if len(first["api"].Endpoints) != 1 {
		t.Fatalf("a target beside the namespace that cannot sync: %+v", first)
	}

	s := webSlice.DeepCopy()
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.0.9"}})
	client.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), s, metav1.UpdateOptions{})
	if u := next(t, batches); len(u) != 1 || u[0].Backend != "web" || len(u[0].Endpoints) != 2 {
		t.Fatalf("while a namespace cannot sync: %+v", u)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.Waiting(), "namespace locked Services: services is forbidden") {
		if time.Now().After(deadline) {
			t.Fatalf("Waiting says %q", w.Waiting())
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-stuck:
		t.Fatalf("the targets of a namespace that cannot sync took effect: %v", err)
	default:
	}

	done := make(chan error, 1)
	w.SetTargets([]Target{target("web", "shop", "web"), target("api", "shop", "api")}, done)
	if err := <-stuck; err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("the waiting targets, replaced: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if why := w.Waiting(); why != "" {
		t.Fatalf("still waiting for %q", why)
	}
	// api, in effect since before, goes on being watched.
	as := apiSlice.DeepCopy()
	as.Endpoints = append(as.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.0.8"}})
	client.DiscoveryV1().EndpointSlices("shop").Update(context.Background(), as, metav1.UpdateOptions{})
	if u := next(t, batches); len(u) != 1 || u[0].Backend != "api" || len(u[0].Endpoints) != 2 {
		t.Fatalf("after the replacing targets: %+v", u)
	}
}
