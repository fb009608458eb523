package kube

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/kuberig"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
)

// Rollout timing, as a Deployment with a preStop delay runs it.
const (
	// grace is how long a terminating pod keeps serving before it stops.
	grace = 700 * time.Millisecond
	// controllerLag is, in the bad order, how long after the pod stopped
	// its endpoint is updated.
	controllerLag = 300 * time.Millisecond
	// kubeProxyLag is how far kube-proxy's view lags the EndpointSlices.
	kubeProxyLag = 200 * time.Millisecond
	pods         = 3
)

// rolloutResult is what one rollout under load measured.
type rolloutResult struct {
	load     *load.Result
	handoff  supervisor.Handoff
	start    time.Time // of the load
	duration time.Duration
}

// rollout replaces every pod of a Service one by one, under load through b,
// the way a Deployment rollout does: a new pod becomes ready; the old one
// is marked terminating and keeps serving for a grace period, then stops
// and its endpoint goes. In the bad order the old pod stops first and its
// endpoint is updated only after. Halfway, baton is reloaded (SIGHUP).
func rollout(t *testing.T, b *harness.Baton, ns, svc string, old []*pod, badOrder bool, kp *kubeProxy) rolloutResult {
	return rolloutThrough(t, b, b.Address("web"), "", ns, svc, old, badOrder, kp)
}

// rolloutThrough is rollout with the load on addr, one of b's listeners,
// asking for host (none: addr).
func rolloutThrough(t *testing.T, b *harness.Baton, addr, host, ns, svc string, old []*pod, badOrder bool, kp *kubeProxy) rolloutResult {
	t.Helper()
	state := make([]podState, 0, 2*len(old))
	for _, p := range old {
		state = append(state, readyPod(p))
	}
	write := func() {
		writeSlice(t, ns, svc, state)
		if kp != nil {
			kp.set(state)
		}
	}
	var progress atomic.Uint64
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan *load.Result, 1)
	res := rolloutResult{start: time.Now()}
	go func() {
		done <- load.Run(ctx, load.Config{
			HTTPAddr: addr, Host: host, Duration: 5 * time.Minute,
			KeepAlive: 4, NewConn: 2, Post: 2, Progress: &progress,
		})
	}()
	traffic := func() { harness.WaitTraffic(t, &progress, 100) }
	traffic()
	start := time.Now()
	for i, o := range old {
		np := startPod(t, fmt.Sprintf("v2-%d", i), fmt.Sprintf("198.18.1.%d", 10+i))
		state = append(state, readyPod(np))
		write()
		traffic()
		idx := indexOf(state, o)
		if badOrder {
			o.stop()
			time.Sleep(controllerLag)
		}
		state[idx] = podState{p: o, serving: !badOrder, terminating: true}
		write()
		if !badOrder {
			time.Sleep(grace)
			o.stop()
		}
		state = append(state[:idx], state[idx+1:]...)
		write()
		traffic()
		if i == len(old)/2 {
			res.handoff = b.SIGHUP()
			traffic()
		}
	}
	res.duration = time.Since(start)
	stop()
	res.load = <-done
	return res
}

func indexOf(state []podState, p *pod) int {
	for i, ps := range state {
		if ps.p == p {
			return i
		}
	}
	return -1
}

func startPods(t *testing.T, n int) []*pod {
	var ps []*pod
	for i := range n {
		ps = append(ps, startPod(t, fmt.Sprintf("v1-%d", i), fmt.Sprintf("198.18.0.%d", 10+i)))
	}
	return ps
}

// TestRollingUpdateEndpointsMode replaces every pod of a Service under
// load, in the good order and the bad one, with a baton handoff halfway:
// in endpoints mode not one request fails.
func TestRollingUpdateEndpointsMode(t *testing.T) {
	for _, badOrder := range []bool{false, true} {
		name := map[bool]string{false: "good order", true: "pod stops before its endpoint is updated"}[badOrder]
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			createService(t, ns, "shop", "")
			old := startPods(t, pods)
			var state []podState
			for _, p := range old {
				state = append(state, readyPod(p))
			}
			writeSlice(t, ns, "shop", state)
			b := startBaton(t, batonConfig(ns, "shop", "endpoints", "    balancer: least-request\n"))
			res := rollout(t, b, ns, "shop", old, badOrder, nil)
			t.Logf("rollout of %d pods in %s: %s; handoff %s in %dms", pods, res.duration.Round(time.Millisecond), res.load, res.handoff.Outcome, res.handoff.ReadyMs)
			if res.handoff.Outcome != supervisor.OutcomeOK {
				t.Errorf("handoff during the rollout: %s %s", res.handoff.Outcome, res.handoff.Reason)
			}
			// A POST that a stopping pod's keep-alive close meets in
			// flight cannot be told apart from one the pod read before
			// dying: baton, like nginx and Go's Transport, does not send
			// it again. In the bad order that can cost a POST; the GETs
			// never fail, and in the good order nothing does.
			failed := res.load.TotalFailures()
			if badOrder {
				failed -= res.load.FailuresByKind["post"]
				t.Logf("POSTs failed in the bad order: %d", res.load.FailuresByKind["post"])
			}
			if failed != 0 {
				t.Errorf("%d failed requests: %v by kind %v; first: %q", failed, res.load.Failures, res.load.FailuresByKind, res.load.Examples)
			}
			if res.load.Requests < 1000 {
				t.Errorf("too little load to show anything: %s", res.load)
			}
			harness.WaitFor(t, 10*time.Second, "status to show the new pods", func() bool {
				st := b.Status()
				return len(st.Backends) == 1 && st.Backends[0].Ready == pods && st.Backends[0].Terminating == 0 && st.Backends[0].Mode == "endpoints"
			})
		})
	}
}

// TestRollingUpdateClusterIPMode runs the same rollouts through a Service's
// ClusterIP, with kube-proxy (done by hand) balancing. It measures what
// that mode costs; docs/kubernetes.md records the figures.
func TestRollingUpdateClusterIPMode(t *testing.T) {
	for i, badOrder := range []bool{false, true} {
		name := map[bool]string{false: "good order", true: "pod stops before its endpoint is updated"}[badOrder]
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			clusterIP := fmt.Sprintf("198.18.128.%d", 20+i)
			createService(t, ns, "shop", clusterIP)
			kp := startKubeProxy(t, clusterIP, kubeProxyLag)
			old := startPods(t, pods)
			var state []podState
			for _, p := range old {
				state = append(state, readyPod(p))
			}
			writeSlice(t, ns, "shop", state)
			kp.setNow(state)
			b := startBaton(t, batonConfig(ns, "shop", "clusterIP", ""))
			res := rollout(t, b, ns, "shop", old, badOrder, kp)
			t.Logf("clusterIP mode, %s: rollout of %d pods in %s: %s; failures by kind %v; first: %q",
				name, pods, res.duration.Round(time.Millisecond), res.load, res.load.FailuresByKind, res.load.Examples)
			if res.handoff.Outcome != supervisor.OutcomeOK {
				t.Errorf("handoff during the rollout: %s %s", res.handoff.Outcome, res.handoff.Reason)
			}
			// In the good order, baton pools no connection to the
			// ClusterIP while a pod is in its grace period: none meets
			// its close, and nothing fails. In the bad order kube-proxy
			// still sends new connections to the stopped pod for its lag:
			// that costs requests (docs/kubernetes.md has the figures).
			if f := res.load.TotalFailures(); !badOrder && f != 0 {
				t.Errorf("%d failed requests in the good order: %v by kind %v", f, res.load.Failures, res.load.FailuresByKind)
			}
			if res.load.Requests < 1000 {
				t.Errorf("too little load to show anything: %s", res.load)
			}
			harness.WaitFor(t, 10*time.Second, "status of the clusterIP backend", func() bool {
				st := b.Status()
				return len(st.Backends) == 1 && st.Backends[0].Mode == "clusterIP" && st.Backends[0].Ready == 1 // the Service's one cluster IP
			})
		})
	}
}

// TestWorkerWaitsForTheCaches: a reload whose workers cannot reach the API
// server never gets ready and rolls back; one naming a headless Service in
// clusterIP mode fails with that reason. The old generation keeps serving.
func TestWorkerWaitsForTheCaches(t *testing.T) {
	ns := newNamespace(t)
	createService(t, ns, "shop", "")
	createService(t, ns, "db", "None")
	old := startPods(t, 1)
	writeSlice(t, ns, "shop", []podState{readyPod(old[0])})
	good := batonConfig(ns, "shop", "endpoints", "")
	b := startBaton(t, strings.Replace(good, "readyTimeout: 20s", "readyTimeout: 3s", 1))

	unreachable := strings.Replace(string(mustRead(t, kubeconfig)), kuberig.APIAddr, "127.0.0.1:1", 1)
	dead := b.Dir + "/dead-kubeconfig"
	mustWrite(t, dead, unreachable)
	b.WriteConfig(strings.Replace(strings.Replace(good, "readyTimeout: 20s", "readyTimeout: 3s", 1), kubeconfig, dead, 1))
	if out, err := b.Ctl("reload"); err == nil || !strings.Contains(out, "not ready within readyTimeout") {
		t.Errorf("reload with an unreachable API server: %v %s", err, out)
	}

	b.WriteConfig(strings.Replace(batonConfig(ns, "db", "clusterIP", ""), "readyTimeout: 20s", "readyTimeout: 3s", 1))
	if out, err := b.Ctl("reload"); err == nil || !strings.Contains(out, "headless") {
		t.Errorf("reload with a headless Service in clusterIP mode: %v %s", err, out)
	}

	b.WriteConfig(batonConfig(ns, "shop", "endpoints", "kubernetes-typo: 1\n"))
	if out, err := b.Ctl("reload"); err == nil || !strings.Contains(out, "refused") {
		t.Errorf("reload with a bad key: %v %s", err, out)
	}
	res := load.Run(context.Background(), load.Config{HTTPAddr: b.Address("web"), Duration: time.Second, KeepAlive: 2})
	if res.TotalFailures() != 0 || res.Requests == 0 {
		t.Errorf("after refused reloads the old generation does not serve: %s", res)
	}
}

// TestNoServingEndpointAnswers503 keeps the route and answers 503 while the
// Service has nothing serving, and recovers when a pod is back.
func TestNoServingEndpointAnswers503(t *testing.T) {
	ns := newNamespace(t)
	createService(t, ns, "shop", "")
	p := startPods(t, 1)[0]
	writeSlice(t, ns, "shop", []podState{{p: p}}) // not ready, not serving
	b := startBaton(t, batonConfig(ns, "shop", "endpoints", ""))
	addr := b.Address("web")
	if code := get(t, addr); code != 503 {
		t.Errorf("no serving endpoint: %d, want 503", code)
	}
	writeSlice(t, ns, "shop", []podState{readyPod(p)})
	harness.WaitFor(t, 10*time.Second, "the pod to be routed to", func() bool { return get(t, addr) == 200 })
}
