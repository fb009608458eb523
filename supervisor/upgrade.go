package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/baton-proxy/baton/internal/sockfd"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
)

// controlFile names the control socket for a self-upgrade.
const controlFileName = "control"

// controlListener returns the control socket: the previous supervisor's
// after a self-upgrade, else a new one.
func (s *Supervisor) controlListener(path string) (*net.UnixListener, error) {
	if upg := s.opts.Upgrader; upg != nil && upg.HasParent() {
		f, err := upg.File(controlFileName)
		if err != nil {
			return nil, fmt.Errorf("inherit control socket: %w", err)
		}
		if f != nil {
			defer f.Close()
			ln, err := net.FileListener(f)
			if err != nil {
				return nil, fmt.Errorf("inherit control socket: %w", err)
			}
			ul, ok := ln.(*net.UnixListener)
			if !ok {
				ln.Close()
				return nil, fmt.Errorf("inherited control socket is not a unix listener")
			}
			ul.SetUnlinkOnClose(true) // ours to remove now
			return ul, nil
		}
	}
	ln, lock, err := listenControl(path)
	if err != nil {
		return nil, err
	}
	s.ctlLock = lock
	return ln, nil
}

// handleUpgrade lends every socket, the control socket and the loop's
// history to the Upgrader, which starts the next supervisor; the loop goes
// on meanwhile and learns the outcome as an event. The lent descriptors are
// duplicates, closed once the Upgrader returns: a failed upgrade leaves
// nothing behind.
func (s *Supervisor) handleUpgrade(reply chan error) {
	st := &s.state
	answer := func(err error) {
		if reply != nil {
			reply <- err
		}
	}
	upg := s.opts.Upgrader
	switch {
	case upg == nil:
		answer(ErrNoUpgrader)
		return
	case st.stopping:
		answer(ErrStopping)
		return
	case st.upgrading || st.starting != nil || st.finishing != nil || !st.ready:
		answer(ErrUpgrading)
		return
	case st.canary != nil:
		answer(errors.New(s.canaryBusy()))
		return
	case os.Getpid() == 1:
		answer(ErrPID1)
		return
	}
	lent := make(map[string]*os.File)
	closeLent := func() {
		for _, f := range lent {
			f.Close()
		}
	}
	for name, f := range st.sockets.files() {
		d, err := sockfd.Dup(f, f.Name())
		if err != nil {
			closeLent()
			answer(fmt.Errorf("upgrade: lend %s: %w", name, err))
			return
		}
		lent[name] = d
	}
	ctl, err := s.controlFile()
	if err != nil {
		closeLent()
		answer(fmt.Errorf("upgrade: %w", err))
		return
	}
	lent[controlFileName] = ctl
	state, err := json.Marshal(s.upgradeState())
	if err != nil {
		closeLent()
		answer(fmt.Errorf("upgrade: %w", err))
		return
	}
	st.upgrading = true
	s.log.Info("upgrading: starting the next supervisor", zap.Int("sockets", len(lent)-1))
	s.owned.Add(1)
	go func() {
		defer s.owned.Done()
		err := upg.Upgrade(lent, state)
		closeLent()
		s.send(upgradeDone{err: err, reply: reply})
	}()
}

// upgradeState is what a supervisor hands to the next at an upgrade, so
// that generation numbers, the handoff history and the lifetime counters
// go on across it.
type upgradeState struct {
	NextGeneration   uint64                         `json:"nextGeneration"`
	ActiveGeneration uint64                         `json:"activeGeneration"`
	HandoffSeq       int                            `json:"handoffSeq"`
	Handoffs         []Handoff                      `json:"handoffs"`
	Outcomes         map[Outcome]uint64             `json:"outcomes"`
	Totals           ipc.Stats                      `json:"totals"`
	Backends         map[string]ipc.BackendCounters `json:"backends,omitempty"`
	// TicketKeys keep TLS sessions resumable across the upgrade.
	TicketKeys     [][]byte  `json:"ticketKeys,omitempty"`
	TicketRotateAt time.Time `json:"ticketRotateAt"`
}

// upgradeState captures the loop's history; the counters of workers still
// running count as they are now (the old supervisor sees the rest).
func (s *Supervisor) upgradeState() upgradeState {
	st := &s.state
	snap := s.snapshot(false)
	us := upgradeState{
		NextGeneration:   st.nextGen,
		ActiveGeneration: snap.ActiveGeneration,
		HandoffSeq:       st.handoffSeq,
		Handoffs:         snap.Handoffs,
		Outcomes:         st.outcomes,
		Totals: ipc.Stats{
			Accepted:   snap.Totals.Accepted,
			Requests:   snap.Totals.Requests,
			Errors:     snap.Totals.Errors,
			LogDropped: snap.Totals.LogDropped,

			TLSHandshakeErrors:  snap.Totals.TLSHandshakeErrors,
			ProxyProtocolErrors: snap.Totals.ProxyProtocolErrors,
			Series:              snap.Totals.Series,
		},
		Backends:       snap.Totals.Backends,
		TicketKeys:     st.ticketKeys,
		TicketRotateAt: st.ticketRotateAt,
	}
	return us
}

// takeUpgradeState seeds the loop with what the previous supervisor handed
// over, and returns the generation that served there.
func (s *Supervisor) takeUpgradeState() uint64 {
	upg := s.opts.Upgrader
	if upg == nil || !upg.HasParent() || upg.State() == nil {
		return 0
	}
	var us upgradeState
	if err := json.Unmarshal(upg.State(), &us); err != nil {
		s.log.Warn("upgrade: the previous supervisor's state is unreadable; history starts anew", zap.Error(err))
		return 0
	}
	st := &s.state
	st.nextGen = us.NextGeneration
	st.handoffSeq = us.HandoffSeq
	for _, h := range us.Handoffs {
		st.handoffs = append(st.handoffs, &handoff{Handoff: h})
	}
	for o, n := range us.Outcomes {
		st.outcomes[o] = n
	}
	// The log destination's drops are each process's own: not carried.
	st.retired = ipc.Stats{Accepted: us.Totals.Accepted, Requests: us.Totals.Requests, Errors: us.Totals.Errors,
		TLSHandshakeErrors: us.Totals.TLSHandshakeErrors, ProxyProtocolErrors: us.Totals.ProxyProtocolErrors}
	for name, c := range us.Backends {
		st.retiredBackends[name] = c
	}
	st.retiredSeries.Add(us.Totals.Series...)
	if len(us.TicketKeys) > 0 {
		st.ticketKeys, st.ticketRotateAt = us.TicketKeys, us.TicketRotateAt
	}
	return us.ActiveGeneration
}

func (s *Supervisor) handleUpgradeDone(ev upgradeDone) {
	s.state.upgrading = false
	if ev.err != nil {
		s.log.Error("upgrade failed; this supervisor goes on", zap.Error(ev.err))
	} else {
		s.log.Info("upgrade done: the next supervisor serves; draining")
	}
	if ev.reply != nil {
		ev.reply <- ev.err
	}
}

// handleUpgraded drains everything once the next supervisor has taken
// over. The control socket is the next supervisor's now: this one stops
// answering on it (and leaves its path).
func (s *Supervisor) handleUpgraded() {
	s.state.upgraded = true
	s.ctl.SetUnlinkOnClose(false)
	s.ctl.Close()
	s.handleStop(false)
}

// controlFile returns a close-on-exec duplicate of the control socket's
// descriptor. Not UnixListener.File: the *os.File that returns switches
// the socket to blocking mode when exec passes it on (its Fd method),
// and the mode is the socket's, shared with this process's own accept
// loop, which would then block in accept(2) and hold up Close.
func (s *Supervisor) controlFile() (*os.File, error) {
	if s.ctl == nil {
		return nil, fmt.Errorf("no control socket")
	}
	return sockfd.Dup(s.ctl, "control")
}
