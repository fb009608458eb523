package kube

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// newNamespace creates a namespace for one test.
func newNamespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t-%d", rand.Uint32())
	_, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// createService creates Service ns/name with port "http" 80 -> 8080, and
// the given cluster IP ("None": headless).
func createService(t testing.TB, ns, name, clusterIP string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web")}},
		},
	}
	if _, err := client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No namespace controller runs: delete the Service itself, which
	// frees its cluster IP for the next run of the test.
	t.Cleanup(func() {
		client.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// podState is a pod as the EndpointSlice shows it.
type podState struct {
	p                           *pod
	ready, serving, terminating bool
}

func readyPod(p *pod) podState { return podState{p: p, ready: true, serving: true} }

// writeSlice writes the one EndpointSlice of Service ns/svc, as the
// endpoint-slice controller would: named port "http" on the pods' target
// port 8080.
func writeSlice(t testing.TB, ns, svc string, pods []podState) {
	t.Helper()
	writeSlicePort(t, ns, svc, 8080, pods)
}

// writeSlicePort is writeSlice with the pods' target port port.
func writeSlicePort(t testing.TB, ns, svc string, port int32, pods []podState) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-a", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port)}},
	}
	for _, ps := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{ps.p.ip},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr(ps.ready), Serving: ptr(ps.serving), Terminating: ptr(ps.terminating),
			},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: ps.p.name},
		})
	}
	ctx := context.Background()
	cur, err := client.DiscoveryV1().EndpointSlices(ns).Get(ctx, s.Name, metav1.GetOptions{})
	if err == nil {
		s.ResourceVersion = cur.ResourceVersion
		_, err = client.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{})
	} else {
		_, err = client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// batonConfig renders a baton config routing to Service ns/svc.
func batonConfig(ns, svc, mode, extra string) string {
	return fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
drainTimeout: 30s
workers: 2
kubernetes:
  kubeconfig: %s
listeners:
  - name: web
    address: 127.0.0.1:0
    reusePort: true
backends:
  - name: shop
    kubernetes:
      service: %s/%s
      port: http
      mode: %s
    retries: 2
%sroutes:
  - listener: web
    backend: shop
`, kubeconfig, ns, svc, mode, extra)
}

func startBaton(t testing.TB, cfg string) *harness.Baton { return harness.Start(t, batonBin, cfg) }

// kubeProxy does kube-proxy's job for one Service by hand: it listens on
// the ClusterIP and sends each new connection to a random pod among those
// kube-proxy would pick (ready, else serving and terminating). Its view of
// the pods lags the EndpointSlice by lag, as kube-proxy's sync does.
type kubeProxy struct {
	ln  net.Listener
	lag time.Duration
	wg  sync.WaitGroup

	mu    sync.Mutex // protects pods and conns
	pods  []podState
	conns map[net.Conn]struct{}
}

func startKubeProxy(t testing.TB, clusterIP string, lag time.Duration) *kubeProxy {
	t.Helper()
	if err := addAddr(clusterIP); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(clusterIP, "80"))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeProxy{ln: ln, lag: lag, conns: make(map[net.Conn]struct{})}
	k.wg.Go(k.accept)
	t.Cleanup(k.close)
	return k
}

// set changes the pods, lag from now.
func (k *kubeProxy) set(pods []podState) {
	pods = append([]podState(nil), pods...)
	k.wg.Go(func() {
		time.Sleep(k.lag)
		k.mu.Lock()
		k.pods = pods
		k.mu.Unlock()
	})
}

// setNow changes the pods at once (kube-proxy's state before the test).
func (k *kubeProxy) setNow(pods []podState) {
	k.mu.Lock()
	k.pods = append([]podState(nil), pods...)
	k.mu.Unlock()
}

func (k *kubeProxy) pick() *pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ready, terminating []*pod
	for _, ps := range k.pods {
		switch {
		case ps.ready:
			ready = append(ready, ps.p)
		case ps.serving && ps.terminating:
			terminating = append(terminating, ps.p)
		}
	}
	if len(ready) == 0 {
		ready = terminating
	}
	if len(ready) == 0 {
		return nil
	}
	return ready[rand.IntN(len(ready))]
}

func (k *kubeProxy) accept() {
	for {
		c, err := k.ln.Accept()
		if err != nil {
			return
		}
		p := k.pick()
		if p == nil {
			c.Close()
			continue
		}
		k.wg.Go(func() { k.forward(c, p) })
	}
}

// forward joins a client connection to a pod, as DNAT does: when the pod
// goes away, so does the connection.
func (k *kubeProxy) forward(c net.Conn, p *pod) {
	defer c.Close()
	up, err := net.Dial("tcp", p.addr())
	if err != nil {
		return
	}
	defer up.Close()
	k.mu.Lock()
	k.conns[c] = struct{}{}
	k.conns[up] = struct{}{}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		delete(k.conns, c)
		delete(k.conns, up)
		k.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		copyClose(up, c)
		close(done)
	}()
	copyClose(c, up)
	<-done
}

func copyClose(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.(*net.TCPConn).CloseWrite()
}

func (k *kubeProxy) close() {
	k.ln.Close()
	k.mu.Lock()
	for c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
	k.wg.Wait()
}
