package integration

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/supervisor"
)

// startNamedBackend starts a backend that names itself in X-Backend.
func startNamedBackend(t testing.TB, name string) *backend.Server {
	t.Helper()
	be, err := backend.Start(name, "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

// canaryConfig is a config of 2 workers whose listeners (reuseport) route
// to be, with extra appended.
func canaryConfig(be *backend.Server, extra string) string {
	return options{workers: 2, reusePort: true, tcp: true, extra: extra}.configYAML(be)
}

// newConnGets sends n GETs to addr, each on a new connection, from 8
// clients at once, and counts the answers by X-Backend and status.
func newConnGets(t *testing.T, addr string, n int) (byBackend map[string]int, byStatus map[int]int) {
	t.Helper()
	byBackend, byStatus = map[string]int{}, map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	for range 8 {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			for range next {
				resp, err := c.Get("http://" + addr + "/")
				if err != nil {
					t.Errorf("GET: %v", err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				byBackend[resp.Header.Get("X-Backend")]++
				byStatus[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return byBackend, byStatus
}

// lastHandoff returns b's handoff id.
func handoffByID(t *testing.T, b *batonProc, id int) supervisor.Handoff {
	t.Helper()
	for _, h := range b.Status().Handoffs {
		if h.ID == id {
			return h
		}
	}
	t.Fatalf("no handoff %d in status", id)
	return supervisor.Handoff{}
}

// TestCanaryShares starts canaries at 10% and 50% beside a generation
// routing to another backend: over 4,000 new connections each takes its
// share within ±3 points (the BPF program steers by the connection's
// hash). Abort gives every new connection back to the active generation,
// promote gives them all to the canary (issue 11).
func TestCanaryShares(t *testing.T) {
	a, c := startNamedBackend(t, "a"), startNamedBackend(t, "c")
	b := startBaton(t, canaryConfig(a, ""))
	addr := b.Address("web")
	const conns = 4000
	for _, pct := range []int{10, 50} {
		b.WriteConfig(canaryConfig(c, ""))
		out, err := b.Ctl("reload", "--canary", strconv.Itoa(pct))
		if err != nil {
			t.Fatalf("reload --canary %d: %v: %s", pct, err, out)
		}
		st := b.Status()
		if st.Canary == nil || st.Canary.Percent != pct {
			t.Fatalf("status canary %+v, want %d%%", st.Canary, pct)
		}
		states := map[supervisor.GenState]int{}
		for _, g := range st.Generations {
			states[g.State]++
		}
		if states[supervisor.GenCanary] != 1 || states[supervisor.GenActive] != 1 {
			t.Fatalf("generations by state %v: want one active and one canary", states)
		}
		got, _ := newConnGets(t, addr, conns)
		share := 100 * float64(got["c"]) / conns
		t.Logf("canary %d%%: %.1f%% of %d new connections (%v)", pct, share, conns, got)
		if share < float64(pct)-3 || share > float64(pct)+3 || got["a"]+got["c"] != conns {
			t.Errorf("canary at %d%% took %.1f%% of new connections (%v), want ±3 points", pct, share, got)
		}
		if pct == 10 {
			id := st.Canary.Handoff
			if out, err := b.Ctl("abort"); err != nil {
				t.Fatalf("abort: %v: %s", err, out)
			}
			h := handoffByID(t, b, id)
			if h.Outcome != supervisor.OutcomeAborted || h.Canary == nil || h.Canary.By != "operator" || h.Trigger != "canary" {
				t.Errorf("aborted canary's handoff: %+v (%+v)", h, h.Canary)
			}
			if got, _ := newConnGets(t, addr, 300); got["a"] != 300 {
				t.Errorf("after abort, new connections went to %v, want all to a", got)
			}
			b.WriteConfig(canaryConfig(a, ""))
			continue
		}
		if out, err := b.Ctl("promote"); err != nil {
			t.Fatalf("promote: %v: %s", err, out)
		}
		st = b.Status()
		if st.Canary != nil || st.ActiveGeneration != st.Handoffs[len(st.Handoffs)-1].To {
			t.Errorf("after promote: canary %+v, active %d, last handoff %+v", st.Canary, st.ActiveGeneration, st.Handoffs[len(st.Handoffs)-1])
		}
		if got, _ := newConnGets(t, addr, 300); got["c"] != 300 {
			t.Errorf("after promote, new connections went to %v, want all to c", got)
		}
	}
	// Nothing is left of the canary's sockets and the old generation's
	// once they drained: as many sockets listen as the config asks.
	waitDrained(t, b, 30*time.Second)
	if n := listeningSockets(t, addr); n != 2 {
		t.Errorf("%d sockets listen on %s, want 2", n, addr)
	}
}

// TestCanaryUnderLoad promotes a canary and aborts another while
// keep-alive, new-connection and POST clients and TCP streams run: not one
// failure. A reload, a SIGHUP and an upgrade during a canary are refused
// with the reason.
func TestCanaryUnderLoad(t *testing.T) {
	a, c := startNamedBackend(t, "a"), startNamedBackend(t, "c")
	b := startBaton(t, canaryConfig(a, ""))
	l := startLoad(t, b)
	l.wait(t, 2000)
	for i, step := range []struct {
		pct     int
		verdict string
	}{{50, "promote"}, {10, "abort"}, {30, "promote"}} {
		be := c
		if i%2 == 1 {
			be = a
		}
		b.WriteConfig(canaryConfig(be, ""))
		if out, err := b.Ctl("reload", "--canary", strconv.Itoa(step.pct)); err != nil {
			t.Fatalf("reload --canary: %v: %s", err, out)
		}
		l.wait(t, 20000)
		if i == 0 {
			h := b.SIGHUP()
			if h.Outcome != supervisor.OutcomeRefused || !strings.Contains(h.Reason, "canary is running") {
				t.Errorf("SIGHUP during a canary: %s: %s", h.Outcome, h.Reason)
			}
			if out, err := b.Ctl("reload"); err == nil || !strings.Contains(out, "promote or abort it first") {
				t.Errorf("reload during a canary: %v: %s", err, out)
			}
			if out, err := b.Ctl("upgrade"); err == nil || !strings.Contains(out, "canary is running") {
				t.Errorf("upgrade during a canary: %v: %s", err, out)
			}
			if out, err := b.Ctl("reload", "--canary", "20"); err == nil || !strings.Contains(out, "canary is running") {
				t.Errorf("a second canary: %v: %s", err, out)
			}
		}
		if out, err := b.Ctl(step.verdict); err != nil {
			t.Fatalf("%s: %v: %s", step.verdict, err, out)
		}
		l.wait(t, 20000)
	}
	checkNoFailures(t, l.stop(), 5000)
}

// TestCanaryAutoVerdict: with canary.duration set, a canary whose backend
// answers 500 is aborted as soon as it has served minRequests, and a
// healthy one is promoted when the duration has passed.
func TestCanaryAutoVerdict(t *testing.T) {
	policy := "canary:\n  duration: 3s\n  minRequests: 50\n  maxErrorRatio: 2\n"
	for _, tc := range []struct {
		name    string
		fail    bool
		verdict string
		outcome supervisor.Outcome
		reason  string
	}{
		{"abort", true, "aborted", supervisor.OutcomeAborted, "more than 2× the active generation's"},
		{"promote", false, "promoted", supervisor.OutcomeOK, "healthy for 3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, c := startNamedBackend(t, "a"), startNamedBackend(t, "c")
			c.Fail.Store(tc.fail)
			b := startBaton(t, canaryConfig(a, policy))
			b.WriteConfig(canaryConfig(c, policy))
			if out, err := b.Ctl("reload", "--canary", "50"); err != nil {
				t.Fatalf("reload --canary: %v: %s", err, out)
			}
			id := b.Status().Canary.Handoff
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stop()
			wg.Go(func() {
				client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
				for ctx.Err() == nil {
					if resp, err := client.Get("http://" + b.Address("web") + "/"); err == nil {
						resp.Body.Close()
					}
					time.Sleep(2 * time.Millisecond)
				}
			})
			var h supervisor.Handoff
			waitFor(t, 30*time.Second, "the automatic verdict", func() bool {
				h = handoffByID(t, b, id)
				return h.Outcome != supervisor.OutcomeCanary
			})
			t.Logf("verdict: %s (%s): %s", h.Outcome, h.Canary.By, h.Reason)
			if h.Outcome != tc.outcome || h.Canary.Verdict != tc.verdict || h.Canary.By != "auto" || !strings.Contains(h.Reason, tc.reason) {
				t.Errorf("verdict %s (%+v): %s; want %s by auto, reason with %q", h.Outcome, h.Canary, h.Reason, tc.outcome, tc.reason)
			}
			if tc.fail && h.Canary.Requests < 50 {
				t.Errorf("aborted after %d requests, before minRequests", h.Canary.Requests)
			}
			want := h.To // promoted
			if tc.fail {
				want = h.From // aborted: the active generation stays
			}
			if b.Status().ActiveGeneration != want {
				t.Errorf("active generation %d, want %d", b.Status().ActiveGeneration, want)
			}
		})
	}
}

// TestCanaryRefused: a canary needs sockets of its own, so a listener
// without reusePort refuses it, with the reason; the active generation
// serves on.
func TestCanaryRefused(t *testing.T) {
	a := startNamedBackend(t, "a")
	b := startBaton(t, options{workers: 2}.configYAML(a))
	before := b.Status().ActiveGeneration
	out, err := b.Ctl("reload", "--canary", "10")
	if err == nil || !strings.Contains(out, "reusePort: true") {
		t.Errorf("canary on a single socket: %v: %s", err, out)
	}
	if out, err := b.Ctl("reload", "--canary", "100"); err == nil || !strings.Contains(out, "1 to 99") {
		t.Errorf("canary of 100%%: %v: %s", err, out)
	}
	if out, err := b.Ctl("promote"); err == nil || !strings.Contains(out, "no canary is running") {
		t.Errorf("promote without a canary: %v: %s", err, out)
	}
	st := b.Status()
	if st.ActiveGeneration != before || st.Canary != nil || len(st.Generations) != 1 {
		t.Errorf("after refused canaries: active %d (was %d), canary %+v, %d generations", st.ActiveGeneration, before, st.Canary, len(st.Generations))
	}
	if h := st.Handoffs[len(st.Handoffs)-1]; h.Outcome != supervisor.OutcomeRefused {
		t.Errorf("last handoff %s, want refused", h.Outcome)
	}
}

// TestCanarySlots: where BPF cannot steer (here turned off), a canary takes
// whole sockets of each group: k of its N, so its share is k/N, and status
// says so. The active generation's workers stop accepting on those
// sockets meanwhile; promote and abort under load drop nothing.
func TestCanarySlots(t *testing.T) {
	a, c := startNamedBackend(t, "a"), startNamedBackend(t, "c")
	cfg := func(be *backend.Server) string {
		return options{workers: 2, sockets: 4, reusePort: true, tcp: true}.configYAML(be)
	}
	b := harness.StartWith(t, batonBin, cfg(a), func(cmd *exec.Cmd) {
		cmd.Env = append(os.Environ(), "BATON_STEERING=off")
	})
	addr := b.Address("web")
	for _, l := range b.Status().Listeners {
		if !strings.Contains(l.Steering, "BATON_STEERING=off") {
			t.Fatalf("listener %s steering %q, want the kernel's hash and why", l.Name, l.Steering)
		}
	}
	for _, tc := range []struct{ ask, share int }{{50, 50}, {10, 25}} {
		b.WriteConfig(cfg(c))
		if out, err := b.Ctl("reload", "--canary", strconv.Itoa(tc.ask)); err != nil {
			t.Fatalf("reload --canary %d: %v: %s", tc.ask, err, out)
		}
		st := b.Status()
		if st.Canary == nil || st.Canary.Share != float64(tc.share) || !strings.HasPrefix(st.Canary.Steering, "slots") {
			t.Fatalf("canary asked %d%%: status %+v, want a share of %d%% by slots", tc.ask, st.Canary, tc.share)
		}
		const conns = 4000
		got, _ := newConnGets(t, addr, conns)
		share := 100 * float64(got["c"]) / conns
		t.Logf("canary asked %d%%, %d%% by slots: %.1f%% of %d new connections (%v)", tc.ask, tc.share, share, conns, got)
		if share < float64(tc.share)-3 || share > float64(tc.share)+3 {
			t.Errorf("canary took %.1f%% of new connections, want %d±3", share, tc.share)
		}
		if out, err := b.Ctl("abort"); err != nil {
			t.Fatalf("abort: %v: %s", err, out)
		}
		if got, _ := newConnGets(t, addr, 300); got["a"] != 300 {
			t.Errorf("after abort, new connections went to %v, want all to a", got)
		}
	}
	l := startLoad(t, b)
	l.wait(t, 5000)
	for i, verdict := range []string{"abort", "promote"} {
		next := a // the abort's canary routes to c, the promoted one to a
		if i == 0 {
			next = c
		}
		b.WriteConfig(cfg(next))
		if out, err := b.Ctl("reload", "--canary", "50"); err != nil {
			t.Fatalf("reload --canary: %v: %s", err, out)
		}
		l.wait(t, 20000)
		if out, err := b.Ctl(verdict); err != nil {
			t.Fatalf("%s: %v: %s", verdict, err, out)
		}
		l.wait(t, 20000)
	}
	checkNoFailures(t, l.stop(), 5000)
	waitDrained(t, b, 30*time.Second)
	if n := listeningSockets(t, addr); n != 4 {
		t.Errorf("%d sockets listen on %s, want 4 (slots open none)", n, addr)
	}
	// Without steering a group cannot change size: refused, with why.
	b.WriteConfig(options{workers: 2, sockets: 2, reusePort: true, tcp: true}.configYAML(c))
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeRefused || !strings.Contains(h.Reason, "BATON_STEERING=off") {
		t.Errorf("resize without steering: %s: %s", h.Outcome, h.Reason)
	}
}

// TestSupervisorDeathDuringCanary: the supervisor dies (SIGKILL) while a
// canary runs. Both generations serve on, the steering program still
// splitting new connections; the next `baton run` adopts them, keeps the
// active generation and aborts the canary (it was never promoted), and
// every new connection goes to the active generation again.
func TestSupervisorDeathDuringCanary(t *testing.T) {
	a, c := startNamedBackend(t, "a"), startNamedBackend(t, "c")
	cfg := func(be *backend.Server) string {
		return options{workers: 2, reusePort: true, tcp: true, extra: "orphanTimeout: 1m\n"}.configYAML(be)
	}
	b := startBaton(t, cfg(a))
	activeGen := b.Status().ActiveGeneration
	b.WriteConfig(cfg(c))
	if out, err := b.Ctl("reload", "--canary", "50"); err != nil {
		t.Fatalf("reload --canary: %v: %s", err, out)
	}
	st := b.Status()
	for _, g := range st.Generations {
		killOnCleanup(t, g.Workers)
	}
	addr := b.Address("web")
	if err := b.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.Exited
	if got, _ := newConnGets(t, addr, 400); got["a"] == 0 || got["c"] == 0 {
		t.Errorf("with the supervisor dead, new connections went to %v: want both generations still serving", got)
	}
	b.WriteConfig(cfg(a))
	b2 := harness.Rerun(t, b)
	st = b2.Status()
	if st.ActiveGeneration != activeGen || st.Canary != nil {
		t.Fatalf("after adoption: active generation %d (want %d), canary %+v", st.ActiveGeneration, activeGen, st.Canary)
	}
	for _, g := range st.Generations {
		if g.ID != activeGen && !strings.Contains(g.DrainReason, "canary") {
			t.Errorf("generation %d after adoption: %s, drain reason %q; want the canary aborted", g.ID, g.State, g.DrainReason)
		}
	}
	if got, _ := newConnGets(t, addr, 400); got["a"] != 400 {
		t.Errorf("after adoption, new connections went to %v, want all to a", got)
	}
	waitDrained(t, b2, 30*time.Second)
	for _, g := range b2.Status().Generations {
		if g.ID != activeGen && g.State != supervisor.GenExited {
			t.Errorf("canary generation %d is %s after adoption, want drained and exited", g.ID, g.State)
		}
	}
	if n := listeningSockets(t, addr); n != 2 {
		t.Errorf("%d sockets listen on %s after the canary drained, want 2", n, addr)
	}
}

// TestCanaryOfAnotherSize: a canary whose config has another number of
// workers (sockets left out: one per worker) gets that many sockets of its
// own; once promoted, they are the group, and the old ones are gone.
func TestCanaryOfAnotherSize(t *testing.T) {
	a, c := startNamedBackend(t, "a"), startNamedBackend(t, "c")
	b := startBaton(t, options{workers: 2, reusePort: true, tcp: true}.configYAML(a))
	addr := b.Address("web")
	b.WriteConfig(options{workers: 3, reusePort: true, tcp: true}.configYAML(c))
	if out, err := b.Ctl("reload", "--canary", "30"); err != nil {
		t.Fatalf("reload --canary: %v: %s", err, out)
	}
	if n := listeningSockets(t, addr); n != 5 {
		t.Errorf("%d sockets listen during the canary, want 2 + 3", n)
	}
	got, _ := newConnGets(t, addr, 4000)
	if share := 100 * float64(got["c"]) / 4000; share < 27 || share > 33 {
		t.Errorf("canary of 3 sockets at 30%% took %.1f%% (%v)", share, got)
	}
	if out, err := b.Ctl("promote"); err != nil {
		t.Fatalf("promote: %v: %s", err, out)
	}
	waitDrained(t, b, 30*time.Second)
	if n := listeningSockets(t, addr); n != 3 {
		t.Errorf("%d sockets listen after the promote, want 3", n)
	}
	for _, l := range b.Status().Listeners {
		if l.Sockets != 3 {
			t.Errorf("listener %s: %d sockets in status, want 3", l.Name, l.Sockets)
		}
	}
	if got, _ := newConnGets(t, addr, 300); got["c"] != 300 {
		t.Errorf("after promote, new connections went to %v, want all to c", got)
	}
}
