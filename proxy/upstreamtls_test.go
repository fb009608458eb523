package proxy

import (
	"bufio"
	"crypto/tls"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// tlsBackend is an HTTPS backend (httptest's certificate: example.com,
// 127.0.0.1, ::1) that counts its connections, and its CA as a file.
func tlsBackend(t *testing.T) (srv *httptest.Server, caFile string, conns *atomic.Int64) {
	conns = new(atomic.Int64)
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "over "+map[bool]string{true: "tls", false: "plain"}[r.TLS != nil])
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	return srv, caFile, conns
}

// withBackendTLS adds tls settings to webConfig's backend.
func withBackendTLS(cfg, settings string) string {
	return strings.Replace(cfg, "    connectTimeout: 1s\n", "    connectTimeout: 1s\n    tls: "+settings+"\n", 1)
}

// TestUpstreamTLS: a backend with tls is reached over HTTPS, verified
// against caFile with the endpoint's address or serverName as the name,
// from HTTP/1.1 (its pooled connections reused) and HTTP/2 frontends; a
// certificate that does not verify is a 502.
func TestUpstreamTLS(t *testing.T) {
	srv, caFile, conns := tlsBackend(t)
	addr := strings.TrimPrefix(srv.URL, "https://")
	for _, tc := range []struct {
		name, settings string
		status         int
	}{
		{"caFile, the address as the name", `{caFile: "` + caFile + `"}`, 200},
		{"caFile and serverName", `{caFile: "` + caFile + `", serverName: example.com}`, 200},
		{"a serverName the certificate lacks", `{caFile: "` + caFile + `", serverName: other.example}`, 502},
		{"the system's roots", `{}`, 502},
		{"insecureSkipVerify", `{insecureSkipVerify: true}`, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, web, _ := startProxy(t, withBackendTLS(webConfig(addr), tc.settings))
			before := conns.Load()
			for range 20 {
				resp, err := http.Get("http://" + web + "/")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d (%q), want %d", resp.StatusCode, body, tc.status)
				}
				if tc.status == 200 && string(body) != "over tls" {
					t.Fatalf("backend answered %q", body)
				}
			}
			if n := conns.Load() - before; tc.status == 200 && n != 1 {
				t.Errorf("20 requests took %d upstream connections, want 1 (reused)", n)
			}

			if tc.status != 200 {
				return
			}
			var protos http.Protocols
			protos.SetUnencryptedHTTP2(true)
			client := &http.Client{Transport: &http.Transport{Protocols: &protos}}
			resp, err := client.Get("http://" + web + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 || string(body) != "over tls" {
				t.Errorf("h2c frontend: %s %d %q", resp.Proto, resp.StatusCode, body)
			}
		})
	}
}

// batchConn holds what is written until the next read (or Flush): two
// TLS records written one after the other leave in one segment.
type batchConn struct {
	net.Conn
	buf []byte
}

func (c *batchConn) Write(p []byte) (int, error) { c.buf = append(c.buf, p...); return len(p), nil }

func (c *batchConn) Flush() error {
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	return err
}

func (c *batchConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		if err := c.Flush(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(p)
}

// TestUpstreamTLSStrayBytes: a backend that sends more than its response
// over TLS, in a record of its own (a second response, as a desync would),
// does not get its connection reused: the record that TLS holds, unread by
// the response's reader and no longer on the socket, never reaches the
// next client.
func TestUpstreamTLSStrayBytes(t *testing.T) {
	srv, _, _ := tlsBackend(t) // for its certificate
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer raw.Close()
				bc := &batchConn{Conn: raw}
				c := tls.Server(bc, &tls.Config{Certificates: srv.TLS.Certificates})
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nevil!")
					bc.Flush()
				}
			}()
		}
	}()
	_, web, _ := startProxy(t, withBackendTLS(webConfig(ln.Addr().String()), `{insecureSkipVerify: true}`))
	for i := range 5 {
		resp, err := http.Get("http://" + web + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			t.Fatalf("request %d got %q: another response's bytes", i, body)
		}
	}
	if n := accepted.Load(); n != 5 {
		t.Errorf("%d upstream connections for 5 requests, want 5 (none reused after stray bytes)", n)
	}
}
