package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestForeignControlDirIsRefused: a control socket directory that another
// user pre-created (as /tmp/baton-UID can be) is refused at start, with the
// reason, instead of trusted (issue 8, problem 7).
func TestForeignControlDirIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a directory another user owns")
	}
	be := startBackend(t)
	dir := t.TempDir()
	ctl := filepath.Join(dir, "ctl")
	if err := os.Mkdir(ctl, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ctl, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(options{}.configYAML(be), "@DIR@/run/control.sock", ctl+"/control.sock", 1)
	path := filepath.Join(dir, "baton.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(batonBin, "run", "--config", path)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("baton started with another user's control directory")
	}
	if err == nil || !strings.Contains(string(out), "owned by uid 65534") {
		t.Fatalf("baton run: %v\n%s\nwant it refused, naming the owner", err, out)
	}
}

// TestControlSocketOutlivesEMFILE runs the supervisor out of descriptors
// while clients crowd its control socket: accepts fail with EMFILE, and
// once descriptors are free again status answers (issue 8, problem 4: one
// EMFILE used to end the control loop for good).
func TestControlSocketOutlivesEMFILE(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{}.configYAML(be))
	pid := b.Cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	tight := unix.Rlimit{Cur: uint64(len(fds) + 2), Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &tight, nil); err != nil {
		t.Fatal(err)
	}
	restore := func() { unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil) }
	defer restore()
	var crowd []net.Conn
	for range 10 {
		c, err := net.Dial("unix", b.Socket)
		if err != nil {
			t.Fatal(err)
		}
		crowd = append(crowd, c)
	}
	waitFor(t, 20*time.Second, "the supervisor to hit EMFILE", func() bool {
		return strings.Contains(b.Logs.String(), "too many open files")
	})
	for _, c := range crowd {
		c.Close()
	}
	// Still at the tight limit: only the crowd's descriptors came back.
	waitFor(t, 20*time.Second, "status after EMFILE", func() bool {
		_, err := b.TryStatus()
		return err == nil
	})
	restore()
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload after EMFILE: %v: %s", err, out)
	}
}
