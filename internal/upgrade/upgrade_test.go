package upgrade

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFailedUpgradeLeavesNothing starts a "new process" that exits at once:
// Upgrade fails promptly with ErrExited, and no descriptor is left open.
func TestFailedUpgradeLeavesNothing(t *testing.T) {
	script := filepath.Join(t.TempDir(), "fail")
	os.WriteFile(script, []byte("#!/bin/sh\nexit 3\n"), 0o755)
	u := &Upgrader{opts: Options{Binary: script, Timeout: 10 * time.Second}, ready: true, exit: make(chan struct{})}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := func() int {
		ents, _ := os.ReadDir("/proc/self/fd")
		return len(ents)
	}
	n0 := count()
	for range 5 {
		start := time.Now()
		err := u.Upgrade(map[string]*os.File{"null": f}, []byte(`{"x":1}`))
		if !errors.Is(err, ErrExited) {
			t.Fatalf("Upgrade to a binary that exits: %v, want ErrExited", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a failed upgrade took %s", d)
		}
	}
	if n := count(); n != n0 {
		t.Errorf("descriptors: %d before, %d after 5 failed upgrades", n0, n)
	}
	select {
	case <-u.Exit():
		t.Fatal("Exit closed after failed upgrades")
	default:
	}
}

// TestUpgradeTimeout: a new process that never says ready is killed at the
// timeout, and reaped.
func TestUpgradeTimeout(t *testing.T) {
	script := filepath.Join(t.TempDir(), "hang")
	os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755)
	u := &Upgrader{opts: Options{Binary: script, Timeout: 200 * time.Millisecond}, ready: true, exit: make(chan struct{})}
	start := time.Now()
	if err := u.Upgrade(nil, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Upgrade to a binary that never gets ready: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the timed-out upgrade returned after %s", d)
	}
}

// TestUpgradeSucceeds: a new process that says ready (one byte on its
// descriptor 3) makes Upgrade return nil and closes Exit.
func TestUpgradeSucceeds(t *testing.T) {
	script := filepath.Join(t.TempDir(), "ok")
	os.WriteFile(script, []byte("#!/bin/sh\nprintf x >&3\nexec sleep 5\n"), 0o755)
	u := &Upgrader{opts: Options{Binary: script, Timeout: 10 * time.Second}, ready: true, exit: make(chan struct{})}
	if err := u.Upgrade(nil, nil); err != nil {
		t.Fatalf("Upgrade: %v", err)
	}
	select {
	case <-u.Exit():
	default:
		t.Fatal("Exit not closed after a successful upgrade")
	}
}
