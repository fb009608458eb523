package integration

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

	st := upgrade(t, b)
	if b.ExitErr != nil {
		t.Errorf("the old supervisor exited with %v", b.ExitErr)
	}
	newPID := st.PID
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

// TestUpgradeLeavesNothingBehind: after `baton upgrade`, a listener removed
// by a reload is closed for good (a connection is refused, not queued where
// nobody serves) and can be added back; generation numbers and the handoff
// history go on across the upgrade; and failed upgrades leave no descriptor
// behind (issue 8, problem 5).
func TestUpgradeLeavesNothingBehind(t *testing.T) {
	be := startBackend(t)
	extraAddr := freePort(t)
	base := options{workers: 1}.configYAML(be)
	withExtra := base + fmt.Sprintf("  - listener: extra\n    backend: app\n")
	withExtra = strings.Replace(withExtra, "listeners:\n", fmt.Sprintf("listeners:\n  - name: extra\n    address: %q\n", extraAddr), 1)
	b := startBaton(t, withExtra)
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload: %v %s", err, out)
	}
	before := b.Status()
	oldPID := b.Cmd.Process.Pid

	// Failed upgrades first: the binary on disk exits at once.
	good, err := os.ReadFile(b.Bin)
	if err != nil {
		t.Fatal(err)
	}
	fds := func(pid int) int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	replaceBinary(t, b, "exit 3")
	n0 := fds(oldPID)
	for i := range 20 {
		if out, err := b.Ctl("upgrade"); err == nil {
			t.Fatalf("upgrade %d to a broken binary succeeded: %s", i, out)
		}
	}
	if n := fds(oldPID); n > n0 {
		t.Errorf("20 failed upgrades: the supervisor holds %d descriptors, %d before", n, n0)
	}
	t.Logf("descriptors before and after 20 failed upgrades: %d, %d", n0, fds(oldPID))
	tmp := b.Bin + ".good"
	if err := os.WriteFile(tmp, good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, b.Bin); err != nil {
		t.Fatal(err)
	}

	after := upgrade(t, b)
	last := after.Handoffs[len(after.Handoffs)-1]
	if last.Trigger != "upgrade" || last.From != before.ActiveGeneration || after.ActiveGeneration <= before.ActiveGeneration || last.ID <= before.Handoffs[len(before.Handoffs)-1].ID {
		t.Errorf("after the upgrade: active %d (was %d), last handoff %+v; want generation numbers and handoff ids to go on, trigger upgrade", after.ActiveGeneration, before.ActiveGeneration, last)
	}
	if len(after.Handoffs) < len(before.Handoffs) || after.Totals.Requests < before.Totals.Requests {
		t.Errorf("history or totals lost across the upgrade: %d handoffs (was %d), %d requests (was %d)", len(after.Handoffs), len(before.Handoffs), after.Totals.Requests, before.Totals.Requests)
	}

	// Remove the extra listener in the new supervisor: it closes for good.
	b.WriteConfig(base)
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload without the extra listener: %v %s", err, out)
	}
	waitFor(t, 30*time.Second, "the removed listener to refuse connections", func() bool {
		c, err := net.DialTimeout("tcp", extraAddr, time.Second)
		if err != nil {
			return errors.Is(err, syscall.ECONNREFUSED)
		}
		c.Close()
		return false
	})
	// And add it back.
	b.WriteConfig(withExtra)
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload adding the listener back: %v %s", err, out)
	}
	getOK(t, http.DefaultClient, "http://"+extraAddr+"/")
}

// TestUpgradeRefusedAsPID1 runs baton as PID 1 of its own PID namespace,
// as a container's init: `baton upgrade` is refused with the reason (the
// old supervisor's exit would end the container), and baton serves on.
func TestUpgradeRefusedAsPID1(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare (util-linux) for a PID namespace")
	}
	be := startBackend(t)
	dir := t.TempDir()
	cfg := strings.ReplaceAll(options{}.configYAML(be), "@DIR@", dir)
	path := filepath.Join(dir, "baton.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--kill-child", batonBin, "run", "--config", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when unshare has exited
	go func() {
		cmd.Wait()
		close(exited)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Errorf("unshare did not exit after SIGKILL")
			}
		}
	}()
	sock := filepath.Join(dir, "run", "control.sock")
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(batonBin, append(args, "--socket", sock)...).CombinedOutput()
		return string(out), err
	}
	waitFor(t, 30*time.Second, "baton as PID 1 to serve", func() bool {
		out, err := ctl("status", "-o", "json")
		return err == nil && strings.Contains(out, `"pid": 1,`)
	})
	out, err := ctl("upgrade")
	if err == nil || !strings.Contains(out, "PID 1") {
		t.Fatalf("baton upgrade as PID 1: %v %s; want it refused with the reason", err, out)
	}
	if out, err := ctl("reload"); err != nil {
		t.Fatalf("reload as PID 1 after the refused upgrade: %v %s", err, out)
	}
	if out, err := ctl("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("baton as PID 1 did not stop")
	}
}

// upgrade runs `baton upgrade` on b, waits for the old supervisor to exit,
// and returns the new one's status; the new supervisor is stopped when the
// test ends.
func upgrade(t *testing.T, b *batonProc) *supervisor.Status {
	t.Helper()
	if out, err := b.Ctl("upgrade"); err != nil || !strings.Contains(out, "upgrade ok") {
		t.Fatalf("baton upgrade: %v %s\n%s", err, out, b.Logs)
	}
	waitFor(t, 60*time.Second, "the old supervisor to exit", func() bool {
		select {
		case <-b.Exited:
			return true
		default:
			return false
		}
	})
	st := b.Status()
	t.Cleanup(func() {
		if !gone(st.PID) {
			b.Ctl("stop")
			waitFor(t, 60*time.Second, "the new supervisor to stop", func() bool { return gone(st.PID) })
		}
	})
	return st
}
