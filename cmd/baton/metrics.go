package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
)

// metricsHandler serves the supervisor's status as Prometheus metrics:
// lifetime totals kept by the supervisor (the workers' series summed,
// those of exited workers included), so they do not reset when a worker or
// a generation is replaced, and a few of the supervisor's own process
// metrics.
func metricsHandler(sup *supervisor.Supervisor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, ok := sup.Brief(r.Context())
		if !ok {
			http.Error(w, "baton: stopping", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		var p metrics.Page
		statusMetrics(&p, &st)
		processMetrics(&p)
		p.WriteTo(w)
	})
}

// probeTimeout bounds how long a probe waits for the supervisor's loop.
const probeTimeout = 2 * time.Second

// readyzHandler answers 200 while an active generation serves and baton is
// not stopping, else 503: a load balancer's or Kubernetes' readiness probe.
func readyzHandler(sup *supervisor.Supervisor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		st, ok := sup.Brief(ctx)
		switch {
		case !ok:
			http.Error(w, "not ready: the supervisor does not answer", http.StatusServiceUnavailable)
		case st.Stopping:
			http.Error(w, "not ready: stopping", http.StatusServiceUnavailable)
		case !st.Ready:
			http.Error(w, "not ready: no active generation", http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ready: generation %d\n", st.ActiveGeneration)
		}
	})
}

// healthzHandler answers 200 while the supervisor's loop answers within
// probeTimeout: a liveness probe (a stopping baton is alive).
func healthzHandler(sup *supervisor.Supervisor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		if _, ok := sup.Brief(ctx); !ok {
			http.Error(w, "unhealthy: the supervisor does not answer", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
}

// seriesHelp describes the series the workers report (internal/metrics).
var seriesHelp = map[string]string{
	"baton_http_request_duration_seconds":      "HTTP requests by listener, backend (empty: none, such as no route) and status class, from the request head to the response's end.",
	"baton_upstream_connect_duration_seconds":  "New connections to a backend's endpoints (TCP, and TLS when the backend has it).",
	"baton_upstream_response_duration_seconds": "From a request's first attempt on a backend to its response head.",
	"baton_tls_handshakes_total":               "TLS handshakes on a listener, failed ones included.",
	"baton_tls_handshake_errors_total":         "TLS handshakes on a listener that failed.",
	"baton_proxy_protocol_errors_total":        "Connections on a listener closed for a missing or malformed PROXY protocol header.",
	"baton_connections_refused_total":          "Connections on a listener closed at accept: the worker held http.maxConnections already.",
}

// statusMetrics puts one status on p.
func statusMetrics(p *metrics.Page, st *supervisor.Status) {
	u := func(v uint64) float64 { return float64(v) }
	p.Gauge("baton_info", "The supervisor's version and pid.", 1, "version", st.Version, "pid", strconv.Itoa(st.PID))
	p.Gauge("baton_active_generation", "The generation that takes new connections.", float64(st.ActiveGeneration))
	p.Counter("baton_requests_total", "Requests and TCP streams served by every worker, across generations.", u(st.Totals.Requests))
	p.Counter("baton_connections_accepted_total", "Client connections accepted by every worker, across generations.", u(st.Totals.Accepted))
	p.Counter("baton_proxy_errors_total", "Requests answered with an error by baton itself (no route, no backend).", u(st.Totals.Errors))
	p.Counter("baton_log_lines_dropped_total", "Log lines dropped, by the supervisor and every worker, because their destination did not keep up.", u(st.Totals.LogDropped))
	p.Gauge("baton_connections", "Client connections open now, over every worker.", float64(st.Totals.Connections))
	for _, o := range []supervisor.Outcome{supervisor.OutcomeOK, supervisor.OutcomeFailed, supervisor.OutcomeRefused, supervisor.OutcomeAborted} {
		p.Counter("baton_handoffs_total", "Handoffs by outcome.", u(st.Totals.Handoffs[o]), "outcome", string(o))
	}
	var canaryShare, canaryGen float64
	if c := st.Canary; c != nil {
		canaryShare, canaryGen = c.Share, float64(c.Generation)
	}
	p.Gauge("baton_canary_generation", "The generation running as a canary beside the active one; 0: none.", canaryGen)
	p.Gauge("baton_canary_share_percent", "The canary's share of new connections, in percent; 0: no canary.", canaryShare)
	if n := len(st.Handoffs); n > 0 {
		p.Gauge("baton_last_handoff_ready_seconds", "From the last handoff's request to its new generation being ready.", float64(st.Handoffs[n-1].ReadyMs)/1000)
	}
	p.Gauge("baton_routing_version", "The version of the route providers' routing (Gateway API, Ingress) sent to the workers; 0: none.", u(st.RoutingVersion))
	p.Gauge("baton_workers_routing_behind", "Ready workers that have not applied the last routing yet.", float64(len(st.RoutingBehind())))
	p.Gauge("baton_workers_routing_in_part", "Ready workers that applied the last routing only in part (baton status says why).", float64(len(st.RoutingInPart())))
	type workerKey struct{ gen, state string }
	workers := map[workerKey]int{}
	var keys []workerKey
	for _, g := range st.Generations {
		for _, wk := range g.Workers {
			k := workerKey{fmt.Sprint(g.State), fmt.Sprint(wk.State)}
			if workers[k] == 0 {
				keys = append(keys, k)
			}
			workers[k]++
		}
	}
	for _, k := range keys {
		p.Gauge("baton_workers", "Worker processes by generation state and worker state.", float64(workers[k]), "generation_state", k.gen, "state", k.state)
	}
	for _, l := range st.Listeners {
		for i, q := range l.AcceptQueue {
			p.Gauge("baton_listener_accept_queue", "Connections waiting in a listening socket's accept queue.", float64(q), "listener", l.Name, "socket", strconv.Itoa(i))
		}
	}
	for _, be := range st.Backends {
		const help = "Endpoints of a backend by state, as the active generation sees them."
		p.Gauge("baton_backend_endpoints", help, float64(be.Ready), "backend", be.Name, "mode", be.Mode, "state", "ready")
		p.Gauge("baton_backend_endpoints", help, float64(be.Terminating), "backend", be.Name, "mode", be.Mode, "state", "terminating")
	}
	names := make([]string, 0, len(st.Totals.Backends))
	for n := range st.Totals.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, m := range []struct {
		name, help string
		get        func(c ipc.BackendCounters) uint64
	}{
		{"baton_backend_requests_total", "Requests and TCP streams routed to a backend, across generations.", func(c ipc.BackendCounters) uint64 { return c.Requests }},
		{"baton_backend_errors_total", "Requests baton answered 502, 503 or 504 for a backend.", func(c ipc.BackendCounters) uint64 { return c.Errors }},
		{"baton_backend_retries_total", "Requests sent again, on a new connection or another endpoint.", func(c ipc.BackendCounters) uint64 { return c.Retries }},
		{"baton_backend_connect_failures_total", "Failed connects to a backend's endpoints.", func(c ipc.BackendCounters) uint64 { return c.ConnectFailures }},
	} {
		for _, n := range names {
			p.Counter(m.name, m.help, u(m.get(st.Totals.Backends[n])), "backend", n)
		}
	}
	for i := range st.Totals.Series {
		s := &st.Totals.Series[i]
		if !s.IsHistogram() {
			p.Counter(s.Name, seriesHelp[s.Name], u(s.Value), s.Labels...)
			continue
		}
		p.Histogram(s.Name, seriesHelp[s.Name], s)
	}
	for i := range st.Totals.Series {
		if s := &st.Totals.Series[i]; s.Name == "baton_http_request_duration_seconds" {
			var n uint64
			for _, c := range s.Counts {
				n += c
			}
			p.Counter("baton_http_requests_total", "HTTP requests by listener, backend (empty: none) and status class.", u(n), s.Labels...)
		}
	}
}

// processMetrics puts the supervisor's own process metrics on p, with the
// names and meanings of Prometheus' process collector.
func processMetrics(p *metrics.Page) {
	p.Gauge("go_goroutines", "Goroutines of the supervisor.", float64(runtime.NumGoroutine()))
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		p.Gauge("process_open_fds", "Open file descriptors of the supervisor.", float64(len(ents)))
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 22 {
		return
	}
	ticks := 100.0 // sysconf(_SC_CLK_TCK) on Linux
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	start, _ := strconv.ParseFloat(f[19], 64)
	rss, _ := strconv.ParseFloat(f[21], 64)
	p.Counter("process_cpu_seconds_total", "User and system CPU time of the supervisor, in seconds.", (utime+stime)/ticks)
	p.Gauge("process_resident_memory_bytes", "Resident memory of the supervisor, in bytes.", rss*float64(os.Getpagesize()))
	if boot := bootTime(); boot > 0 {
		p.Gauge("process_start_time_seconds", "Start time of the supervisor since the Unix epoch, in seconds.", boot+start/ticks)
	}
}

// bootTime is when the machine booted, in seconds since the Unix epoch.
func bootTime() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			t, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return t
		}
	}
	return 0
}
