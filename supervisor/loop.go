package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
	"github.com/baton-proxy/baton/internal/sdnotify"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// loopState is everything the loop owns. Nothing else reads or writes it.
type loopState struct {
	startedAt       time.Time
	cfg             *Config // the active generation's config (the first one at start)
	sockets         *socketTable
	gens            []*generation // live ones, and the last few finished
	nextGen         uint64
	active          *generation
	starting        *generation
	finishing       *finishing    // a handoff waiting for its drained workers to stop accepting
	canary          *generation   // serving beside active, if any
	handoffs        []*handoff    // the last HistoryLength
	handoffSeq      int           // the last handoff's ID
	pending         []reloadEvent // reloads asked for while one runs
	stopping        bool
	shutdownAt      time.Time // while stopping: close the listeners and drain at this time (shutdownDelay)
	watchdogAt      time.Time // send WATCHDOG=1 at this time; zero: no watchdog
	accessLog       *os.File  // the access log file, when a config names one
	accessLogPath   string
	watch           *fileWatch // watch: true
	ticketKeys      [][]byte   // TLS session-ticket keys, newest first
	ticketRotateAt  time.Time  // when the next key is made
	stopAt          time.Time  // kill everything left at this time while stopping
	runErr          error      // what Run returns
	retired         ipc.Stats  // counters of the worker processes that exited
	retiredBackends map[string]ipc.BackendCounters
	retiredSeries   metrics.Set // metric series of the worker processes that exited
	outcomes        map[Outcome]uint64
	upgrading       bool      // an upgrade is starting the next supervisor
	upgraded        bool      // the next supervisor has taken over
	ready           bool      // the first generation was ready (Upgrader told)
	controlCheckAt  time.Time // look whether the control socket is still there (checkControl)
	sampleAt        time.Time // the next sample of the connections timeline
	timeline        timeline  // connections per generation, a sample a second
	// routing is the route provider's last payload (SetRouting), in a
	// sealed file every worker gets; routingVersion counts them.
	routing        *os.File
	routingSize    int64
	routingVersion uint64
}

// Events the loop handles.
type (
	event       any
	reloadEvent struct {
		trigger string
		canary  int          // a canary reload of this percent; 0: a reload
		reply   chan Handoff // nil: nobody waits
	}
	// verdictEvent promotes or aborts the running canary.
	verdictEvent struct {
		promote bool
		reply   chan Handoff
	}
	stopEvent struct{ now bool }
	// upgradeEvent asks for a self-upgrade; upgradeDone reports it.
	upgradeEvent struct{ reply chan error }
	upgradeDone  struct {
		err   error
		reply chan error
	}
	statusEvent struct {
		reply chan Status
		brief bool // without the timeline
	}
	reopenLogsEvent struct{}
	// routingEvent is a new routing payload, in its file (SetRouting).
	routingEvent struct {
		file *os.File
		size int64
	}
	// procMessage is a message from a worker process.
	procMessage struct {
		p  *proc
		fr ipc.Frame
	}
	// procBroken reports a protocol error on a worker's socket.
	procBroken struct {
		p   *proc
		err error
	}
	// procExit reports that a worker process has exited.
	procExit struct {
		p   *proc
		err error
	}
)

// Run opens the listeners and the control socket, starts the first
// generation, and supervises until Stop (or ctx's end, a graceful stop). It
// returns once every worker has exited and every socket is closed; an error
// if the first generation could not start.
func (s *Supervisor) Run(ctx context.Context) error {
	st := &s.state
	st.startedAt = time.Now()
	if s.opts.WatchdogInterval > 0 {
		st.watchdogAt = st.startedAt.Add(s.opts.WatchdogInterval)
	}
	st.outcomes = make(map[Outcome]uint64)
	st.retiredBackends = make(map[string]ipc.BackendCounters)
	st.retiredSeries = metrics.Set{}
	activated, err := socketActivation()
	if err != nil {
		close(s.done)
		return err
	}
	if err := closeOnExecInherited(); err != nil {
		s.log.Warn("cannot mark inherited descriptors close-on-exec; workers may inherit them", zap.Error(err))
	}
	st.sockets = newSocketTable()
	st.sockets.log = s.log
	st.sockets.newSteer = s.opts.Steer
	defer func() { st.sockets.closeAll(!st.upgraded) }()
	upg := s.opts.Upgrader
	if upg != nil && upg.HasParent() {
		st.sockets.inherit = upg.File
	}
	st.sockets.activated = activated
	if len(activated) > 0 {
		s.log.Info("socket activation", zap.Int("sockets", len(activated)))
	}

	cfg, err := s.opts.Load()
	if err != nil {
		close(s.done)
		return err
	}
	st.cfg = cfg
	s.logWarnings(cfg)
	ctl, err := s.controlListener(cfg.ControlSocket)
	if err != nil {
		close(s.done)
		return err
	}
	s.ctl, s.ctlPath = ctl, cfg.ControlSocket
	st.controlCheckAt = time.Now().Add(controlCheckEvery)
	st.sampleAt = time.Now().Add(sampleEvery)
	s.owned.Add(1)
	go s.serveControl(ctl)
	defer func() {
		// After an upgrade the next supervisor answers on the same
		// socket: leave its path in place.
		s.ctl.SetUnlinkOnClose(!st.upgraded)
		s.ctl.Close()
		s.owned.Wait()
		if s.ctlLock != nil {
			s.ctlLock.Close()
		}
	}()
	stopOnCancel := context.AfterFunc(ctx, func() { s.Stop(false) })
	defer stopOnCancel()
	defer s.stopWatch()
	s.updateWatch(cfg)

	st.ticketKeys = [][]byte{newTicketKey()}
	st.ticketRotateAt = time.Now().Add(TicketKeyRotation)
	upgrade := s.opts.Upgrader != nil && s.opts.Upgrader.HasParent()
	if !upgrade {
		if g := s.adopt(cfg); g != nil {
			// A supervisor with this control socket died and its
			// workers serve: they are ours now. Another config is an
			// ordinary handoff away.
			s.becameReady()
			if !bytes.Equal(g.cfg.Payload, cfg.Payload) {
				st.pending = append(st.pending, reloadEvent{trigger: "config"})
				s.runPending()
			}
			return s.run(activated)
		}
	}
	trigger := "start"
	from := s.takeUpgradeState()
	if from != 0 {
		trigger = "upgrade"
	}
	h := s.newHandoff(trigger, 1)
	h.From = from
	if !s.startGeneration(cfg, h, nil) {
		close(s.done)
		return fmt.Errorf("%w: %s", ErrStartFailed, h.Reason)
	}
	return s.run(activated)
}

// run warns about unused activated sockets and runs the loop until a stop
// has finished.
func (s *Supervisor) run(activated []*activated) error {
	st := &s.state
	for _, a := range activated {
		if !a.used {
			s.log.Warn("socket activation: no listener takes this socket (match its FileDescriptorName= to a listener name, or its address)", zap.String("name", a.name), zap.String("address", a.addr))
		}
	}
	s.log.Info("supervisor started", zap.Int("pid", os.Getpid()), zap.String("control", st.cfg.ControlSocket), zap.String("binary", s.opts.Binary))
	s.loop()
	s.closeRouting()
	close(s.done)
	return st.runErr
}

// loop handles events and deadlines until a stop has finished.
func (s *Supervisor) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var exit <-chan struct{} // closed when a new supervisor has taken over
	if s.opts.Upgrader != nil {
		exit = s.opts.Upgrader.Exit()
	}
	for !s.finished() {
		var tick <-chan time.Time
		if next := s.nextDeadline(); !next.IsZero() {
			timer.Reset(time.Until(next))
			tick = timer.C
		}
		select {
		case ev := <-s.events:
			s.handle(ev)
		case now := <-tick:
			s.checkDeadlines(now)
		case <-exit:
			exit = nil
			s.handleUpgraded()
		}
	}
	s.log.Info("supervisor stopped")
}

func (s *Supervisor) handle(ev event) {
	switch ev := ev.(type) {
	case reloadEvent:
		s.handleReload(ev)
	case verdictEvent:
		reason := "by baton abort"
		if ev.promote {
			reason = "by baton promote"
		}
		s.canaryVerdict(ev.promote, "operator", reason, ev.reply)
	case stopEvent:
		s.handleStop(ev.now)
	case statusEvent:
		st := s.snapshot(!ev.brief)
		ev.reply <- st
	case reopenLogsEvent:
		s.reopenLogs()
	case routingEvent:
		s.handleRouting(ev)
	case procMessage:
		s.handleMessage(ev.p, ev.fr)
	case procBroken:
		s.handleBroken(ev.p, ev.err)
	case procExit:
		s.handleExit(ev.p, ev.err)
	case upgradeEvent:
		s.handleUpgrade(ev.reply)
	case upgradeDone:
		s.handleUpgradeDone(ev)
	default:
		panic(fmt.Sprintf("supervisor: unknown event %T", ev))
	}
}

// finished reports whether a stop has completed: no process is left.
func (s *Supervisor) finished() bool {
	if !s.state.stopping {
		return false
	}
	for _, g := range s.state.gens {
		if g.live() {
			return false
		}
	}
	return true
}

// nextDeadline returns the earliest pending deadline, or zero.
func (s *Supervisor) nextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	st := &s.state
	consider(st.watchdogAt)
	consider(st.ticketRotateAt)
	consider(st.controlCheckAt)
	consider(st.sampleAt)
	if st.finishing != nil {
		consider(st.finishing.by)
	}
	if st.canary != nil {
		consider(st.canary.canary.verdictAt)
	}
	if st.stopping {
		consider(st.shutdownAt)
		consider(st.stopAt)
	}
	for _, g := range st.gens {
		switch g.state {
		case GenStarting:
			consider(g.readyDeadline)
		case GenDraining:
			if g.live() {
				consider(g.drainDeadline)
			}
		case GenActive, GenCanary:
			for _, sl := range g.slots {
				switch sl.state {
				case WorkerStarting:
					consider(sl.readyDeadline)
				case WorkerBackoff:
					consider(sl.restartAt)
				case WorkerReady:
					if sl.watched && g.cfg.WorkerTimeout > 0 {
						consider(sl.lastSeen.Add(g.cfg.WorkerTimeout))
					}
				}
			}
		}
	}
	return next
}

// checkDeadlines acts on every deadline that has passed.
func (s *Supervisor) checkDeadlines(now time.Time) {
	st := &s.state
	s.judgeCanary(now)
	s.checkFinishing(now)
	if !st.ticketRotateAt.IsZero() && !now.Before(st.ticketRotateAt) {
		s.rotateTickets(now)
	}
	if !st.controlCheckAt.IsZero() && !now.Before(st.controlCheckAt) {
		s.checkControl()
		st.controlCheckAt = now.Add(controlCheckEvery)
	}
	if !st.sampleAt.IsZero() && !now.Before(st.sampleAt) {
		st.timeline.add(now, st.gens)
		st.sampleAt = now.Add(sampleEvery)
	}
	if !st.watchdogAt.IsZero() && !now.Before(st.watchdogAt) {
		s.notify(sdnotify.Watchdog)
		st.watchdogAt = now.Add(s.opts.WatchdogInterval)
	}
	if st.stopping && !st.shutdownAt.IsZero() && !now.Before(st.shutdownAt) {
		s.beginDrain()
	}
	if st.stopping && !st.stopAt.IsZero() && !now.Before(st.stopAt) {
		s.killAll("stop timeout")
		st.stopAt = time.Time{}
	}
	for _, g := range st.gens {
		switch g.state {
		case GenStarting:
			if !now.Before(g.readyDeadline) {
				s.failGeneration(g, s.notReadyReason(g))
			}
		case GenDraining:
			if g.live() && !g.drainDeadline.IsZero() && !now.Before(g.drainDeadline) {
				s.killDraining(g)
			}
		case GenActive, GenCanary:
			for _, sl := range g.slots {
				switch {
				case sl.state == WorkerStarting && !now.Before(sl.readyDeadline):
					sl.log().Warn("restarted worker not ready in time; killing it", zap.Duration("readyTimeout", g.cfg.ReadyTimeout))
					sl.proc.kill()
				case sl.state == WorkerBackoff && !now.Before(sl.restartAt):
					s.restart(sl)
				case sl.state == WorkerReady && sl.watched && g.cfg.WorkerTimeout > 0 && !now.Before(sl.lastSeen.Add(g.cfg.WorkerTimeout)) && sl.proc != nil:
					// Stopped, deadlocked or starved: its socket keeps
					// queueing connections nobody serves. Replace it.
					sl.proc.killedFor = fmt.Sprintf("unresponsive: no message for workerTimeout %s", g.cfg.WorkerTimeout)
					sl.log().Error("worker unresponsive; killing it to restart it", zap.Duration("workerTimeout", g.cfg.WorkerTimeout), zap.Duration("silentFor", now.Sub(sl.lastSeen)))
					sl.watched = false // killed: no second kill
					sl.proc.kill()
				}
			}
		}
	}
}

func (s *Supervisor) notReadyReason(g *generation) string {
	for _, sl := range g.slots {
		if sl.state != WorkerReady {
			reason := fmt.Sprintf("worker %d (pid %d) not ready within readyTimeout %s", sl.index, sl.pid, g.cfg.ReadyTimeout)
			if sl.waiting != "" {
				reason += ": " + sl.waiting
			}
			return reason
		}
	}
	return "not ready within readyTimeout"
}

// handleStop begins a graceful stop, or, the second time or when asked,
// kills every worker at once.
func (s *Supervisor) handleStop(now bool) {
	st := &s.state
	if st.stopping || now {
		if !st.stopping {
			if st.canary != nil {
				s.canaryVerdict(false, "stop", "the supervisor is stopping now", nil)
			}
			st.stopping = true
			s.refusePending()
		}
		s.log.Warn("stopping now: killing every worker")
		st.shutdownAt = time.Time{}
		if st.starting != nil {
			s.failGeneration(st.starting, "supervisor stopping")
		}
		s.killAll("immediate stop")
		return
	}
	if st.canary != nil {
		s.canaryVerdict(false, "stop", "the supervisor is stopping", nil)
	}
	st.stopping = true
	s.stopWatch()
	s.notify(sdnotify.Stopping, s.notifyStatus())
	s.refusePending()
	if st.starting != nil {
		s.failGeneration(st.starting, "supervisor stopping")
	}
	if d := st.cfg.ShutdownDelay; d > 0 && !st.upgraded {
		// Not ready any more, but serving on: a load balancer takes
		// baton out of rotation meanwhile.
		st.shutdownAt = time.Now().Add(d)
		s.log.Info("stopping: not ready; serving on for shutdownDelay, then closing the listeners", zap.Duration("shutdownDelay", d))
		return
	}
	s.beginDrain()
}

// beginDrain is a graceful stop's second step: the listening sockets
// close, so that a new connection is refused at once instead of queued and
// abandoned, and every generation drains until stopTimeout.
func (s *Supervisor) beginDrain() {
	st := &s.state
	st.shutdownAt = time.Time{}
	st.stopAt = time.Now().Add(st.cfg.StopTimeout)
	s.log.Info("stopping: draining every generation", zap.Duration("stopTimeout", st.cfg.StopTimeout))
	if !st.upgraded {
		// The supervisor's copies close first, then the workers' as
		// they drain, each taking what the kernel queued on it before
		// (ipc.Drain.Closing); after the last the kernel refuses new
		// connections. (After an upgrade the sockets are the next
		// supervisor's: its copies stay open.)
		st.sockets.closeAll(true)
		s.log.Info("stopping: the supervisor's listeners closed")
	}
	for _, g := range st.gens {
		switch g.state {
		case GenActive, GenCanary:
			s.drain(g, "supervisor stopping", st.stopAt)
		case GenDraining:
			if g.drainDeadline.After(st.stopAt) {
				g.drainDeadline = st.stopAt
			}
		}
	}
}

func (s *Supervisor) refusePending() {
	for _, ev := range s.state.pending {
		h := s.newHandoff(ev.trigger, 1)
		h.replies = append(h.replies, ev.reply)
		s.finishHandoff(h, OutcomeRefused, ErrStopping.Error())
	}
	s.state.pending = nil
}

// killAll kills every process and cancels every restart.
func (s *Supervisor) killAll(why string) {
	for _, g := range s.state.gens {
		for _, sl := range g.slots {
			if sl.proc != nil {
				sl.log().Warn("killing worker", zap.String("why", why))
				sl.proc.kill()
			}
			if sl.state == WorkerBackoff {
				sl.state = WorkerExited
			}
		}
		s.settle(g)
	}
}
