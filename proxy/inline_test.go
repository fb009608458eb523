package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// The tests of serveInline: requests served inside one read session, where
// the wait for the next request trusts a read that left the socket empty.

// TestInlineRequestSentBeforeTheResponse pipelines a second request in a
// segment of its own while the first is at the backend: its arrival is seen
// by the runtime's poller before the first response is written. A wait that
// armed readiness only after that response would never see it (the
// connection would sit until the idle timeout); within the read session it
// is answered at once. RFC 9112 §9.3.2 lets a client pipeline.
func TestInlineRequestSentBeforeTheResponse(t *testing.T) {
	holding := make(chan struct{})
	release := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(holding)
			<-release
		}
		io.WriteString(w, r.URL.Path)
	}))
	defer be.Close()
	_, web, _ := startProxy(t, webConfig(hostOf(be)))

	c, br := dialWeb(t, web)
	// A first request, so that the next ones are served inline.
	if got := getBody(t, c, br, "/first"); got != "/first" {
		t.Fatalf("first response %q", got)
	}

	fmt.Fprintf(c, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	<-holding // baton has read it and waits for the backend
	fmt.Fprintf(c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	waitQueued(t, c)
	// Let the runtime's poller see the input before the first response
	// goes out: the lost wake-up this test guards against needs it.
	time.Sleep(20 * time.Millisecond)
	close(release)

	for _, want := range []string{"/hold", "/next"} {
		if got := readBody(t, br); got != want {
			t.Fatalf("response %q, want %q", got, want)
		}
	}
}

// TestInlineAndReadRequestHeadTakeTurns runs, on one connection, every kind
// of request that leaves the read session or comes back to it: bodyless
// ones (inline), two pipelined in one segment, a POST (its body is read
// outside the session), a head in two pieces (readRequestHead, with its
// header timeout), a malformed head (400 and close).
func TestInlineAndReadRequestHeadTakeTurns(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	defer be.Close()
	// A header timeout that a busy machine does not reach between the two
	// pieces of a head.
	cfg := strings.Replace(webConfig(hostOf(be)), "readHeaderTimeout: 200ms", "readHeaderTimeout: 5s", 1)
	_, web, _ := startProxy(t, cfg)
	c, br := dialWeb(t, web)

	steps := []struct {
		send []string // written one after the other
		want []string // response bodies, in order
	}{
		{[]string{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"GET /a "}},
		{[]string{"GET /b HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"GET /b "}},
		{[]string{"GET /c HTTP/1.1\r\nHost: x\r\n\r\nGET /d HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"GET /c ", "GET /d "}},
		{[]string{"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"}, []string{"POST /e hello"}},
		{[]string{"GET /f HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"GET /f "}},
		{[]string{"POST /g HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n", "world"}, []string{"POST /g world"}},
		{[]string{"GET /h HTTP/1.1\r\nHo", "st: x\r\n\r\n"}, []string{"GET /h "}},
		{[]string{"GET /i HTTP/1.1\r\nHost: x\r\n\r\n"}, []string{"GET /i "}},
	}
	for _, s := range steps {
		for i, part := range s.send {
			if i > 0 {
				waitConsumed(t, c) // baton has read the first part
			}
			io.WriteString(c, part)
		}
		for _, want := range s.want {
			if got := readBody(t, br); got != want {
				t.Fatalf("after %q: response %q, want %q", s.send, got, want)
			}
		}
	}

	// A head that breaks a rule (a space before the colon, RFC 9112 §5.1):
	// 400, and the connection closes.
	io.WriteString(c, "GET /j HTTP/1.1\r\nHost : x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("malformed head: %d, want 400", resp.StatusCode)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the 400: %v, want EOF", err)
	}
}

// TestIdleKeepAliveConnectionTimesOut: a connection idle past
// http.idleTimeout after a request (waiting inside the read session) is
// closed, as nginx's keepalive_timeout does.
func TestIdleKeepAliveConnectionTimesOut(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer be.Close()
	cfg := strings.Replace(webConfig(hostOf(be)), "readHeaderTimeout: 200ms", "readHeaderTimeout: 200ms\n  idleTimeout: 300ms", 1)
	_, web, _ := startProxy(t, cfg)
	c, br := dialWeb(t, web)
	for range 2 {
		if got := getBody(t, c, br, "/"); got != "ok" {
			t.Fatalf("response %q", got)
		}
	}
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want EOF from the idle timeout", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout (300ms, lazily extended: at least half of it)", d)
	}
}

func getBody(t *testing.T, c net.Conn, br *bufio.Reader, path string) string {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return readBody(t, br)
}

func readBody(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitQueued waits until what c wrote waits, unread, in the receive queue of
// the proxy's end of the connection.
func waitQueued(t *testing.T, c net.Conn) {
	t.Helper()
	waitRecvQueue(t, c, func(n int) bool { return n > 0 })
}

// waitConsumed waits until the proxy's end of c has read all c wrote.
func waitConsumed(t *testing.T, c net.Conn) {
	t.Helper()
	waitRecvQueue(t, c, func(n int) bool { return n == 0 })
}

// waitRecvQueue waits, up to 10 s, until ok holds of the bytes queued
// unread at the proxy's end of c, read from /proc/net/tcp.
func waitRecvQueue(t *testing.T, c net.Conn, ok func(int) bool) {
	t.Helper()
	// The proxy's end has c's addresses the other way round.
	local, remote := procTCPAddr(c.RemoteAddr()), procTCPAddr(c.LocalAddr())
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 5 || f[1] != local || f[2] != remote {
				continue
			}
			var tx, rx int
			fmt.Sscanf(f[4], "%x:%x", &tx, &rx)
			if ok(rx) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy's receive queue never reached the state waited for")
		}
		time.Sleep(time.Millisecond)
	}
}

// procTCPAddr writes an IPv4 TCP address as /proc/net/tcp does.
func procTCPAddr(a net.Addr) string {
	ta := a.(*net.TCPAddr)
	ip := ta.IP.To4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ta.Port)
}

// TestKeepAliveAfterASlowResponse: a keep-alive connection whose first
// response took longer than readHeaderTimeout serves its next requests.
// The read session's wait looks at the read deadline first, and the one the
// first head was read under had passed: the connection closed under the
// second request (a client then sees its request fail, which is fatal for
// one that cannot be retried, RFC 9112 §9.3.1).
func TestKeepAliveAfterASlowResponse(t *testing.T) {
	be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
		if n == 0 {
			time.Sleep(400 * time.Millisecond) // readHeaderTimeout is 200ms
		}
		io.WriteString(w, okResponse)
	})
	_, web, _ := startProxy(t, webConfig(be.addr()))
	c, br := dialWeb(t, web)
	for i := range 3 {
		if resp := rawGet(t, c, br); resp.StatusCode != 200 {
			t.Fatalf("response %d: %d", i, resp.StatusCode)
		}
	}
}
