package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestProxyProtocolListener: on a listener with proxyProtocol, the
// header's source address is the client (X-Forwarded-For), a LOCAL header
// leaves the peer's, and a connection without a header is closed unanswered
// (PROXY protocol spec §2.1: a receiver must not guess; nginx and HAProxy
// close on a "broken header").
func TestProxyProtocolListener(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	}))
	defer be.Close()
	cfg := strings.Replace(webConfig(hostOf(be)), "address: @WEB@", "address: @WEB@\n    proxyProtocol: true", 1)
	p, web, _ := startProxy(t, cfg)

	const req = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	exchange := func(t *testing.T, send string) (string, error) {
		t.Helper()
		c, err := net.Dial("tcp", web)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, send)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body), nil
	}
	for _, tc := range []struct{ name, header, xff string }{
		{"v1 TCP4", "PROXY TCP4 203.0.113.7 192.0.2.1 40000 80\r\n", "203.0.113.7"},
		{"v1 UNKNOWN", "PROXY UNKNOWN\r\n", "127.0.0.1"},
		{"v2 TCP6", "\r\n\r\n\x00\r\nQUIT\n\x21\x21\x00\x24" +
			"\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07" +
			"\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01" +
			"\x9c\x40\x00\x50", "2001:db8::7"},
		{"v2 LOCAL", "\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xff, err := exchange(t, tc.header+req)
			if err != nil || xff != tc.xff {
				t.Fatalf("backend saw X-Forwarded-For %q (%v), want %q", xff, err, tc.xff)
			}
		})
	}
	for _, tc := range []struct{ name, send string }{
		{"no header", req},
		{"a bare-LF header", "PROXY TCP4 203.0.113.7 192.0.2.1 40000 80\n" + req},
		{"a header for another address family", "PROXY TCP4 2001:db8::7 192.0.2.1 40000 80\r\n" + req},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := p.stats.proxyProtocolErrors.Load()
			if body, err := exchange(t, tc.send); err == nil {
				t.Fatalf("answered (%q); want the connection closed", body)
			}
			if after := p.stats.proxyProtocolErrors.Load(); after != before+1 {
				t.Errorf("proxyProtocolErrors %d, want %d", after, before+1)
			}
		})
	}
}
