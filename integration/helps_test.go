package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
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
// within the client's timeout. So is every connection of a burst made
// at once: the other worker takes one per arrival, and looks at the
// stopped one's queue again for what arrivals left there.
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
		if err := echo(b.Address("echo"), msg, timeout); err != nil {
			t.Fatalf("echo %d with worker %d stopped: %v", i, stopped, err)
		}
	}

	const burst = 40
	errs := make(chan error, burst)
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() { errs <- echo(b.Address("echo"), msg, timeout) })
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			t.Logf("burst echo with worker %d stopped: %v", stopped, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d connections made at once were not answered with worker %d stopped", failed, burst, stopped)
	}
}

// echo sends msg on a new connection to addr and reads it back, within
// timeout.
func echo(addr string, msg []byte, timeout time.Duration) error {
	s, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(timeout))
	if _, err := s.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(got) != string(msg) {
		return fmt.Errorf("read %q, want %q", got, msg)
	}
	return nil
}
