package integration

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
	"github.com/baton-proxy/baton/integration/internal/certs"
	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/supervisor"
)

// tlsSetup is a CA, two server certificates (a.example, ECDSA; b.example,
// RSA) and a client certificate, as files in dir.
type tlsSetup struct {
	ca                *certs.CA
	dir               string
	aCert, aKey       string
	bCert, bKey       string
	clientCA          string
	clientPEM, keyPEM []byte
}

func newTLSSetup(t *testing.T) *tlsSetup {
	s := &tlsSetup{ca: certs.NewCA(t, "baton test CA"), dir: t.TempDir()}
	c, k := s.ca.Issue(t, []string{"a.example"}, certs.Options{})
	s.aCert, s.aKey = certs.Write(t, s.dir, "a", c, k)
	c, k = s.ca.Issue(t, []string{"b.example"}, certs.Options{RSA: true})
	s.bCert, s.bKey = certs.Write(t, s.dir, "b", c, k)
	s.clientPEM, s.keyPEM = s.ca.Issue(t, []string{"client"}, certs.Options{Client: true})
	s.clientCA = s.dir + "/ca.pem"
	os.WriteFile(s.clientCA, s.ca.PEM, 0o644)
	return s
}

// config renders a config for be with an http listener "websecure" over
// TLS (and extra lines under its tls key), beside the plain one.
func (s *tlsSetup) config(be *backend.Server, o options, tlsExtra string) string {
	cfg := o.configYAML(be)
	listener := fmt.Sprintf(`  - name: websecure
    address: "127.0.0.1:0"
    protocol: http
    tls:
      certificates:
        - {certFile: %q, keyFile: %q}
        - {certFile: %q, keyFile: %q}
%s`, s.aCert, s.aKey, s.bCert, s.bKey, tlsExtra)
	cfg = strings.Replace(cfg, "listeners:\n", "listeners:\n"+listener, 1)
	return cfg + "  - listener: websecure\n    pathPrefix: /\n    backend: app\n"
}

// client returns a TLS client config that trusts the test CA, for name.
func (s *tlsSetup) client(name string) *tls.Config {
	return &tls.Config{RootCAs: s.ca.Pool, ServerName: name}
}

// TestTLSTermination: SNI picks the certificate (the first by default),
// HTTP/1.1 and HTTP/2 (ALPN) are served over TLS, the backend learns the
// scheme, a TLS TCP listener works, and a session resumes after every one
// of 20 handoffs (the supervisor's ticket keys).
func TestTLSTermination(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	o := options{workers: 2, reusePort: true}
	cfg := s.config(be, o, "")
	b := startBaton(t, cfg)
	addr := b.Address("websecure")

	for _, tc := range []struct{ sni, want string }{{"a.example", "a.example"}, {"b.example", "b.example"}, {"", "a.example"}} {
		conf := s.client(tc.sni)
		if tc.sni == "" {
			conf.InsecureSkipVerify = true // no name to verify: look at what came
		}
		c, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			t.Fatalf("SNI %q: %v", tc.sni, err)
		}
		if cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != tc.want {
			t.Errorf("SNI %q: certificate for %q, want %q", tc.sni, cn, tc.want)
		}
		c.Close()
	}

	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: s.client("a.example"), ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("https://" + addr + "/headers")
		if err != nil {
			t.Fatalf("h2 %t: %v", h2, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want || resp.StatusCode != 200 {
			t.Errorf("h2 %t: %s %d, want HTTP/%d 200", h2, resp.Proto, resp.StatusCode, want)
		}
		if !strings.Contains(strings.ToLower(string(body)), "x-forwarded-proto: https") {
			t.Errorf("h2 %t: the backend did not see X-Forwarded-Proto: https:\n%s", h2, body)
		}
		tr.CloseIdleConnections()
	}

	// Resumption across handoffs: one session cache, a new connection
	// after each handoff.
	cache := tls.NewLRUClientSessionCache(8)
	dial := func() bool {
		conf := s.client("a.example")
		conf.ClientSessionCache = cache
		c, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// A request and its answer: the TLS 1.3 ticket comes after the
		// handshake, and the client takes it while it reads.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
		io.ReadAll(c)
		return c.ConnectionState().DidResume
	}
	dial()
	resumed := 0
	for i := range 20 {
		if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
			t.Fatalf("handoff %d: %s %s", i, h.Outcome, h.Reason)
		}
		if dial() {
			resumed++
		}
	}
	t.Logf("sessions resumed after %d of 20 handoffs", resumed)
	if resumed != 20 {
		t.Errorf("sessions resumed after %d of 20 handoffs, want every one", resumed)
	}
}

// TestTLSClientCertificate: with clientCA, a client without a certificate
// is refused and one with a certificate the CA signed is served.
func TestTLSClientCertificate(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	cfg := s.config(be, options{}, fmt.Sprintf("      clientCA: %q\n", s.clientCA))
	b := startBaton(t, cfg)
	addr := b.Address("websecure")
	get := func(conf *tls.Config) (int, error) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: conf}, Timeout: 10 * time.Second}
		resp, err := c.Get("https://" + addr + "/")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := get(s.client("a.example")); err == nil {
		t.Errorf("no client certificate: %d, want the handshake refused", code)
	}
	conf := s.client("a.example")
	conf.Certificates = []tls.Certificate{certs.Pair(t, s.clientPEM, s.keyPEM)}
	if code, err := get(conf); err != nil || code != 200 {
		t.Errorf("with a client certificate: %d %v, want 200", code, err)
	}
}

// TestTLSBadInput: a reload with a missing certificate, a key that does
// not match, or minVersion below 1.2 is refused with the reason and the
// running generation keeps serving; an expired certificate is served with
// a warning; new files are served after a reload.
func TestTLSBadInput(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	cfg := s.config(be, options{}, "")
	b := startBaton(t, cfg)
	addr := b.Address("websecure")
	serial := func() string {
		c, err := tls.Dial("tcp", addr, s.client("a.example"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	for _, tc := range []struct{ name, cfg, reason string }{
		{"missing certificate", strings.Replace(cfg, s.aCert, s.dir+"/nope.crt", 1), "no such file"},
		{"key of another certificate", strings.Replace(cfg, s.aKey, s.bKey, 1), "does not match"},
		{"TLS 1.0", strings.Replace(cfg, "    tls:\n", "    tls:\n      minVersion: \"1.0\"\n", 1), "minVersion must be 1.2 or 1.3"},
	} {
		b.WriteConfig(tc.cfg)
		out, err := b.Ctl("reload")
		if err == nil || !strings.Contains(out, tc.reason) {
			t.Errorf("%s: reload %v %q, want refused with %q", tc.name, err, out, tc.reason)
		}
		if serial() != first {
			t.Errorf("%s: the refused reload changed the certificate served", tc.name)
		}
	}
	// Rotation: new files, a reload, the new certificate.
	c, k := s.ca.Issue(t, []string{"a.example"}, certs.Options{SerialNum: 4242})
	certs.Write(t, s.dir, "a", c, k)
	b.WriteConfig(cfg)
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload with new certificate files: %v %s", err, out)
	}
	if got := serial(); got != "4242" {
		t.Errorf("after the rotation the certificate served has serial %s, want 4242", got)
	}
	// Expired: served, with a warning.
	c, k = s.ca.Issue(t, []string{"a.example"}, certs.Options{NotAfter: -time.Hour})
	certs.Write(t, s.dir, "a", c, k)
	if out, err := b.Ctl("reload"); err != nil {
		t.Fatalf("reload with an expired certificate: %v %s", err, out)
	}
	waitFor(t, 10*time.Second, "a warning about the expired certificate", func() bool {
		return strings.Contains(b.Logs.String(), "expired on")
	})
}

// TestTLSOverTCP terminates TLS on a tcp listener: the backend echoes the
// plain bytes.
func TestTLSOverTCP(t *testing.T) {
	be := startBackend(t)
	s := newTLSSetup(t)
	cfg := options{tcp: true}.configYAML(be)
	cfg = strings.Replace(cfg, "    protocol: tcp\n", fmt.Sprintf("    protocol: tcp\n    tls:\n      certificates:\n        - {certFile: %q, keyFile: %q}\n", s.aCert, s.aKey), 1)
	b := startBaton(t, cfg)
	c, err := tls.Dial("tcp", b.Address("echo"), s.client("a.example"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "ping\n")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo over TLS: %q %v", buf, err)
	}
}

// TestUpstreamTLS: a backend with tls is reached over HTTPS, its
// certificate verified against caFile for serverName; a CA that did not
// sign it is a 502, with the reason in the log.
func TestUpstreamTLS(t *testing.T) {
	ca := certs.NewCA(t, "backend CA")
	c, k := ca.Issue(t, []string{"backend.example"}, certs.Options{})
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s over TLS %t", r.URL.Path, r.TLS != nil)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	caFile := dir + "/backend-ca.pem"
	os.WriteFile(caFile, ca.PEM, 0o644)
	other := dir + "/other-ca.pem"
	os.WriteFile(other, certs.NewCA(t, "another CA").PEM, 0o644)

	cfg := fmt.Sprintf(`controlSocket: @DIR@/run/control.sock
listeners:
  - name: web
    address: "127.0.0.1:0"
backends:
  - name: good
    static: [%[1]q]
    tls: {serverName: backend.example, caFile: %[2]q}
  - name: bad
    static: [%[1]q]
    tls: {serverName: backend.example, caFile: %[3]q}
routes:
  - listener: web
    pathPrefix: /good
    backend: good
  - listener: web
    pathPrefix: /bad
    backend: bad
`, strings.TrimPrefix(srv.URL, "https://"), caFile, other)
	b := startBaton(t, cfg)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + b.Address("web") + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/good"); code != 200 || body != "/good over TLS true" {
		t.Errorf("/good: %d %q, want 200 from the backend over TLS", code, body)
	}
	if code, _ := get("/bad"); code != 502 {
		t.Errorf("/bad (a CA that did not sign the backend's certificate): %d, want 502", code)
	}
	waitFor(t, 10*time.Second, "the upstream failure logged with its reason", func() bool {
		return strings.Contains(b.Logs.String(), "certificate signed by unknown authority")
	})
}

// TestTLSOpenSSLBuild: baton built as `make build OPENSSL=1` signs with
// its RSA key in OpenSSL's libcrypto (the workers load it, and say so),
// and clients that verify the chain and the handshake's signature are
// served over TLS 1.3 (RSA-PSS, RFC 8446 §4.4.3) and 1.2 (RFC 5246
// §7.4.3), before and after a handoff. The ECDSA certificate is untouched.
func TestTLSOpenSSLBuild(t *testing.T) {
	bin, err := harness.BuildBatonOpenSSL(t.TempDir(), raceEnabled)
	if err != nil {
		t.Fatal(err)
	}
	be := startBackend(t)
	s := newTLSSetup(t)
	b := harness.Start(t, bin, s.config(be, options{workers: 2, reusePort: true}, ""))
	addr := b.Address("websecure")
	get := func(name string, v uint16) {
		t.Helper()
		conf := s.client(name)
		conf.MinVersion, conf.MaxVersion = v, v
		tr := &http.Transport{TLSClientConfig: conf}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("%s, TLS %x: %v", name, v, err)
		}
		resp.Body.Close()
		if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; resp.StatusCode != 200 || cn != name {
			t.Errorf("%s, TLS %x: %d from %q", name, v, resp.StatusCode, cn)
		}
	}
	for round := range 2 {
		for _, w := range b.ActiveWorkers() {
			maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", w.PID))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(maps), "libcrypto.so") {
				t.Errorf("worker %d has not loaded libcrypto", w.PID)
			}
		}
		for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
			get("b.example", v)
			get("a.example", v)
		}
		if round == 0 {
			if h := b.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
				t.Fatalf("handoff: %s %s", h.Outcome, h.Reason)
			}
		}
	}
	if logs := b.Logs.String(); !strings.Contains(logs, "RSA keys sign in OpenSSL") {
		t.Errorf("no worker said its RSA keys sign in OpenSSL:\n%s", logs)
	}
}

// A tcp listener with tls.mode passthrough, with the real binary: each
// HTTPS client reaches the backend its server name routes to and verifies
// that backend's own certificate (baton holds no key), before and after
// a handoff; a name no route takes is closed without a word.
func TestTLSPassthrough(t *testing.T) {
	s := newTLSSetup(t)
	serve := func(name, cert, key string) string {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "backend "+name) }))
		ts.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
		ts.StartTLS()
		t.Cleanup(ts.Close)
		return strings.TrimPrefix(ts.URL, "https://")
	}
	a, b := serve("a", s.aCert, s.aKey), serve("b", s.bCert, s.bKey)
	be := startBackend(t)
	cfg := options{workers: 2, reusePort: true}.configYAML(be)
	cfg = strings.Replace(cfg, "listeners:\n", `listeners:
  - name: pass
    address: "127.0.0.1:0"
    protocol: tcp
    reusePort: true
    tls: {mode: passthrough}
`, 1)
	cfg = strings.Replace(cfg, "backends:\n", fmt.Sprintf("backends:\n  - {name: a, static: [%q]}\n  - {name: b, static: [%q]}\n", a, b), 1)
	cfg += "  - {listener: pass, host: a.example, backend: a}\n  - {listener: pass, host: b.example, backend: b}\n"
	bt := startBaton(t, cfg)
	addr := bt.Address("pass")
	get := func(name string) (string, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: s.client(name), DisableKeepAlives: true}}
		req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
		req.Host = name
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	check := func(when string) {
		t.Helper()
		for name, want := range map[string]string{"a.example": "backend a", "b.example": "backend b"} {
			if got, err := get(name); err != nil || got != want {
				t.Errorf("%s, SNI %s: %q %v, want %q", when, name, got, err, want)
			}
		}
		if got, err := get("c.example"); err == nil {
			t.Errorf("%s, SNI c.example, which no route takes: %q", when, got)
		}
	}
	check("first generation")
	if h := bt.SIGHUP(); h.Outcome != supervisor.OutcomeOK {
		t.Fatalf("handoff: %+v", h)
	}
	check("after a handoff")
}
