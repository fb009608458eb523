package proxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy/route"
)

// captureConn is a client's side of a connection that keeps what the
// client writes and answers its reads with EOF: a TLS client's handshake
// writes its ClientHello, then fails.
type captureConn struct {
	net.Conn // nil: only what tls.Client uses is implemented
	out      bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *captureConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *captureConn) Close() error                     { return nil }
func (c *captureConn) SetDeadline(time.Time) error      { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error  { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }
func (c *captureConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *captureConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// clientHello returns the records of the ClientHello crypto/tls's client
// sends with cfg.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &captureConn{}
	tls.Client(c, cfg).Handshake()
	if c.out.Len() == 0 {
		t.Fatal("the client wrote no ClientHello")
	}
	return c.out.Bytes()
}

// reframe splits the handshake message carried by hello's records into
// records of at most size bytes each.
func reframe(hello []byte, size int) []byte {
	var msg []byte
	for rest := hello; len(rest) >= 5; {
		n := int(rest[3])<<8 | int(rest[4])
		msg = append(msg, rest[5:5+n]...)
		rest = rest[5+n:]
	}
	var out []byte
	for len(msg) > 0 {
		k := min(size, len(msg))
		out = append(out, 22, 3, 1, byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

// stdServerName is what crypto/tls's server reads of a client's first
// flight in: the server name its ClientHelloInfo gives, and whether it got
// that far (it parsed a ClientHello).
func stdServerName(in []byte) (string, bool) {
	name, called := "", false
	c := &replayConn{in: bytes.NewReader(in)}
	tls.Server(c, &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
		name, called = chi.ServerName, true
		return nil, errors.New("stop here")
	}}).Handshake()
	return name, called
}

// replayConn is a server's side of a connection whose client sent in and
// then nothing more; what the server writes is dropped.
type replayConn struct {
	captureConn
	in *bytes.Reader
}

func (c *replayConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *replayConn) Write(p []byte) (int, error) { return len(p), nil }

// readClientHello reads the server name from real ClientHellos (crypto/
// tls's, with and without SNI, with its post-quantum key share, which
// makes the hello longer than 1,200 bytes), however their handshake
// message is split into records (RFC 8446 §5.1: down to one byte a
// record); it takes the hello's records and no byte more (the backend
// gets the rest as it comes); it refuses what is not a TLS handshake, and
// a hello larger than its bound.
func TestReadClientHello(t *testing.T) {
	for _, tc := range []struct {
		what, sni string
		cfg       *tls.Config
	}{
		{"a name", "shop.example", &tls.Config{ServerName: "shop.example"}},
		{"no SNI (an address)", "", &tls.Config{ServerName: "192.0.2.1", InsecureSkipVerify: true}},
		{"TLS 1.2 only", "old.example", &tls.Config{ServerName: "old.example", MaxVersion: tls.VersionTLS12}},
		{"post-quantum key share", "pq.example", &tls.Config{ServerName: "pq.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}}},
	} {
		hello := clientHello(t, tc.cfg)
		for _, size := range []int{1 << 14, 512, 100, 7, 1} {
			in := reframe(hello, size)
			if name, ok := stdServerName(in); !ok || name != tc.sni {
				t.Fatalf("%s, records of %d: crypto/tls reads %q (%v): the test's hello is wrong", tc.what, size, name, ok)
			}
			after := []byte("the rest of the stream")
			r := bytes.NewReader(append(append([]byte(nil), in...), after...))
			raw, name, err := readClientHello(r, maxClientHello)
			if err != nil || name != tc.sni {
				t.Fatalf("%s, records of %d bytes: %q %v, want %q", tc.what, size, name, err, tc.sni)
			}
			if !bytes.Equal(raw, in) {
				t.Fatalf("%s, records of %d bytes: took %d bytes, want the hello's %d", tc.what, size, len(raw), len(in))
			}
			if rest, _ := io.ReadAll(r); !bytes.Equal(rest, after) {
				t.Fatalf("%s: read beyond the hello: %q left", tc.what, rest)
			}
		}
	}
	hello := clientHello(t, &tls.Config{ServerName: "big.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}})
	for _, tc := range []struct {
		what string
		in   []byte
		max  int
		want error
	}{
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), maxClientHello, errNotTLS},
		{"an alert record", []byte{21, 3, 1, 0, 2, 2, 40}, maxClientHello, errNotTLS},
		{"an empty handshake record", []byte{22, 3, 1, 0, 0}, maxClientHello, errBadClientHello},
		{"a ServerHello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, maxClientHello, errNotTLS},
		{"larger than the bound", hello, len(hello) - 1, errHelloTooLarge},
		{"a hello cut short", hello[:len(hello)-10], maxClientHello, io.ErrUnexpectedEOF},
	} {
		if _, _, err := readClientHello(bytes.NewReader(tc.in), tc.max); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}
}

// FuzzClientHello holds readClientHello to crypto/tls's server: whatever
// first flight crypto/tls parses a ClientHello from (its
// GetConfigForClient is called), readClientHello takes too, with the same
// server name; readClientHello never reads past the records it
// returns, whatever the input; and clientHelloName, given the input
// whole, answers as readClientHello does.
func FuzzClientHello(f *testing.F) {
	for _, cfg := range []*tls.Config{
		{ServerName: "shop.example"},
		{ServerName: "192.0.2.1", InsecureSkipVerify: true},
		{ServerName: "old.example", MaxVersion: tls.VersionTLS12},
		{ServerName: "pq.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}},
	} {
		hello := clientHello(f, cfg)
		f.Add(hello)
		f.Add(reframe(hello, 50))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		raw, name, err := readClientHello(r, maxClientHello)
		if read := len(in) - r.Len(); read != len(raw) || !bytes.Equal(raw, in[:read]) {
			t.Fatalf("read %d bytes, returned %d", read, len(raw))
		}
		if err == nil && strings.HasSuffix(name, ".") {
			t.Fatalf("a name with a trailing dot: %q", name)
		}
		if stdName, ok := stdServerName(in); ok && (err != nil || name != stdName) {
			t.Fatalf("crypto/tls reads server name %q; readClientHello %q, %v", stdName, name, err)
		}
		// The stream loop's parse of what it has read answers as the
		// read does, error for error.
		if loopName, loopErr := clientHelloName(in, maxClientHello); loopName != name || fmt.Sprint(loopErr) != fmt.Sprint(err) {
			t.Fatalf("clientHelloName: %q, %v; readClientHello: %q, %v", loopName, loopErr, name, err)
		}
		// The stream loop's helloScan, fed what has come so far, says
		// "whole" once as much has come as readClientHello reads before
		// it stops waiting for more (it reads in order, so any less
		// would leave it waiting), never before.
		read := len(raw)
		waiting := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		var h helloScan
		for i := 0; i <= read; i++ {
			if whole, want := h.whole(in[:i]), i == read && !waiting; whole != want {
				t.Fatalf("after %d bytes (readClientHello stops after %d: %v): helloScan says whole %t", i, read, err, whole)
			}
		}
	})
}

// tlsEcho serves TLS as name (a self-signed certificate of that name) on
// loopback and answers each connection "I am NAME\n"; it returns its
// address.
func tlsEcho(t *testing.T, name string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	c := selfSigned(t, name, key)
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	return serveConns(t, ln, func(c net.Conn) { io.WriteString(c, "I am "+name+"\n") })
}

// A tcp listener with tls.mode passthrough (issue 24; nginx's
// ssl_preread, the Gateway API's TLSRoute Passthrough) routes each TLS
// connection by its ClientHello's server name, exact before "*.", a route
// without host taking the rest and hellos without SNI, and hands it to
// the backend whole, ClientHello included: the client completes its
// handshake with the backend's own certificate (baton holds no key). A
// name no route takes, or a connection that is not TLS, is closed with
// nothing sent.
func TestTLSPassthrough(t *testing.T) {
	a, b, rest := tlsEcho(t, "a.example"), tlsEcho(t, "x.b.example"), tlsEcho(t, "rest.example")
	cfg := fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: echo
    address: @TCP@
    protocol: tcp
    tls: {mode: passthrough}
backends:
  - {name: a, static: [%q]}
  - {name: b, static: [%q]}
  - {name: rest, static: [%q]}
routes:
  - {listener: echo, host: a.example, backend: a}
  - {listener: echo, hostnames: ["*.b.example"], backend: b}
  - {listener: echo, backend: rest}
`, a, b, rest)
	_, _, withRest := startProxy(t, cfg)
	_, _, hostsOnly := startProxy(t, strings.Replace(cfg, "  - {listener: echo, backend: rest}\n", "", 1))
	tcp := withRest
	dial := func(sni string, pq bool) (string, error) {
		cc := &tls.Config{ServerName: sni, InsecureSkipVerify: true}
		if pq {
			cc.CurvePreferences = []tls.CurveID{tls.X25519MLKEM768} // a hello of more than 1,200 bytes
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", tcp, cc)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err := io.ReadAll(c)
		return strings.TrimSpace(string(line)), err
	}
	for _, tc := range []struct {
		sni  string
		pq   bool
		want string
	}{
		{"a.example", false, "I am a.example"},
		{"A.Example", false, "I am a.example"},
		{"x.b.example", true, "I am x.b.example"},
		{"other.example", false, "I am rest.example"},
		{"b.example", false, "I am rest.example"}, // "*.b.example" takes a label more
		{"127.0.0.1", false, "I am rest.example"}, // no SNI (crypto/tls sends none for an address)
	} {
		got, err := dial(tc.sni, tc.pq)
		if err != nil || got != tc.want {
			t.Errorf("SNI %s: %q %v, want %q", tc.sni, got, err, tc.want)
		}
	}
	// Without the route for the rest, no route takes these: closed with
	// nothing sent (no alert).
	tcp = hostsOnly
	for _, sni := range []string{"other.example", "127.0.0.1"} {
		if got, err := dial(sni, false); err == nil || !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
			t.Errorf("SNI %s, which no route takes: %q %v, want the connection closed", sni, got, err)
		}
	}
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
	if b, err := io.ReadAll(c); len(b) != 0 {
		t.Errorf("a connection that is not TLS: answered %q %v", b, err)
	}
}

// A listener that terminates TLS passes the connections of some hosts
// through instead (route.PassthroughListener; ingress-nginx's
// ssl-passthrough, which reads the ClientHello before nginx does): a
// server name that a passthrough rule takes reaches its backend whole,
// the backend's own certificate answering; any other is terminated here
// and served as HTTP, HTTP/2 included, the ClientHello read twice.
func TestPassthroughBesideTermination(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app "+r.Proto) }))
	t.Cleanup(app.Close)
	pass := tlsEcho(t, "pass.example")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(strings.Replace(webConfig(hostOf(app)), "@WEB@", ln.Addr().String(), 1)))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cfg.Listeners[0].TLS = &config.ListenerTLS{Certificates: []config.Certificate{selfSigned(t, "web.example", key)}, MinVersion: config.DefaultTLSMinVersion}
	p := startProxyConfig(t, cfg, []ipc.Listener{{ListenerInfo: ipc.ListenerInfo{Name: "web"}, Listeners: []net.Listener{ln}}})
	err = p.ApplyRouting(context.Background(), routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "k8s/pass", Static: []string{pass}}},
		Rules:    []route.Rule[string]{{Name: "ingress default/pass passthrough", Listener: route.PassthroughListener("web"), Hostnames: []string{"pass.example"}, Backends: []route.Backend[string]{{Target: "k8s/pass", Weight: 1}}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{ServerName: "pass.example", InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, _ := io.ReadAll(c)
	c.Close()
	if got := c.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "pass.example" || string(line) != "I am pass.example\n" {
		t.Errorf("SNI pass.example: certificate of %s, %q; want the backend's own", got, line)
	}
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "web.example", InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatalf("SNI web.example (h2 %v): %v", h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]; resp.Proto != want || string(b) != "app HTTP/1.1" || resp.TLS.PeerCertificates[0].Subject.CommonName != "web.example" {
			t.Errorf("SNI web.example: %s %q from %s, want %s, the app's answer, baton's certificate", resp.Proto, b, resp.TLS.PeerCertificates[0].Subject.CommonName, want)
		}
	}
}
