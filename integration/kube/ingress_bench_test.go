package kube

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// ingressObj is an Ingress of class for host with a Prefix path to
// Service svc (port "http") per path, and annotations.
func ingressObj(ns, class, name, host string, paths []string, svc string, annotations map[string]string) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	var ps []networkingv1.HTTPIngressPath
	for _, p := range paths {
		ps = append(ps, networkingv1.HTTPIngressPath{Path: p, PathType: &prefix,
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: svc, Port: networkingv1.ServiceBackendPort{Name: "http"}}}})
	}
	return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: networkingv1.IngressSpec{IngressClassName: &class, Rules: []networkingv1.IngressRule{{Host: host,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: ps}}}}}}
}

// putIngress writes in over the Ingress of its name, whatever its version
// (baton writes the status).
func putIngress(tb testing.TB, in *networkingv1.Ingress) {
	tb.Helper()
	res := client.NetworkingV1().Ingresses(in.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := res.Get(context.Background(), in.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		in.ResourceVersion = cur.ResourceVersion
		_, err = res.Update(context.Background(), in, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		tb.Fatalf("update Ingress %s: %v", in.Name, err)
	}
}

// BenchmarkIngressScale measures 1,000 Ingresses of 3 paths each (3,000
// paths, ingress-nginx's scale of kubernetes/ingress-nginx#1386): the time
// from the first create to every path served (the creates included:
// 1,000 writes to the API server), and the resident memory of the
// supervisor and of each worker before and after.
//
//	go test -run '^$' -bench IngressScale -benchtime 1x ./integration/kube/
func BenchmarkIngressScale(b *testing.B) {
	for b.Loop() {
		ingressScale(b)
	}
}

func ingressScale(b *testing.B) {
	const ingresses = 1000
	ns := newNamespace(b)
	for i, svc := range []string{"s0", "s1", "s2"} {
		createService(b, ns, svc, "")
		writeSlice(b, ns, svc, []podState{readyPod(startPod(b, "scale-"+svc, fmt.Sprintf("198.18.7.%d", i+1)))})
	}
	bt, class := ingressBaton(b, ns, "198.18.65.20")
	before := memory(bt)
	ctx := context.Background()
	start := time.Now()
	for i := range ingresses {
		in := ingressObj(ns, class, fmt.Sprintf("i%d", i), fmt.Sprintf("i%d.example", i), []string{"/a", "/b", "/c"}, fmt.Sprintf("s%d", i%3), nil)
		if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, in, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	created := time.Since(start)
	p := newProber("198.18.65.20", 80)
	get := func(host, path string) int {
		req, _ := http.NewRequest("GET", p.url[:len(p.url)-1]+path, nil)
		req.Host = host
		resp, err := p.c.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	last := fmt.Sprintf("i%d.example", ingresses-1)
	harness.WaitFor(b, 180*time.Second, "every Ingress served", func() bool { return get(last, "/c") == 200 })
	served := time.Since(start)
	for i := 0; i < ingresses; i += 97 { // a sample of the others, every path
		for _, path := range []string{"/a", "/b", "/c"} {
			if code := get(fmt.Sprintf("i%d.example", i), path); code != 200 {
				b.Errorf("i%d.example%s: %d", i, path, code)
			}
		}
	}
	after := memory(bt)
	b.ReportMetric(created.Seconds(), "create-s")
	b.ReportMetric(served.Seconds(), "apply-to-serving-s")
	b.ReportMetric(float64((served - created).Milliseconds()), "after-last-create-ms")
	b.ReportMetric(float64(after.supervisorRSS), "supervisor-rss-KiB")
	b.ReportMetric(float64(after.supervisorRSS-before.supervisorRSS), "supervisor-delta-KiB")
	b.ReportMetric(float64(after.workerRSS), "worker-rss-KiB")
	b.ReportMetric(float64(after.workerAnon-before.workerAnon), "worker-delta-KiB")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkIngressChurn changes Ingresses under load, as a busy cluster
// does, and counts what the clients lost; then the same load against
// nginx, reloaded as many times (ingress-nginx reloads nginx for such
// changes): 500 changes, one every 100 ms (the weights of a canary of the
// Ingress under load, the paths and annotations of 100 others, Ingresses
// deleted and created again), while keep-alive, new-connection and POST
// clients and WebSocket-like upgraded streams of 5 s run against the
// Ingress under load, and one stream lives through all of it. Reported
// per proxy: failed requests, cut streams (and for baton the handoffs:
// none).
//
//	go test -run '^$' -bench IngressChurn -benchtime 1x ./integration/kube/
func BenchmarkIngressChurn(b *testing.B) {
	for b.Loop() {
		ingressChurn(b)
	}
}

// The churn: churnChanges changes (INGRESS_BENCH_CHANGES for a short
// run), churnEvery apart.
var churnChanges, churnEvery = envInt("INGRESS_BENCH_CHANGES", 500), 100 * time.Millisecond

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func mustURL(tb testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

func ingressChurn(b *testing.B) {
	ns := newNamespace(b)
	pods := map[string]*pod{}
	for i, svc := range []string{"app", "canary"} {
		createService(b, ns, svc, "")
		pods[svc] = startPod(b, "churn-"+svc, fmt.Sprintf("198.18.8.%d", i+1))
		writeSlice(b, ns, svc, []podState{readyPod(pods[svc])})
	}
	const addr = "198.18.65.21"
	bt, class := ingressBaton(b, ns, addr)
	ctx := context.Background()
	create := func(in *networkingv1.Ingress) {
		if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, in, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	canary := func(w int) *networkingv1.Ingress {
		return ingressObj(ns, class, "load-canary", "load.example", []string{"/"}, "canary",
			map[string]string{"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": strconv.Itoa(w)})
	}
	const others = 100
	other := func(i, v int) *networkingv1.Ingress {
		return ingressObj(ns, class, fmt.Sprintf("o%d", i), fmt.Sprintf("o%d.example", i), []string{fmt.Sprintf("/v%d", v)}, "app",
			map[string]string{"nginx.ingress.kubernetes.io/proxy-body-size": fmt.Sprintf("%dk", v+1)})
	}
	create(ingressObj(ns, class, "load", "load.example", []string{"/"}, "app", nil))
	create(canary(0))
	for i := range others {
		create(other(i, 0))
	}
	p := newProber(addr, 80)
	lastOther := &http.Request{Method: "GET", URL: mustURL(b, "http://"+addr+"/v0"), Host: fmt.Sprintf("o%d.example", others-1)}
	harness.WaitFor(b, 120*time.Second, "the Ingresses served", func() bool {
		if p.status("load.example") != 200 {
			return false
		}
		resp, err := p.c.Do(lastOther)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	gen0 := bt.Status().ActiveGeneration
	weights := []int{0, 10, 50, 100, 20}
	res := underLoad(b, net.JoinHostPort(addr, "80"), func(i int) {
		switch i % 4 {
		case 0:
			putIngress(b, canary(weights[(i/4)%len(weights)]))
		case 1:
			putIngress(b, other((i/4)%others, i))
		case 2:
			if err := client.NetworkingV1().Ingresses(ns).Delete(ctx, fmt.Sprintf("o%d", (i/4)%others), metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		case 3:
			create(other((i/4)%others, i))
		}
	})
	handoffs := bt.Status().ActiveGeneration - gen0
	res.report(b, "baton")
	b.ReportMetric(float64(handoffs), "baton-handoffs")
	if res.failed > 0 || handoffs != 0 {
		b.Errorf("baton: %d failed, %d handoffs: %v", res.failed, handoffs, res.examples)
	}

	// nginx, as ingress-nginx runs it: the same pods, the same load, a
	// reload (nginx -s reload) per change; old workers finish their
	// connections for up to worker_shutdown_timeout (10 s here;
	// ingress-nginx's is 240 s).
	ng := startNginx(b, "198.18.65.22", pods["app"].addr())
	nres := underLoad(b, "198.18.65.22:80", func(int) { ng.reload(b) })
	nres.report(b, "nginx")
	b.ReportMetric(0, "ns/op")
}

// churnResult is what the clients of one churn lost.
type churnResult struct {
	failed, cut, requests, echoes uint64
	examples                      []string
}

func (r churnResult) report(b *testing.B, who string) {
	b.ReportMetric(float64(r.failed), who+"-failed")
	b.ReportMetric(float64(r.cut), who+"-streams-cut")
	b.ReportMetric(float64(r.requests), who+"-requests")
	b.ReportMetric(float64(r.echoes), who+"-long-stream-echoes")
}

// underLoad runs the churn's load against addr (Host load.example) while
// change(i) runs churnChanges times, churnEvery apart, and a second more.
func underLoad(b *testing.B, addr string, change func(int)) churnResult {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var short, long *load.Result
	wg.Go(func() {
		short = load.Run(ctx, load.Config{HTTPAddr: addr, Host: "load.example", Duration: 30 * time.Minute,
			KeepAlive: 4, NewConn: 2, Post: 2, Upgrades: 4, StreamLife: 5 * time.Second, StreamInterval: 20 * time.Millisecond})
	})
	// One WebSocket-like stream for the whole churn.
	wg.Go(func() {
		long = load.Run(ctx, load.Config{HTTPAddr: addr, Host: "load.example", Duration: 30 * time.Minute,
			Upgrades: 1, StreamLife: 30 * time.Minute, StreamInterval: 50 * time.Millisecond})
	})
	defer func() {
		stop()
		wg.Wait()
	}()
	for i := range churnChanges {
		change(i)
		time.Sleep(churnEvery)
	}
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	b.Logf("%s: %s; the long stream: %s", addr, short, long)
	return churnResult{
		failed:   short.TotalFailures() + long.TotalFailures(),
		cut:      short.FailuresByKind["upgrade"] + long.FailuresByKind["upgrade"],
		requests: short.Requests, echoes: long.Echoes,
		examples: append(short.Examples, long.Examples...),
	}
}

// nginx is an nginx master this benchmark started.
type nginx struct {
	cmd  *exec.Cmd
	conf string
}

// startNginx runs nginx (Debian's, scripts/peers.sh) with 2 workers on
// addr:80, proxying to backend with keep-alive upstream connections and
// WebSocket upgrades, as ingress-nginx configures it.
func startNginx(tb testing.TB, addr, backend string) *nginx {
	tb.Helper()
	if err := addAddr(addr); err != nil {
		tb.Fatal(err)
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
	}
	dir := tb.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	err = os.WriteFile(conf, []byte(fmt.Sprintf(`daemon off;
master_process on;
worker_processes 2;
worker_shutdown_timeout 10s;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s;
  proxy_temp_path %[1]s;
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  upstream app { server %[3]s; keepalive 32; }
  server {
    listen %[2]s:80 reuseport;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_read_timeout 3600s;
    }
  }
}
`, dir, addr, backend)), 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("nginx: %v (scripts/peers.sh installs it)", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	harness.WaitFor(tb, 10*time.Second, "nginx listening", func() bool {
		c, err := net.DialTimeout("tcp", addr+":80", time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return &nginx{cmd: cmd, conf: conf}
}

// reload has nginx reload its config, as `nginx -s reload` does.
func (n *nginx) reload(tb testing.TB) {
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		tb.Fatalf("nginx reload: %v", err)
	}
}

// BenchmarkIngressToRouting measures an Ingress change from the write to
// the API server to the first request routed by it, with 1,000 Ingresses
// in place (3,000 paths): an Ingress's host changes, and a client asks for
// the new host every millisecond until it is answered 200. Reported as
// p50-ms, p99-ms and max-ms.
//
//	go test -run '^$' -bench IngressToRouting -benchtime 200x ./integration/kube/
func BenchmarkIngressToRouting(b *testing.B) {
	const ingresses = 1000
	ns := newNamespace(b)
	createService(b, ns, "app", "")
	writeSlice(b, ns, "app", []podState{readyPod(startPod(b, "latency", "198.18.7.9"))})
	_, class := ingressBaton(b, ns, "198.18.65.23")
	ctx := context.Background()
	obj := func(i int, host string) *networkingv1.Ingress {
		return ingressObj(ns, class, fmt.Sprintf("i%d", i), host, []string{"/a", "/b", "/"}, "app", nil)
	}
	for i := range ingresses {
		if _, err := client.NetworkingV1().Ingresses(ns).Create(ctx, obj(i, fmt.Sprintf("i%d.example", i)), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	p := newProber("198.18.65.23", 80)
	harness.WaitFor(b, 180*time.Second, "every Ingress served", func() bool { return p.status(fmt.Sprintf("i%d.example", ingresses-1)) == 200 })
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		k := i % ingresses
		host := fmt.Sprintf("i%d-%d.example", k, i)
		start := time.Now()
		putIngress(b, obj(k, host))
		for p.status(host) != 200 {
			if time.Since(start) > 30*time.Second {
				b.Fatalf("change %d: %s not served within 30s", i, host)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	reportLatency(b, lat)
}
