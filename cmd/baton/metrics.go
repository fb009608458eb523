package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
)

// metricsHandler serves the supervisor's status as Prometheus metrics. The
// counters are lifetime totals kept by the supervisor, so they do not reset
// when a worker or a generation is replaced.
func metricsHandler(sup *supervisor.Supervisor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st, ok := sup.Status()
		if !ok {
			http.Error(w, "baton: stopping", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		writeMetrics(w, &st)
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
		st, ok := sup.StatusContext(ctx)
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
		if _, ok := sup.StatusContext(ctx); !ok {
			http.Error(w, "unhealthy: the supervisor does not answer", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
}

func writeMetrics(out io.Writer, st *supervisor.Status) {
	var b strings.Builder
	metric := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	metric("baton_info", "gauge", "The supervisor's version and pid.")
	fmt.Fprintf(&b, "baton_info{version=%q,pid=\"%d\"} 1\n", st.Version, st.PID)
	metric("baton_active_generation", "gauge", "The generation that takes new connections.")
	fmt.Fprintf(&b, "baton_active_generation %d\n", st.ActiveGeneration)
	metric("baton_requests_total", "counter", "Requests and TCP streams served by every worker, across generations.")
	fmt.Fprintf(&b, "baton_requests_total %d\n", st.Totals.Requests)
	metric("baton_connections_accepted_total", "counter", "Client connections accepted by every worker, across generations.")
	fmt.Fprintf(&b, "baton_connections_accepted_total %d\n", st.Totals.Accepted)
	metric("baton_proxy_errors_total", "counter", "Requests answered with an error by baton itself (no route, no backend).")
	fmt.Fprintf(&b, "baton_proxy_errors_total %d\n", st.Totals.Errors)
	metric("baton_log_lines_dropped_total", "counter", "Log lines dropped, by the supervisor and every worker, because stderr did not keep up.")
	fmt.Fprintf(&b, "baton_log_lines_dropped_total %d\n", st.Totals.LogDropped)
	metric("baton_tls_handshake_errors_total", "counter", "TLS handshakes that failed, every worker's, across generations.")
	fmt.Fprintf(&b, "baton_tls_handshake_errors_total %d\n", st.Totals.TLSHandshakeErrors)
	metric("baton_proxy_protocol_errors_total", "counter", "Connections closed for a missing or malformed PROXY protocol header.")
	fmt.Fprintf(&b, "baton_proxy_protocol_errors_total %d\n", st.Totals.ProxyProtocolErrors)
	metric("baton_connections", "gauge", "Client connections open now, over every worker.")
	fmt.Fprintf(&b, "baton_connections %d\n", st.Totals.Connections)
	metric("baton_handoffs_total", "counter", "Handoffs by outcome.")
	for _, o := range []supervisor.Outcome{supervisor.OutcomeOK, supervisor.OutcomeFailed, supervisor.OutcomeRefused} {
		fmt.Fprintf(&b, "baton_handoffs_total{outcome=%q} %d\n", o, st.Totals.Handoffs[o])
	}
	if n := len(st.Handoffs); n > 0 {
		h := st.Handoffs[n-1]
		metric("baton_last_handoff_ready_seconds", "gauge", "From the last handoff's request to its new generation being ready.")
		fmt.Fprintf(&b, "baton_last_handoff_ready_seconds %g\n", float64(h.ReadyMs)/1000)
	}
	metric("baton_workers", "gauge", "Worker processes by generation state and worker state.")
	workers := map[string]int{}
	for _, g := range st.Generations {
		for _, wk := range g.Workers {
			workers[fmt.Sprintf("generation_state=%q,state=%q", g.State, wk.State)]++
		}
	}
	for _, k := range sortedKeys(workers) {
		fmt.Fprintf(&b, "baton_workers{%s} %d\n", k, workers[k])
	}
	metric("baton_listener_accept_queue", "gauge", "Connections waiting in a listening socket's accept queue.")
	for _, l := range st.Listeners {
		for i, q := range l.AcceptQueue {
			fmt.Fprintf(&b, "baton_listener_accept_queue{listener=%q,socket=\"%d\"} %d\n", l.Name, i, q)
		}
	}
	metric("baton_backend_endpoints", "gauge", "Endpoints of a backend by state, as the active generation sees them.")
	for _, be := range st.Backends {
		fmt.Fprintf(&b, "baton_backend_endpoints{backend=%q,mode=%q,state=\"ready\"} %d\n", be.Name, be.Mode, be.Ready)
		fmt.Fprintf(&b, "baton_backend_endpoints{backend=%q,mode=%q,state=\"terminating\"} %d\n", be.Name, be.Mode, be.Terminating)
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
		metric(m.name, "counter", m.help)
		for _, n := range names {
			fmt.Fprintf(&b, "%s{backend=%q} %d\n", m.name, n, m.get(st.Totals.Backends[n]))
		}
	}
	io.WriteString(out, b.String())
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
