package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
)

// handoffs is how many consecutive SIGHUP handoffs each configuration
// runs under load.
const handoffs = 50

// TestHandoffsUnderLoad is baton's reason to exist: consecutive SIGHUP
// handoffs while keep-alive clients, new-connection clients, POST clients
// and TCP streams run, and not one failure, counted as a client that never
// retries sees it.
func TestHandoffsUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		workers   int
		reusePort bool
	}{
		{1, false},
		{1, true},
		{2, false},
		{2, true},
	} {
		t.Run(fmt.Sprintf("workers=%d/reusePort=%t", tc.workers, tc.reusePort), func(t *testing.T) {
			be := startBackend(t)
			b := startBaton(t, options{workers: tc.workers, reusePort: tc.reusePort, tcp: true}.configYAML(be))
			res, hs := handoffsUnderLoad(t, b, handoffs)
			t.Logf("%d handoffs: %s", len(hs), res)
			t.Logf("ready ms: %s; drain ms: %s", summarize(hs, readyMs), summarize(hs, drainMs))
			if n := res.TotalFailures(); n != 0 {
				t.Errorf("%d failures across %d handoffs: %v by kind %v; first: %q", n, len(hs), res.Failures, res.FailuresByKind, res.Examples)
			}
			for _, h := range hs {
				if h.Outcome != supervisor.OutcomeOK || h.DrainMs == nil {
					t.Errorf("handoff %d: %s (%s), drained: %t", h.ID, h.Outcome, h.Reason, h.DrainMs != nil)
				}
			}
			if res.Requests < handoffs*10 || res.Streams == 0 {
				t.Errorf("too little load to show anything: %s", res)
			}
		})
	}
}

// TestHandoffsIPv6 runs handoffs on an IPv6 loopback listener.
func TestHandoffsIPv6(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, host: "[::1]", tcp: true}.configYAML(be))
	if addr := b.Address("web"); addr[0] != '[' {
		t.Fatalf("web listens on %s, want [::1]", addr)
	}
	res, hs := handoffsUnderLoad(t, b, 10)
	t.Logf("%d handoffs: %s", len(hs), res)
	if n := res.TotalFailures(); n != 0 || res.Requests == 0 {
		t.Errorf("%d failures: %v; first: %q", n, res.Failures, res.Examples)
	}
}

// handoffsUnderLoad runs load against b while sending n SIGHUPs, each after
// the previous handoff is done and requests have flowed through the new
// generation. It returns the load's result and the handoffs.
func handoffsUnderLoad(t *testing.T, b *batonProc, n int) (*load.Result, []supervisor.Handoff) {
	t.Helper()
	l := startLoad(t, b)
	waitTraffic := func() { l.wait(t, 200) }
	waitTraffic()
	var hs []supervisor.Handoff
	for range n {
		hs = append(hs, b.SIGHUP())
		waitTraffic()
	}
	res := l.stop()
	// Every old generation drains once its last stream ends; the final
	// status then has each handoff's drain time.
	waitDrained(t, b, 60*time.Second)
	final := b.Status().Handoffs
	if len(final) > len(hs) {
		final = final[len(final)-len(hs):]
	}
	return res, final
}

// loadRun is load.Run against b's "web" and "echo" listeners, in the
// background: keep-alive, new-connection and POST clients and TCP streams
// that each outlive many handoffs.
type loadRun struct {
	progress atomic.Uint64
	cancel   context.CancelFunc
	done     chan *load.Result
	once     sync.Once
	res      *load.Result
}

func startLoad(t testing.TB, b *batonProc) *loadRun {
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadRun{cancel: cancel, done: make(chan *load.Result, 1)}
	t.Cleanup(func() { l.stop() })
	go func() {
		l.done <- load.Run(ctx, load.Config{
			HTTPAddr:   b.Address("web"),
			TCPAddr:    b.Address("echo"),
			Duration:   5 * time.Minute,
			KeepAlive:  4,
			NewConn:    2,
			Post:       2,
			TCPStreams: 4,
			StreamLife: 2 * time.Second,
			Progress:   &l.progress,
		})
	}()
	return l
}

// wait waits until n more requests and echoes have succeeded.
func (l *loadRun) wait(t testing.TB, n uint64) { harness.WaitTraffic(t, &l.progress, n) }

// stop ends the load and returns its result.
func (l *loadRun) stop() *load.Result {
	l.once.Do(func() {
		l.cancel()
		l.res = <-l.done
	})
	return l.res
}

// checkNoFailures fails t unless res counts no failure, at least
// minRequests requests and a finished TCP stream.
func checkNoFailures(t testing.TB, res *load.Result, minRequests uint64) {
	t.Helper()
	t.Logf("%s", res)
	if n := res.TotalFailures(); n != 0 {
		t.Errorf("%d failures: %v by kind %v; first: %q", n, res.Failures, res.FailuresByKind, res.Examples)
	}
	if res.Requests < minRequests || res.Streams == 0 {
		t.Errorf("too little load to show anything: %s", res)
	}
}

func readyMs(h supervisor.Handoff) (int64, bool) { return h.ReadyMs, true }
func drainMs(h supervisor.Handoff) (int64, bool) {
	if h.DrainMs == nil {
		return 0, false
	}
	return *h.DrainMs, true
}

// summarize returns min/median/max of a handoff timing.
func summarize(hs []supervisor.Handoff, f func(supervisor.Handoff) (int64, bool)) string {
	var v []int64
	for _, h := range hs {
		if x, ok := f(h); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return "none"
	}
	for i := range v {
		for j := i + 1; j < len(v); j++ {
			if v[j] < v[i] {
				v[i], v[j] = v[j], v[i]
			}
		}
	}
	return fmt.Sprintf("min %d p50 %d max %d (n=%d)", v[0], v[len(v)/2], v[len(v)-1], len(v))
}

// TestReloadAnswerMeansNewConfig checks what an operator relies on once
// `baton reload` has answered ok: a connection made from then on is served
// by the new config. The old workers share the listening socket with the
// new ones until they stop accepting, so the supervisor reports a handoff
// only once each old worker has said it stopped (ipc.Stopped).
func TestReloadAnswerMeansNewConfig(t *testing.T) {
	be := startBackend(t)
	all := options{workers: 2}.configYAML(be)
	appOnly := strings.Replace(all, "pathPrefix: /\n", "pathPrefix: /app\n", 1)
	b := startBaton(t, all)
	web := b.Address("web")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	for i := range 30 {
		cfg, want := appOnly, http.StatusNotFound
		if i%2 == 1 {
			cfg, want = all, http.StatusOK
		}
		b.WriteConfig(cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		resp, err := ipc.Call(ctx, b.Socket, ipc.Request{Command: supervisor.CommandReload})
		cancel()
		if err != nil || !resp.OK {
			t.Fatalf("reload %d: %v %+v", i, err, resp)
		}
		var h supervisor.Handoff
		if err := json.Unmarshal(resp.Result, &h); err != nil || h.Outcome != supervisor.OutcomeOK {
			t.Fatalf("reload %d: %v %s", i, err, resp.Result)
		}
		r, err := client.Get("http://" + web + "/elsewhere")
		if err != nil {
			t.Fatalf("after reload %d: %v", i, err)
		}
		r.Body.Close()
		if r.StatusCode != want {
			t.Fatalf("after reload %d answered ok, a new connection got %d, want %d: an old worker served it with the old config", i, r.StatusCode, want)
		}
	}
}
