package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
)

// TestSeries: what a worker reports of its requests: durations by
// listener, backend and status class (a 404 under no backend), over
// HTTP/1.1 and HTTP/2, and its upstream connect and response times.
func TestSeries(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
		}
	}))
	defer be.Close()
	p, web, _ := startProxy(t, webConfig(hostOf(be)))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	for _, c := range []*http.Client{http.DefaultClient, h2} {
		for _, path := range []string{"/", "/", "/missing"} {
			resp, err := c.Get("http://" + web + path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	// A request is counted once its response is out: the last ones'
	// counts may still be on their way.
	var set metrics.Set
	count := func(name string, labels ...string) uint64 {
		for _, s := range set.Sorted() {
			match := s.Name == name
			for i := 0; match && i+1 < len(labels); i += 2 {
				match = s.Label(labels[i]) == labels[i+1]
			}
			if match {
				var n uint64
				for _, c := range s.Counts {
					n += c
				}
				return n
			}
		}
		return 0
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		set = metrics.Set{}
		set.Add(p.series()...)
		if count(metricRequestDuration, "listener", "web", "backend", "app", "code_class", "2xx") >= 4 &&
			count(metricRequestDuration, "listener", "web", "backend", "app", "code_class", "4xx") >= 2 &&
			count(metricResponseDuration, "backend", "app") >= 6 || time.Now().After(deadline) {
			break
		}
	}
	if n := count(metricRequestDuration, "listener", "web", "backend", "app", "code_class", "2xx"); n != 4 {
		t.Errorf("2xx requests of backend app: %d, want 4", n)
	}
	if n := count(metricRequestDuration, "listener", "web", "backend", "app", "code_class", "4xx"); n != 2 {
		t.Errorf("4xx requests of backend app: %d, want 2", n)
	}
	if n := count(metricResponseDuration, "backend", "app"); n != 6 {
		t.Errorf("upstream response times: %d, want 6", n)
	}
	if n := count(metricConnectDuration, "backend", "app"); n < 1 {
		t.Errorf("upstream connect times: %d", n)
	}
}
