package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// v2Header is a PROXY protocol version 2 header for TCP over IPv4 from
// 198.51.100.20:40000 to 192.0.2.1:443.
var v2Header = []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c" +
	"\xc6\x33\x64\x14\xc0\x00\x02\x01\x9c\x40\x01\xbb")

// startHAProxy runs HAProxy in TCP mode in front of baton: v2at passes
// connections to to with send-proxy-v2, v1at with send-proxy.
func startHAProxy(t *testing.T, to, v1at, v2at string) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatal("haproxy is not installed (make test installs it: scripts/testdeps.sh)")
	}
	cfg := fmt.Sprintf(`global
  maxconn 100
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend v1
  bind %s
  default_backend v1
frontend v2
  bind %s
  default_backend v2
backend v1
  server baton %s send-proxy
backend v2
  server baton %s send-proxy-v2
`, v1at, v2at, to, to)
	path := t.TempDir() + "/haproxy.cfg"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-f", path, "-db")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, a := range []string{v1at, v2at} {
		waitFor(t, 10*time.Second, "haproxy listening on "+a, func() bool {
			c, err := net.Dial("tcp", a)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
}

// TestProxyProtocol: a listener with proxyProtocol: true takes the
// client's address from a PROXY header, version 1 or 2, before TLS
// (HTTP/1.1 and HTTP/2 by ALPN), and closes a connection that has none.
// The headers come from HAProxy itself (send-proxy, send-proxy-v2), whose
// documentation is the protocol's spec, and from a client that writes its
// own; a tcp listener reads them too.
func TestProxyProtocol(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	cfg := s.config(be, options{tcp: true}, "")
	cfg = strings.Replace(cfg, "    protocol: http\n    tls:", "    protocol: http\n    proxyProtocol: true\n    tls:", 1)
	cfg = strings.Replace(cfg, "    protocol: tcp\n", "    protocol: tcp\n    proxyProtocol: true\n", 1)
	b := startBaton(t, cfg)
	secure, echo := b.Address("websecure"), b.Address("echo")

	// xff asks /headers over TLS on a connection dial opens, and returns
	// the X-Forwarded-For the backend saw.
	xff := func(t *testing.T, h2 bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) string {
		t.Helper()
		tr := &http.Transport{DialContext: dial, TLSClientConfig: s.client("a.example"), ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + secure + "/headers")
		if err != nil {
			t.Fatalf("h2 %t: %v", h2, err)
		}
		defer resp.Body.Close()
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
			t.Errorf("HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
		}
		body, _ := io.ReadAll(resp.Body)
		for line := range strings.SplitSeq(string(body), "\r\n") {
			if k, v, ok := strings.Cut(line, ": "); ok && strings.EqualFold(k, "X-Forwarded-For") {
				return v
			}
		}
		t.Fatalf("no X-Forwarded-For in %q", body)
		return ""
	}

	t.Run("own header", func(t *testing.T) {
		for _, h2 := range []bool{false, true} {
			got := xff(t, h2, func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err == nil {
					_, err = c.Write(v2Header)
				}
				return c, err
			})
			if got != "198.51.100.20" {
				t.Errorf("h2 %t: X-Forwarded-For %q, want the header's 198.51.100.20", h2, got)
			}
		}
	})

	t.Run("haproxy", func(t *testing.T) {
		v1at, v2at := freePort(t), freePort(t)
		startHAProxy(t, secure, v1at, v2at)
		// The client connects to HAProxy from 127.0.0.5; baton sees
		// HAProxy's 127.0.0.1, and the header says 127.0.0.5.
		from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 5)}}
		for _, via := range []string{v1at, v2at} {
			for _, h2 := range []bool{false, true} {
				got := xff(t, h2, func(ctx context.Context, network, _ string) (net.Conn, error) {
					return from.DialContext(ctx, network, via)
				})
				if got != "127.0.0.5" {
					t.Errorf("via HAProxy %s, h2 %t: X-Forwarded-For %q, want the client's 127.0.0.5", via, h2, got)
				}
			}
		}

		// The tcp listener, behind HAProxy too.
		v1tcp, v2tcp := freePort(t), freePort(t)
		startHAProxy(t, echo, v1tcp, v2tcp)
		for _, via := range []string{v1tcp, v2tcp} {
			c, err := net.Dial("tcp", via)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "ping\n")
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != "ping\n" {
				t.Errorf("tcp listener via HAProxy %s: %q, %v; want the echo", via, line, err)
			}
			c.Close()
		}
	})

	t.Run("no header", func(t *testing.T) {
		// A client that reaches the listener directly gets no TLS, no
		// answer: the connection closes.
		c, err := net.Dial("tcp", secure)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		conn := tls.Client(c, s.client("a.example"))
		if err := conn.Handshake(); err == nil {
			t.Errorf("a TLS handshake without a PROXY header succeeded")
		}
		// Counted, in baton status (and baton_proxy_protocol_errors_total).
		waitFor(t, 10*time.Second, "status totals.proxyProtocolErrors ≥ 1", func() bool {
			return b.Status().Totals.ProxyProtocolErrors >= 1
		})
	})
}
