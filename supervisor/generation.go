package supervisor

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/internal/sdnotify"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// generation is Workers processes started from one config and one binary.
type generation struct {
	id            uint64
	state         GenState
	cfg           *Config
	plan          *plan // sockets it holds; nil once released
	binary        string
	startedAt     time.Time
	reason        string // why it failed, or was stopped early
	drainReason   string // why it was told to drain
	readyDeadline time.Time
	drainStart    time.Time
	drainDeadline time.Time
	handoff       *handoff   // the handoff that started it
	drainedBy     *handoff   // the handoff that made it drain, if any
	canary        *canaryRun // set when it started as a canary
	exited        counts     // what its exited workers served
	// paused names, per listener, the sockets its workers do not accept
	// on (a canary's share without BPF); nil: none.
	paused map[string][]int
	slots  []*slot
	log    *zap.Logger
}

// slot is one worker place in a generation; in the active generation a dead
// worker is restarted in its slot.
type slot struct {
	gen           *generation
	index         int
	state         WorkerState
	proc          *proc // the running process; nil when none
	pid           int   // the last process's pid
	restarts      int
	failures      int // consecutive short-lived runs, for the backoff
	startedAt     time.Time
	readyAt       time.Time
	readyDeadline time.Time
	restartAt     time.Time
	failReason    string // what the worker said in a failed message
	waiting       string // what the worker, not ready yet, last said it waits for
	stats         ipc.Stats
	// lastSeen is when the running process last sent a message; watched
	// is set once it has sent stats, which makes its silence a sign of a
	// hang (workerTimeout). A worker that never reports is not watched.
	lastSeen time.Time
	watched  bool
	// restartReason says why the slot's process was last replaced.
	restartReason string
}

// proc is one worker process and its socket. Two goroutines serve it: one
// reads its messages, one waits for its exit; both end when it exits.
type proc struct {
	slot      *slot
	p         Process
	conn      *ipc.Conn
	startedAt time.Time
	exited    bool
	acks      bool          // it answers a drain with ipc.Stopped (ipc.Ready.Acks)
	stopped   bool          // it said so: it accepts no more
	readDone  chan struct{} // closed when readProc has delivered everything
	// killedFor says why the supervisor killed it, if it did.
	killedFor string
}

// readGrace bounds how long an exited worker's socket may stay open (held
// by a process it started) before the supervisor stops reading it.
const readGrace = time.Second

func (sl *slot) log() *zap.Logger {
	return sl.gen.log.With(zap.Int("slot", sl.index), zap.Int("pid", sl.pid))
}

// accepting returns the workers of g that may still accept: alive, and
// not yet said they stopped, of those that say so (ipc.Ready.Acks).
func (g *generation) accepting() []*slot {
	var out []*slot
	for _, sl := range g.slots {
		if p := sl.proc; p != nil && !p.exited && p.acks && !p.stopped {
			out = append(out, sl)
		}
	}
	return out
}

// live reports whether any process of g runs or waits to restart.
func (g *generation) live() bool {
	for _, sl := range g.slots {
		if sl.proc != nil || sl.state == WorkerBackoff {
			return true
		}
	}
	return false
}

func (g *generation) allReady() bool {
	for _, sl := range g.slots {
		if sl.state != WorkerReady {
			return false
		}
	}
	return true
}

// startGeneration acquires the sockets for cfg and launches a generation
// for handoff h; a canary gets sockets of its own. It reports false, with h
// decided, when nothing could start.
func (s *Supervisor) startGeneration(cfg *Config, h *handoff, canary *canaryRun) bool {
	st := &s.state
	if err := s.useAccessLog(cfg); err != nil {
		s.finishHandoff(h, OutcomeRefused, err.Error())
		return false
	}
	p, err := st.sockets.acquire(cfg.Listeners, cfg.Workers, canary != nil)
	if err != nil {
		s.finishHandoff(h, OutcomeRefused, err.Error())
		return false
	}
	st.nextGen++
	g := &generation{
		id:        st.nextGen,
		state:     GenStarting,
		cfg:       cfg,
		plan:      p,
		binary:    s.opts.Binary,
		startedAt: time.Now(),
		handoff:   h,
		canary:    canary,
	}
	g.log = s.log.With(zap.Uint64("generation", g.id))
	if canary != nil {
		canary.planSlots(g)
	}
	h.To = g.id
	st.starting = g
	st.gens = append(st.gens, g)
	s.trimHistory()
	g.log.Info("starting generation", zap.Int("workers", cfg.Workers), zap.String("trigger", h.Trigger))
	for i := range cfg.Workers {
		sl := &slot{gen: g, index: i}
		g.slots = append(g.slots, sl)
	}
	for _, sl := range g.slots {
		if err := s.launch(sl); err != nil {
			s.failGeneration(g, err.Error())
			return st.active != nil
		}
	}
	h.SpawnMs = ms(time.Since(h.StartedAt))
	g.readyDeadline = time.Now().Add(cfg.ReadyTimeout)
	return true
}

// launch starts a process in sl and sends it its hello.
func (s *Supervisor) launch(sl *slot) error {
	g := sl.gen
	conn, child, err := ipc.NewPair()
	if err != nil {
		return fmt.Errorf("worker %d: %w", sl.index, err)
	}
	env := append(workerEnviron(), s.opts.Env...)
	env = append(env, ipc.EnvFD+"=3")
	spec := LaunchSpec{
		Path:   g.binary,
		Args:   append([]string{g.binary}, s.opts.Args...),
		Env:    env,
		IPC:    child,
		Stdout: os.Stdout,
		Stderr: os.Stderr,

		Credential: g.cfg.WorkerCredential,
	}
	process, err := s.opts.Launcher.Launch(spec)
	child.Close() // the worker holds its own copy now
	if err != nil {
		conn.Close()
		return fmt.Errorf("worker %d: %w", sl.index, err)
	}
	p := &proc{slot: sl, p: process, conn: conn, startedAt: time.Now(), readDone: make(chan struct{})}
	sl.proc = p
	sl.pid = process.Pid()
	sl.state = WorkerStarting
	sl.startedAt = p.startedAt
	sl.readyDeadline = p.startedAt.Add(g.cfg.ReadyTimeout)
	sl.failReason, sl.waiting = "", ""
	sl.stats = ipc.Stats{} // a new process counts from zero
	sl.lastSeen, sl.watched = p.startedAt, false
	s.owned.Add(2)
	go s.readProc(p)
	go s.waitProc(p)

	hello, files := s.helloFor(sl)
	if err := conn.Send(ipc.TypeHello, hello, files...); err != nil {
		// The process is gone or broken; its exit decides what follows.
		sl.log().Warn("sending hello failed; killing worker", zap.Error(err))
		p.kill()
	} else if hello.Routing {
		s.sendRouting(sl, false) // announced by the hello
	}
	sl.log().Debug("worker launched")
	return nil
}

// helloFor builds sl's hello and the descriptors that go with it.
func (s *Supervisor) helloFor(sl *slot) (ipc.Hello, []*os.File) {
	g := sl.gen
	hello := ipc.Hello{Generation: g.id, Slot: sl.index, Workers: len(g.slots), Config: g.cfg.Payload, TicketKeys: s.state.ticketKeys}
	if g.cfg.OrphanTimeout > 0 {
		hello.Orphans = &ipc.Orphans{Name: orphanName(g.cfg.ControlSocket), Timeout: g.cfg.OrphanTimeout}
	}
	if g.canary != nil {
		hello.CanaryOf = g.canary.of
	}
	hello.Paused = g.paused
	hello.Routing = s.state.routing != nil
	var files []*os.File
	for _, pl := range g.plan.listeners {
		own := socketsForSlot(sl.index, len(g.slots), len(pl.sockets))
		helps := helpedSockets(own, len(pl.sockets))
		idx := append(own, helps...)
		hello.Listeners = append(hello.Listeners, ipc.ListenerInfo{
			Name:      pl.spec.Name,
			Key:       pl.group.key,
			Network:   pl.group.network,
			Address:   pl.group.address,
			Protocol:  pl.spec.Protocol,
			ReusePort: pl.group.reusePort,
			GroupSize: len(pl.sockets),
			Sockets:   idx,
			Helps:     helps,
		})
		for _, i := range idx {
			files = append(files, pl.sockets[i].file)
		}
	}
	if st := &s.state; st.accessLog != nil && g.cfg.AccessLogPath == st.accessLogPath {
		hello.AccessLog = true
		files = append(files, st.accessLog)
	}
	return hello, files
}

// readProc forwards p's messages to the loop until its socket ends.
func (s *Supervisor) readProc(p *proc) {
	defer s.owned.Done()
	defer close(p.readDone)
	for {
		fr, files, err := p.conn.Receive()
		for _, f := range files {
			f.Close()
		}
		if err == nil && len(files) > 0 {
			err = fmt.Errorf("%w: descriptors with %s", ipc.ErrUnexpected, fr.Type)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.send(procBroken{p: p, err: err})
			}
			return
		}
		if !s.send(procMessage{p: p, fr: fr}) {
			return
		}
	}
}

// waitProc waits for p to exit and tells the loop.
func (s *Supervisor) waitProc(p *proc) {
	defer s.owned.Done()
	err := p.p.Wait()
	// Deliver what the worker said last (its final counters) before its
	// exit; close its socket if something it started still holds it.
	select {
	case <-p.readDone:
	case <-time.After(readGrace):
	}
	p.conn.Close()
	<-p.readDone
	// The loop runs until every process has exited, so this is delivered.
	s.send(procExit{p: p, err: err})
}

func (p *proc) kill() {
	if !p.exited {
		p.p.Signal(syscall.SIGKILL)
	}
}

func (s *Supervisor) handleMessage(p *proc, fr ipc.Frame) {
	sl := p.slot
	if sl.proc != p || p.exited {
		return
	}
	sl.lastSeen = time.Now()
	switch fr.Type {
	case ipc.TypeReady:
		var m ipc.Ready
		if err := fr.Unmarshal(&m); err != nil {
			s.handleBroken(p, err)
			return
		}
		if sl.state != WorkerStarting {
			return
		}
		p.acks = m.Acks
		sl.state = WorkerReady
		sl.readyAt = time.Now()
		sl.log().Info("worker ready", zap.Duration("after", sl.readyAt.Sub(sl.startedAt)))
		g := sl.gen
		if g.state == GenStarting && g.allReady() {
			if g.canary != nil {
				s.startCanary(g)
			} else {
				s.promote(g)
			}
		}
	case ipc.TypeFailed:
		var m ipc.Failed
		if err := fr.Unmarshal(&m); err != nil {
			s.handleBroken(p, err)
			return
		}
		sl.failReason = m.Reason
		sl.log().Error("worker failed", zap.String("reason", m.Reason))
		if sl.gen.state == GenStarting {
			s.failGeneration(sl.gen, fmt.Sprintf("worker %d (pid %d) failed: %s", sl.index, sl.pid, m.Reason))
		} else {
			p.kill()
		}
	case ipc.TypeWaiting:
		var m ipc.Waiting
		if err := fr.Unmarshal(&m); err != nil {
			s.handleBroken(p, err)
			return
		}
		if len(m.Reason) > ipc.MaxWaitingReason {
			m.Reason = m.Reason[:ipc.MaxWaitingReason] + "…"
		}
		if sl.state != WorkerReady && m.Reason != sl.waiting {
			sl.waiting = m.Reason
			sl.log().Info("worker waiting", zap.String("for", m.Reason))
		}
	case ipc.TypeStopped:
		p.stopped = true
		s.checkFinishing(time.Now())
	case ipc.TypeStats:
		var m ipc.Stats
		if err := fr.Unmarshal(&m); err != nil {
			s.handleBroken(p, err)
			return
		}
		sl.stats = m
		sl.watched = true
		s.judgeCanary(time.Now())
	default:
		s.handleBroken(p, fmt.Errorf("%w: %s from a worker", ipc.ErrUnexpected, fr.Type))
	}
}

// handleBroken treats a protocol error as the worker's failure.
func (s *Supervisor) handleBroken(p *proc, err error) {
	sl := p.slot
	if sl.proc != p || p.exited {
		return
	}
	sl.log().Error("bad message from worker; killing it", zap.Error(err))
	sl.failReason = err.Error()
	if sl.gen.state == GenStarting {
		s.failGeneration(sl.gen, fmt.Sprintf("worker %d (pid %d): %v", sl.index, sl.pid, err))
		return
	}
	p.kill()
}

func (s *Supervisor) handleExit(p *proc, err error) {
	p.exited = true
	sl := p.slot
	g := sl.gen
	// Its counters live on in the totals: they never go down across
	// restarts and generations.
	s.state.retired.AddCounters(&sl.stats)
	g.exited.requests += sl.stats.Requests
	g.exited.failures += sl.stats.Failures
	s.state.retiredSeries.Add(sl.stats.Series...)
	for _, b := range sl.stats.Backends {
		c := s.state.retiredBackends[b.Name]
		c.Add(b.BackendCounters)
		s.state.retiredBackends[b.Name] = c
	}
	sl.stats = ipc.Stats{}
	if sl.proc == p {
		sl.proc = nil
	}
	status := exitString(err)
	switch {
	case g.state == GenStarting:
		why := sl.failReason
		if why == "" {
			why = status
		}
		sl.log().Error("worker exited before ready", zap.String("status", status))
		s.failGeneration(g, fmt.Sprintf("worker %d (pid %d) exited before ready: %s", sl.index, sl.pid, why))
		sl.state = WorkerFailed
	case (g.state == GenActive || g.state == GenCanary) && (!s.state.stopping || !s.state.shutdownAt.IsZero()):
		// Restarted while the generation serves, shutdownDelay included.
		up := time.Since(p.startedAt)
		if up >= StableAfter {
			sl.failures = 0
		}
		delay := backoff(sl.failures)
		sl.failures++
		sl.state = WorkerBackoff
		sl.restartReason = p.killedFor
		if sl.restartReason == "" {
			sl.restartReason = "exited: " + status
		}
		sl.restartAt = time.Now().Add(delay)
		sl.log().Warn("worker of the active generation died; restarting it", zap.String("status", status), zap.Duration("after", up), zap.Duration("backoff", delay))
	case g.state == GenDraining || g.state == GenActive || g.state == GenCanary:
		sl.state = WorkerExited
		sl.log().Info("worker exited", zap.String("status", status))
	default:
		sl.state = WorkerFailed
	}
	s.settle(g)
	s.checkFinishing(time.Now())
}

// backoff returns the wait before restart number n (from 0).
func backoff(n int) time.Duration {
	d := MinRestartBackoff
	for range n {
		d *= 2
		if d >= MaxRestartBackoff {
			return MaxRestartBackoff
		}
	}
	return d
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee interface{ ExitCode() int }
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return "exit status " + strconv.Itoa(ee.ExitCode())
	}
	return err.Error()
}

// restart launches a new process in a slot of the active generation.
func (s *Supervisor) restart(sl *slot) {
	sl.restarts++
	if err := s.launch(sl); err != nil {
		delay := backoff(sl.failures)
		sl.failures++
		sl.state = WorkerBackoff
		sl.restartAt = time.Now().Add(delay)
		sl.log().Error("restarting worker failed", zap.Error(err), zap.Duration("backoff", delay))
		return
	}
	sl.log().Info("worker restarted", zap.Int("restarts", sl.restarts))
}

// promote makes g, all ready, the active generation and drains the old one.
func (s *Supervisor) promote(g *generation) {
	st := &s.state
	old := st.active
	g.state = GenActive
	st.active = g
	st.starting = nil
	st.cfg = g.cfg
	h := g.handoff
	h.ReadyMs = ms(time.Since(h.StartedAt))
	for _, sl := range g.slots {
		h.StartupMs = max(h.StartupMs, ms(sl.readyAt.Sub(sl.startedAt)))
	}
	g.log.Info("generation active", zap.Int64("readyMs", h.ReadyMs))
	// New connections go to g's sockets from now on (they differ from
	// the old generation's when the group was resized).
	st.sockets.commit(g.plan)
	st.sockets.steer(g.plan, nil, 0)
	if old == nil {
		s.finishHandoff(h, OutcomeOK, "")
		s.becameReady()
		s.runPending()
		return
	}
	old.drainedBy = h
	s.drain(old, fmt.Sprintf("handoff to generation %d", g.id), time.Now().Add(g.cfg.DrainTimeout))
	s.becameReady()
	// Reported once the old workers accept no more: a connection made
	// after `baton reload` returns is the new generation's.
	s.finishAfterStop(h, OutcomeOK, "", old)
}

// becameReady, the first time a generation serves, tells systemd and a
// previous supervisor (which may then drain and exit).
func (s *Supervisor) becameReady() {
	st := &s.state
	if st.ready {
		return
	}
	st.ready = true
	if upg := s.opts.Upgrader; upg != nil && upg.HasParent() {
		// systemd tracks this process from now on, before the previous
		// one learns it may go (NotifyAccess=all).
		s.notify(sdnotify.MainPID(os.Getpid()), sdnotify.Ready, s.notifyStatus())
	} else {
		s.notify(sdnotify.Ready, s.notifyStatus())
	}
	if upg := s.opts.Upgrader; upg != nil {
		if err := upg.Ready(); err != nil {
			s.log.Error("upgrader ready", zap.Error(err))
		}
	}
}

// failGeneration kills a starting generation; the active one keeps serving.
func (s *Supervisor) failGeneration(g *generation, reason string) {
	st := &s.state
	if g.state != GenStarting {
		return
	}
	g.state = GenFailed
	g.reason = reason
	if st.starting == g {
		st.starting = nil
	}
	g.log.Error("generation failed; the previous one keeps serving", zap.String("reason", reason))
	for _, sl := range g.slots {
		if sl.proc != nil {
			sl.proc.kill()
		}
		sl.state = WorkerFailed
	}
	s.finishHandoff(g.handoff, OutcomeFailed, reason)
	s.settle(g)
	if st.active == nil && !st.stopping {
		// Nothing to roll back to: the first generation failed.
		st.runErr = fmt.Errorf("%w: %s", ErrStartFailed, reason)
		st.stopping = true
		s.refusePending()
		return
	}
	s.runPending()
}

// drain tells every worker of g to drain before deadline.
func (s *Supervisor) drain(g *generation, reason string, deadline time.Time) {
	g.state = GenDraining
	g.drainStart = time.Now()
	g.drainDeadline = deadline
	g.drainReason = reason
	g.log.Info("draining generation", zap.String("reason", reason), zap.Time("deadline", deadline))
	// At a stop the supervisor's sockets are closed before any drain is
	// sent (beginDrain): the workers' copies are the last.
	msg := ipc.Drain{Deadline: deadline, Reason: reason, Closing: s.state.stopping && !s.state.upgraded, Ack: true}
	for _, sl := range g.slots {
		switch {
		case sl.proc != nil:
			sl.state = WorkerDraining
			if err := sl.proc.conn.Send(ipc.TypeDrain, msg); err != nil {
				sl.log().Warn("sending drain failed; killing worker", zap.Error(err))
				sl.proc.kill()
			}
		case sl.state == WorkerBackoff:
			sl.state = WorkerExited
		}
	}
	s.state.sockets.draining(g.plan)
	s.settle(g)
	s.limitDraining()
}

// limitDraining stops the oldest draining generations early while more
// than MaxDraining are draining: a reload storm meeting long-lived
// connections must not keep every old generation (and its memory) alive.
// A generation stopped early has EarlyStopGrace before its workers are
// killed, which closes what they still hold.
func (s *Supervisor) limitDraining() {
	limit := s.state.cfg.MaxDraining
	if limit <= 0 {
		return
	}
	var draining []*generation // not yet stopped early, oldest first
	for _, g := range s.state.gens {
		if g.state == GenDraining && g.live() && g.reason == "" {
			draining = append(draining, g)
		}
	}
	until := time.Now().Add(EarlyStopGrace)
	for _, g := range draining[:max(0, len(draining)-limit)] {
		g.reason = fmt.Sprintf("stopped early: more than maxDraining (%d) generations were draining", limit)
		g.log.Warn("stopping a draining generation early", zap.String("reason", g.reason), zap.Time("killAt", until))
		if g.drainDeadline.IsZero() || g.drainDeadline.After(until) {
			g.drainDeadline = until
		}
	}
}

// killDraining kills what is left of g at its drain deadline.
func (s *Supervisor) killDraining(g *generation) {
	n := 0
	var conns int64
	for _, sl := range g.slots {
		if sl.proc != nil {
			n++
			conns += sl.stats.Connections
			sl.proc.kill()
		}
	}
	g.log.Warn("drain timeout: killing workers that are still busy", zap.Int("workers", n), zap.Int64("connections", conns))
	g.drainDeadline = time.Time{}
}

// settle finishes g once its processes are gone: a draining generation
// becomes exited, and a finished one releases its sockets.
func (s *Supervisor) settle(g *generation) {
	if g.live() {
		return
	}
	if g.state == GenDraining {
		g.state = GenExited
		d := ms(time.Since(g.drainStart))
		if g.drainedBy != nil {
			g.drainedBy.DrainMs = &d
		}
		g.log.Info("generation drained", zap.Int64("drainMs", d))
	}
	if (g.state == GenExited || g.state == GenFailed) && g.plan != nil {
		s.state.sockets.release(g.plan)
		g.plan = nil
	}
}

// trimHistory forgets the oldest finished generations beyond HistoryLength.
func (s *Supervisor) trimHistory() {
	st := &s.state
	finished := 0
	for _, g := range st.gens {
		if g.plan == nil && !g.live() {
			finished++
		}
	}
	kept := st.gens[:0]
	for _, g := range st.gens {
		if finished > HistoryLength && g.plan == nil && !g.live() {
			finished--
			continue
		}
		kept = append(kept, g)
	}
	st.gens = kept
}

// workerEnviron is this process's environment without what is meant for
// the supervisor alone: systemd's notification socket and watchdog, so that
// a worker can neither notify nor be mistaken for the service.
func workerEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES":
		default:
			env = append(env, kv)
		}
	}
	return env
}
