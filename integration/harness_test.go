// Package integration runs the real baton binary as a process, with real
// backends on loopback, real clients and real signals.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
)

// batonBin is the baton binary every test runs, built once by TestMain (with
// -race when the tests run with it).
var batonBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	batonBin = filepath.Join(dir, "baton")
	args := []string{"build", "-o", batonBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/baton-proxy/baton/cmd/baton")
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build baton:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// batonProc is one running `baton run`.
type batonProc struct {
	t       testing.TB
	dir     string
	bin     string // the binary path the supervisor runs workers from
	config  string
	socket  string
	cmd     *exec.Cmd
	logs    *syncBuffer
	exited  chan struct{}
	exitErr error
}

type options struct {
	workers      int
	reusePort    bool
	sockets      int
	readyTimeout string
	drainTimeout string
	host         string // listener host; default 127.0.0.1
	tcp          bool   // add a tcp listener "echo" to the backend's TCP port
	extra        string // appended to the config
}

// configYAML renders a config for the backend be. Its control socket is
// under @DIR@, which startBaton replaces with the test's directory.
func (o options) configYAML(be *backend.Server) string {
	if o.workers == 0 {
		o.workers = 1
	}
	if o.readyTimeout == "" {
		o.readyTimeout = "20s"
	}
	if o.drainTimeout == "" {
		o.drainTimeout = "30s"
	}
	if o.host == "" {
		o.host = "127.0.0.1"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "controlSocket: %s\nreadyTimeout: %s\ndrainTimeout: %s\nworkers: %d\n",
		"@DIR@/run/control.sock", o.readyTimeout, o.drainTimeout, o.workers)
	fmt.Fprintf(&b, "listeners:\n  - name: web\n    address: \"%s:0\"\n    protocol: http\n    reusePort: %t\n", o.host, o.reusePort)
	if o.sockets > 0 {
		fmt.Fprintf(&b, "    sockets: %d\n", o.sockets)
	}
	if o.tcp {
		fmt.Fprintf(&b, "  - name: echo\n    address: \"%s:0\"\n    protocol: tcp\n    reusePort: %t\n", o.host, o.reusePort)
		if o.sockets > 0 {
			fmt.Fprintf(&b, "    sockets: %d\n", o.sockets)
		}
	}
	fmt.Fprintf(&b, "backends:\n  - name: app\n    static: [%q]\n", be.HTTPAddr)
	if o.tcp {
		fmt.Fprintf(&b, "  - name: echo\n    static: [%q]\n", be.TCPAddr)
	}
	b.WriteString("routes:\n  - listener: web\n    pathPrefix: /\n    backend: app\n")
	if o.tcp {
		b.WriteString("  - listener: echo\n    backend: echo\n")
	}
	b.WriteString(o.extra)
	return b.String()
}

// startBaton writes cfg and runs baton with it from a copy of the binary (so
// that a test may replace it), and waits for the first generation.
func startBaton(t testing.TB, cfg string) *batonProc {
	t.Helper()
	dir := t.TempDir()
	b := &batonProc{t: t, dir: dir, bin: filepath.Join(dir, "baton"), config: filepath.Join(dir, "baton.yaml"), logs: &syncBuffer{}, exited: make(chan struct{})}
	b.socket = filepath.Join(dir, "run", "control.sock")
	copyFile(t, batonBin, b.bin)
	b.writeConfig(cfg)
	b.cmd = exec.Command(b.bin, "--log-format", "json", "run", "--config", b.config)
	b.cmd.Stdout, b.cmd.Stderr = b.logs, b.logs
	// A race-enabled binary sleeps a second at exit by default, which
	// would count in every drain.
	b.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=20")
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.exitErr = b.cmd.Wait()
		close(b.exited)
	}()
	t.Cleanup(b.cleanup)
	waitFor(t, 60*time.Second, "the first generation", func() bool {
		select {
		case <-b.exited:
			t.Fatalf("baton exited at start: %v\n%s", b.exitErr, b.logs)
		default:
		}
		st, err := b.tryStatus()
		return err == nil && st.ActiveGeneration > 0
	})
	return b
}

func (b *batonProc) writeConfig(cfg string) {
	cfg = strings.ReplaceAll(cfg, "@DIR@", b.dir)
	if err := os.WriteFile(b.config, []byte(cfg), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// cleanup stops baton gracefully and checks that no worker outlives it.
func (b *batonProc) cleanup() {
	t := b.t
	select {
	case <-b.exited:
	default:
		st, err := b.tryStatus()
		if err != nil {
			st = &supervisor.Status{}
		}
		b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(60 * time.Second):
			b.cmd.Process.Kill()
			<-b.exited
			t.Errorf("baton did not stop within 60s of SIGTERM")
		}
		for _, g := range st.Generations {
			for _, w := range g.Workers {
				if w.PID > 0 && processAlive(w.PID) && isBatonWorker(w.PID) {
					t.Errorf("worker pid %d (generation %d) outlived the supervisor", w.PID, g.ID)
					syscall.Kill(w.PID, syscall.SIGKILL)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("baton logs:\n%s", b.logs)
	}
	if strings.Contains(b.logs.String(), "WARNING: DATA RACE") {
		t.Errorf("the race detector reported a data race in baton:\n%s", b.logs)
	}
}

func (b *batonProc) tryStatus() (*supervisor.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ipc.Call(ctx, b.socket, ipc.Request{Command: "status"})
	if err != nil {
		return nil, err
	}
	if !resp.OK {
		return nil, errors.New(resp.Error)
	}
	var st supervisor.Status
	return &st, json.Unmarshal(resp.Result, &st)
}

func (b *batonProc) status() *supervisor.Status {
	b.t.Helper()
	st, err := b.tryStatus()
	if err != nil {
		b.t.Fatalf("status: %v\n%s", err, b.logs)
	}
	return st
}

// address returns the bound address of a listener.
func (b *batonProc) address(name string) string {
	for _, l := range b.status().Listeners {
		if l.Name == name {
			return l.Address
		}
	}
	b.t.Fatalf("no listener %q", name)
	return ""
}

// sighup sends SIGHUP and waits for the handoff it starts to be decided.
func (b *batonProc) sighup() supervisor.Handoff {
	b.t.Helper()
	before := b.status().Handoffs
	lastID := before[len(before)-1].ID
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		b.t.Fatal(err)
	}
	var h supervisor.Handoff
	waitFor(b.t, 60*time.Second, "the handoff after SIGHUP", func() bool {
		hs := b.status().Handoffs
		last := hs[len(hs)-1]
		if last.ID > lastID && last.Outcome != supervisor.OutcomePending {
			h = last
			return true
		}
		return false
	})
	return h
}

// ctl runs a baton CLI command against this supervisor and returns its
// output and exit error.
func (b *batonProc) ctl(args ...string) (string, error) {
	cmd := exec.Command(batonBin, append(args, "--socket", b.socket)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (b *batonProc) activeWorkers() []supervisor.WorkerStatus {
	st := b.status()
	for _, g := range st.Generations {
		if g.ID == st.ActiveGeneration {
			return g.Workers
		}
	}
	b.t.Fatalf("no active generation")
	return nil
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// isBatonWorker reports whether pid runs `baton worker` (a pid may have
// been reused by another process).
func isBatonWorker(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	return len(args) >= 2 && string(args[len(args)-1]) == "worker" && strings.HasSuffix(string(args[0]), "baton")
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	tmp := to + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	// Rename over the old file, as a deploy does: a running process keeps
	// its binary, the next exec reads the new one.
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

func startBackend(t testing.TB) *backend.Server {
	t.Helper()
	be, err := backend.Start("be", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

// syncBuffer is a bytes.Buffer safe for a process's output and a test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func killProcess(pid int) error {
	if !isBatonWorker(pid) {
		return fmt.Errorf("pid %d is not a baton worker", pid)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}
