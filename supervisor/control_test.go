package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestControlDirMustBeOurs: a control socket directory that another user
// owns, or that others may write to, lets them swap the socket and answer
// for baton (issue 8, problem 7): baton refuses to start with it.
func TestControlDirMustBeOurs(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, mode) // past the umask
		return d
	}
	ok := mk("ok", 0o700)
	if err := checkControlDir(ok); err != nil {
		t.Fatalf("own 0700 directory: %v", err)
	}
	if err := checkControlDir(mk("shared", 0o755)); err != nil {
		t.Fatalf("own 0755 directory (systemd's RuntimeDirectory default): %v", err)
	}
	if err := checkControlDir(mk("open", 0o777)); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Fatalf("world-writable directory: %v", err)
	}
	link := filepath.Join(base, "link")
	os.Symlink(ok, link)
	if err := checkControlDir(link); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("symlink: %v", err)
	}
	if os.Geteuid() == 0 {
		theirs := mk("theirs", 0o700)
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := checkControlDir(theirs); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("another user's directory: %v", err)
		}
		if _, _, err := listenControl(filepath.Join(theirs, "control.sock")); err == nil {
			t.Fatal("listenControl took another user's directory")
		}
	}
}
