package integration

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
)

// probe returns the status of GET http://addr/path.
func probe(addr, path string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStopWithShutdownDelay stops baton under load as a load balancer
// needs (issue 8, problem 1): /readyz turns 503 at once while every
// connection, new ones included, is still served for shutdownDelay; then
// the listeners close and a new connection is refused at once, never
// accepted and abandoned; a request in flight finishes; baton exits 0.
func TestStopWithShutdownDelay(t *testing.T) {
	be := startBackend(t)
	metrics := freePort(t)
	cfg := options{workers: 2, reusePort: true, extra: "shutdownDelay: 2s\nstopTimeout: 20s\nmetrics:\n  address: " + metrics + "\n"}.configYAML(be)
	b := startBaton(t, cfg)
	web := b.Address("web")
	if s := probe(metrics, "/readyz"); s != 200 {
		t.Fatalf("/readyz before the stop: %d", s)
	}
	if s := probe(metrics, "/healthz"); s != 200 {
		t.Fatalf("/healthz: %d", s)
	}
	// A request in flight across the delay and the drain.
	slow := make(chan int, 1)
	go func() { slow <- probe(web, "/sleep/3s") }()
	var progress atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *load.Result, 1)
	go func() {
		done <- load.Run(ctx, load.Config{HTTPAddr: web, Duration: time.Minute, KeepAlive: 4, NewConn: 4, Progress: &progress})
	}()
	harness.WaitTraffic(t, &progress, 200)

	b.Cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 10*time.Second, "/readyz to answer 503", func() bool { return probe(metrics, "/readyz") == 503 })
	stopped := time.Now()
	// Within the delay, new connections and keep-alive ones are served.
	harness.WaitTraffic(t, &progress, 200)
	if s := probe(web, "/"); s != 200 {
		t.Errorf("a new connection during shutdownDelay: %d, want 200", s)
	}
	if time.Since(stopped) > 1500*time.Millisecond {
		t.Logf("warning: the delay's checks took %s of its 2s", time.Since(stopped))
	}
	cancel()
	noFailures(t, <-done)

	// Then the listeners close: a connection is refused, never left
	// waiting in a queue nobody serves.
	var refusedAt time.Time
	waitFor(t, 10*time.Second, "new connections to be refused", func() bool {
		c, err := net.DialTimeout("tcp", web, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			var buf [12]byte
			_, rerr := io.ReadFull(c, buf[:])
			c.Close()
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				t.Errorf("a connection accepted after the stop was abandoned: %v", rerr)
			}
			return false
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			refusedAt = time.Now()
			return true
		}
		t.Errorf("dial after the delay: %v, want connection refused", err)
		return true
	})
	t.Logf("new connections refused %s after /readyz turned 503 (shutdownDelay 2s)", refusedAt.Sub(stopped).Round(time.Millisecond))
	if s := <-slow; s != 200 {
		t.Errorf("the request in flight: %d, want 200", s)
	}
	select {
	case <-b.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("baton did not exit")
	}
	if b.ExitErr != nil {
		t.Errorf("baton exited with %v", b.ExitErr)
	}
}
