package integration

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
)

// killOnCleanup makes sure the workers of pids end with the test, even if
// it fails while they are orphans.
func killOnCleanup(t *testing.T, ws []supervisor.WorkerStatus) {
	t.Cleanup(func() {
		for _, w := range ws {
			if processAlive(w.PID) && isBatonWorker(w.PID) {
				syscall.Kill(w.PID, syscall.SIGKILL)
			}
		}
	})
}

// TestSupervisorDeathAndAdoption kills the supervisor with SIGKILL under
// load: its workers keep serving with 0 failed requests; the next `baton
// run` with the same config adopts them as its active generation (a
// handoff with trigger adopt), then reloads 20 times with 0 failures, and
// stops them.
func TestSupervisorDeathAndAdoption(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, tcp: true, extra: "orphanTimeout: 1m\n"}.configYAML(be))
	before := b.Status()
	workers := b.ActiveWorkers()
	killOnCleanup(t, workers)

	var progress atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *load.Result, 1)
	go func() {
		done <- load.Run(ctx, load.Config{
			HTTPAddr: b.Address("web"), TCPAddr: b.Address("echo"), Duration: 5 * time.Minute,
			KeepAlive: 4, NewConn: 2, Post: 2, TCPStreams: 2, StreamLife: 2 * time.Second,
			Progress: &progress,
		})
	}()
	harness.WaitTraffic(t, &progress, 200)

	if err := b.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.Exited
	// Nobody supervises: the workers serve on.
	harness.WaitTraffic(t, &progress, 500)
	for _, w := range workers {
		if !processAlive(w.PID) {
			t.Fatalf("worker %d died with its supervisor", w.PID)
		}
	}

	b2 := harness.Rerun(t, b)
	st := b2.Status()
	last := st.Handoffs[len(st.Handoffs)-1]
	if last.Trigger != "adopt" || st.ActiveGeneration != before.ActiveGeneration || last.Outcome != supervisor.OutcomeOK {
		t.Fatalf("after the restart: active generation %d (was %d), last handoff %+v; want the old workers adopted", st.ActiveGeneration, before.ActiveGeneration, last)
	}
	adopted := map[int]bool{}
	for _, w := range b2.ActiveWorkers() {
		adopted[w.PID] = true
	}
	for _, w := range workers {
		if !adopted[w.PID] {
			t.Errorf("worker %d was not adopted (active: %v)", w.PID, adopted)
		}
	}
	harness.WaitTraffic(t, &progress, 200)
	for i := range 20 {
		if h := b2.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
			t.Fatalf("handoff %d after adoption: %s %s", i, h.Outcome, h.Reason)
		}
		harness.WaitTraffic(t, &progress, 50)
	}
	cancel()
	noFailures(t, <-done)
	if out, err := b2.Ctl("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	select {
	case <-b2.Exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the adopting supervisor did not stop")
	}
	waitFor(t, 30*time.Second, "the adopted workers to exit", func() bool {
		for _, w := range workers {
			if processAlive(w.PID) && isBatonWorker(w.PID) {
				return false
			}
		}
		return true
	})
}

// TestOrphansDrainWhenNotAdopted: workers whose supervisor died, and that
// no supervisor adopts within orphanTimeout, drain and exit.
func TestOrphansDrainWhenNotAdopted(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, extra: "orphanTimeout: 2s\n"}.configYAML(be))
	web := b.Address("web")
	workers := b.ActiveWorkers()
	killOnCleanup(t, workers)
	if err := b.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.Exited
	killed := time.Now()
	getOK(t, http.DefaultClient, "http://"+web+"/") // an orphan serves
	waitFor(t, 30*time.Second, "the orphans to drain and exit", func() bool {
		for _, w := range workers {
			if processAlive(w.PID) && isBatonWorker(w.PID) {
				return false
			}
		}
		return true
	})
	t.Logf("orphans gone %s after their supervisor's SIGKILL (orphanTimeout 2s)", time.Since(killed).Round(time.Millisecond))
}

// TestAdoptionThenNewConfig: the supervisor restarted after a death with
// another config adopts the workers, then hands off to the new config at
// once.
func TestAdoptionThenNewConfig(t *testing.T) {
	be := startBackend(t)
	cfg := options{workers: 2, reusePort: true, extra: "orphanTimeout: 1m\n"}.configYAML(be)
	b := startBaton(t, cfg)
	web := b.Address("web")
	killOnCleanup(t, b.ActiveWorkers())
	if err := b.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-b.Exited
	b.WriteConfig(strings.Replace(cfg, "workers: 2", "workers: 3", 1))
	b2 := harness.Rerun(t, b)
	waitFor(t, 30*time.Second, "the handoff to the new config", func() bool {
		st := b2.Status()
		n := len(st.Handoffs)
		return n >= 2 && st.Handoffs[n-2].Trigger == "adopt" && st.Handoffs[n-1].Trigger == "config" && st.Handoffs[n-1].Outcome == supervisor.OutcomeOK
	})
	if n := len(b2.ActiveWorkers()); n != 3 {
		t.Errorf("%d active workers after the handoff, want the new config's 3", n)
	}
	getOK(t, http.DefaultClient, "http://"+web+"/")
}
