package supervisor

import (
	"fmt"
	"net"
	"os"

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
	return listenControl(path)
}

// handleUpgrade hands every socket to the Upgrader and starts the next
// supervisor; the loop goes on meanwhile and learns the outcome as an
// event.
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
	case st.upgrading || st.starting != nil || !st.ready:
		answer(ErrUpgrading)
		return
	}
	files := st.sockets.files()
	ctl, err := s.controlFile()
	if err != nil {
		answer(fmt.Errorf("upgrade: %w", err))
		return
	}
	defer ctl.Close() // AddFile keeps its own duplicate
	files[controlFileName] = ctl
	for name, f := range files {
		if err := upg.AddFile(name, f); err != nil {
			answer(fmt.Errorf("upgrade: hand over %s: %w", name, err))
			return
		}
	}
	st.upgrading = true
	s.log.Info("upgrading: starting the next supervisor", zap.Int("sockets", len(files)-1))
	s.owned.Add(1)
	go func() {
		defer s.owned.Done()
		s.send(upgradeDone{err: upg.Upgrade(), reply: reply})
	}()
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

// controlFile returns a duplicate of the control socket's descriptor.
func (s *Supervisor) controlFile() (*os.File, error) {
	if s.ctl == nil {
		return nil, fmt.Errorf("no control socket")
	}
	return s.ctl.File()
}
