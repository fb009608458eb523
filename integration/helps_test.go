package integration

import (
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestStoppedWorkerHoldsNoConnection: in a reuseport group the steering
// gives each worker its turn of new connections, busy or not, and a
// connection steered to a worker that is stopped (SIGSTOP here; a long
// pause, or a worker off its core, in life) waited in its socket's queue
// until it ran again, where nginx's one shared socket lets another worker
// take it. Each worker now helps with the sockets of the others
// (ipc.ListenerInfo.Helps): with one of two workers stopped, every
// connection, HTTP and TCP, one after the other, is answered by the other
// within the client's timeout.
func TestStoppedWorkerHoldsNoConnection(t *testing.T) {
	be := startBackend(t)
	b := startBaton(t, options{workers: 2, reusePort: true, tcp: true}.configYAML(be))
	ws := b.ActiveWorkers()
	if len(ws) != 2 {
		t.Fatalf("%d active workers, want 2", len(ws))
	}
	stopped := ws[1].PID
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(stopped, syscall.SIGCONT) })

	const conns = 20 // the steering sends half of them to the stopped one
	const timeout = 5 * time.Second
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: timeout}
	for i := range conns {
		resp, err := c.Get("http://" + b.Address("web") + "/")
		if err != nil {
			t.Fatalf("GET %d with worker %d stopped: %v", i, stopped, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d with worker %d stopped: %s", i, stopped, resp.Status)
		}
	}
	msg := []byte("ping\n")
	for i := range conns {
		s, err := net.DialTimeout("tcp", b.Address("echo"), timeout)
		if err != nil {
			t.Fatal(err)
		}
		s.SetDeadline(time.Now().Add(timeout))
		got := make([]byte, len(msg))
		if _, err := s.Write(msg); err != nil {
			t.Fatalf("echo %d: write: %v", i, err)
		}
		if _, err := io.ReadFull(s, got); err != nil || string(got) != string(msg) {
			t.Fatalf("echo %d with worker %d stopped: %q, %v", i, stopped, got, err)
		}
		s.Close()
	}
}
