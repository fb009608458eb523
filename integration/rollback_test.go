package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
)

// background runs load against b until the returned function is called,
// which returns the result once traffic has been seen.
func background(t *testing.T, b *batonProc, tcp bool) func() *load.Result {
	t.Helper()
	var progress atomic.Uint64
	cfg := load.Config{
		HTTPAddr:  b.Address("web"),
		Duration:  5 * time.Minute,
		KeepAlive: 2,
		NewConn:   1,
		Post:      1,
		Progress:  &progress,
	}
	if tcp {
		cfg.TCPAddr, cfg.TCPStreams, cfg.StreamLife = b.Address("echo"), 1, 300*time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *load.Result, 1)
	go func() { done <- load.Run(ctx, cfg) }()
	harness.WaitTraffic(t, &progress, 20)
	return func() *load.Result {
		harness.WaitTraffic(t, &progress, 20)
		cancel()
		return <-done
	}
}

func noFailures(t *testing.T, res *load.Result) {
	t.Helper()
	t.Logf("load: %s", res)
	if n := res.TotalFailures(); n != 0 {
		t.Errorf("%d failures: %v by kind %v; first: %q", n, res.Failures, res.FailuresByKind, res.Examples)
	}
}

func TestInvalidConfigIsRefused(t *testing.T) {
	be := startBackend(t)
	good := options{workers: 2, reusePort: true}.configYAML(be)
	b := startBaton(t, good)
	stop := background(t, b, false)
	before := b.Status()

	b.WriteConfig(good + "workerz: 3\n")
	out, err := b.Ctl("reload")
	// The reason says where, as baton check does (FILE:LINE:COLUMN), and
	// what the key resembles.
	where := fmt.Sprintf(".yaml:%d:1: unknown key %q (did you mean %q?)", strings.Count(good, "\n")+1, "workerz", "workers")
	if err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, where) {
		t.Errorf("baton reload with an unknown key: err %v, output %q; want a failure saying %q", err, out, where)
	}
	// Files that are no config at all: refused, the generation serving on.
	bomb := `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]` + "\n"
	for c := 'b'; c <= 'i'; c++ {
		bomb += fmt.Sprintf("%c: &%c [%s]\n", c, c, strings.TrimSuffix(strings.Repeat("*"+string(c-1)+",", 9), ","))
	}
	for name, text := range map[string]string{
		"empty": "", "not UTF-8": "controlSocket: \"\xff\xfe\"\n", "a YAML bomb": bomb,
		"nested 10,000 deep": "routes: " + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "\n",
	} {
		b.WriteConfig(text)
		if out, err := b.Ctl("reload"); err == nil || !strings.Contains(out, "refused") {
			t.Errorf("reload with a file %s: err %v, output %.300q; want it refused", name, err, out)
		}
	}
	b.WriteConfig(strings.Replace(good, "backend: app", "backend: nope", 1))
	h := b.SIGHUP()
	if h.Outcome != supervisor.OutcomeRefused || !strings.Contains(h.Reason, `backend "nope" is not defined`) {
		t.Errorf("SIGHUP with a bad route: %s %q, want refused naming the backend", h.Outcome, h.Reason)
	}
	// Moving the control socket would strand every --config client
	// (issue 8, problem 6): refused, with the reason.
	b.WriteConfig(strings.Replace(good, "@DIR@/run/control.sock", "@DIR@/elsewhere/control.sock", 1))
	if out, err := b.Ctl("reload"); err == nil || !strings.Contains(out, "controlSocket changes only at a restart") {
		t.Errorf("reload moving the control socket: err %v, output %q; want it refused with the reason", err, out)
	}
	after := b.Status()
	if after.ActiveGeneration != before.ActiveGeneration {
		t.Errorf("active generation %d -> %d after refused reloads", before.ActiveGeneration, after.ActiveGeneration)
	}

	b.WriteConfig(good)
	if out, err := b.Ctl("reload"); err != nil {
		t.Errorf("reload of the good config: %v: %s", err, out)
	}
	noFailures(t, stop())
}

// replaceBinary puts a shell script where the supervisor finds its worker
// binary, as a broken deploy would.
func replaceBinary(t *testing.T, b *batonProc, script string) {
	t.Helper()
	tmp := b.Bin + ".new"
	if err := os.WriteFile(tmp, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, b.Bin); err != nil {
		t.Fatal(err)
	}
}

// restoreBinary puts baton's own binary back where replaceBinary put a
// script.
func restoreBinary(t *testing.T, b *batonProc) {
	t.Helper()
	copyFile(t, batonBin, b.Bin)
}

func TestCrashingWorkerIsRolledBack(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, tcp: true}.configYAML(be))
	stop := background(t, b, true)
	before := b.ActiveWorkers()

	replaceBinary(t, b, "echo 'worker: boom' >&2; exit 3")
	out, err := b.Ctl("reload")
	if err == nil || !strings.Contains(out, "failed") || !strings.Contains(out, "exit status 3") {
		t.Errorf("reload with a crashing worker: err %v, output %q; want failed with exit status 3", err, out)
	}
	if after := b.ActiveWorkers(); fmt.Sprint(pids(after)) != fmt.Sprint(pids(before)) {
		t.Errorf("active workers changed from %v to %v after a failed handoff", pids(before), pids(after))
	}

	copyFile(t, batonBin, b.Bin) // the fixed deploy
	if out, err := b.Ctl("reload"); err != nil {
		t.Errorf("reload after fixing the binary: %v: %s", err, out)
	}
	noFailures(t, stop())
}

func TestWorkerNeverReadyIsRolledBack(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 1, readyTimeout: "1s"}.configYAML(be))
	stop := background(t, b, false)
	active := b.Status().ActiveGeneration

	replaceBinary(t, b, "exec sleep 300")
	out, err := b.Ctl("reload")
	if err == nil || !strings.Contains(out, "not ready within readyTimeout 1s") {
		t.Errorf("reload with a worker that never gets ready: err %v, output %q", err, out)
	}
	st := b.Status()
	if st.ActiveGeneration != active {
		t.Errorf("active generation %d -> %d", active, st.ActiveGeneration)
	}
	var stuck []int
	for _, g := range st.Generations {
		if g.State == supervisor.GenFailed {
			stuck = append(stuck, pids(g.Workers)...)
		}
	}
	if len(stuck) == 0 {
		t.Fatalf("no failed generation in status: %+v", st.Generations)
	}
	waitFor(t, 10*time.Second, "the stuck worker to be killed", func() bool {
		for _, pid := range stuck {
			if processAlive(pid) {
				return false
			}
		}
		return true
	})
	copyFile(t, batonBin, b.Bin)
	noFailures(t, stop())
}

// TestConcurrentReloadsAreCoalesced sends five reloads while a slow worker
// start is in progress: the first runs, the other four are answered by one
// more handoff; none is lost, none runs in parallel.
func TestConcurrentReloadsAreCoalesced(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 1}.configYAML(be))
	real := b.Bin + ".real"
	copyFile(t, batonBin, real)
	replaceBinary(t, b, "sleep 0.5; exec "+real+` "$@"`)
	startID := b.Status().Handoffs[0].ID

	first := make(chan error, 1)
	go func() { _, err := b.Ctl("reload"); first <- err }()
	waitFor(t, 10*time.Second, "the first reload to start", func() bool {
		p := b.Status().PendingHandoff
		return p != nil && p.ID > startID
	})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			if out, err := b.Ctl("reload"); err != nil {
				errs <- fmt.Errorf("%v: %s", err, out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("coalesced reload: %v", err)
	}
	if err := <-first; err != nil {
		t.Errorf("first reload: %v", err)
	}
	var got []supervisor.Handoff
	for _, h := range b.Status().Handoffs {
		if h.ID > startID {
			got = append(got, h)
		}
	}
	if len(got) != 2 || got[0].Coalesced != 1 || got[1].Coalesced != 4 {
		t.Errorf("handoffs after five reloads: %+v; want two, answering 1 and 4 requests", got)
	}
	if len(got) == 2 && got[1].StartedAt.Before(got[0].StartedAt.Add(time.Duration(got[0].DurationMs)*time.Millisecond)) {
		t.Errorf("second handoff started before the first was decided")
	}
}

func TestKilledWorkerIsRestarted(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 1}.configYAML(be))
	victim := b.ActiveWorkers()[0]
	if err := killProcess(victim.PID); err != nil {
		t.Fatal(err)
	}
	// Clients arriving while the slot restarts wait in the accept queue,
	// which the supervisor keeps open; none is refused.
	res := load.Run(context.Background(), load.Config{HTTPAddr: b.Address("web"), Duration: time.Second, KeepAlive: 2, NewConn: 2, Post: 1})
	noFailures(t, res)
	waitFor(t, 10*time.Second, "the restarted worker", func() bool {
		w := b.ActiveWorkers()[0]
		return w.Restarts == 1 && w.State == supervisor.WorkerReady && w.PID != victim.PID
	})
	if res.Requests == 0 {
		t.Errorf("no request answered after the kill")
	}
}

func pids(ws []supervisor.WorkerStatus) []int {
	var p []int
	for _, w := range ws {
		p = append(p, w.PID)
	}
	return p
}
