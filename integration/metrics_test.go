package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/supervisor"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape returns the value of an unlabelled (or fully labelled) metric.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	v, ok := scrapeMaybe(t, addr, name)
	if !ok {
		t.Fatalf("metric %s not found", name)
	}
	return v
}

// scrapeMaybe is scrape for a metric that may not be there yet.
func scrapeMaybe(t *testing.T, addr, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f, true
		}
	}
	return 0, false
}

// freePort returns a loopback address nothing listens on, for a program
// that takes its port from its config.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMetricsSurviveHandoffs checks that the Prometheus counters, which
// the supervisor keeps, never go down when workers and generations are
// replaced.
func TestMetricsSurviveHandoffs(t *testing.T) {
	be := startBackend(t)
	maddr := freePort(t)
	b := startBaton(t, options{workers: 2, extra: fmt.Sprintf("metrics:\n  address: %s\n", maddr)}.configYAML(be))
	web := b.Address("web")
	get := func(n int) {
		for range n {
			getOK(t, http.DefaultClient, "http://"+web+"/")
		}
	}
	get(50)
	waitFor(t, 10*time.Second, "the requests in the metrics", func() bool {
		return scrape(t, maddr, "baton_requests_total") >= 50
	})
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("handoff: %+v", h)
	}
	waitDrained(t, b, 30*time.Second)
	if n := scrape(t, maddr, "baton_requests_total"); n < 50 {
		t.Errorf("requests_total went down to %v after a handoff", n)
	}
	get(10)
	waitFor(t, 10*time.Second, "the new generation's requests added", func() bool {
		return scrape(t, maddr, "baton_requests_total") >= 60
	})
	if n := scrape(t, maddr, `baton_handoffs_total{outcome="ok"}`); n != 2 {
		t.Errorf("handoffs ok: %v, want 2 (start and reload)", n)
	}

	// The workers' series: request durations by listener, backend and
	// status class, summed over the exited generation and the new one;
	// upstream connect times; a 404 under no backend.
	const ok2xx = `baton_http_requests_total{listener="web",backend="app",code_class="2xx"}`
	waitFor(t, 10*time.Second, "60 requests in "+ok2xx, func() bool { return scrape(t, maddr, ok2xx) >= 60 })
	if n := scrape(t, maddr, `baton_http_request_duration_seconds_count{listener="web",backend="app",code_class="2xx"}`); n < 60 {
		t.Errorf("request duration histogram counts %v, want at least 60", n)
	}
	if n := scrape(t, maddr, `baton_upstream_connect_duration_seconds_count{backend="app"}`); n < 1 {
		t.Errorf("upstream connect histogram counts %v", n)
	}
	b.WriteConfig(strings.Replace(options{workers: 2, extra: fmt.Sprintf("metrics:\n  address: %s\n", maddr)}.configYAML(be), "pathPrefix: /\n", "pathPrefix: /app\n", 1))
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("handoff to /app only: %+v", h)
	}
	if r, err := http.Get("http://" + web + "/elsewhere"); err != nil || r.StatusCode != 404 {
		t.Fatalf("GET /elsewhere: %v %v, want 404", r, err)
	}
	const noRoute = `baton_http_requests_total{listener="web",backend="",code_class="4xx"}`
	waitFor(t, 10*time.Second, noRoute, func() bool { n, _ := scrapeMaybe(t, maddr, noRoute); return n >= 1 })
	if n := scrape(t, maddr, ok2xx); n < 60 {
		t.Errorf("%s went down to %v after a second handoff", ok2xx, n)
	}

	// What promtool check metrics checks (its linter), on the real scrape.
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if problems, err := promlint.New(bytes.NewReader(text)).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", err, problems)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := parser.TextToMetricFamilies(bytes.NewReader(text)); err != nil {
		t.Errorf("Prometheus' parser: %v", err)
	}
	if !bytes.Contains(text, []byte("process_resident_memory_bytes")) {
		t.Errorf("no process metrics of the supervisor")
	}
}
