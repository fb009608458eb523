package integration

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/supervisor"
)

// scrape returns the value of an unlabelled (or fully labelled) metric.
func scrape(t *testing.T, addr, name string) float64 {
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
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

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
	waitFor(t, 30*time.Second, "the old generation to exit", func() bool {
		for _, g := range b.Status().Generations {
			if g.State == supervisor.GenDraining {
				return false
			}
		}
		return true
	})
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
}
