package supervisor

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/baton-proxy/baton/internal/sdnotify"
	"github.com/baton-proxy/baton/internal/selfmap"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// handoff is a Handoff in progress and the callers waiting for its outcome.
type handoff struct {
	Handoff
	notified bool // RELOADING=1 was sent for it: READY=1 follows
	replies  []chan Handoff
}

func (s *Supervisor) newHandoff(trigger string, coalesced int) *handoff {
	st := &s.state
	st.handoffSeq++
	h := &handoff{Handoff: Handoff{
		ID:        st.handoffSeq,
		Trigger:   trigger,
		Outcome:   OutcomePending,
		Coalesced: coalesced,
		StartedAt: time.Now(),
	}}
	if st.active != nil {
		h.From = st.active.id
	}
	st.handoffs = append(st.handoffs, h)
	if len(st.handoffs) > HistoryLength {
		st.handoffs = st.handoffs[len(st.handoffs)-HistoryLength:]
	}
	return h
}

// finishHandoff records h's outcome and answers everyone waiting for it.
func (s *Supervisor) finishHandoff(h *handoff, outcome Outcome, reason string) {
	h.Outcome = outcome
	h.Reason = reason
	h.DurationMs = ms(time.Since(h.StartedAt))
	if h.notified {
		s.notify(sdnotify.Ready, s.notifyStatus())
	}
	s.state.outcomes[outcome]++
	fields := []zap.Field{
		zap.Int("handoff", h.ID), zap.Uint64("from", h.From), zap.Uint64("to", h.To),
		zap.String("trigger", h.Trigger), zap.String("outcome", string(outcome)),
		zap.Int64("durationMs", h.DurationMs), zap.Int64("spawnMs", h.SpawnMs), zap.Int64("readyMs", h.ReadyMs),
	}
	if outcome == OutcomeOK {
		s.log.Info("handoff done", fields...)
	} else {
		s.log.Error("handoff "+string(outcome), append(fields, zap.String("reason", reason))...)
	}
	h.answer()
	// The supervisor waits from here on, running little of its binary:
	// what start-up and the handoff mapped of it need not stay mapped.
	if _, err := selfmap.Release(); err != nil {
		s.log.Debug("release the binary's pages", zap.Error(err))
	}
}

// StopAckTimeout bounds how long a handoff waits for the workers it
// drained to say that they accept no more (ipc.Stopped) before it reports
// its outcome regardless.
const StopAckTimeout = 2 * time.Second

// finishing is a handoff decided but not reported yet: until the workers
// of the generation it drained accept no more, a new connection may still
// reach one of them, and be served by the old config.
type finishing struct {
	h       *handoff
	outcome Outcome
	reason  string
	drained *generation
	by      time.Time // StopAckTimeout after the drain
}

// finishAfterStop finishes h once every worker of drained, just told to
// drain, has stopped accepting or exited, or StopAckTimeout has passed.
// Workers that never say so (of a baton before ipc.Stopped) are not
// waited for. Reloads queued meanwhile wait for it.
func (s *Supervisor) finishAfterStop(h *handoff, outcome Outcome, reason string, drained *generation) {
	s.state.finishing = &finishing{h: h, outcome: outcome, reason: reason, drained: drained, by: time.Now().Add(StopAckTimeout)}
	s.checkFinishing(time.Now())
}

// checkFinishing finishes the handoff waiting for its drained workers
// when none of them accepts any more, or when its time is up.
func (s *Supervisor) checkFinishing(now time.Time) {
	st := &s.state
	f := st.finishing
	if f == nil {
		return
	}
	left := f.drained.accepting()
	if len(left) > 0 && now.Before(f.by) {
		return
	}
	if len(left) > 0 {
		pids := make([]int, len(left))
		for i, sl := range left {
			pids[i] = sl.pid
		}
		f.drained.log.Warn("draining workers did not say they stopped accepting; reporting the handoff regardless",
			zap.Ints("pids", pids), zap.Duration("waited", StopAckTimeout))
	}
	st.finishing = nil
	s.finishHandoff(f.h, f.outcome, f.reason)
	s.runPending()
}

// answer sends h's record to everyone waiting for it.
func (h *handoff) answer() {
	for _, r := range h.replies {
		if r != nil {
			r <- h.record()
		}
	}
	h.replies = nil
}

// record returns a copy of h that shares nothing with it: the loop goes on
// changing h (its drain time, a canary's verdict) while others read the
// copy.
func (h *handoff) record() Handoff {
	hc := h.Handoff
	if hc.DrainMs != nil {
		d := *hc.DrainMs
		hc.DrainMs = &d
	}
	if hc.Canary != nil {
		c := *hc.Canary
		hc.Canary = &c
	}
	return hc
}

// handleReload starts a reload now, or queues it behind the one running.
func (s *Supervisor) handleReload(ev reloadEvent) {
	st := &s.state
	s.checkControl()
	if st.stopping || st.upgrading {
		why := ErrStopping
		if st.upgrading {
			why = ErrUpgrading
		}
		h := s.newHandoff(ev.trigger, 1)
		h.replies = append(h.replies, ev.reply)
		s.finishHandoff(h, OutcomeRefused, why.Error())
		return
	}
	if ev.canary != 0 {
		s.startCanaryReload(ev)
		return
	}
	if busy := s.canaryBusy(); busy != "" {
		h := s.newHandoff(ev.trigger, 1)
		h.replies = append(h.replies, ev.reply)
		s.finishHandoff(h, OutcomeRefused, busy)
		return
	}
	st.pending = append(st.pending, ev)
	if st.starting == nil && st.finishing == nil {
		s.runPending()
	} else {
		s.log.Info("reload queued behind the running handoff", zap.String("trigger", ev.trigger), zap.Int("queued", len(st.pending)))
	}
}

// runPending runs one reload for every request queued: they are coalesced,
// and each gets the outcome of that one handoff.
func (s *Supervisor) runPending() {
	st := &s.state
	if len(st.pending) == 0 || st.stopping || st.starting != nil || st.finishing != nil {
		return
	}
	evs := st.pending
	st.pending = nil
	h := s.newHandoff(evs[0].trigger, len(evs))
	for _, ev := range evs {
		h.replies = append(h.replies, ev.reply)
	}
	// systemd (Type=notify-reload) waits for RELOADING=1, then READY=1
	// once the handoff is decided, whatever the outcome.
	h.notified = true
	s.notify(sdnotify.Reloading, sdnotify.Monotonic(), sdnotify.Status(fmt.Sprintf("reloading (handoff %d)", h.ID)))
	cfg, err := s.opts.Load()
	if err != nil {
		s.finishHandoff(h, OutcomeRefused, err.Error())
		return
	}
	s.logWarnings(cfg)
	s.updateWatch(cfg)
	if cfg.ControlSocket != st.cfg.ControlSocket {
		// Moving it would strand every client that finds the socket
		// through the config file (docs/operations.md says so too).
		s.finishHandoff(h, OutcomeRefused, fmt.Sprintf("controlSocket changes only at a restart: it is %s, the config says %s", st.cfg.ControlSocket, cfg.ControlSocket))
		return
	}
	s.startGeneration(cfg, h, nil)
}

// snapshot returns the status the loop's state describes, with the
// timeline when asked.
func (s *Supervisor) snapshot(timeline bool) Status {
	st := &s.state
	out := Status{
		PID:            os.Getpid(),
		Version:        s.opts.Version,
		StartedAt:      st.startedAt,
		Binary:         s.opts.Binary,
		Stopping:       st.stopping,
		PendingReloads: len(st.pending),
		RoutingVersion: st.routingVersion,
	}
	out.Ready = st.active != nil && !st.stopping
	if timeline {
		out.Timeline = st.timeline.list()
	}
	out.Canary = s.canaryStatus(time.Now())
	if st.active != nil {
		out.ActiveGeneration = st.active.id
		for _, sl := range st.active.slots {
			if len(sl.stats.Backends) > 0 {
				out.Backends = sl.stats.Backends
				break
			}
		}
	}
	if g := s.newestPlanned(); g != nil {
		for _, pl := range g.plan.listeners {
			ls := ListenerStatus{
				Name:      pl.spec.Name,
				Network:   pl.group.network,
				Address:   pl.group.address,
				Protocol:  pl.spec.Protocol,
				ReusePort: pl.group.reusePort,
				Sockets:   len(pl.sockets),
				Steering:  "bpf",
			}
			if pl.group.steer == nil {
				ls.Steering = "kernel hash: steering needs " + pl.group.steerReason()
			}
			if pl.group.network != "unix" {
				for _, sock := range pl.sockets {
					depth, limit, err := queueDepth(sock.file)
					if err == nil {
						ls.AcceptQueue = append(ls.AcceptQueue, depth)
						ls.Backlog = limit
					}
				}
			}
			out.Listeners = append(out.Listeners, ls)
		}
	}
	out.Totals = Totals{
		Accepted: st.retired.Accepted,
		Requests: st.retired.Requests,
		Errors:   st.retired.Errors,
		Handoffs: make(map[Outcome]uint64, len(st.outcomes)),

		LogDropped: st.retired.LogDropped,

		TLSHandshakeErrors:  st.retired.TLSHandshakeErrors,
		ProxyProtocolErrors: st.retired.ProxyProtocolErrors,
	}
	if s.opts.LogDropped != nil {
		out.Totals.LogDropped += s.opts.LogDropped()
	}
	for o, n := range st.outcomes {
		out.Totals.Handoffs[o] = n
	}
	backends := make(map[string]ipc.BackendCounters, len(st.retiredBackends))
	for name, c := range st.retiredBackends {
		backends[name] = c
	}
	series := st.retiredSeries.Clone()
	for _, g := range st.gens {
		for _, sl := range g.slots {
			series.Add(sl.stats.Series...)
			out.Totals.Accepted += sl.stats.Accepted
			out.Totals.Requests += sl.stats.Requests
			out.Totals.Errors += sl.stats.Errors
			out.Totals.LogDropped += sl.stats.LogDropped
			out.Totals.TLSHandshakeErrors += sl.stats.TLSHandshakeErrors
			out.Totals.ProxyProtocolErrors += sl.stats.ProxyProtocolErrors
			out.Totals.Connections += sl.stats.Connections
			for _, b := range sl.stats.Backends {
				c := backends[b.Name]
				c.Add(b.BackendCounters)
				backends[b.Name] = c
			}
		}
	}
	if len(backends) > 0 {
		out.Totals.Backends = backends
	}
	out.Totals.Series = series.Sorted()
	for _, g := range st.gens {
		gs := GenerationStatus{ID: g.id, State: g.state, Binary: g.binary, StartedAt: g.startedAt, Reason: g.reason, DrainReason: g.drainReason}
		for _, sl := range g.slots {
			gs.Workers = append(gs.Workers, WorkerStatus{
				PID:         sl.pid,
				Slot:        sl.index,
				State:       sl.state,
				Restarts:    sl.restarts,
				StartedAt:   sl.startedAt,
				Connections: sl.stats.Connections,
				Accepted:    sl.stats.Accepted,
				Requests:    sl.stats.Requests,
				Errors:      sl.stats.Errors,

				LastRestartReason: sl.restartReason,
				RoutingVersion:    sl.stats.RoutingVersion,
				RoutingError:      sl.stats.RoutingError,
			})
			if sl.state != WorkerReady {
				gs.Workers[len(gs.Workers)-1].Waiting = sl.waiting
			}
		}
		out.Generations = append(out.Generations, gs)
	}
	for _, h := range st.handoffs {
		hc := h.record()
		if hc.Outcome == OutcomePending {
			// handoffs lists decided ones only (ok, failed, refused).
			out.PendingHandoff = &hc
			continue
		}
		out.Handoffs = append(out.Handoffs, hc)
	}
	return out
}

// newestPlanned returns the active generation, or failing that the newest
// one holding sockets.
func (s *Supervisor) newestPlanned() *generation {
	if a := s.state.active; a != nil && a.plan != nil {
		return a
	}
	for i := len(s.state.gens) - 1; i >= 0; i-- {
		if g := s.state.gens[i]; g.plan != nil {
			return g
		}
	}
	return nil
}

// notify sends service notifications, unless a next supervisor has taken
// over (systemd tracks that one; a STOPPING=1 from this one would stop the
// service).
func (s *Supervisor) notify(assignments ...string) {
	if s.opts.Notify != nil && !s.state.upgraded {
		s.opts.Notify(assignments...)
	}
}

// notifyStatus is the STATUS= line: what serves, and how the last handoff
// went.
func (s *Supervisor) notifyStatus() string {
	st := &s.state
	var b strings.Builder
	switch {
	case st.stopping:
		b.WriteString("stopping")
	case st.active != nil:
		fmt.Fprintf(&b, "generation %d serving", st.active.id)
	default:
		b.WriteString("starting")
	}
	if n := len(st.handoffs); n > 0 {
		h := st.handoffs[n-1]
		fmt.Fprintf(&b, "; last handoff %d (%s): %s", h.ID, h.Trigger, h.Outcome)
		if h.Reason != "" {
			fmt.Fprintf(&b, ": %s", h.Reason)
		}
	}
	return sdnotify.Status(b.String())
}

// logWarnings logs what loading cfg found wrong but not fatal.
func (s *Supervisor) logWarnings(cfg *Config) {
	for _, w := range cfg.Warnings {
		s.log.Warn("config: " + w)
	}
}
