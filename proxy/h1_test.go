package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// chunkyBackend streams its responses (chunked) and echoes request bodies.
func chunkyBackend(t *testing.T) string {
	t.Helper()
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "got %d bytes: %s", len(b), b)
			return
		}
		for i := range 3 {
			fmt.Fprintf(w, "part %d;", i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(be.Close)
	return hostOf(be)
}

func rawRoundTrip(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestChunkedResponseToHTTP10ClientIsDecoded(t *testing.T) {
	_, web, _ := startProxy(t, webConfig(chunkyBackend(t)))
	resp, body := rawRoundTrip(t, web, "GET / HTTP/1.0\r\nHost: x\r\n\r\n")
	if body != "part 0;part 1;part 2;" || !resp.Close || len(resp.TransferEncoding) != 0 {
		t.Fatalf("HTTP/1.0 client: body %q, close %t, TE %v", body, resp.Close, resp.TransferEncoding)
	}
	resp, body = rawRoundTrip(t, web, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if body != "part 0;part 1;part 2;" || len(resp.TransferEncoding) == 0 {
		t.Fatalf("HTTP/1.1 client: body %q, TE %v; want the chunks passed through", body, resp.TransferEncoding)
	}
}

func TestChunkedRequestBodyAndExpectContinue(t *testing.T) {
	_, web, _ := startProxy(t, webConfig(chunkyBackend(t)))
	_, body := rawRoundTrip(t, web, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	if body != "got 11 bytes: hello world" {
		t.Fatalf("chunked POST: %q", body)
	}
	// A client that waits for 100 Continue before sending its body.
	c, br := dialWeb(t, web)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("waiting for 100 Continue: %q %v", line, err)
	}
	br.ReadString('\n') // the blank line after it
	io.WriteString(c, "ping")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "got 4 bytes: ping" {
		t.Fatalf("after 100 Continue: %q", b)
	}
}

func TestRequestSmugglingIsRefused(t *testing.T) {
	_, web, _ := startProxy(t, webConfig(chunkyBackend(t)))
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
		"GET / HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n", // no Host
	} {
		resp, _ := rawRoundTrip(t, web, req)
		if resp.StatusCode != 400 || !resp.Close {
			t.Errorf("%q: %d close=%t, want 400 and close", req, resp.StatusCode, resp.Close)
		}
	}
}

// TestUpgradeIsTunnelled switches protocols through the proxy, as a
// WebSocket does, and echoes bytes both ways afterwards.
func TestUpgradeIsTunnelled(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "want Upgrade: echo", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw)
	}))
	defer be.Close()
	_, web, _ := startProxy(t, webConfig(hostOf(be)))
	c, br := dialWeb(t, web)
	io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "echo" {
		t.Fatalf("upgrade: %v %+v", err, resp)
	}
	io.WriteString(c, "ping")
	b := make([]byte, 4)
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
		t.Fatalf("through the tunnel: %q %v", b, err)
	}
}
