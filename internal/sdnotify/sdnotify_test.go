package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNotifyOverADatagramSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	n := FromEnv()
	if err := n.Notify(Reloading, Monotonic()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	ln.SetReadDeadline(time.Now().Add(5 * time.Second))
	k, err := ln.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(buf[:k])
	if !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("datagram %q", got)
	}
	var none *Notifier
	if err := none.Notify(Ready); err != nil {
		t.Fatalf("a nil Notifier: %v", err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "4000000")
	t.Setenv("WATCHDOG_PID", "")
	if d := WatchdogInterval(); d != 2*time.Second {
		t.Fatalf("WatchdogInterval = %s, want 2s", d)
	}
	t.Setenv("WATCHDOG_PID", "1")
	if d := WatchdogInterval(); d != 0 {
		t.Fatalf("another process's watchdog: %s, want 0", d)
	}
}
