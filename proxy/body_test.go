package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// bodyConfig routes /buffered with request buffering and a body limit,
// /limited with a limit only, and the rest with neither.
func bodyConfig(backend string) string {
	return strings.Replace(webConfig(backend), "routes:\n", `routes:
  - listener: web
    pathPrefix: /buffered
    backend: app
    bufferRequestBody: 16
    maxBodySize: 64
  - listener: web
    pathPrefix: /limited
    backend: app
    maxBodySize: 8
  - listener: web
    pathPrefix: /refusing
    backend: app
    bufferRequestBody: 8
    maxBodySize: 8
`, 1)
}

// countingBackend echoes request bodies with the framing they came with,
// and counts the connections and requests it got.
type countingBackend struct {
	addr            string
	conns, requests atomic.Int64
}

func newCountingBackend(t *testing.T) *countingBackend {
	cb := &countingBackend{}
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cb.requests.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(w, "length %d te %v body %s", r.ContentLength, r.TransferEncoding, b)
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			cb.conns.Add(1)
		}
	}
	be.Start()
	t.Cleanup(be.Close)
	cb.addr = hostOf(be)
	return cb
}

// TestBufferedBodyHoldsNoBackendConnection sends a body slowly to a route
// with bufferRequestBody: no backend connection is opened until the whole
// body is in, and the backend gets it with a Content-Length (issue 7 class
// 7; nginx's proxy_request_buffering).
func TestBufferedBodyHoldsNoBackendConnection(t *testing.T) {
	cb := newCountingBackend(t)
	_, web, _ := startProxy(t, bodyConfig(cb.addr))
	c, br := dialWeb(t, web)
	io.WriteString(c, "POST /buffered HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	for _, part := range []string{"3\r\nabc\r\n", "4\r\ndefg\r\n"} {
		io.WriteString(c, part)
		// The proxy has what was sent so far: a request that the backend
		// saw now would show up by the time an unrelated request returns.
		if r := plainGet(t, web, "/other"); r != 200 {
			t.Fatalf("GET /other: %d", r)
		}
		if n := cb.requests.Load(); n != 1 {
			t.Fatalf("after a partial body: backend saw %d requests (the GETs'), want 1 per GET so far", n)
		}
		cb.requests.Add(-1)
	}
	io.WriteString(c, "0\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "length 7 te [] body abcdefg" {
		t.Fatalf("backend saw %q, want the whole body with a Content-Length", b)
	}
}

// plainGet sends one GET on its own connection and returns the status.
func plainGet(t *testing.T, web, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + web + path)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestBodyLimitsAndBuffering(t *testing.T) {
	cb := newCountingBackend(t)
	_, web, _ := startProxy(t, bodyConfig(cb.addr))
	for _, tc := range []struct {
		name, req string
		status    int
		body      string // what the backend says it got, when it got it
	}{
		{"length over the limit: 413 before the backend", "POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n123456789", 413, ""},
		{"length at the limit", "POST /limited HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n12345678", 200, "length 8 te [] body 12345678"},
		{"chunked over the limit", "POST /limited HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n5\r\n67890\r\n0\r\n\r\n", 413, ""},
		{"chunked within the buffer: sent with a length", "POST /buffered HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n12345\r\n0\r\n\r\n", 200, "length 5 te [] body 12345"},
		{"chunked beyond the buffer: streamed", "POST /buffered HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n0123456789abcdefghij\r\n0\r\n\r\n", 200, "length -1 te [chunked] body 0123456789abcdefghij"},
		{"length beyond the buffer: streamed", "POST /buffered HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n0123456789abcdefghij", 200, "length 20 te [] body 0123456789abcdefghij"},
		{"chunked beyond buffer and limit", "POST /buffered HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n" + strings.Repeat("x", 65) + "\r\n0\r\n\r\n", 413, ""},
		{"buffer = limit refuses what it cannot buffer", "POST /refusing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n9\r\n123456789\r\n0\r\n\r\n", 413, ""},
		{"malformed chunk while buffering", "POST /buffered HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cb.requests.Load()
			resp, body := rawRoundTrip(t, web, tc.req)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status != 200 && !resp.Close {
				t.Errorf("a refused body must close the connection")
			}
			if tc.body != "" && body != tc.body {
				t.Errorf("backend got %q, want %q", body, tc.body)
			}
			if tc.status == 413 && tc.name[:6] == "length" && cb.requests.Load() != before {
				t.Errorf("the backend saw a request whose length was over the limit")
			}
		})
	}
}

// TestExpectContinueOverLimit: a client that waits for 100 Continue before
// a body that is too large gets the 413 instead, and never sends it (RFC
// 9110 §10.1.1).
func TestExpectContinueOverLimit(t *testing.T) {
	cb := newCountingBackend(t)
	_, web, _ := startProxy(t, bodyConfig(cb.addr))
	resp, _ := rawRoundTrip(t, web, "POST /limited HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n")
	if resp.StatusCode != 413 {
		t.Fatalf("status %d, want 413 (and no 100 Continue first)", resp.StatusCode)
	}
}

// A request's fields are slices of its head, in the buffer that reading
// the body reuses. A POST whose body, arriving after the head, began with
// "HEAD" turned into a HEAD where it lay: its response went out with its
// Content-Length but without its content, and the client's connection
// read the next response as this one's body; behind a front proxy that
// shares connections among users, that answers one user with another's
// response (response queue poisoning: Kettle, "HTTP/2: The Sequel is
// Always Worse", Black Hat USA 2021). Found by FuzzRequest, whose check
// read the request after its body. RFC 9110 §9.3.2: only a HEAD's
// response has no content.
func TestRequestBodyCannotRewriteItsHead(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+string(b))
	}))
	defer be.Close()
	for _, buffered := range []bool{false, true} {
		cfg := webConfig(hostOf(be))
		if buffered {
			cfg = strings.Replace(cfg, "    backend: app\n", "    backend: app\n    bufferRequestBody: 64KiB\n", 1)
		}
		_, web, _ := startProxy(t, cfg)
		c, br := dialWeb(t, web)
		for _, body := range []string{"HEADxxxx", "GET /x HTTP/1.1\r\n\r\n"} {
			fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
			waitConsumed(t, c) // the head is read alone, the body after
			io.WriteString(c, body)
			resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != "POST "+body {
				t.Fatalf("buffered %v, body %q: response %q, %v; want %q", buffered, body, got, err, "POST "+body)
			}
		}
	}
}
