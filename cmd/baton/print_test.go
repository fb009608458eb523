package main

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func sampleStatus() *supervisor.Status {
	now := time.Now()
	drain := int64(12)
	return &supervisor.Status{
		PID: 42, Version: "test", StartedAt: now.Add(-time.Minute), ActiveGeneration: 2,
		Listeners: []supervisor.ListenerStatus{{Name: "web", Address: "127.0.0.1:8080", Protocol: "http", ReusePort: true, Sockets: 2, AcceptQueue: []int{0, 3}, Backlog: 4096}},
		Generations: []supervisor.GenerationStatus{
			{ID: 2, State: supervisor.GenActive, Workers: []supervisor.WorkerStatus{{PID: 100, Slot: 0, State: supervisor.WorkerReady, StartedAt: now, Requests: 9}}},
			{ID: 1, State: supervisor.GenDraining, Workers: []supervisor.WorkerStatus{{PID: 90, Slot: 0, State: supervisor.WorkerDraining, StartedAt: now}}},
		},
		Handoffs:       []supervisor.Handoff{{ID: 2, From: 1, To: 2, Trigger: "signal", Outcome: supervisor.OutcomeOK, ReadyMs: 9, DrainMs: &drain}},
		PendingHandoff: &supervisor.Handoff{ID: 3, From: 2, Trigger: "control", Outcome: supervisor.OutcomePending},
		Backends:       []ipc.BackendStats{{Name: "shop", Mode: "endpoints", Ready: 3, Terminating: 1, UpdatedAt: now}},
		Totals: supervisor.Totals{Requests: 1234, Handoffs: map[supervisor.Outcome]uint64{supervisor.OutcomeOK: 2},
			Backends: map[string]ipc.BackendCounters{"shop": {Requests: 50, Errors: 1, Retries: 4, ConnectFailures: 3}}},
	}
}

func TestPrintStatus(t *testing.T) {
	var b strings.Builder
	if err := printStatus(&b, sampleStatus(), time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"active generation 2", "0,3 / 4096", "shop", "endpoints", "draining", "12ms", "pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
}

// scrapeText renders st as /metrics does.
func scrapeText(t *testing.T, st *supervisor.Status) string {
	t.Helper()
	var p metrics.Page
	statusMetrics(&p, st)
	processMetrics(&p)
	var b strings.Builder
	p.WriteTo(&b)
	return b.String()
}

// TestMetrics: the status's counters, gauges and the workers' series, in
// a scrape that promtool's linter (promlint) passes, a label value with a
// tab and a quote included.
func TestMetrics(t *testing.T) {
	st := sampleStatus()
	var h metrics.Histogram
	h.Observe(3 * time.Millisecond)
	h.Observe(2 * time.Second)
	st.Totals.Series = []metrics.Series{
		h.Series("baton_http_request_duration_seconds", "listener", "web", "backend", "shop", "code_class", "2xx"),
		h.Series("baton_upstream_connect_duration_seconds", "backend", "odd\tname \"quoted\""),
		{Name: "baton_tls_handshakes_total", Labels: []string{"listener", "web"}, Value: 9},
	}
	out := scrapeText(t, st)
	for _, want := range []string{
		"baton_requests_total 1234\n",
		`baton_handoffs_total{outcome="ok"} 2` + "\n",
		`baton_handoffs_total{outcome="failed"} 0` + "\n",
		`baton_workers{generation_state="active",state="ready"} 1` + "\n",
		`baton_listener_accept_queue{listener="web",socket="1"} 3` + "\n",
		`baton_backend_endpoints{backend="shop",mode="endpoints",state="terminating"} 1` + "\n",
		`baton_backend_retries_total{backend="shop"} 4` + "\n",
		`baton_backend_connect_failures_total{backend="shop"} 3` + "\n",
		`baton_http_request_duration_seconds_bucket{listener="web",backend="shop",code_class="2xx",le="0.005"} 1` + "\n",
		`baton_http_request_duration_seconds_bucket{listener="web",backend="shop",code_class="2xx",le="+Inf"} 2` + "\n",
		`baton_http_request_duration_seconds_sum{listener="web",backend="shop",code_class="2xx"} 2.003` + "\n",
		`baton_http_requests_total{listener="web",backend="shop",code_class="2xx"} 2` + "\n",
		"baton_upstream_connect_duration_seconds_count{backend=\"odd\tname \\\"quoted\\\"\"} 2\n", // the quotes escaped
		`baton_tls_handshakes_total{listener="web"} 9` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
	problems, err := promlint.New(strings.NewReader(out)).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint (promtool check metrics): %v %v", err, problems)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := parser.TextToMetricFamilies(strings.NewReader(out)); err != nil {
		t.Errorf("Prometheus' parser: %v", err)
	}
	for _, want := range []string{"process_resident_memory_bytes ", "process_cpu_seconds_total ", "process_start_time_seconds ", "process_open_fds "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s", want)
		}
	}
}
