package integration

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/baton-proxy/baton/integration/internal/harness"
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
	getOK(t, http.DefaultClient, "http://"+addr+"/")
	if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("handoff: %+v", h)
	}
	getOK(t, http.DefaultClient, "http://"+addr+"/")
}
