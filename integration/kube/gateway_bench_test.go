package kube

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// gatewayBench is a baton serving Gateway "gw" of a GatewayClass of its
// own, in a namespace of its own, at one address.
type gatewayBench struct {
	dyn  dynamic.Interface
	ns   string
	addr string // the Gateway's
	b    *harness.Baton
}

// newGatewayBench starts baton (two workers; a drain waits up to 10
// minutes for its connections, so that a stream opened before a handoff
// lives on) and the Gateway, with the listeners given as YAML, at address
// addr, and waits for it to be Programmed.
func newGatewayBench(tb testing.TB, ns, addr, listeners string) *gatewayBench {
	g := &gatewayBench{dyn: gatewayCRDs(tb), ns: ns, addr: addr}
	g.b = startBaton(tb, fmt.Sprintf(`controlSocket: "@DIR@/run/control.sock"
readyTimeout: 20s
drainTimeout: 10m
workers: 2
kubernetes:
  kubeconfig: %s
gateway:
  controllerName: example.test/%s
  addresses: [%s/32]
`, kubeconfig, ns, addr))
	apply(tb, g.dyn, fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: bench-%[1]s}
spec: {controllerName: example.test/%[1]s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: %[1]s}
spec:
  gatewayClassName: bench-%[1]s
  listeners: %[2]s`, ns, listeners))
	harness.WaitFor(tb, 60*time.Second, "the Gateway Programmed", func() bool {
		return condition(tb, g.dyn, "gateways", ns, "gw", "Programmed") == "True"
	})
	return g
}

// route is an HTTPRoute of the bench's namespace on Gateway gw: hostnames,
// one rule of a PathPrefix match to weighted backendRefs (Service name to
// weight; port 80).
func (g *gatewayBench) route(name string, hosts []string, prefix string, backends map[string]int) *unstructured.Unstructured {
	var refs []any
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		refs = append(refs, map[string]any{"name": n, "port": int64(80), "weight": int64(backends[n])})
	}
	hs := make([]any, len(hosts))
	for i, h := range hosts {
		hs[i] = h
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": name, "namespace": g.ns},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "gw"}},
			"hostnames":  hs,
			"rules": []any{map[string]any{
				"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": prefix}}},
				"backendRefs": refs,
			}},
		},
	}}
}

func (g *gatewayBench) create(tb testing.TB, u *unstructured.Unstructured) {
	tb.Helper()
	if _, err := g.dyn.Resource(gvr("httproutes")).Namespace(g.ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create HTTPRoute %s: %v", u.GetName(), err)
	}
}

// put writes u over the route of its name, whatever its version.
func (g *gatewayBench) put(tb testing.TB, u *unstructured.Unstructured) {
	tb.Helper()
	res := g.dyn.Resource(gvr("httproutes")).Namespace(g.ns)
	// The controller writes the route's status: a conflict is that.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := res.Get(context.Background(), u.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = res.Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		tb.Fatalf("update HTTPRoute %s: %v", u.GetName(), err)
	}
}

func (g *gatewayBench) delete(tb testing.TB, name string) {
	tb.Helper()
	if err := g.dyn.Resource(gvr("httproutes")).Namespace(g.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		tb.Fatalf("delete HTTPRoute %s: %v", name, err)
	}
}

// prober asks the Gateway for a host on one keep-alive connection.
type prober struct {
	c   *http.Client
	url string
}

func newProber(addr string, port int) *prober {
	return &prober{c: &http.Client{Timeout: 5 * time.Second}, url: "http://" + net.JoinHostPort(addr, strconv.Itoa(port)) + "/"}
}

func (p *prober) status(host string) int {
	req, _ := http.NewRequest("GET", p.url, nil)
	req.Host = host
	resp, err := p.c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// BenchmarkHTTPRouteToRouting measures a route change from the write to
// the API server to the first request routed by it: an HTTPRoute's
// hostname changes, and a client asks the Gateway for the new host every
// millisecond until it is answered 200 (not 404). Through a real
// kube-apiserver, baton's controller (watch, translation, status), the
// routing's way to both workers, and the request; with 1, 100 and 1,000
// HTTPRoutes in place (each of its own hostname). Reported as p50-ms,
// p99-ms and max-ms.
//
//	go test -run '^$' -bench HTTPRouteToRouting -benchtime 200x ./integration/kube/
func BenchmarkHTTPRouteToRouting(b *testing.B) {
	for i, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) { routeLatency(b, n, i) })
	}
}

func routeLatency(b *testing.B, n, idx int) {
	ns := newNamespace(b)
	createService(b, ns, "app", "")
	writeSlice(b, ns, "app", []podState{readyPod(startPod(b, "app", fmt.Sprintf("198.18.5.%d", idx+1)))})
	g := newGatewayBench(b, ns, fmt.Sprintf("198.18.64.%d", 220+idx), `[{name: http, port: 80, protocol: HTTP}]`)
	for i := range n {
		g.create(b, g.route(fmt.Sprintf("r%d", i), []string{fmt.Sprintf("r%d.example", i)}, "/", map[string]int{"app": 1}))
	}
	p := newProber(g.addr, 80)
	last := fmt.Sprintf("r%d.example", n-1)
	harness.WaitFor(b, 120*time.Second, "every route served", func() bool { return p.status(last) == 200 })

	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		k := i % n
		host := fmt.Sprintf("r%d-%d.example", k, i)
		start := time.Now()
		g.put(b, g.route(fmt.Sprintf("r%d", k), []string{host}, "/", map[string]int{"app": 1}))
		for p.status(host) != 200 {
			if time.Since(start) > 30*time.Second {
				b.Fatalf("route change %d: %s not served within 30s", i, host)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatency(b, lat)
}

// reportLatency reports the p50, p99 and max of lat, in ms.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkGatewayChurn changes a Gateway's configuration under load, as
// a busy cluster does, and counts what the clients lost: 1,000 HTTPRoute
// changes (the weights of the route under load, the matches of others,
// routes deleted and created again), 20 listener additions and removals
// (each a handoff) and 100 rotations of the HTTPS listener's Secret (no handoff), while
// keep-alive, new-connection and POST clients (HTTP and HTTPS) and
// WebSocket-like upgraded streams of 5 s each run against the route under
// load, and one such stream lives through all of it. Reported: failed
// requests and cut streams (both should be 0),
// requests and streams served, handoffs made, and how long the churn
// took.
//
//	go test -run '^$' -bench GatewayChurn -benchtime 1x ./integration/kube/
func BenchmarkGatewayChurn(b *testing.B) {
	for b.Loop() {
		gatewayChurn(b)
	}
}

func gatewayChurn(b *testing.B) {
	ns := newNamespace(b)
	for i, svc := range []string{"a", "b"} {
		createService(b, ns, svc, "")
		writeSlice(b, ns, svc, []podState{readyPod(startPod(b, svc, fmt.Sprintf("198.18.6.%d", i+1)))})
	}
	ca := certs.NewCA(b, "churn CA")
	secret := func(serial int64) *corev1.Secret {
		c, k := ca.Issue(b, []string{"load.example"}, certs.Options{SerialNum: serial})
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cert"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: c, corev1.TLSPrivateKeyKey: k}}
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, secret(1), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	const base = `{name: http, port: 80, protocol: HTTP}, {name: https, port: 443, protocol: HTTPS, hostname: load.example, tls: {certificateRefs: [{name: cert}]}}`
	g := newGatewayBench(b, ns, "198.18.64.230", "["+base+"]")
	weights := [][2]int{{1, 0}, {1, 1}, {0, 1}, {3, 1}}
	loadRoute := func(i int) *unstructured.Unstructured {
		w := weights[i%len(weights)]
		return g.route("load", []string{"load.example"}, "/", map[string]int{"a": w[0], "b": w[1]})
	}
	g.create(b, loadRoute(0))
	const others = 100
	other := func(i, v int) *unstructured.Unstructured {
		return g.route(fmt.Sprintf("r%d", i), []string{fmt.Sprintf("r%d.example", i)}, fmt.Sprintf("/v%d", v), map[string]int{"a": 1})
	}
	for i := range others {
		g.create(b, other(i, 0))
	}
	p := newProber(g.addr, 80)
	harness.WaitFor(b, 120*time.Second, "the routes served", func() bool {
		return p.status("load.example") == 200 && condition(b, g.dyn, "httproutes", ns, fmt.Sprintf("r%d", others-1), "Accepted") == "True"
	})

	// The load: until the churn is over, and a second more.
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var plain, secure *load.Result
	wg.Go(func() {
		plain = load.Run(loadCtx, load.Config{HTTPAddr: net.JoinHostPort(g.addr, "80"), Host: "load.example", Duration: 30 * time.Minute,
			KeepAlive: 4, NewConn: 2, Post: 2, Upgrades: 4, StreamLife: 5 * time.Second, StreamInterval: 20 * time.Millisecond})
	})
	wg.Go(func() {
		secure = load.Run(loadCtx, load.Config{HTTPAddr: net.JoinHostPort(g.addr, "443"), Host: "load.example", Duration: 30 * time.Minute,
			KeepAlive: 2, NewConn: 2, TLS: &tls.Config{InsecureSkipVerify: true, ServerName: "load.example"}})
	})
	// And one WebSocket-like stream for the whole churn: it lives through
	// every change, or the churn cut it.
	var long *load.Result
	wg.Go(func() {
		long = load.Run(loadCtx, load.Config{HTTPAddr: net.JoinHostPort(g.addr, "80"), Host: "load.example", Duration: 30 * time.Minute,
			Upgrades: 1, StreamLife: 30 * time.Minute, StreamInterval: 50 * time.Millisecond})
	})
	defer func() {
		stop()
		wg.Wait()
	}()
	gen0 := g.b.Status().ActiveGeneration

	// The churn: a route change every 20 ms; every 10th also rotates the
	// Secret, every 50th adds or removes a listener.
	start := time.Now()
	var extra []string // listeners added, as YAML
	for i := range 1000 {
		switch i % 4 {
		case 0:
			g.put(b, loadRoute(i/4+1))
		case 1:
			g.put(b, other((i/4)%others, i))
		case 2:
			g.delete(b, fmt.Sprintf("r%d", (i/4)%others))
		case 3:
			g.create(b, other((i/4)%others, i))
		}
		if i%10 == 9 {
			if _, err := client.CoreV1().Secrets(ns).Update(ctx, secret(int64(i/10+2)), metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		if i%50 == 49 {
			if j := i / 50; j%2 == 0 {
				extra = append(extra, fmt.Sprintf("{name: extra-%d, port: %d, protocol: HTTP}", j, 8000+j))
			} else {
				extra = extra[:len(extra)-1]
			}
			g.setListeners(b, base, extra)
		}
		time.Sleep(20 * time.Millisecond)
	}
	churn := time.Since(start)
	// The last state served: the last Secret's certificate on 443.
	lastSerial := int64(1000/10 + 1)
	harness.WaitFor(b, 120*time.Second, "the last certificate served", func() bool { return servedSerial(g.addr, "load.example") == lastSerial })
	time.Sleep(time.Second) // a second of load on the last state; the load stops itself at the cancel
	stop()
	wg.Wait()

	st := g.b.Status()
	handoffs := st.ActiveGeneration - gen0
	failed := plain.TotalFailures() + secure.TotalFailures() + long.TotalFailures()
	cut := plain.FailuresByKind["upgrade"] + long.FailuresByKind["upgrade"]
	if long.Streams != 1 || long.TotalFailures() > 0 {
		b.Errorf("the stream of the whole churn: %d streams, failures %v %v; want 1 stream, whole", long.Streams, long.Failures, long.Examples)
	}
	b.ReportMetric(float64(long.Echoes), "long-stream-echoes")
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(float64(cut), "streams-cut")
	b.ReportMetric(float64(plain.Requests+secure.Requests), "requests")
	b.ReportMetric(float64(plain.Streams), "streams")
	b.ReportMetric(float64(handoffs), "handoffs")
	b.ReportMetric(churn.Seconds(), "churn-s")
	b.ReportMetric(0, "ns/op")
	b.Logf("HTTP: %s", plain)
	b.Logf("HTTPS: %s", secure)
	if failed > 0 {
		b.Errorf("%d requests or streams failed: %v %v; %v %v", failed, plain.Failures, plain.Examples, secure.Failures, secure.Examples)
	}
	for _, h := range st.Handoffs {
		if h.Outcome != supervisor.OutcomeOK {
			b.Errorf("handoff %d (generation %d to %d): %s: %s", h.ID, h.From, h.To, h.Outcome, h.Reason)
		}
	}
}

// setListeners writes Gateway gw's listeners: base and extra, YAML flow
// mappings.
func (g *gatewayBench) setListeners(tb testing.TB, base string, extra []string) {
	tb.Helper()
	var ls []any
	doc := "[" + strings.Join(append([]string{base}, extra...), ", ") + "]"
	if err := yaml.Unmarshal([]byte(doc), &ls); err != nil {
		tb.Fatal(err)
	}
	res := g.dyn.Resource(gvr("gateways")).Namespace(g.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the controller writes its status
		cur, err := res.Get(context.Background(), "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		unstructured.SetNestedSlice(cur.Object, ls, "spec", "listeners")
		_, err = res.Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		tb.Fatalf("update the Gateway's listeners: %v", err)
	}
}

// servedSerial returns the serial number of the certificate addr:443
// serves for host, 0 when the handshake fails.
func servedSerial(addr, host string) int64 {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort(addr, "443"),
		&tls.Config{InsecureSkipVerify: true, ServerName: host})
	if err != nil {
		return 0
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// BenchmarkGatewayMemory measures what 1,000 HTTPRoutes and 10,000
// endpoints cost: the resident memory of the supervisor and of each
// worker (VmRSS, and RssAnon: what is the process's own) with the Gateway
// alone, then with 1,000 HTTPRoutes over 10 Services of 1,000 endpoints
// each, once every worker routes them all.
//
//	go test -run '^$' -bench GatewayMemory -benchtime 1x ./integration/kube/
func BenchmarkGatewayMemory(b *testing.B) {
	for b.Loop() {
		gatewayMemory(b)
	}
}

func gatewayMemory(b *testing.B) {
	const services, perService, routes = 10, 1000, 1000
	ns := newNamespace(b)
	ctx := context.Background()
	for s := range services {
		svc := fmt.Sprintf("svc%d", s)
		createService(b, ns, svc, "")
		for part := 0; part*100 < perService; part++ {
			sl := &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", svc, part), Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
			}
			for i := part * 100; i < min(perService, (part+1)*100); i++ {
				sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
					Addresses:  []string{fmt.Sprintf("198.19.%d.%d", s*4+i/250, i%250+1)},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
				})
			}
			if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, sl, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	g := newGatewayBench(b, ns, "198.18.64.231", `[{name: http, port: 80, protocol: HTTP}]`)
	before := memory(g.b)
	for i := range routes {
		g.create(b, g.route(fmt.Sprintf("r%d", i), []string{fmt.Sprintf("r%d.example", i)}, "/", map[string]int{fmt.Sprintf("svc%d", i%services): 1}))
	}
	harness.WaitFor(b, 180*time.Second, "every endpoint routed", func() bool {
		st, err := g.b.TryStatus()
		if err != nil {
			return false
		}
		ready := 0
		for _, be := range st.Backends {
			ready += be.Ready
		}
		return ready == services*perService
	})
	after := memory(g.b)
	b.ReportMetric(float64(after.supervisorRSS), "supervisor-rss-KiB")
	b.ReportMetric(float64(after.supervisorRSS-before.supervisorRSS), "supervisor-delta-KiB")
	b.ReportMetric(float64(after.workerRSS), "worker-rss-KiB")
	b.ReportMetric(float64(after.workerAnon), "worker-anon-KiB")
	b.ReportMetric(float64(after.workerAnon-before.workerAnon), "worker-delta-KiB")
	b.ReportMetric(0, "ns/op")
	b.Logf("before: %+v; after: %+v", before, after)
}

// mem is what baton's processes hold, in KiB; a worker's is the average
// of the active generation's.
type mem struct {
	supervisorRSS, supervisorAnon int64
	workerRSS, workerAnon         int64
}

func memory(b *harness.Baton) mem {
	m := mem{supervisorRSS: procKiB(b.Cmd.Process.Pid, "VmRSS:"), supervisorAnon: procKiB(b.Cmd.Process.Pid, "RssAnon:")}
	ws := b.ActiveWorkers()
	for _, w := range ws {
		m.workerRSS += procKiB(w.PID, "VmRSS:")
		m.workerAnon += procKiB(w.PID, "RssAnon:")
	}
	if len(ws) > 0 {
		m.workerRSS /= int64(len(ws))
		m.workerAnon /= int64(len(ws))
	}
	return m
}

// procKiB reads a field of /proc/PID/status, in KiB.
func procKiB(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, field) {
			n, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return n
		}
	}
	return 0
}
