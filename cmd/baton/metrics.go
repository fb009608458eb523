package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
	"github.com/baton-proxy/baton/supervisor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsHandler serves the supervisor's status as Prometheus metrics,
// with client_golang: the counters are lifetime totals kept by the
// supervisor (the workers' series summed, those of exited workers
// included), so they do not reset when a worker or a generation is
// replaced. The supervisor's own Go and process metrics come along.
func metricsHandler(sup *supervisor.Supervisor) http.Handler {
	base := prometheus.NewRegistry()
	base.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, ok := sup.Status()
		if !ok {
			http.Error(w, "baton: stopping", http.StatusServiceUnavailable)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(&statusCollector{st: &st})
		promhttp.HandlerFor(prometheus.Gatherers{base, reg}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}).ServeHTTP(w, r)
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

// seriesHelp describes the series the workers report (internal/metrics).
var seriesHelp = map[string]string{
	"baton_http_request_duration_seconds":      "HTTP requests by listener, backend (empty: none, such as no route) and status class, from the request head to the response's end.",
	"baton_upstream_connect_duration_seconds":  "New connections to a backend's endpoints (TCP, and TLS when the backend has it).",
	"baton_upstream_response_duration_seconds": "From a request's first attempt on a backend to its response head.",
	"baton_tls_handshakes_total":               "TLS handshakes on a listener, failed ones included.",
	"baton_tls_handshake_errors_total":         "TLS handshakes on a listener that failed.",
	"baton_proxy_protocol_errors_total":        "Connections on a listener closed for a missing or malformed PROXY protocol header.",
}

// statusCollector turns one status into metrics. It describes nothing
// ahead (an unchecked collector): its series depend on the config.
type statusCollector struct{ st *supervisor.Status }

func (c *statusCollector) Describe(chan<- *prometheus.Desc) {}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st
	emit := func(name, help string, typ prometheus.ValueType, v float64, labels ...string) {
		var names, values []string
		for i := 0; i+1 < len(labels); i += 2 {
			names, values = append(names, labels[i]), append(values, labels[i+1])
		}
		desc := prometheus.NewDesc(name, help, names, nil)
		m, err := prometheus.NewConstMetric(desc, typ, v, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err) // skipped, logged by the handler
		}
		ch <- m
	}
	counter := func(name, help string, v uint64, labels ...string) {
		emit(name, help, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(name, help string, v float64, labels ...string) {
		emit(name, help, prometheus.GaugeValue, v, labels...)
	}

	gauge("baton_info", "The supervisor's version and pid.", 1, "version", st.Version, "pid", strconv.Itoa(st.PID))
	gauge("baton_active_generation", "The generation that takes new connections.", float64(st.ActiveGeneration))
	counter("baton_requests_total", "Requests and TCP streams served by every worker, across generations.", st.Totals.Requests)
	counter("baton_connections_accepted_total", "Client connections accepted by every worker, across generations.", st.Totals.Accepted)
	counter("baton_proxy_errors_total", "Requests answered with an error by baton itself (no route, no backend).", st.Totals.Errors)
	counter("baton_log_lines_dropped_total", "Log lines dropped, by the supervisor and every worker, because their destination did not keep up.", st.Totals.LogDropped)
	gauge("baton_connections", "Client connections open now, over every worker.", float64(st.Totals.Connections))
	for _, o := range []supervisor.Outcome{supervisor.OutcomeOK, supervisor.OutcomeFailed, supervisor.OutcomeRefused} {
		counter("baton_handoffs_total", "Handoffs by outcome.", st.Totals.Handoffs[o], "outcome", string(o))
	}
	if n := len(st.Handoffs); n > 0 {
		gauge("baton_last_handoff_ready_seconds", "From the last handoff's request to its new generation being ready.", float64(st.Handoffs[n-1].ReadyMs)/1000)
	}
	type workerKey struct{ gen, state string }
	workers := map[workerKey]int{}
	for _, g := range st.Generations {
		for _, wk := range g.Workers {
			workers[workerKey{fmt.Sprint(g.State), fmt.Sprint(wk.State)}]++
		}
	}
	for k, n := range workers {
		gauge("baton_workers", "Worker processes by generation state and worker state.", float64(n), "generation_state", k.gen, "state", k.state)
	}
	for _, l := range st.Listeners {
		for i, q := range l.AcceptQueue {
			gauge("baton_listener_accept_queue", "Connections waiting in a listening socket's accept queue.", float64(q), "listener", l.Name, "socket", strconv.Itoa(i))
		}
	}
	for _, be := range st.Backends {
		const help = "Endpoints of a backend by state, as the active generation sees them."
		gauge("baton_backend_endpoints", help, float64(be.Ready), "backend", be.Name, "mode", be.Mode, "state", "ready")
		gauge("baton_backend_endpoints", help, float64(be.Terminating), "backend", be.Name, "mode", be.Mode, "state", "terminating")
	}
	for name, bc := range st.Totals.Backends {
		counter("baton_backend_requests_total", "Requests and TCP streams routed to a backend, across generations.", bc.Requests, "backend", name)
		counter("baton_backend_errors_total", "Requests baton answered 502, 503 or 504 for a backend.", bc.Errors, "backend", name)
		counter("baton_backend_retries_total", "Requests sent again, on a new connection or another endpoint.", bc.Retries, "backend", name)
		counter("baton_backend_connect_failures_total", "Failed connects to a backend's endpoints.", bc.ConnectFailures, "backend", name)
	}
	for i := range st.Totals.Series {
		s := &st.Totals.Series[i]
		if !s.IsHistogram() {
			counter(s.Name, seriesHelp[s.Name], s.Value, s.Labels...)
			continue
		}
		if len(s.Counts) != len(metrics.Buckets)+1 {
			continue // another version's buckets
		}
		var names, values []string
		for j := 0; j+1 < len(s.Labels); j += 2 {
			names, values = append(names, s.Labels[j]), append(values, s.Labels[j+1])
		}
		buckets := make(map[float64]uint64, len(metrics.Buckets))
		var cum uint64
		for j, ub := range metrics.Buckets {
			cum += s.Counts[j]
			buckets[ub] = cum
		}
		count := cum + s.Counts[len(metrics.Buckets)]
		desc := prometheus.NewDesc(s.Name, seriesHelp[s.Name], names, nil)
		m, err := prometheus.NewConstHistogram(desc, count, s.Sum, buckets, values...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
		if s.Name == "baton_http_request_duration_seconds" {
			counter("baton_http_requests_total", "HTTP requests by listener, backend (empty: none) and status class.", count, s.Labels...)
		}
	}
}
