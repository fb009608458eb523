package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/supervisor"
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

// blackhole returns a loopback address whose accept queue is full, so
// that the kernel drops the SYNs of a new connection and a connect times
// out.
func blackhole(t *testing.T) string {
	fd, addr := boundSocket(t)
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	for full := false; !full; {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			full = true
			continue
		}
		t.Cleanup(func() { c.Close() })
	}
	return addr
}

// silentBackend accepts connections, reads, and never answers.
func silentBackend(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestBackendTimeouts: a connect that times out is a 504 every time, a
// refused one a 502, a backend silent past responseTimeout a 504; each
// failure is logged once with its backend, endpoint and cause; and a pooled
// connection idle past idleTimeout is closed (issue 8, problem 9).
func TestBackendTimeouts(t *testing.T) {
	refused := refusingAddr(t)
	var closed atomic.Int64
	idle := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	idle.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	idle.Start()
	defer idle.Close()
	cfg := fmt.Sprintf(`controlSocket: @DIR@/run/control.sock
listeners:
  - name: web
    address: "127.0.0.1:0"
backends:
  - name: hole
    static: [%q]
    connectTimeout: 300ms
  - name: refused
    static: [%q]
  - name: silent
    static: [%q]
    responseTimeout: 300ms
  - name: idle
    static: [%q]
    idleTimeout: 300ms
routes:
  - {listener: web, pathPrefix: /hole, backend: hole}
  - {listener: web, pathPrefix: /refused, backend: refused}
  - {listener: web, pathPrefix: /silent, backend: silent}
  - {listener: web, pathPrefix: /idle, backend: idle}
`, blackhole(t), refused, silentBackend(t), strings.TrimPrefix(idle.URL, "http://"))
	b := startBaton(t, cfg)
	web := "http://" + b.Address("web")
	c := &http.Client{Timeout: 10 * time.Second}
	for _, tc := range []struct {
		path string
		want int
	}{{"/hole", 504}, {"/refused", 502}, {"/silent", 504}, {"/hole", 504}, {"/refused", 502}, {"/silent", 504}, {"/hole", 504}} {
		start := time.Now()
		resp, err := c.Get(web + tc.path)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d after %s, want %d", tc.path, resp.StatusCode, time.Since(start).Round(time.Millisecond), tc.want)
		}
	}
	// Log lines reach the file asynchronously (the log sink's writer).
	waitFor(t, 10*time.Second, "7 upstream failures in the log", func() bool {
		return strings.Count(b.Logs.String(), `"msg":"upstream failed"`) >= 7
	})
	logs := b.Logs.String()
	for _, want := range []string{`"backend":"hole"`, `"backend":"refused"`, `"backend":"silent"`, "connection refused", "i/o timeout"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log has no upstream failure with %s", want)
		}
	}
	if n := strings.Count(logs, `"msg":"upstream failed"`); n != 7 {
		t.Errorf("%d upstream failures logged, want 7 (one each)", n)
	}
	getOK(t, c, web+"/idle")
	waitFor(t, 10*time.Second, "the pooled connection closed after idleTimeout", func() bool { return closed.Load() > 0 })
}

// TestHungWorkerIsReplaced stops an active worker with SIGSTOP, as a hang
// would: it is killed and restarted in its slot within workerTimeout and
// a second, status says why, and no request waits past that (issue 8,
// problem 2).
func TestHungWorkerIsReplaced(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, extra: "workerTimeout: 2s\n"}.configYAML(be))
	web := b.Address("web")
	hung := b.ActiveWorkers()[0]
	if err := syscall.Kill(hung.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(hung.PID, syscall.SIGCONT)
	// SIGSTOP takes effect asynchronously: what the worker accepts before
	// it stops is in flight in a hung process, lost with it. What
	// arrives after must not hang.
	waitFor(t, 10*time.Second, "the worker to stop", func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", hung.PID))
		return err == nil && strings.Contains(string(st), "State:\tT")
	})
	stopped := time.Now()
	// New connections meanwhile: half of them land on the stopped
	// worker's socket and wait there until its slot is served again.
	var wg sync.WaitGroup
	var slowest atomic.Int64
	bound := 2*time.Second + time.Second + 2*time.Second // workerTimeout + restart + margin for a loaded machine
	for range 8 {
		wg.Go(func() {
			start := time.Now()
			c := http.Client{Timeout: 3 * bound}
			resp, err := c.Get("http://" + web + "/")
			took := time.Since(start)
			for {
				old := slowest.Load()
				if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
					break
				}
			}
			if err != nil {
				t.Errorf("GET while a worker hangs: %v after %s", err, took)
				return
			}
			resp.Body.Close()
		})
	}
	var replaced time.Duration
	waitFor(t, 3*bound, "the hung worker's slot to get a new process", func() bool {
		for _, w := range b.ActiveWorkers() {
			if w.Slot == hung.Slot && w.PID != hung.PID && w.State == supervisor.WorkerReady {
				replaced = time.Since(stopped)
				if !strings.Contains(w.LastRestartReason, "unresponsive") {
					t.Errorf("restart reason %q, want it to say unresponsive", w.LastRestartReason)
				}
				return true
			}
		}
		return false
	})
	wg.Wait()
	t.Logf("replaced %s after SIGSTOP (workerTimeout 2s); slowest request %s", replaced.Round(time.Millisecond), time.Duration(slowest.Load()).Round(time.Millisecond))
	if d := time.Duration(slowest.Load()); d > bound {
		t.Errorf("a request waited %s, past workerTimeout + 1s (+2s margin)", d)
	}
	waitFor(t, 10*time.Second, "the log line", func() bool { return strings.Contains(b.Logs.String(), "worker unresponsive") })
	if strings.Count(b.Logs.String(), "worker unresponsive") != 1 {
		t.Errorf("want one 'worker unresponsive' log line")
	}
}

// TestStderrNobodyReads runs baton with stderr on a pipe nobody reads:
// after the pipe's 64 KiB fill, 200 reloads and status still answer, the
// dropped lines are counted, and once the pipe is read again a line says
// how many were lost (issue 8, problem 3).
func TestStderrNobodyReads(t *testing.T) {
	be := startBackend(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := harness.StartWith(t, batonBin, options{workers: 2, reusePort: true}.configYAML(be), func(cmd *exec.Cmd) {
		cmd.Stdout, cmd.Stderr = w, w
	})
	w.Close() // baton and its workers hold the only write ends
	for i := range 200 {
		done := make(chan error, 1)
		go func() {
			out, err := b.Ctl("reload")
			if err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("reload %d with stderr full: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("reload %d hung with stderr full", i)
		}
	}
	st := b.Status()
	if st.Totals.LogDropped == 0 {
		t.Fatalf("200 reloads into a full pipe dropped no log line")
	}
	t.Logf("200 reloads with stderr full: %d log lines dropped", st.Totals.LogDropped)
	// Read the pipe again: the supervisor says what it lost.
	got := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "log lines dropped") {
				got <- true
				return
			}
		}
		got <- false
	}()
	b.Ctl("reload") // something to log, now that the pipe moves
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("the log never said lines were dropped")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no 'log lines dropped' line once stderr was read again")
	}
}

// TestStopWithStderrNobodyReads: with stderr (and the access log on it) a
// pipe nobody reads and full, SIGTERM still stops baton within stopTimeout:
// no exit path waits on a log write (issue 20, problem 3: the supervisor
// sat in a futex until someone read the pipe).
func TestStopWithStderrNobodyReads(t *testing.T) {
	be := startBackend(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Full before baton starts: every log line of baton's waits or drops.
	fd := int(w.Fd()) // once: Fd makes the file blocking again
	unix.SetNonblock(fd, true)
	for {
		if _, err := unix.Write(fd, make([]byte, 4096)); err != nil {
			break
		}
	}
	unix.SetNonblock(fd, false)
	cfg := options{workers: 2, reusePort: true, extra: "stopTimeout: 5s\naccessLog: {path: stderr}\n"}.configYAML(be)
	b := harness.StartWith(t, batonBin, cfg, func(cmd *exec.Cmd) {
		cmd.Stdout, cmd.Stderr = w, w
	})
	w.Close() // baton and its workers hold the only write ends
	for range 50 {
		if code := probe(b.Address("web"), "/"); code != 200 {
			t.Fatalf("request with stderr full: %d", code)
		}
	}
	b.Ctl("reload") // more to log, and a generation draining
	start := time.Now()
	b.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.Exited:
		t.Logf("stopped %s after SIGTERM with stderr full", time.Since(start).Round(time.Millisecond))
	case <-time.After(5*time.Second + 10*time.Second):
		t.Fatal("baton still running 10s past stopTimeout with stderr full")
	}
}

// TestControlSocketRemoved: a control socket removed under a running
// baton (a cleanup of /run, its directory gone with it) is made again at
// the next SIGHUP, and within a few seconds without one; `baton status`
// answers again (issue 20, problem 4).
func TestControlSocketRemoved(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{}.configYAML(be))
	if err := os.Remove(b.Socket); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryStatus(); err == nil {
		t.Fatal("status answered without its socket")
	}
	b.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 30*time.Second, "status after SIGHUP", func() bool { _, err := b.TryStatus(); return err == nil })
	if fi, err := os.Stat(b.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the control socket made again: %v, mode %v", err, fi.Mode().Perm())
	}

	// The whole directory, and no signal: the periodic look.
	if err := os.RemoveAll(filepath.Dir(b.Socket)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "status with no signal", func() bool { _, err := b.TryStatus(); return err == nil })
	if fi, err := os.Stat(filepath.Dir(b.Socket)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the control socket's directory made again: %v, mode %v", err, fi.Mode().Perm())
	}
	// Its lock was made again too: a second supervisor on the same
	// socket is refused, as at start.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, b.Bin, "run", "--config", b.Config) // killed if it runs
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another baton") {
		t.Fatalf("a second supervisor on the remade socket: %v\n%s", err, out)
	}
	if _, err := b.TryStatus(); err != nil {
		t.Fatalf("status after the second supervisor was refused: %v", err)
	}
	if !strings.Contains(b.Logs.String(), "control socket was removed") {
		t.Error("no log line says the control socket was made again")
	}
}

// TestMaxDrainingUnderAReloadStorm reloads while every generation keeps a
// long-lived TCP stream: past maxDraining, the oldest draining generation
// is stopped early and is gone within seconds, with the reason in status
// (issue 8, problem 8: a storm once left 33 generations alive).
func TestMaxDrainingUnderAReloadStorm(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{tcp: true, drainTimeout: "5m", extra: "maxDraining: 2\n"}.configYAML(be))
	echo := b.Address("echo")
	var streams []net.Conn
	defer func() {
		for _, c := range streams {
			c.Close()
		}
	}()
	for i := range 6 {
		c, err := net.Dial("tcp", echo)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
			t.Fatalf("reload %d: %s %s", i, h.Outcome, h.Reason)
		}
	}
	var early int
	waitFor(t, 15*time.Second, "at most maxDraining generations draining", func() bool {
		draining := 0
		early = 0
		for _, g := range b.Status().Generations {
			if g.State == supervisor.GenDraining {
				draining++
			}
			if strings.Contains(g.Reason, "stopped early") {
				early++
			}
		}
		return draining <= 2
	})
	if early != 4 {
		t.Errorf("%d generations stopped early, want 4 (6 drained, maxDraining 2)", early)
	}
	// The oldest streams were closed with their generations; the newest
	// ones live on.
	streams[0].SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := streams[0].Read(make([]byte, 1)); err == nil {
		t.Error("the oldest generation's stream is still open")
	}
	streams[5].SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(streams[5], "pong\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(streams[5], make([]byte, 5)); err != nil {
		t.Errorf("the newest draining generation's stream: %v", err)
	}
}

// TestKubernetesUnreachableSaysWhy: a generation whose Kubernetes API
// server cannot be reached fails its readyTimeout with the API server's
// error as the reason (not just "not ready"), the running generation
// serves on, and the failing list or watch is logged (once, not at every
// retry).
func TestKubernetesUnreachableSaysWhy(t *testing.T) {
	be := startBackend(t)
	good := options{readyTimeout: "3s"}.configYAML(be)
	b := startBaton(t, good)

	dead := freePort(t) // nothing listens here
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, dead)), 0o600)
	kube := strings.Replace(good, fmt.Sprintf("    static: [%q]\n", be.HTTPAddr),
		"    kubernetes: {service: default/shop, port: http, mode: endpoints}\n", 1) +
		fmt.Sprintf("kubernetes:\n  kubeconfig: %q\n", kubeconfig)
	b.WriteConfig(kube)
	h := b.SIGHUP()
	if h.Outcome != supervisor.OutcomeFailed || !strings.Contains(h.Reason, "not ready within readyTimeout 3s: kubernetes: namespace default") ||
		!strings.Contains(h.Reason, "connection refused") {
		t.Errorf("handoff %s %q; want failed with the API server's error", h.Outcome, h.Reason)
	}
	getOK(t, http.DefaultClient, "http://"+b.Address("web")+"/")
	if logs := b.Logs.String(); strings.Count(logs, "kubernetes list or watch failed") < 1 || !strings.Contains(logs, "connection refused") {
		t.Errorf("the failing list or watch is not in baton's log:\n%s", logs)
	}
}
