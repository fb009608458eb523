package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/internal/epollset"
	"github.com/baton-proxy/baton/supervisor"
)

// TestSocketActivation starts baton as systemd would with a socket unit:
// the listening socket already open as descriptor 3, named in
// $LISTEN_FDNAMES, for the pid in $LISTEN_PID. baton adopts it for the
// listener of that name instead of binding its own.
func TestSocketActivation(t *testing.T) {
	be := startBackend(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // baton holds the socket from now on, through lf's descriptor
	defer lf.Close()
	// The config's address is another one: the name decides.
	cfg := strings.Replace(options{}.configYAML(be), `address: "127.0.0.1:0"`, `address: "127.0.0.1:1"`, 1)
	b := harness.StartWith(t, batonBin, cfg, func(cmd *exec.Cmd) {
		// systemd sets LISTEN_PID after forking; sh's exec keeps the pid.
		args := strings.Join(cmd.Args, " ")
		cmd.Args = []string{"sh", "-c", "LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=web exec " + args}
		cmd.Path, _ = exec.LookPath("sh")
		cmd.ExtraFiles = []*os.File{lf}
	})
	if got := b.Address("web"); got != addr {
		t.Fatalf("listener web on %s, want the activated socket's %s", got, addr)
	}
	// The supervisor holds the socket (descriptor 3) without watching it:
	// in its runtime's poller it would wake at every connection.
	watched, err := epollset.Watched(b.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if watched[3] {
		t.Errorf("the supervisor's epoll set watches the activated socket (descriptor 3)")
	}
	getOK(t, http.DefaultClient, "http://"+addr+"/")
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("handoff: %+v", h)
	}
	getOK(t, http.DefaultClient, "http://"+addr+"/")
}

// notifySocket is a systemd stand-in: a real datagram socket that baton
// finds in $NOTIFY_SOCKET; Next returns the notifications in order.
type notifySocket struct {
	path      string
	got       chan string
	watchdogs int // WATCHDOG=1 pings expect skipped
}

func newNotifySocket(t *testing.T) *notifySocket {
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &notifySocket{path: path, got: make(chan string, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			n.got <- string(buf[:k])
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return n
}

// expect waits for the next notification that has every one of keys (and
// skips watchdog pings), failing after a deadline.
func (n *notifySocket) expect(t *testing.T, what string, keys ...string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m := <-n.got:
			if m == "WATCHDOG=1\n" {
				n.watchdogs++
				continue
			}
			for _, k := range keys {
				if !strings.Contains(m, k) {
					t.Fatalf("%s: got notification %q, want %v", what, m, keys)
				}
			}
			return m
		case <-deadline:
			t.Fatalf("%s: no notification with %v", what, keys)
			return ""
		}
	}
}

// TestSystemdNotify runs baton with $NOTIFY_SOCKET on a real datagram
// socket, under load: READY=1 once the first generation serves;
// RELOADING=1 (with MONOTONIC_USEC) then READY=1 for every reload, ok,
// failed or refused; after an upgrade, MAINPID= of the new supervisor with
// its READY=1; STOPPING=1 on stop; WATCHDOG=1 pings with $WATCHDOG_USEC.
func TestSystemdNotify(t *testing.T) {
	be := startBackend(t)
	n := newNotifySocket(t)
	good := options{workers: 2, reusePort: true}.configYAML(be)
	b := harness.StartWith(t, batonBin, good, func(cmd *exec.Cmd) {
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+n.path, "WATCHDOG_USEC=100000")
	})
	n.expect(t, "start", "READY=1", "STATUS=generation 1 serving")
	stop := background(t, b, false)

	b.SIGHUP()
	n.expect(t, "reload", "RELOADING=1", "MONOTONIC_USEC=")
	n.expect(t, "reload done", "READY=1", "(signal): ok")

	b.WriteConfig(good + "nonsense: 1\n")
	b.SIGHUP()
	n.expect(t, "refused reload", "RELOADING=1")
	n.expect(t, "refused reload done", "READY=1", "(signal): refused")
	b.WriteConfig(good)

	replaceBinary(t, b, "exit 3")
	b.SIGHUP()
	n.expect(t, "failed reload", "RELOADING=1")
	n.expect(t, "failed reload done", "READY=1", "(signal): failed")
	restoreBinary(t, b)

	if out, err := b.Ctl("upgrade"); err != nil {
		t.Fatalf("upgrade: %v %s", err, out)
	}
	m := n.expect(t, "upgrade", "MAINPID=", "READY=1")
	st := b.Status()
	if !strings.Contains(m, fmt.Sprintf("MAINPID=%d\n", st.PID)) || st.PID == b.Cmd.Process.Pid {
		t.Errorf("upgrade: notification %q, new supervisor pid %d (old %d)", m, st.PID, b.Cmd.Process.Pid)
	}
	noFailures(t, stop())
	waitFor(t, 30*time.Second, "the old supervisor to exit", func() bool {
		select {
		case <-b.Exited:
			return true
		default:
			return false
		}
	})
	if out, err := b.Ctl("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	n.expect(t, "stop", "STOPPING=1")
	waitFor(t, 30*time.Second, "the new supervisor to exit", func() bool { return gone(st.PID) })
	if n.watchdogs == 0 {
		t.Error("no WATCHDOG=1 ping with WATCHDOG_USEC=100000")
	}
	if strings.Count(b.Logs.String(), "systemd notification") > 0 {
		t.Errorf("a notification failed:\n%s", b.Logs)
	}
}
