package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// startProxy serves cfgYAML (with @WEB@ and @TCP@ listeners bound here) and
// returns the addresses and the proxy.
func startProxy(t testing.TB, cfgYAML string) (p *Proxy, web, tcp string) {
	t.Helper()
	var ls []ipc.Listener
	bind := func(name string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, ipc.Listener{ListenerInfo: ipc.ListenerInfo{Name: name}, Listeners: []net.Listener{ln}})
		return ln.Addr().String()
	}
	if strings.Contains(cfgYAML, "@WEB@") {
		web = bind("web")
		cfgYAML = strings.ReplaceAll(cfgYAML, "@WEB@", web)
	}
	if strings.Contains(cfgYAML, "@TCP@") {
		tcp = bind("echo")
		cfgYAML = strings.ReplaceAll(cfgYAML, "@TCP@", tcp)
	}
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatal(err)
	}
	return startProxyConfig(t, cfg, ls), web, tcp
}

// startProxyConfig starts a proxy of cfg on ls, and stops it when t ends.
func startProxyConfig(t testing.TB, cfg *config.Config, ls []ipc.Listener) (p *Proxy) {
	t.Helper()
	p = New(cfg, zaptest.NewLogger(t))
	if err := p.Serve(ls); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p.Drain(ctx, false)
		// The drain closed every connection without waiting: let their
		// goroutines end (and log) before the test does.
		done := make(chan struct{})
		go func() {
			for _, f := range p.https {
				f.conns.Wait()
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	return p
}

func webConfig(backends ...string) string {
	return fmt.Sprintf(`
controlSocket: /tmp/unused.sock
http:
  readHeaderTimeout: 200ms
  drainIdleGrace: 300ms
listeners:
  - name: web
    address: @WEB@
backends:
  - name: app
    static: [%s]
    connectTimeout: 1s
routes:
  - listener: web
    backend: app
`, `"`+strings.Join(backends, `", "`)+`"`)
}

// serveConns serves ln's connections with handle, each in a goroutine of
// its own, until the test ends: then the listener and the connections
// still open are closed, and every goroutine is waited for. It returns
// ln's address.
func serveConns(t testing.TB, ln net.Listener, handle func(net.Conn)) string {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   = map[net.Conn]struct{}{}
		closed bool
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			open[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					c.Close()
				}()
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// dialWeb connects to the proxy's listener at web, with a 10 s deadline
// (closed when the test ends), and returns a reader of the connection.
func dialWeb(t *testing.T, web string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", web)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// TestForwardedAndHopByHopHeaders checks what reaches the backend about
// the client: from an untrusted client, baton's own X-Forwarded-* (a
// spoofed chain is dropped, as Envoy's use_remote_address); from a
// trustedProxies address, its chain with the client appended and its
// proto and host (nginx's $proxy_add_x_forwarded_for).
func TestForwardedAndHopByHopHeaders(t *testing.T) {
	for _, tc := range []struct {
		name, trusted     string
		xff, proto, xhost string
	}{
		{"untrusted", "", "127.0.0.1", "http", "shop.example"},
		{"trusted", "trustedProxies: [127.0.0.0/8]\n", "203.0.113.9, 127.0.0.1", "https", "front.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got http.Header
			var host string
			be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, host = r.Header.Clone(), r.Host
				w.Header().Set("Keep-Alive", "timeout=5")
				w.Header().Set("X-Kept", "yes")
			}))
			defer be.Close()
			_, web, _ := startProxy(t, tc.trusted+webConfig(hostOf(be)))

			req, _ := http.NewRequest("GET", "http://"+web+"/x", nil)
			req.Host = "shop.example"
			req.Header.Set("Connection", "X-Hop")
			req.Header.Set("X-Hop", "1")
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			req.Header.Set("X-Forwarded-Proto", "https")
			req.Header.Set("X-Forwarded-Host", "front.example")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if host != "shop.example" {
				t.Errorf("Host = %q, want the client's", host)
			}
			if xff := got.Get("X-Forwarded-For"); xff != tc.xff {
				t.Errorf("X-Forwarded-For = %q, want %q", xff, tc.xff)
			}
			if p, h := got.Get("X-Forwarded-Proto"), got.Get("X-Forwarded-Host"); p != tc.proto || h != tc.xhost {
				t.Errorf("X-Forwarded-Proto/Host = %q %q, want %q %q", p, h, tc.proto, tc.xhost)
			}
			if got.Get("X-Hop") != "" {
				t.Errorf("hop-by-hop header named in Connection reached the backend")
			}
			if resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-Kept") != "yes" {
				t.Errorf("response headers: %v", resp.Header)
			}
		})
	}
}

func TestConnectFailureMovesToTheNextAddress(t *testing.T) {
	var hits [2]atomic.Int64
	var bes []string
	for i := range 2 {
		be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			io.Copy(w, r.Body)
		}))
		defer be.Close()
		bes = append(bes, hostOf(be))
	}
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close() // connect refused from now on
	p, web, _ := startProxy(t, webConfig(deadAddr, bes[0], bes[1]))
	for i := range 30 {
		body := fmt.Sprintf("post %d", i)
		resp, err := http.Post("http://"+web+"/", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != body {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if hits[0].Load() < 10 || hits[1].Load() < 10 {
		t.Errorf("round robin skewed: %d / %d", hits[0].Load(), hits[1].Load())
	}
	if e := p.Stats().Errors; e != 0 {
		t.Errorf("%d errors counted", e)
	}
	if c := p.Stats().Backends[0]; c.Requests != 30 || c.ConnectFailures == 0 || c.Errors != 0 {
		t.Errorf("backend counters: %+v; want 30 requests, connect failures, no errors", c.BackendCounters)
	}
}

func TestNoBackendAndNoRoute(t *testing.T) {
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	cfg := strings.Replace(webConfig(deadAddr), "  - listener: web\n    backend: app\n", "  - listener: web\n    pathPrefix: /api\n    backend: app\n", 1)
	_, web, _ := startProxy(t, cfg)
	for path, want := range map[string]int{"/api/x": http.StatusBadGateway, "/other": http.StatusNotFound} {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// rawGet writes a GET on c and reads the response.
func rawGet(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestDrainClosesKeepAliveConnectionsSafely(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer be.Close()
	p, web, _ := startProxy(t, webConfig(hostOf(be)))

	active, _ := net.Dial("tcp", web)
	defer active.Close()
	abr := bufio.NewReader(active)
	idle, _ := net.Dial("tcp", web)
	defer idle.Close()
	ibr := bufio.NewReader(idle)
	if rawGet(t, active, abr).Close || rawGet(t, idle, ibr).Close {
		t.Fatal("Connection: close before draining")
	}

	drained := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Drain(ctx, false)
		close(drained)
	}()
	waitDraining(t, p)

	// A request on a kept-alive connection during the drain is answered,
	// with Connection: close, and the connection then ends.
	resp := rawGet(t, active, abr)
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("request while draining: %d, close=%t; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	if _, err := abr.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: %v, want EOF", err)
	}
	// An idle one is closed after the grace, without a response.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Errorf("idle keep-alive connection: %v, want EOF after the grace", err)
	}
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return once the connections were gone")
	}
	if _, err := net.DialTimeout("tcp", web, time.Second); err == nil {
		t.Error("a drained proxy still accepts")
	}
}

// TestStopAcceptingLeavesTheQueueToOthers checks what the worker says to
// the supervisor after StopAccepting (ipc.Stopped): that no accept of its
// happens any more, so that a connection queued on a shared listening
// socket from then on is the new generation's. The test's copies of the
// sockets stand for the supervisor's and the new workers'.
func TestStopAcceptingLeavesTheQueueToOthers(t *testing.T) {
	var (
		ls     []ipc.Listener
		copies []net.Listener
	)
	for _, name := range []string{"web", "echo"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f, err := ln.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		other, err := net.FileListener(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		ls = append(ls, ipc.Listener{ListenerInfo: ipc.ListenerInfo{Name: name}, Listeners: []net.Listener{ln}})
		copies = append(copies, other)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - {name: web, address: %q}
  - {name: echo, address: %q, protocol: tcp}
backends:
  - {name: app, static: ["127.0.0.1:9"]}
routes:
  - {listener: web, backend: app}
  - {listener: echo, backend: app}
`, copies[0].Addr(), copies[1].Addr())))
	if err != nil {
		t.Fatal(err)
	}
	p := New(cfg, zaptest.NewLogger(t))
	if err := p.Serve(ls); err != nil {
		t.Fatal(err)
	}
	p.StopAccepting(false)
	for _, other := range copies {
		// Enough connections that a worker still accepting would take
		// some before the test's own accepts.
		dialled := map[string]bool{}
		for range 20 {
			c, err := net.Dial("tcp", other.Addr().String())
			if err != nil {
				t.Fatalf("dial %s: %v", other.Addr(), err)
			}
			defer c.Close()
			dialled[c.LocalAddr().String()] = true
		}
		other.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
		for len(dialled) > 0 {
			got, err := other.Accept()
			if err != nil {
				t.Fatalf("%s: %d connections made after StopAccepting were not left in the queue: %v", other.Addr(), len(dialled), err)
			}
			got.Close()
			if !dialled[got.RemoteAddr().String()] {
				t.Fatalf("%s: accepted %s, not dialled here", other.Addr(), got.RemoteAddr())
			}
			delete(dialled, got.RemoteAddr().String())
		}
	}
	if n := p.Stats().Accepted; n != 0 {
		t.Errorf("accepted %d after StopAccepting", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Drain(ctx, false)
}

func waitDraining(t *testing.T, p *Proxy) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !p.draining.Load() {
		if time.Now().After(deadline) {
			t.Fatal("not draining")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSlowHeadersAreCutOff(t *testing.T) {
	be := httptest.NewServer(http.NotFoundHandler())
	defer be.Close()
	_, web, _ := startProxy(t, webConfig(hostOf(be)))
	c, err := net.Dial("tcp", web)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // and never the end
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("slowloris connection not closed by the proxy: %v", err)
	}
	if len(b) > 0 && !strings.Contains(string(b), "408") {
		t.Errorf("answer to a slow request: %q", b)
	}
}

func TestH2C(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))
	defer be.Close()
	p, web, _ := startProxy(t, webConfig(hostOf(be)))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	resp, err := client.Get("http://" + web + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(b) != "HTTP/1.1" {
		t.Fatalf("h2c: client saw %s, backend saw %q", resp.Proto, b)
	}
	// Draining sends GOAWAY; the connection ends and Drain returns.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.Drain(ctx, false)
	if ctx.Err() != nil {
		t.Fatal("Drain waited for the deadline: the h2 connection was not closed")
	}
}

func TestTCPProxyPassesHalfClose(t *testing.T) {
	echo, _ := net.Listen("tcp", "127.0.0.1:0")
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
				c.Close()
			}()
		}
	}()
	_, _, tcp := startProxy(t, tcpConfig(echo.Addr().String()))
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := strings.Repeat("stream ", 10000)
	go func() {
		io.WriteString(c, msg)
		c.(*net.TCPConn).CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != msg {
		t.Fatalf("echo through the proxy: %d bytes, %v", len(b), err)
	}
}

// A TCP stream that lives past keepAliveAfter gets TCP keep-alive on both
// of its connections, so that a peer gone without a word is noticed; a
// short one never pays for it (issue 23: short TCP connections at nginx's
// rate).
func TestTCPStreamKeepAlive(t *testing.T) {
	echo, _ := net.Listen("tcp", "127.0.0.1:0")
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	p, _, tcp := startProxy(t, tcpConfig(echo.Addr().String()))
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := c.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	// The stream loop serves a plain tcp listener: the stream's two
	// sockets are its one stream's.
	l := p.tcps[0].loop
	if l == nil {
		t.Fatal("a plain tcp listener without a stream loop")
	}
	// keepAlive says whether the stream's client and upstream sockets
	// have keep-alive on; found is false while the loop has no stream
	// with both.
	keepAlive := func() (client, up, found bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		on := func(fd int) bool {
			v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE)
			return err == nil && v == 1
		}
		for _, s := range l.sides.by {
			if s == nil {
				continue
			}
			if st := s.st; st.a.fd >= 0 && st.b.fd >= 0 && st.state == stateRelay {
				return on(st.a.fd), on(st.b.fd), true
			}
		}
		return false, false, false
	}
	start := time.Now()
	if client, up, found := keepAlive(); !found {
		t.Fatal("the stream is not in the loop's")
	} else if client || up {
		t.Fatalf("a new stream has keep-alive on already: client %t, upstream %t", client, up)
	}
	waitUntil(t, "keep-alive on both connections of a stream that lives", func() bool {
		client, up, _ := keepAlive()
		return client && up
	})
	if d := time.Since(start); d < keepAliveAfter/2 {
		t.Errorf("keep-alive on after %s, before keepAliveAfter (%s)", d, keepAliveAfter)
	}
}

// TestMaxRequestsPerConnection: an HTTP/1.1 connection serves
// http.maxRequestsPerConnection requests (nginx's keepalive_requests), the
// last with Connection: close, and then closes.
func TestMaxRequestsPerConnection(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer be.Close()
	cfg := strings.Replace(webConfig(hostOf(be)), "http:\n", "http:\n  maxRequestsPerConnection: 3\n", 1)
	_, web, _ := startProxy(t, cfg)
	c, br := dialWeb(t, web)
	for i := range 3 {
		resp := rawGet(t, c, br)
		if resp.StatusCode != 200 || resp.Close != (i == 2) {
			t.Fatalf("response %d: %d, close %v", i, resp.StatusCode, resp.Close)
		}
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the last request: %d bytes, %v (want EOF)", n, err)
	}
}

// A backend's sendTimeout bounds each write of a request to it, not the
// whole request (nginx's proxy_send_timeout, "between two successive write
// operations", https://nginx.org/en/docs/http/ngx_http_proxy_module.html#proxy_send_timeout):
// a body that a slow client streams for four times as long goes through.
func TestSendTimeoutBoundsEachWrite(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%d", len(b))
	}))
	t.Cleanup(backend.Close)
	cfg := strings.Replace(webConfig(hostOf(backend)), "connectTimeout: 1s", "connectTimeout: 1s\n    sendTimeout: 250ms\n    responseTimeout: 250ms", 1)
	_, web, _ := startProxy(t, cfg)
	c, br := dialWeb(t, web)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n")
	for range 10 { // a byte every 100 ms: a second in all
		time.Sleep(100 * time.Millisecond)
		c.Write([]byte("x"))
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "10" {
		t.Errorf("a body streamed for 1 s with sendTimeout 250ms: %d %q", resp.StatusCode, b)
	}
}

// A worker gives the memory of connections back once the active ones
// fall to half their peak by at least giveBackConns, or once a wave of at
// least giveBackConns new ones is over (they parked); small swings and
// steady traffic keep it.
func TestGiveBack(t *testing.T) {
	var m memWatch
	for i, step := range []struct {
		active   int64
		accepted uint64
		give     bool
	}{
		{500, 500, false}, {10_000, 10_500, false}, {9_000, 10_600, false}, {5_000, 10_700, true},
		{4_000, 10_800, false}, {0, 10_800, true}, {0, 10_800, false},
		// 1,200 new ones that park: a wave, given back once it is over.
		{100, 11_300, false}, {50, 12_000, false}, {50, 12_000, true}, {50, 12_000, false},
		// Steady traffic: never quiet.
		{10, 13_100, false}, {10, 14_200, false}, {10, 15_300, false},
	} {
		if got := m.tick(step.active, step.accepted); got != step.give {
			t.Fatalf("step %d (%d active, %d accepted): give back %v, want %v", i, step.active, step.accepted, got, step.give)
		}
	}
}
