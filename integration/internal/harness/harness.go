// Package harness runs the real baton binary for integration tests: it
// starts `baton run` with a config, talks to its control socket, sends it
// signals, and checks at the end that no worker outlived it.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/supervisor"
)

// BuildBaton builds cmd/baton into dir, with the race detector when race
// is set (tests that run with -race test a race-enabled baton).
func BuildBaton(dir string, race bool) (string, error) {
	return Build(dir, "baton", "github.com/baton-proxy/baton/cmd/baton", race)
}

// BuildBatonOpenSSL builds cmd/baton into dir as `make build OPENSSL=1`
// does: with cgo and the openssl tag, so that RSA keys sign in OpenSSL.
func BuildBatonOpenSSL(dir string, race bool) (string, error) {
	return build(dir, "baton-openssl", "github.com/baton-proxy/baton/cmd/baton", race, []string{"CGO_ENABLED=1"}, "-tags", "openssl")
}

// Build builds the command pkg into dir/name.
func Build(dir, name, pkg string, race bool) (string, error) {
	return build(dir, name, pkg, race, nil)
}

// build builds pkg into dir/name with env added to the environment and
// flags added to go build's.
func build(dir, name, pkg string, race bool, env []string, flags ...string) (string, error) {
	bin := filepath.Join(dir, name)
	args := append([]string{"build", "-o", bin}, flags...)
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", name, err)
	}
	return bin, nil
}

// WaitFor polls cond until it holds, or fails t after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitTraffic waits until progress (a load run's count of answered
// requests and echoes) has grown by n from now.
func WaitTraffic(t testing.TB, progress *atomic.Uint64, n uint64) {
	t.Helper()
	from := progress.Load()
	WaitFor(t, 30*time.Second, "traffic through the proxy", func() bool { return progress.Load() >= from+n })
}

// Baton is one running `baton run`.
type Baton struct {
	t   testing.TB
	cli string // the baton binary the test built, for CLI commands
	// Dir holds the config, the control socket and the worker binary.
	Dir string
	// Bin is where the supervisor finds its worker binary: a copy, which
	// a test may replace as a deploy would.
	Bin     string
	Config  string
	Socket  string
	Cmd     *exec.Cmd
	Logs    *LogFile
	Exited  chan struct{} // closed when the supervisor has exited
	ExitErr error         // set before Exited is closed
}

// Start writes cfg (with @DIR@ replaced by the test's folder) and runs
// `baton run` with it, from a copy of cli, and waits for the first
// generation to be active.
func Start(t testing.TB, cli, cfg string) *Baton { return StartWith(t, cli, cfg, nil) }

// StartWith is Start with a hook that may change the command before it
// starts (wrap it, give it descriptors).
func StartWith(t testing.TB, cli, cfg string, prepare func(*exec.Cmd)) *Baton {
	t.Helper()
	dir := t.TempDir()
	b := &Baton{t: t, cli: cli, Dir: dir, Bin: filepath.Join(dir, "baton"), Config: filepath.Join(dir, "baton.yaml"), Logs: &LogFile{Path: filepath.Join(dir, "baton.log")}, Exited: make(chan struct{})}
	b.Socket = filepath.Join(dir, "run", "control.sock")
	CopyFile(t, cli, b.Bin)
	b.WriteConfig(cfg)
	b.run(prepare)
	return b
}

// Rerun starts `baton run` again with prev's binary, config and folder
// (its control socket too), as an operator restarts a supervisor that
// died, and waits for it to serve.
func Rerun(t testing.TB, prev *Baton) *Baton {
	t.Helper()
	b := &Baton{t: t, cli: prev.cli, Dir: prev.Dir, Bin: prev.Bin, Config: prev.Config, Socket: prev.Socket, Logs: &LogFile{Path: prev.Logs.Path + ".2"}, Exited: make(chan struct{})}
	b.run(nil)
	return b
}

// run starts the supervisor and waits until a generation is active.
func (b *Baton) run(prepare func(*exec.Cmd)) {
	t := b.t
	b.Cmd = exec.Command(b.Bin, "--log-format", "json", "run", "--config", b.Config)
	// A file, not a pipe: a supervisor started by an upgrade inherits it,
	// and Wait must not wait for that one to close it.
	logf, err := os.Create(b.Logs.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	b.Cmd.Stdout, b.Cmd.Stderr = logf, logf
	// A race-enabled binary sleeps a second at exit by default, which
	// would count in every drain.
	b.Cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=20")
	if prepare != nil {
		prepare(b.Cmd)
	}
	if err := b.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.ExitErr = b.Cmd.Wait()
		close(b.Exited)
	}()
	t.Cleanup(b.cleanup)
	WaitFor(t, 60*time.Second, "the first generation", func() bool {
		select {
		case <-b.Exited:
			t.Fatalf("baton exited at start: %v\n%s", b.ExitErr, b.Logs)
		default:
		}
		st, err := b.TryStatus()
		return err == nil && st.ActiveGeneration > 0
	})
}

// WriteConfig replaces the config file.
func (b *Baton) WriteConfig(cfg string) {
	cfg = strings.ReplaceAll(cfg, "@DIR@", b.Dir)
	if err := os.WriteFile(b.Config, []byte(cfg), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// cleanup stops baton gracefully and checks that no worker outlives it.
func (b *Baton) cleanup() {
	t := b.t
	select {
	case <-b.Exited:
	default:
		st, err := b.TryStatus()
		if err != nil {
			st = &supervisor.Status{}
		}
		b.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.Exited:
		case <-time.After(60 * time.Second):
			b.Cmd.Process.Kill()
			<-b.Exited
			t.Errorf("baton did not stop within 60s of SIGTERM")
		}
		for _, g := range st.Generations {
			for _, w := range g.Workers {
				if w.PID > 0 && ProcessAlive(w.PID) && IsBatonWorker(w.PID) {
					t.Errorf("worker pid %d (generation %d) outlived the supervisor", w.PID, g.ID)
					syscall.Kill(w.PID, syscall.SIGKILL)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("baton logs:\n%s", b.Logs)
	}
	if strings.Contains(b.Logs.String(), "WARNING: DATA RACE") {
		t.Errorf("the race detector reported a data race in baton:\n%s", b.Logs)
	}
}

// TryStatus asks the control socket for the status.
func (b *Baton) TryStatus() (*supervisor.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := ipc.Call(ctx, b.Socket, ipc.Request{Command: supervisor.CommandStatus})
	if err != nil {
		return nil, err
	}
	if !resp.OK {
		return nil, errors.New(resp.Error)
	}
	var st supervisor.Status
	return &st, json.Unmarshal(resp.Result, &st)
}

// Status is TryStatus, failing the test on error.
func (b *Baton) Status() *supervisor.Status {
	b.t.Helper()
	st, err := b.TryStatus()
	if err != nil {
		b.t.Fatalf("status: %v\n%s", err, b.Logs)
	}
	return st
}

// Address returns the bound address of a listener.
func (b *Baton) Address(name string) string {
	b.t.Helper()
	for _, l := range b.Status().Listeners {
		if l.Name == name {
			return l.Address
		}
	}
	b.t.Fatalf("no listener %q", name)
	return ""
}

// SIGHUP sends SIGHUP and waits for the handoff it starts to be decided.
func (b *Baton) SIGHUP() supervisor.Handoff {
	b.t.Helper()
	before := b.Status().Handoffs
	lastID := before[len(before)-1].ID
	if err := b.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		b.t.Fatal(err)
	}
	var h supervisor.Handoff
	WaitFor(b.t, 60*time.Second, "the handoff after SIGHUP", func() bool {
		hs := b.Status().Handoffs
		last := hs[len(hs)-1]
		if last.ID > lastID && last.Outcome != supervisor.OutcomePending {
			h = last
			return true
		}
		return false
	})
	return h
}

// Ctl runs a baton CLI command against this supervisor and returns its
// output and exit error.
func (b *Baton) Ctl(args ...string) (string, error) {
	cmd := exec.Command(b.cli, append(args, "--socket", b.Socket)...)
	// A race-enabled CLI would sleep a second at exit.
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ActiveWorkers returns the workers of the active generation.
func (b *Baton) ActiveWorkers() []supervisor.WorkerStatus {
	b.t.Helper()
	st := b.Status()
	for _, g := range st.Generations {
		if g.ID == st.ActiveGeneration {
			return g.Workers
		}
	}
	b.t.Fatalf("no active generation")
	return nil
}

// ProcessAlive reports whether pid exists.
func ProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// IsBatonWorker reports whether pid runs `baton worker` (a pid may have
// been reused by another process).
func IsBatonWorker(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	return len(args) >= 2 && string(args[len(args)-1]) == "worker" && strings.HasSuffix(string(args[0]), "baton")
}

// KillWorker sends SIGKILL to a baton worker.
func KillWorker(pid int) error {
	if !IsBatonWorker(pid) {
		return fmt.Errorf("pid %d is not a baton worker", pid)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// CopyFile copies from to to and renames it into place, as a deploy does:
// a running process keeps its binary, the next exec reads the new one.
func CopyFile(t testing.TB, from, to string) {
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
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// LogFile is where baton's output goes; String reads it.
type LogFile struct{ Path string }

func (l *LogFile) String() string {
	b, err := os.ReadFile(l.Path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// ListeningSockets counts the sockets in the LISTEN state bound to addr, an
// IPv4 host:port, as /proc/net/tcp lists them (a reuseport group lists one
// line per socket).
func ListeningSockets(addr string) (int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return 0, fmt.Errorf("listening sockets on %q: an IPv4 host:port is needed", addr)
	}
	a := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == want && f[3] == "0A" {
			n++
		}
	}
	return n, nil
}
