package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/integration/internal/load"
	"github.com/baton-proxy/baton/supervisor"
)

// fdLinks returns what each descriptor of pid points to.
func fdLinks(t *testing.T, pid int) map[string]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]string)
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			m[e.Name()] = l
		}
	}
	return m
}

func sockets(links map[string]string) map[string]bool {
	s := make(map[string]bool)
	for _, l := range links {
		if strings.HasPrefix(l, "socket:") {
			s[l] = true
		}
	}
	return s
}

// TestWorkerHoldsOnlyItsDescriptors checks that an idle worker holds its
// listener sockets and its supervisor socket and nothing else of the
// supervisor's: not the control socket, not another worker's socket. And
// that the supervisor's own descriptors do not grow across reloads.
func TestWorkerHoldsOnlyItsDescriptors(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, sockets: 2, tcp: true}.configYAML(be))
	sup := b.Cmd.Process.Pid
	for range 3 {
		b.SIGHUP()
	}
	waitDrained(t, b, 30*time.Second)
	supFDs := fdLinks(t, sup)
	supSockets := sockets(supFDs)
	workers := b.ActiveWorkers()
	seen := make(map[string]int)
	for _, w := range workers {
		links := fdLinks(t, w.PID)
		socks := sockets(links)
		// Two listeners of two sockets each (the slot's own, and the
		// other slot's, which it helps with), and the supervisor socket:
		// five sockets.
		if len(socks) != 5 {
			t.Errorf("worker %d holds %d sockets, want 5 (2 listeners of 2 + ipc): %v", w.PID, len(socks), links)
		}
		shared := 0
		for s := range socks {
			seen[s]++
			if supSockets[s] {
				shared++ // a listener, which the supervisor holds too
			}
		}
		if shared != 4 {
			t.Errorf("worker %d shares %d sockets with the supervisor, want its 2 listeners' 4", w.PID, shared)
		}
		for fd, l := range links {
			switch {
			case fd == "0" || fd == "1" || fd == "2":
			case strings.HasPrefix(l, "socket:"), strings.HasPrefix(l, "anon_inode:"):
			case strings.HasPrefix(l, "/sys/fs/cgroup/"): // the Go runtime reads its CPU limit
			default:
				t.Errorf("worker %d holds fd %s -> %s", w.PID, fd, l)
			}
		}
	}
	for s, n := range seen {
		if n > 1 && !supSockets[s] {
			t.Errorf("two workers share %s, which is not a listener", s)
		}
	}

	// Reloads must not leak descriptors in the supervisor.
	for range 10 {
		b.SIGHUP()
	}
	// (The first count may include a control connection being closed.)
	waitFor(t, 30*time.Second, "descriptors back to their count", func() bool {
		return len(fdLinks(t, sup)) <= len(supFDs)
	})
}

// binaryPages sums the size and the resident part (KiB) of pid's
// read-only mappings of its own executable (/proc/PID/smaps).
func binaryPages(t *testing.T, pid int) (size, rss int) {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	mine := false
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && strings.Contains(f[0], "-"):
			mine = f[1][1] != 'w' && strings.HasSuffix(strings.TrimSpace(line), exe)
		case mine && len(f) >= 2 && f[0] == "Size:":
			n, _ := strconv.Atoi(f[1])
			size += n
		case mine && len(f) >= 2 && f[0] == "Rss:":
			n, _ := strconv.Atoi(f[1])
			rss += n
		}
	}
	return size, rss
}

// TestSupervisorMapsLittleOfItsBinary: after its handoffs, the supervisor
// holds mapped only what it runs of the binary, not what start-up and
// fault-around mapped (internal/selfmap): 60-66% of the binary's
// read-only pages before, 14.6 of the 17.6 MiB of RSS of a process whose
// own memory is 3.
func TestSupervisorMapsLittleOfItsBinary(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2}.configYAML(be))
	b.SIGHUP()
	waitDrained(t, b, 30*time.Second)
	size, rss := binaryPages(t, b.Cmd.Process.Pid)
	t.Logf("supervisor: %d KiB of the binary's %d KiB read-only mappings resident", rss, size)
	if size == 0 || rss > size/2 {
		t.Fatalf("supervisor maps %d KiB of its binary's %d KiB read-only pages, want at most half", rss, size)
	}
}

func TestStopIsGracefulThenImmediate(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, drainTimeout: "5m", tcp: true}.configYAML(be))
	workers := b.ActiveWorkers()
	// A stream that would keep a draining worker busy for minutes.
	done := make(chan *load.Result, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- load.Run(ctx, load.Config{TCPAddr: b.Address("echo"), Duration: time.Minute, TCPStreams: 1, StreamLife: time.Minute, StreamInterval: 50 * time.Millisecond})
	}()
	waitFor(t, 10*time.Second, "the stream", func() bool {
		for _, w := range b.ActiveWorkers() {
			if w.Connections > 0 {
				return true
			}
		}
		return false
	})
	b.Cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 10*time.Second, "the supervisor to report stopping", func() bool {
		st, err := b.TryStatus()
		return err == nil && st.Stopping
	})
	b.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("a second SIGTERM did not stop baton at once")
	}
	cancel()
	<-done
	for _, w := range workers {
		if processAlive(w.PID) && isBatonWorker(w.PID) {
			t.Errorf("worker %d outlived the supervisor", w.PID)
		}
	}
	if _, err := os.Stat(b.Socket); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}

func TestGracefulStopExitsZero(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2}.configYAML(be))
	workers := b.ActiveWorkers()
	out, err := b.Ctl("stop")
	if err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("baton stop: %v %s", err, out)
	}
	select {
	case <-b.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("baton did not exit after stop")
	}
	if b.ExitErr != nil {
		t.Errorf("baton exited with %v after a graceful stop", b.ExitErr)
	}
	for _, w := range workers {
		if processAlive(w.PID) && isBatonWorker(w.PID) {
			t.Errorf("worker %d outlived the supervisor", w.PID)
		}
	}
}

// TestUnixListener serves HTTP on a unix socket across a handoff, and
// removes the socket file at stop.
func TestUnixListener(t *testing.T) {
	be := startBackend(t)
	cfg := strings.Replace(options{}.configYAML(be), `address: "127.0.0.1:0"`, `address: "unix:@DIR@/web.sock"`, 1)
	b := startBaton(t, cfg)
	path := b.Dir + "/web.sock"
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	getOK(t, client, "http://unix/")
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("handoff: %+v", h)
	}
	getOK(t, client, "http://unix/")
	if out, err := b.Ctl("stop"); err != nil {
		t.Fatalf("stop: %v %s", err, out)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("unix listener's socket file left behind: %v", err)
	}
}

// lowPort returns a free TCP port below 1024 on 127.0.0.1.
func lowPort(t *testing.T) string {
	t.Helper()
	for p := 900; p < 1024; p++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			ln.Close()
			return ln.Addr().String()
		}
	}
	t.Fatal("no free port below 1024")
	return ""
}

// TestWorkersRunAsUser: with user and group set, the supervisor (root)
// binds a listener on a port below 1024 and the workers serve it as that
// user and group, with no supplementary group: no worker has root.
func TestWorkersRunAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, as a privilege drop does")
	}
	be := startBackend(t)
	addr := lowPort(t)
	cfg := strings.Replace(options{workers: 2, reusePort: true}.configYAML(be), `address: "127.0.0.1:0"`, fmt.Sprintf("address: %q", addr), 1)
	cfg = "user: nobody\ngroup: \"65534\"\n" + cfg
	b := harness.StartWith(t, batonBin, cfg, func(cmd *exec.Cmd) {
		// The workers exec the binary as nobody: its folders must let them.
		for d := filepath.Dir(cmd.Path); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
	})
	for _, w := range b.ActiveWorkers() {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.PID))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(st), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 0 && (f[0] == "Uid:" || f[0] == "Gid:"):
				for _, id := range f[1:] {
					if id != "65534" {
						t.Errorf("worker %d: %s, want 65534 everywhere", w.PID, line)
					}
				}
			case len(f) > 0 && f[0] == "Groups:" && len(f) > 1:
				t.Errorf("worker %d: %s, want no supplementary group", w.PID, line)
			}
		}
	}
	if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.Cmd.Process.Pid)); !strings.Contains(string(st), "Uid:\t0\t") {
		t.Errorf("the supervisor does not run as root")
	}
	getOK(t, http.DefaultClient, "http://"+addr+"/")
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload with a user: %v %s", err, out)
	}
	getOK(t, http.DefaultClient, "http://"+addr+"/")

	// Not root: refused with the reason, before anything is bound.
	os.Chmod(b.Config, 0o644)
	cmd := exec.Command(b.Bin, "run", "--config", b.Config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "only when baton starts as root") {
		t.Errorf("baton run with user: as a non-root user: %v %s; want it refused with the reason", err, out)
	}
}
