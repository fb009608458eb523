package main

import (
	"fmt"
	"slices"
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
			{ID: 2, State: supervisor.GenActive, Workers: []supervisor.WorkerStatus{
				{PID: 100, Slot: 0, State: supervisor.WorkerReady, StartedAt: now, Requests: 9, RoutingVersion: 7},
				{PID: 101, Slot: 1, State: supervisor.WorkerReady, StartedAt: now, RoutingVersion: 6},
				{PID: 102, Slot: 2, State: supervisor.WorkerReady, StartedAt: now, RoutingVersion: 7, RoutingError: "routing: rule 3: bad regex"},
			}},
			{ID: 1, State: supervisor.GenDraining, Workers: []supervisor.WorkerStatus{{PID: 90, Slot: 0, State: supervisor.WorkerDraining, StartedAt: now}}},
		},
		RoutingVersion: 7,
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
	for _, want := range []string{"active generation 2", "0,3 / 4096", "shop", "endpoints", "draining", "12ms", "pending",
		"routing 7 (Gateway API, Ingress): not applied yet: generation 2 slot 1 (pid 101) has 6\n",
		"applied in part by generation 2 slot 2 (pid 102): routing: rule 3: bad regex\n"} {
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
		`baton_workers{generation_state="active",state="ready"} 3` + "\n",
		"baton_routing_version 7\n",
		"baton_workers_routing_behind 1\n",
		"baton_workers_routing_in_part 1\n",
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

// The timeline in the terminal (issue 25): which generation served when
// over the last minute, with its drain: generation 1 served, then drained
// in 1.5 s after generation 2 took over; 2 served until 3 did and drains
// still; a canary beside 3 serves a share; a failed generation is marked.
func TestPrintTimeline(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return now.Add(time.Duration(s) * time.Second) }
	drain := int64(1500)
	st := &supervisor.Status{
		Generations: []supervisor.GenerationStatus{
			{ID: 1, State: supervisor.GenExited, StartedAt: at(-58)},
			{ID: 2, State: supervisor.GenDraining, StartedAt: at(-40)},
			{ID: 3, State: supervisor.GenActive, StartedAt: at(-20)},
			{ID: 4, State: supervisor.GenFailed, StartedAt: at(-15)},
			{ID: 5, State: supervisor.GenCanary, StartedAt: at(-10)},
		},
		Handoffs: []supervisor.Handoff{
			{ID: 1, To: 1, Outcome: supervisor.OutcomeOK, StartedAt: at(-58), ReadyMs: 10},
			{ID: 2, From: 1, To: 2, Outcome: supervisor.OutcomeOK, StartedAt: at(-40), ReadyMs: 10, DrainMs: &drain},
			{ID: 3, From: 2, To: 3, Outcome: supervisor.OutcomeOK, StartedAt: at(-20), ReadyMs: 10},
			{ID: 4, From: 3, To: 4, Outcome: supervisor.OutcomeFailed, StartedAt: at(-15), DurationMs: 2000},
			{ID: 5, From: 3, To: 5, Outcome: supervisor.OutcomeCanary, StartedAt: at(-10), ReadyMs: 10, Canary: &supervisor.CanaryRecord{Percent: 10}},
		},
	}
	var b strings.Builder
	printTimeline(&b, st, now)
	lines := strings.Split(b.String(), "\n")
	row := func(id int) string {
		for _, l := range lines {
			if strings.HasPrefix(l, fmt.Sprintf("gen %-4d ", id)) {
				return l
			}
		}
		t.Fatalf("no row for generation %d:\n%s", id, b.String())
		return ""
	}
	bar := func(id int) []rune { return []rune(row(id))[9 : 9+timelineWidth] }
	for _, tc := range []struct {
		id           int
		has, hasNot  string
		note, endsAs string
	}{
		{1, "█", "▓", "exited, drained in 1.5s", "░"},
		{2, "█", "x", "draining", "░"},
		{3, "█", "░", "active", "█"},
		{4, "x", "█", "failed", "x"},
		{5, "▓", "█", "canary", "▓"},
	} {
		r, br := row(tc.id), strings.TrimRight(string(bar(tc.id)), " ")
		if !strings.Contains(br, tc.has) || strings.Contains(br, tc.hasNot) || !strings.HasSuffix(r, tc.note) || !strings.HasSuffix(br, tc.endsAs) {
			t.Errorf("generation %d: %q, want %s and not %s, ending %s, noted %q", tc.id, r, tc.has, tc.hasNot, tc.endsAs, tc.note)
		}
	}
	// Generation 2 begins where 1 ends its active part: the handoff.
	if i1, i2 := slices.Index(bar(1), '░'), slices.Index(bar(2), '█'); i1 < 0 || i2 < 0 || i1 != i2 {
		t.Errorf("generation 1 drains from column %d, 2 is active from %d: want the same\n%s", i1, i2, b.String())
	}
}
