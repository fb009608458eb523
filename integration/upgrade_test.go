package integration

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/supervisor"
)

// TestSupervisorUpgradeUnderLoad replaces the supervisor itself (`baton
// upgrade`) while clients load it: the new supervisor inherits the sockets
// and the control socket, its workers take over, the old supervisor drains
// and exits, and no request fails. The new one then reloads and stops like
// the first.
func TestSupervisorUpgradeUnderLoad(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, tcp: true}.configYAML(be))
	oldPID := b.Cmd.Process.Pid
	stop := background(t, b, true)

	if out, err := b.Ctl("upgrade"); err != nil || !strings.Contains(out, "upgrade ok") {
		t.Fatalf("baton upgrade: %v %s", err, out)
	}
	var newPID int
	t.Cleanup(func() {
		if newPID != 0 && !gone(newPID) {
			b.Ctl("stop")
			waitFor(t, 60*time.Second, "the new supervisor to stop", func() bool { return gone(newPID) })
		}
	})
	waitFor(t, 60*time.Second, "the old supervisor to exit", func() bool {
		select {
		case <-b.Exited:
			return true
		default:
			return false
		}
	})
	if b.ExitErr != nil {
		t.Errorf("the old supervisor exited with %v", b.ExitErr)
	}
	st := b.Status()
	newPID = st.PID
	if newPID == oldPID || st.ActiveGeneration == 0 {
		t.Fatalf("after the upgrade: pid %d (old %d), active generation %d", newPID, oldPID, st.ActiveGeneration)
	}

	// The new supervisor reloads on SIGHUP like the old one.
	last := st.Handoffs[len(st.Handoffs)-1].ID
	if err := syscall.Kill(newPID, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "a handoff in the new supervisor", func() bool {
		hs := b.Status().Handoffs
		h := hs[len(hs)-1]
		return h.ID > last && h.Outcome == supervisor.OutcomeOK
	})
	noFailures(t, stop())

	workers := b.ActiveWorkers()
	if out, err := b.Ctl("stop"); err != nil {
		t.Fatalf("stop the new supervisor: %v %s", err, out)
	}
	waitFor(t, 60*time.Second, "the new supervisor to exit", func() bool { return gone(newPID) })
	for _, w := range workers {
		if !gone(w.PID) && isBatonWorker(w.PID) {
			t.Errorf("worker %d outlived the new supervisor", w.PID)
		}
	}
	if _, err := os.Stat(b.Socket); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}

// gone reports whether pid has exited: it no longer exists, or is a zombie
// waiting for a parent that is not us.
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}
