package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/sockfd"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap/zaptest"
)

// fakeLauncher starts "processes" that are goroutines of the test, speaking
// the real protocol over a real socket pair. Each launch is announced on
// launched; the test then makes the worker ready, fail or exit.
type fakeLauncher struct {
	launched chan *fakeProc
	nextPID  atomic.Int64
}

type fakeProc struct {
	pid   int
	hello *ipc.Hello
	w     *ipc.Worker

	once      sync.Once
	connected chan struct{} // closed once w is set, or connecting failed
	exited    chan struct{}
	err       error
}

func newFakeLauncher() *fakeLauncher {
	l := &fakeLauncher{launched: make(chan *fakeProc, 64)}
	l.nextPID.Store(1000)
	return l
}

// Launch "starts" a worker: a goroutine that reads its hello (which the
// supervisor sends once Launch returns) and announces itself.
func (l *fakeLauncher) Launch(spec LaunchSpec) (Process, error) {
	end, err := sockfd.Dup(spec.IPC, spec.IPC.Name()) // the supervisor closes spec.IPC
	if err != nil {
		return nil, err
	}
	p := &fakeProc{pid: int(l.nextPID.Add(1)), exited: make(chan struct{}), connected: make(chan struct{})}
	go func() {
		defer end.Close()
		defer close(p.connected)
		w, err := ipc.ConnectFile(end)
		if err != nil {
			p.exit(err)
			return
		}
		p.w, p.hello = w, w.Hello()
		l.launched <- p
	}()
	return p, nil
}

func (p *fakeProc) Pid() int { return p.pid }

func (p *fakeProc) Signal(sig os.Signal) error {
	if sig == syscall.SIGKILL {
		p.exit(errors.New("signal: killed"))
	}
	return nil
}

func (p *fakeProc) Wait() error {
	<-p.exited
	return p.err
}

// exit ends the fake process: its socket closes, Wait returns err.
func (p *fakeProc) exit(err error) {
	p.once.Do(func() {
		p.err = err
		close(p.exited)
		go func() {
			<-p.connected
			if p.w != nil {
				p.w.Close()
			}
		}()
	})
}

func (p *fakeProc) ready(t *testing.T) {
	t.Helper()
	if err := p.w.Ready(); err != nil {
		t.Fatal(err)
	}
}

// harness runs a Supervisor with a fake launcher and a config the test can
// change.
type harness struct {
	t      *testing.T
	s      *Supervisor
	l      *fakeLauncher
	cfg    atomic.Pointer[Config]
	loadEr atomic.Pointer[error]
	runErr chan error
}

func newHarness(t *testing.T, workers int, tune func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, l: newFakeLauncher(), runErr: make(chan error, 1)}
	cfg := &Config{
		ControlSocket: filepath.Join(t.TempDir(), "ctl", "control.sock"),
		Workers:       workers,
		ReadyTimeout:  10 * time.Second,
		DrainTimeout:  10 * time.Second,
		StopTimeout:   10 * time.Second,
		Listeners:     []ListenerSpec{{Name: "web", Network: "tcp4", Address: "127.0.0.1:0", Protocol: "http", ReusePort: true}},
		Payload:       []byte(`{"hello":"worker"}`),
	}
	if tune != nil {
		tune(cfg)
	}
	h.cfg.Store(cfg)
	s, err := New(Options{
		Load: func() (*Config, error) {
			if e := h.loadEr.Load(); e != nil {
				return nil, *e
			}
			c := *h.cfg.Load()
			return &c, nil
		},
		Binary:   "/nonexistent/baton",
		Launcher: h.l,
		Logger:   zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	go func() { h.runErr <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		s.Stop(true)
		select {
		case <-h.runErr:
		case <-time.After(10 * time.Second):
			t.Error("supervisor did not stop")
		}
	})
	return h
}

// next returns the next launched process.
func (h *harness) next() *fakeProc {
	h.t.Helper()
	select {
	case p := <-h.l.launched:
		return p
	case <-time.After(10 * time.Second):
		h.t.Fatal("no worker launched")
		return nil
	}
}

// readyGeneration takes the next n launched workers, makes them ready, and
// waits for their generation to be active.
func (h *harness) readyGeneration(n int) []*fakeProc {
	h.t.Helper()
	var ps []*fakeProc
	for range n {
		p := h.next()
		p.ready(h.t)
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *fakeProc) int { return a.hello.Slot - b.hello.Slot })
	gen := ps[0].hello.Generation
	h.waitStatus(fmt.Sprintf("generation %d active", gen), func(st Status) bool { return st.ActiveGeneration == gen })
	return ps
}

func (h *harness) status() Status {
	h.t.Helper()
	st, ok := h.s.Status()
	if !ok {
		h.t.Fatal("supervisor gone")
	}
	return st
}

func (h *harness) waitStatus(what string, cond func(Status) bool) Status {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := h.status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; status: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func genState(st Status, id uint64) GenState {
	for _, g := range st.Generations {
		if g.ID == id {
			return g.State
		}
	}
	return -1
}

// reloadAsync starts a reload and returns its outcome channel.
func (h *harness) reloadAsync() chan Handoff {
	c := make(chan Handoff, 1)
	go func() { c <- h.s.Reload("test") }()
	return c
}

func wait[T any](t *testing.T, c chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out")
		var zero T
		return zero
	}
}

func TestHandoffDrainsOldGenerationOnlyWhenNewIsReady(t *testing.T) {
	h := newHarness(t, 2, nil)
	old := h.readyGeneration(2)
	for i, p := range old {
		// Two sockets: the slot's own, and the other's, which it helps with.
		if l := p.hello.Listeners[0]; len(l.Sockets) != 2 || l.Sockets[0] != i || !slices.Equal(l.Helps, []int{1 - i}) {
			t.Fatalf("hello %d: listener sockets %v, helps %v; want [%d %d], [%d]", i, l.Sockets, l.Helps, i, 1-i, 1-i)
		}
		if p.hello.Generation != 1 || p.hello.Slot != i || p.hello.Workers != 2 || p.hello.Files() != 2 || string(p.hello.Config) != `{"hello":"worker"}` {
			t.Fatalf("hello %d = %+v", i, p.hello)
		}
	}
	h.waitStatus("generation 1 active", func(st Status) bool { return st.ActiveGeneration == 1 })

	done := h.reloadAsync()
	n1 := h.next()
	n1.ready(t)
	n2 := h.next()
	// One new worker is ready, one is not: the old generation still serves.
	select {
	case <-old[0].w.Draining():
		t.Fatal("old worker told to drain before the whole new generation was ready")
	case <-time.After(50 * time.Millisecond):
	}
	n2.ready(t)
	ho := wait(t, done)
	if ho.Outcome != OutcomeOK || ho.From != 1 || ho.To != 2 || ho.Trigger != "test" {
		t.Fatalf("handoff = %+v", ho)
	}
	for _, p := range old {
		<-p.w.Draining()
		if d := p.w.DrainInfo(); d.Reason != "handoff to generation 2" || time.Until(d.Deadline) < 5*time.Second {
			t.Errorf("drain = %+v", d)
		}
		p.exit(nil)
	}
	st := h.waitStatus("generation 1 exited", func(st Status) bool { return genState(st, 1) == GenExited })
	last := st.Handoffs[len(st.Handoffs)-1]
	if st.ActiveGeneration != 2 || last.DrainMs == nil {
		t.Fatalf("status after drain: active %d, last handoff %+v", st.ActiveGeneration, last)
	}
}

// TestHandoffReportedOnceOldWorkersStopAccepting checks that a handoff
// is reported only when every old worker that promised to (ipc.Ready.Acks)
// has said it accepts no more, or has exited: until then a connection
// made after `baton reload` returned could reach the old config.
func TestHandoffReportedOnceOldWorkersStopAccepting(t *testing.T) {
	h := newHarness(t, 3, nil)
	readyAcking := func() []*fakeProc {
		var ps []*fakeProc
		for range 3 {
			p := h.next()
			p.w.AckDrains()
			p.ready(t)
			ps = append(ps, p)
		}
		return ps
	}
	old := readyAcking()
	h.waitStatus("generation 1 active", func(st Status) bool { return st.ActiveGeneration == 1 })

	done := h.reloadAsync()
	cur := readyAcking()
	for _, p := range old {
		<-p.w.Draining()
		if !p.w.DrainInfo().Ack {
			t.Fatalf("drain without Ack: %+v", p.w.DrainInfo())
		}
	}
	if err := old[0].w.StoppedAccepting(); err != nil {
		t.Fatal(err)
	}
	old[1].exit(nil) // exited without saying so: it accepts no more either
	// A reload asked meanwhile waits for this handoff to be reported.
	next := h.reloadAsync()
	st := h.waitStatus("a reload queued", func(st Status) bool { return st.PendingReloads == 1 })
	if st.ActiveGeneration != 2 || st.PendingHandoff == nil || st.PendingHandoff.To != 2 || len(st.Handoffs) != 1 {
		t.Fatalf("handoff reported while worker %d may still accept: active %d, pending %+v, decided %+v", old[2].pid, st.ActiveGeneration, st.PendingHandoff, st.Handoffs)
	}
	select {
	case ho := <-done:
		t.Fatalf("reload answered while worker %d may still accept: %+v", old[2].pid, ho)
	default:
	}
	if err := old[2].w.StoppedAccepting(); err != nil {
		t.Fatal(err)
	}
	if ho := wait(t, done); ho.Outcome != OutcomeOK || ho.To != 2 {
		t.Fatalf("handoff = %+v", ho)
	}
	for range 3 {
		h.next().ready(t)
	}
	for _, p := range cur {
		<-p.w.Draining()
		if err := p.w.StoppedAccepting(); err != nil {
			t.Fatal(err)
		}
	}
	if ho := wait(t, next); ho.Outcome != OutcomeOK || ho.To != 3 || ho.DurationMs >= StopAckTimeout.Milliseconds() {
		t.Fatalf("queued handoff = %+v, want ok to 3 once generation 2 stopped accepting", ho)
	}
}

// TestHandoffReportedWhenOldWorkersNeverSayTheyStopped checks that a
// stuck old worker delays the report by StopAckTimeout at most.
func TestHandoffReportedWhenOldWorkersNeverSayTheyStopped(t *testing.T) {
	h := newHarness(t, 1, nil)
	p := h.next()
	p.w.AckDrains()
	p.ready(t)
	h.waitStatus("generation 1 active", func(st Status) bool { return st.ActiveGeneration == 1 })
	done := h.reloadAsync()
	h.next().ready(t)
	ho := wait(t, done)
	if ho.Outcome != OutcomeOK || ho.DurationMs < StopAckTimeout.Milliseconds() {
		t.Fatalf("handoff = %+v, want ok after at least %s", ho, StopAckTimeout)
	}
}

func TestFailingWorkerRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		act    func(*fakeProc)
		reason string
	}{
		{"failed message", func(p *fakeProc) { p.w.Fail("no backends") }, "failed: no backends"},
		{"exit before ready", func(p *fakeProc) { p.exit(errors.New("exit status 2")) }, "exited before ready: exit status 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 2, nil)
			old := h.readyGeneration(2)
			done := h.reloadAsync()
			good := h.next()
			good.ready(t)
			tc.act(h.next())
			ho := wait(t, done)
			if ho.Outcome != OutcomeFailed || !strings.Contains(ho.Reason, tc.reason) {
				t.Fatalf("handoff = %+v, want failed with %q", ho, tc.reason)
			}
			// The new generation's healthy worker is killed too.
			<-good.exited
			st := h.status()
			if st.ActiveGeneration != 1 || genState(st, 2) != GenFailed {
				t.Fatalf("after rollback: active %d, generation 2 %s", st.ActiveGeneration, genState(st, 2))
			}
			for _, p := range old {
				select {
				case <-p.w.Draining():
					t.Fatal("old worker drained after a failed handoff")
				default:
				}
			}
		})
	}
}

func TestReadyTimeoutRollsBack(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.readyGeneration(1)
	c := *h.cfg.Load()
	c.ReadyTimeout = 50 * time.Millisecond
	h.cfg.Store(&c)
	done := h.reloadAsync()
	stuck := h.next()
	ho := wait(t, done)
	if ho.Outcome != OutcomeFailed || !strings.Contains(ho.Reason, "not ready within readyTimeout 50ms") {
		t.Fatalf("handoff = %+v", ho)
	}
	<-stuck.exited
}

// TestReadyTimeoutSaysWhy: what a worker said it waits for is the reason
// its readyTimeout gives, and status shows it meanwhile.
func TestReadyTimeoutSaysWhy(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.readyGeneration(1)
	c := *h.cfg.Load()
	c.ReadyTimeout = time.Second
	h.cfg.Store(&c)
	done := h.reloadAsync()
	stuck := h.next()
	const why = "kubernetes: namespace default Services: connection refused"
	if err := stuck.w.Waiting(why); err != nil {
		t.Fatal(err)
	}
	ho := wait(t, done)
	if ho.Outcome != OutcomeFailed || !strings.HasSuffix(ho.Reason, "not ready within readyTimeout 1s: "+why) {
		t.Fatalf("handoff = %+v, want the worker's reason", ho)
	}
	<-stuck.exited
}

func TestInvalidConfigIsRefused(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.readyGeneration(1)
	bad := fmt.Errorf("invalid config: workers must be between 1 and 256")
	h.loadEr.Store(&bad)
	ho := h.s.Reload("test")
	if ho.Outcome != OutcomeRefused || ho.Reason != bad.Error() || ho.To != 0 {
		t.Fatalf("handoff = %+v", ho)
	}
	select {
	case p := <-h.l.launched:
		t.Fatalf("a worker was launched for a refused config: %d", p.pid)
	default:
	}
}

func TestReloadsDuringAHandoffAreCoalesced(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.readyGeneration(1)
	first := h.reloadAsync()
	p2 := h.next() // generation 2 starting
	var queued []chan Handoff
	for range 3 {
		queued = append(queued, h.reloadAsync())
	}
	h.waitStatus("three reloads queued", func(st Status) bool { return st.PendingReloads == 3 })
	p2.ready(t)
	if ho := wait(t, first); ho.To != 2 || ho.Coalesced != 1 {
		t.Fatalf("first handoff = %+v", ho)
	}
	p3 := h.next()
	if p3.hello.Generation != 3 {
		t.Fatalf("coalesced reload started generation %d", p3.hello.Generation)
	}
	p3.ready(t)
	for _, q := range queued {
		if ho := wait(t, q); ho.Outcome != OutcomeOK || ho.To != 3 || ho.Coalesced != 3 {
			t.Fatalf("coalesced handoff = %+v", ho)
		}
	}
	select {
	case p := <-h.l.launched:
		t.Fatalf("an extra generation %d was started", p.hello.Generation)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestDeadWorkerIsRestartedInItsSlot(t *testing.T) {
	h := newHarness(t, 2, nil)
	ps := h.readyGeneration(2)
	ps[1].w.SendStats(ipc.Stats{Requests: 7, Accepted: 3, Backends: []ipc.BackendStats{{Name: "app", BackendCounters: ipc.BackendCounters{Requests: 7, Retries: 2}}}})
	h.waitStatus("the dying worker's counters", func(st Status) bool { return st.Totals.Requests == 7 })
	ps[1].exit(errors.New("signal: segmentation fault"))
	p := h.next()
	if p.hello.Generation != 1 || p.hello.Slot != 1 || p.hello.Listeners[0].Sockets[0] != ps[1].hello.Listeners[0].Sockets[0] {
		t.Fatalf("restart hello = %+v", p.hello)
	}
	p.ready(t)
	st := h.waitStatus("the restarted worker ready", func(st Status) bool {
		w := st.Generations[0].Workers[1]
		return w.Restarts == 1 && w.State == WorkerReady && w.PID == p.pid
	})
	if st.Totals.Requests != 7 || st.Totals.Accepted != 3 || st.Totals.Backends["app"].Retries != 2 {
		t.Errorf("totals after the restart: %+v; the dead worker's counters must stay", st.Totals)
	}
}

func TestFirstGenerationFailureEndsRun(t *testing.T) {
	h := newHarness(t, 1, nil)
	p := h.next()
	p.w.Fail("cannot parse config")
	select {
	case err := <-h.runErr:
		h.runErr <- err // for the cleanup
		if !errors.Is(err, ErrStartFailed) || !strings.Contains(err.Error(), "cannot parse config") {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestStopDrainsThenKillsAtTheSecondStop(t *testing.T) {
	h := newHarness(t, 2, nil)
	ps := h.readyGeneration(2)
	h.s.Stop(false)
	for _, p := range ps {
		<-p.w.Draining()
	}
	ps[0].exit(nil) // one drains, one stays busy
	if ho := h.s.Reload("test"); ho.Outcome != OutcomeRefused {
		t.Fatalf("reload while stopping = %+v", ho)
	}
	h.s.Stop(true)
	<-ps[1].exited
	if err := wait(t, h.runErr); err != nil {
		t.Fatalf("Run = %v", err)
	}
	h.runErr <- nil
}

func TestDrainTimeoutKills(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.DrainTimeout = 50 * time.Millisecond })
	old := h.readyGeneration(1)
	done := h.reloadAsync()
	h.next().ready(t)
	wait(t, done)
	select {
	case <-old[0].exited:
	case <-time.After(10 * time.Second):
		t.Fatal("busy draining worker not killed at the drain deadline")
	}
	h.waitStatus("generation 1 exited", func(st Status) bool { return genState(st, 1) == GenExited })
}

func TestSocketsForSlot(t *testing.T) {
	for _, tc := range []struct {
		workers, sockets int
	}{{1, 1}, {2, 1}, {2, 2}, {3, 2}, {2, 5}, {4, 4}, {1, 3}} {
		covered := make(map[int]int)
		for slot := range tc.workers {
			idx := socketsForSlot(slot, tc.workers, tc.sockets)
			if len(idx) == 0 {
				t.Errorf("workers %d sockets %d: slot %d gets no socket", tc.workers, tc.sockets, slot)
			}
			for _, i := range idx {
				covered[i]++
			}
		}
		for i := range tc.sockets {
			if covered[i] == 0 {
				t.Errorf("workers %d sockets %d: socket %d has no worker", tc.workers, tc.sockets, i)
			}
		}
		// Each worker helps with every socket it does not own: all of
		// the group's, once each.
		for slot := range tc.workers {
			own := socketsForSlot(slot, tc.workers, tc.sockets)
			helps := helpedSockets(own, tc.sockets)
			all := slices.Sorted(slices.Values(append(slices.Clone(own), helps...)))
			want := make([]int, tc.sockets)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(all, want) {
				t.Errorf("workers %d sockets %d: slot %d owns %v and helps %v, want every socket once", tc.workers, tc.sockets, slot, own, helps)
			}
		}
	}
}
