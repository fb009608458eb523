package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// fullBacklog returns the address of a listening socket whose accept queue
// is full and never taken from: a backend slow to accept, where a connect
// waits in SYN_SENT until its timeout (the kernel drops the SYNs).
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "backlog")
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue: connects succeed until it is full; the first that
	// times out says it is.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the accept queue never filled")
	return ""
}

// synSent counts the sockets of this machine connecting to addr's port
// (SYN_SENT in /proc/net/tcp).
func synSent(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	var p int
	fmt.Sscan(port, &p)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == "02" && strings.HasSuffix(f[2], fmt.Sprintf(":%04X", p)) {
			n++
		}
	}
	return n
}

// waitUntil waits for cond, checking every 10 ms, and fails the test if it
// does not hold within 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowDialConfig proxies to a backend that is slow to accept, with a
// connect timeout far longer than the tests wait.
func slowDialConfig(backend string) string {
	return strings.Replace(webConfig(backend), "connectTimeout: 1s", "connectTimeout: 30s", 1)
}

// A client that resets its stream while baton is still connecting to the
// backend ends the connect at once (CVE-2023-44487 with reconnects, against
// a backend slow to accept: each dial held a descriptor for connectTimeout),
// and baton tries no other endpoint for it.
func TestH2ResetCancelsTheDial(t *testing.T) {
	be := fullBacklog(t)
	_, web, _ := startProxy(t, slowDialConfig(be))
	hc := dialH2(t, web)
	hc.send(1, nil, h2Get("x", "/")...)
	waitUntil(t, "baton connecting to the backend", func() bool { return synSent(t, be) == 1 })
	hc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	waitUntil(t, "the connect cancelled", func() bool { return synSent(t, be) == 0 })
}

// The same when the HTTP/2 client closes its connection.
func TestH2CloseCancelsTheDial(t *testing.T) {
	be := fullBacklog(t)
	_, web, _ := startProxy(t, slowDialConfig(be))
	hc := dialH2(t, web)
	hc.send(1, nil, h2Get("x", "/")...)
	hc.send(3, nil, h2Get("x", "/")...)
	waitUntil(t, "baton connecting to the backend twice", func() bool { return synSent(t, be) == 2 })
	hc.c.Close()
	waitUntil(t, "the connects cancelled", func() bool { return synSent(t, be) == 0 })
}

// An HTTP/1.1 client that closes its connection while baton connects for
// its request ends the connect (nginx's proxy_ignore_client_abort off).
func TestH1CloseCancelsTheDial(t *testing.T) {
	be := fullBacklog(t)
	_, web, _ := startProxy(t, slowDialConfig(be))
	c, _ := dialWeb(t, web)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	waitUntil(t, "baton connecting to the backend", func() bool { return synSent(t, be) == 1 })
	c.Close()
	waitUntil(t, "the connect cancelled", func() bool { return synSent(t, be) == 0 })
}

// An HTTP/1.1 client that closes its connection while the backend works on
// its request has the upstream request ended: baton closes the upstream
// connection (the backend's answer could only be stray bytes now), and
// takes another for the next client.
func TestH1CloseEndsTheUpstreamRequest(t *testing.T) {
	for _, how := range []string{"close", "half-close", "reset"} {
		t.Run(how, func(t *testing.T) {
			be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
				if n > 0 {
					io.WriteString(w, okResponse)
				}
				// The first request gets no answer: the backend "works".
			})
			_, web, _ := startProxy(t, webConfig(be.addr()))
			c, _ := dialWeb(t, web)
			io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
			be.waitRequests(t, 1)
			switch how {
			case "close":
				c.Close()
			case "half-close":
				c.(*net.TCPConn).CloseWrite()
			case "reset":
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
			if !be.waitClosed() {
				t.Fatal("the upstream connection of a client that left is still open")
			}
			c2, br := dialWeb(t, web)
			if resp := rawGet(t, c2, br); resp.StatusCode != 200 {
				t.Fatalf("the next request: %d", resp.StatusCode)
			}
			if rec := be.record(); len(rec.raws) != 2 {
				t.Fatalf("%d upstream connections, want 2 (the cut one not reused)", len(rec.raws))
			}
		})
	}
}

// A client that stays is served however slow the backend, and one that
// pipelines its next request is not taken for gone.
func TestH1SlowBackendKeepsItsClient(t *testing.T) {
	release := make(chan struct{})
	be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
		if n == 0 {
			<-release
		}
		io.WriteString(w, okResponse)
	})
	_, web, _ := startProxy(t, webConfig(be.addr()))
	c, br := dialWeb(t, web)
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	be.waitRequests(t, 1)
	time.Sleep(3 * clientCheckEvery) // several looks at the client
	close(release)
	for i := range 2 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("response %d: %d", i, resp.StatusCode)
		}
	}
}

// watchClients looks over the connections only while a request is
// upstream: an idle worker is not woken every clientCheckEvery for
// nothing, and a request that goes upstream wakes it again.
func TestWatchClientsSleepsWhileIdle(t *testing.T) {
	release := make(chan struct{})
	be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
		if req.RequestURI == "/slow" {
			<-release
		}
		io.WriteString(w, okResponse)
	})
	p, web, _ := startProxy(t, webConfig(be.addr()))
	c, br := dialWeb(t, web)
	get := func(path string) error {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	if err := get("/fast"); err != nil {
		t.Fatal(err)
	}
	// Idle but for a fast request (which a first tick may find upstream
	// still): at most one look in five ticks. Before, one a tick.
	time.Sleep(5 * clientCheckEvery)
	if n := p.clients.scans.Load(); n > 1 {
		t.Fatalf("%d looks at the clients with no request upstream, want at most 1", n)
	}
	before := p.clients.scans.Load()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := get("/slow"); err != nil {
			t.Error(err)
		}
	}()
	waitUntil(t, "looks at the clients while a request is upstream", func() bool { return p.clients.scans.Load() >= before+2 })
	close(release)
	<-done
}
