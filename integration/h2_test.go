package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
)

// h2specBin returns h2spec, built by `make h2spec` (scripts/h2spec.sh).
// Missing, the test fails: it is not skipped.
func h2specBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("H2SPEC")
	if bin == "" {
		bin = filepath.Join("..", ".cache", "tools", "h2spec")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing (%v): run `make h2spec`", bin, err)
	}
	return bin
}

var h2specSummary = regexp.MustCompile(`(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed`)

// TestH2Spec runs h2spec, the HTTP/2 conformance suite (RFC 7540 and 9113
// with HPACK, RFC 7541; every case, the strict ones too), against the real
// binary: over TLS (ALPN h2) and in the clear (prior knowledge), through
// to the backend. Every case must pass, but one in the clear: "Sends
// invalid connection preface" (RFC 9113 §3.4) sends bytes that do not
// begin as the preface does, which a listener that also speaks HTTP/1.1
// reads as an HTTP/1.1 request and answers 400 (as nginx and net/http's
// h2c do).
func TestH2Spec(t *testing.T) {
	bin := h2specBin(t)
	be := startBackend(t)
	s := newTLSSetup(t)
	b := startBaton(t, s.config(be, options{workers: 1}, ""))
	allButPreface := []string{"generic", "hpack", "http2/3.5/1", "http2/4", "http2/5", "http2/6", "http2/7", "http2/8"}
	for _, tc := range []struct {
		name, addr string
		tls        bool
		specs      []string
	}{{"tls", b.Address("websecure"), true, nil}, {"cleartext", b.Address("web"), false, allButPreface}} {
		t.Run(tc.name, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(tc.addr)
			args := append([]string{"-h", host, "-p", port, "--strict", "--timeout", "5"}, tc.specs...)
			if tc.tls {
				args = append(args, "--tls", "--insecure")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			m := h2specSummary.FindSubmatch(out)
			if m == nil {
				t.Fatalf("h2spec: %v, no summary:\n%s", err, out)
			}
			total, _ := strconv.Atoi(string(m[1]))
			failed, _ := strconv.Atoi(string(m[4]))
			t.Logf("h2spec %s: %s", tc.name, m[0])
			if failed > 0 || total < 140 || err != nil {
				t.Fatalf("h2spec: %s (%v):\n%s", m[0], err, out)
			}
		})
	}
}

// TestH2HandoffsUnderLoad: HTTP/2 clients over TLS, many streams on a
// connection, across 10 handoffs: not one request fails. A draining
// worker sends GOAWAY (first admitting every stream, then naming the last
// it serves), finishes its streams and closes; the client opens its next
// connection on the new generation.
func TestH2HandoffsUnderLoad(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	b := startBaton(t, s.config(be, options{workers: 2, reusePort: true}, ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var progress atomic.Uint64
	done := make(chan *load.Result, 1)
	go func() {
		done <- load.Run(ctx, load.Config{HTTPAddr: b.Address("websecure"), Host: "a.example", TLS: s.client("a.example"),
			H2: 16, Duration: 5 * time.Minute, Progress: &progress})
	}()
	harness.WaitTraffic(t, &progress, 200)
	for i := range 10 {
		if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
			t.Fatalf("handoff %d: %s %s", i, h.Outcome, h.Reason)
		}
		harness.WaitTraffic(t, &progress, 100) // served by the new generation too
	}
	cancel()
	res := <-done
	t.Logf("HTTP/2 across 10 handoffs: %s", res)
	if res.Requests < 1000 {
		t.Fatalf("only %d requests", res.Requests)
	}
	if n := res.TotalFailures(); n > 0 {
		t.Fatalf("%d of %d requests failed across handoffs: %v (%v)", n, res.Requests, res.Failures, res.Examples)
	}
}

// TestH2AccessLogAndMetrics: an HTTP/2 request over TLS gets its access
// log line (protocol HTTP/2.0, the TLS version and SNI), and is counted in
// the metrics by listener, backend and status class.
func TestH2AccessLogAndMetrics(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	logPath := filepath.Join(t.TempDir(), "access.log")
	maddr := freePort(t)
	cfg := s.config(be, options{workers: 1}, "") + fmt.Sprintf("accessLog:\n  path: %q\n  format: json\nmetrics:\n  address: %s\n", logPath, maddr)
	b := startBaton(t, cfg)
	tr := &http.Transport{TLSClientConfig: s.client("a.example"), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get("https://" + b.Address("websecure") + "/h2/logged?q=1")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("%s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	waitFor(t, 10*time.Second, "the access log line", func() bool { return len(readLines(logPath)) >= 1 })
	var e map[string]any
	line := readLines(logPath)[0]
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	if e["protocol"] != "HTTP/2.0" || e["method"] != "GET" || e["path"] != "/h2/logged?q=1" || e["status"] != float64(200) ||
		e["listener"] != "websecure" || e["tls"] != "1.3" || e["sni"] != "a.example" || e["backend"] != "app" || e["host"] == nil {
		t.Fatalf("line %s", line)
	}
	const ok2xx = `baton_http_requests_total{listener="websecure",backend="app",code_class="2xx"}`
	waitFor(t, 10*time.Second, "the request in "+ok2xx, func() bool { v, ok := scrapeMaybe(t, maddr, ok2xx); return ok && v == 1 })
}
