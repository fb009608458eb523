// Package integration runs the real baton binary as a process, with real
// backends on loopback, real clients and real signals.
package integration

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/supervisor"
	"golang.org/x/sys/unix"
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
	batonBin, err = harness.BuildBaton(dir, raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The harness, under this package's short names.
type batonProc = harness.Baton

var (
	waitFor       = harness.WaitFor
	processAlive  = harness.ProcessAlive
	isBatonWorker = harness.IsBatonWorker
	killProcess   = harness.KillWorker
	copyFile      = harness.CopyFile
)

func startBaton(t testing.TB, cfg string) *batonProc { return harness.Start(t, batonBin, cfg) }

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

func startBackend(t testing.TB) *backend.Server {
	t.Helper()
	be, err := backend.Start("be", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

// getOK sends GET url with c and fails t unless it is answered 200.
func getOK(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
}

// waitDrained waits until no generation of b is draining.
func waitDrained(t testing.TB, b *batonProc, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "the old generations to drain", func() bool {
		for _, g := range b.Status().Generations {
			if g.State == supervisor.GenDraining {
				return false
			}
		}
		return true
	})
}

// refusingAddr returns a loopback address that refuses connections for
// the rest of the test: a socket bound to it but not listening, so that
// no listener the test opens later is given its port (as one closed at
// once could be: CI saw the "refused" backend time out, its port taken
// by the blackhole's listener; baton's own listener, bound to port 0,
// could be given it as well).
func refusingAddr(t *testing.T) string {
	_, addr := boundSocket(t)
	return addr
}

// boundSocket returns a TCP socket bound to a free loopback port, not
// listening, and its address; it is closed when t ends.
func boundSocket(t *testing.T) (fd int, addr string) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}
