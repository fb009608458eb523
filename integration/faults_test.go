package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
