package supervisor

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// A canary is a generation that serves beside the active one, on sockets
// of its own in every listener's reuseport group, and takes Percent of the
// new connections: the steering program (internal/steer) sends it that
// share of the hash space. Connections already open stay where they are.
// A verdict ends it: promote (it becomes the active generation and the
// old one drains, as at the end of a reload) or abort (it drains, and the
// active generation takes every new connection again). An operator gives
// the verdict (`baton promote`, `baton abort`), or the supervisor does
// when the config's canary section asks it to (CanaryPolicy).
//
//	starting ──all ready──▶ canary ──promote──▶ active ──▶ draining
//	                           └──────abort──────────────▶ draining

// CanaryPolicy is the automatic verdict on a canary; a zero Duration
// leaves the verdict to an operator.
type CanaryPolicy struct {
	// Duration: promote a healthy canary this long after it started
	// serving.
	Duration time.Duration
	// MinRequests: judge only after the canary served this many.
	MinRequests uint64
	// MaxErrorRatio: abort when the canary's failure rate exceeds this
	// many times the active's, and 1%.
	MaxErrorRatio float64
}

// minFailureRate is the failure rate below which a canary is never
// aborted automatically, however the active generation does: a few
// failures among few requests prove nothing.
const minFailureRate = 0.01

// canaryRun is a canary generation's part beside the active one.
type canaryRun struct {
	percent int
	of      uint64 // the active generation it started beside
	policy  CanaryPolicy
	// startedAt is when it started serving its share; verdictAt is when
	// the automatic verdict is due (zero: none).
	startedAt, verdictAt time.Time
	// activeBase is what the active generation had served when the
	// canary started serving: it is judged against what follows.
	activeBase counts
	// Where BPF cannot steer a listener, the canary takes some of its
	// group's sockets (slots): activePaused are those, which the active
	// generation stops accepting on while the canary runs; slots says so
	// for status, and share is the canary's share of new connections.
	activePaused map[string][]int
	slots        []string
	share        float64
}

// planSlots splits the group of each listener the canary shares with the
// active generation (no BPF): of its N sockets the canary accepts on the
// last k (percent of N, rounded, at least 1 and at most N-1), the active
// generation on the others. The share is k/N, whatever was asked.
func (c *canaryRun) planSlots(g *generation) {
	c.share = float64(c.percent)
	for _, pl := range g.plan.listeners {
		if !pl.slots {
			continue
		}
		n := len(pl.sockets)
		k := min(max(int(math.Round(float64(c.percent)*float64(n)/100)), 1), n-1)
		if g.paused == nil {
			g.paused = make(map[string][]int)
			c.activePaused = make(map[string][]int)
		}
		for i := range n {
			if i < n-k {
				g.paused[pl.spec.Name] = append(g.paused[pl.spec.Name], i)
			} else {
				c.activePaused[pl.spec.Name] = append(c.activePaused[pl.spec.Name], i)
			}
		}
		if len(c.slots) == 0 {
			c.share = 100 * float64(k) / float64(n)
		}
		c.slots = append(c.slots, fmt.Sprintf("%s: %d of %d sockets (%.0f%%)", pl.spec.Name, k, n, 100*float64(k)/float64(n)))
	}
}

// steering says how the canary gets its share, for status.
func (c *canaryRun) steering() string {
	if len(c.slots) == 0 {
		return "bpf"
	}
	return "slots (no BPF): " + strings.Join(c.slots, ", ")
}

// sendPaused tells g's workers which sockets not to accept on (g.paused).
func (s *Supervisor) sendPaused(g *generation) {
	msg := ipc.Accept{Paused: g.paused}
	if msg.Paused == nil {
		msg.Paused = map[string][]int{}
	}
	for _, sl := range g.slots {
		if sl.proc == nil {
			continue
		}
		if err := sl.proc.conn.Send(ipc.TypeAccept, msg); err != nil {
			sl.log().Warn("sending the paused sockets failed; killing worker", zap.Error(err))
			sl.proc.kill()
		}
	}
}

// counts are a generation's requests and failures (ipc.Stats).
type counts struct{ requests, failures uint64 }

// counts returns what g's workers served, those that exited included.
func (g *generation) counts() counts {
	c := g.exited
	for _, sl := range g.slots {
		c.requests += sl.stats.Requests
		c.failures += sl.stats.Failures
	}
	return c
}

func (c counts) rate() float64 {
	if c.requests == 0 {
		return 0
	}
	return float64(c.failures) / float64(c.requests)
}

// canaryBusy says why a reload cannot start while a canary runs; "" when
// none runs.
func (s *Supervisor) canaryBusy() string {
	c := s.state.canary
	if c == nil {
		return ""
	}
	return fmt.Sprintf("a canary is running (generation %d takes %d%% of new connections beside generation %d): promote or abort it first (baton promote, baton abort)", c.id, c.canary.percent, c.canary.of)
}

// startCanaryReload starts a canary reload: a new generation from the
// config on disk that takes percent of the new connections once ready.
func (s *Supervisor) startCanaryReload(ev reloadEvent) {
	st := &s.state
	h := s.newHandoff("canary", 1)
	h.replies = append(h.replies, ev.reply)
	h.Canary = &CanaryRecord{Percent: ev.canary}
	switch {
	case ev.canary < 1 || ev.canary > 99:
		s.finishHandoff(h, OutcomeRefused, fmt.Sprintf("a canary takes 1 to 99 percent of new connections, not %d", ev.canary))
		return
	case st.canary != nil:
		s.finishHandoff(h, OutcomeRefused, s.canaryBusy())
		return
	case st.active == nil || st.starting != nil || st.finishing != nil || len(st.pending) > 0:
		s.finishHandoff(h, OutcomeRefused, "a handoff is running: start the canary once it is done")
		return
	}
	cfg, err := s.opts.Load()
	if err != nil {
		s.finishHandoff(h, OutcomeRefused, err.Error())
		return
	}
	s.logWarnings(cfg)
	if cfg.ControlSocket != st.cfg.ControlSocket {
		s.finishHandoff(h, OutcomeRefused, fmt.Sprintf("controlSocket changes only at a restart: it is %s, the config says %s", st.cfg.ControlSocket, cfg.ControlSocket))
		return
	}
	s.startGeneration(cfg, h, &canaryRun{percent: ev.canary, of: st.active.id, policy: cfg.Canary})
}

// startCanary makes g, all ready, serve its share beside the active
// generation, and answers the reload that started it.
func (s *Supervisor) startCanary(g *generation) {
	st := &s.state
	now := time.Now()
	c := g.canary
	g.state = GenCanary
	st.starting = nil
	st.canary = g
	c.startedAt = now
	if c.policy.Duration > 0 {
		c.verdictAt = now.Add(c.policy.Duration)
	}
	c.activeBase = st.active.counts()
	st.sockets.steer(st.active.plan, g.plan, c.percent*10)
	if c.activePaused != nil {
		st.active.paused = c.activePaused
		s.sendPaused(st.active)
	}
	h := g.handoff
	h.ReadyMs = ms(now.Sub(h.StartedAt))
	for _, sl := range g.slots {
		h.StartupMs = max(h.StartupMs, ms(sl.readyAt.Sub(sl.startedAt)))
	}
	h.Outcome = OutcomeCanary
	h.DurationMs = ms(now.Sub(h.StartedAt))
	// Reloads that arrived while it started are refused as any during a
	// canary: promote or abort first.
	for _, ev := range st.pending {
		ph := s.newHandoff(ev.trigger, 1)
		ph.replies = append(ph.replies, ev.reply)
		s.finishHandoff(ph, OutcomeRefused, s.canaryBusy())
	}
	st.pending = nil
	g.log.Info("canary serving", zap.Int("percent", c.percent), zap.Float64("share", c.share), zap.String("steering", c.steering()), zap.Uint64("beside", c.of), zap.Int64("readyMs", h.ReadyMs), zap.Duration("autoVerdictIn", c.policy.Duration))
	h.answer()
}

// canaryVerdict ends the running canary: promote makes it the active
// generation, abort drains it. by says who decided ("operator", "auto",
// "stop"), reason why. The handoff that started the canary records it.
func (s *Supervisor) canaryVerdict(promote bool, by, reason string, reply chan Handoff) {
	st := &s.state
	g := st.canary
	if g == nil {
		verb := "abort"
		if promote {
			verb = "promote"
		}
		h := s.newHandoff(verb, 1)
		h.replies = append(h.replies, reply)
		s.finishHandoff(h, OutcomeRefused, "no canary is running")
		return
	}
	st.canary = nil
	c := g.canary
	h := g.handoff
	h.replies = append(h.replies, reply)
	h.Canary.By = by
	h.Canary.DecidedAt = time.Now()
	cc, ac := g.counts(), st.active.counts()
	h.Canary.Requests, h.Canary.Failures = cc.requests, cc.failures
	h.Canary.ActiveRequests, h.Canary.ActiveFailures = ac.requests-c.activeBase.requests, ac.failures-c.activeBase.failures
	old := st.active
	if promote {
		h.Canary.Verdict = "promoted"
		g.state = GenActive
		st.active = g
		st.cfg = g.cfg
		st.sockets.commit(g.plan)
		st.sockets.steer(g.plan, nil, 0)
		if g.paused != nil {
			g.paused = nil
			s.sendPaused(g)
		}
		old.drainedBy = h
		s.drain(old, fmt.Sprintf("canary generation %d promoted (%s): %s", g.id, by, reason), time.Now().Add(g.cfg.DrainTimeout))
		s.finishAfterStop(h, OutcomeOK, reason, old)
	} else {
		h.Canary.Verdict = "aborted"
		st.sockets.steer(old.plan, nil, 0)
		if old.paused != nil {
			old.paused = nil
			s.sendPaused(old)
		}
		g.drainedBy = h
		s.drain(g, fmt.Sprintf("canary aborted (%s): %s", by, reason), time.Now().Add(g.cfg.DrainTimeout))
		s.finishAfterStop(h, OutcomeAborted, reason, g)
	}
	s.runPending()
}

// judgeCanary gives the automatic verdict when it is due: abort as soon as
// the canary fails too often (once it has served MinRequests), promote
// when Duration has passed and it has not.
func (s *Supervisor) judgeCanary(now time.Time) {
	st := &s.state
	g := st.canary
	if g == nil || g.canary.verdictAt.IsZero() {
		return
	}
	c := g.canary
	cc, ac := g.counts(), st.active.counts()
	ac.requests -= c.activeBase.requests
	ac.failures -= c.activeBase.failures
	if cc.requests >= c.policy.MinRequests {
		if limit := max(c.policy.MaxErrorRatio*ac.rate(), minFailureRate); cc.rate() > limit {
			s.canaryVerdict(false, "auto", fmt.Sprintf("the canary failed %d of %d requests (%.2f%%), more than %g× the active generation's %.2f%% (%d of %d) and %.0f%%",
				cc.failures, cc.requests, 100*cc.rate(), c.policy.MaxErrorRatio, 100*ac.rate(), ac.failures, ac.requests, 100*minFailureRate), nil)
			return
		}
	}
	if now.Before(c.verdictAt) {
		return
	}
	if cc.requests < c.policy.MinRequests {
		s.canaryVerdict(false, "auto", fmt.Sprintf("only %d requests reached the canary in %s (minRequests %d): not judged, so not promoted",
			cc.requests, c.policy.Duration, c.policy.MinRequests), nil)
		return
	}
	s.canaryVerdict(true, "auto", fmt.Sprintf("healthy for %s: the canary failed %d of %d requests (%.2f%%), the active generation %d of %d (%.2f%%)",
		c.policy.Duration, cc.failures, cc.requests, 100*cc.rate(), ac.failures, ac.requests, 100*ac.rate()), nil)
}

// canaryStatus describes the running canary, if any.
func (s *Supervisor) canaryStatus(now time.Time) *CanaryStatus {
	st := &s.state
	g := st.canary
	if g == nil {
		return nil
	}
	c := g.canary
	cc, ac := g.counts(), st.active.counts()
	cs := &CanaryStatus{
		Generation:       g.id,
		ActiveGeneration: st.active.id,
		Percent:          c.percent,
		Share:            c.share,
		Steering:         c.steering(),
		Handoff:          g.handoff.ID,
		StartedAt:        c.startedAt,
		Requests:         cc.requests,
		Failures:         cc.failures,
		ActiveRequests:   ac.requests - c.activeBase.requests,
		ActiveFailures:   ac.failures - c.activeBase.failures,
	}
	if !c.verdictAt.IsZero() {
		left := max(ms(c.verdictAt.Sub(now)), 0)
		cs.AutoVerdictInMs = &left
		cs.MinRequests = c.policy.MinRequests
		cs.MaxErrorRatio = c.policy.MaxErrorRatio
	}
	return cs
}
