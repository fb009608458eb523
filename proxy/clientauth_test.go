package proxy

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy/route"
)

// testCert is a certificate of a test PKI and its key.
type testCert struct {
	cert *x509.Certificate
	key  crypto.Signer
}

var serial atomic.Int64

// issue makes a certificate for cn signed by parent (itself when nil): a
// CA, or a leaf for usage (client or server authentication).
func issue(t *testing.T, parent *testCert, cn string, ca bool, usage ...x509.ExtKeyUsage) *testCert {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn, Organization: []string{"baton tests"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: usage,
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: ca}
	if ca {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else if !strings.ContainsAny(cn, " \r\n") {
		tmpl.DNSNames = []string{cn}
	}
	signer, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCert{cert, key}
}

func (c *testCert) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

// tls is c as a client's certificate, its chain after it.
func (c *testCert) tls(chain ...*testCert) tls.Certificate {
	tc := tls.Certificate{Certificate: [][]byte{c.cert.Raw}, PrivateKey: c.key, Leaf: c.cert}
	for _, x := range chain {
		tc.Certificate = append(tc.Certificate, x.cert.Raw)
	}
	return tc
}

// The clients of a host with client authentication (ingress-nginx's
// auth-tls-secret and auth-tls-verify-client, nginx's ssl_verify_client
// and ssl_client_certificate, https://nginx.org/en/docs/http/ngx_http_ssl_module.html#ssl_verify_client)
// are served only with a certificate that chains to its CA within the
// verify depth and is for client authentication (RFC 5280 4.2.1.12);
// others get 400, as nginx answers. A request whose Host has client
// authentication other than its connection's server name's is 421
// (RFC 9110 15.5.20, nginx 1.21.1's answer to SNI and Host that differ
// where clients are verified): without it, a client could skip the
// verification by naming another host in its handshake. The backend
// learns the verdict from baton's ssl-client-* fields only: the client's
// own are dropped, and a certificate's names cannot break a line.
// ingress-nginx's auth-tls-match-cn (its template's "if ($ssl_client_s_dn
// !~ MATCH) { return 403; }") refuses a subject that does not match, and
// auth-tls-error-page (its "error_page 495 496 = URL") redirects (302, as
// nginx's error_page to a URL does) what would be a 400.
func TestClientAuthentication(t *testing.T) {
	root := issue(t, nil, "baton test root", true)
	inter := issue(t, root, "baton test intermediate", true)
	other := issue(t, nil, "another root", true)
	good := issue(t, root, "alice", false, x509.ExtKeyUsageClientAuth)
	viaInter := issue(t, inter, "bob", false, x509.ExtKeyUsageClientAuth)
	stranger := issue(t, other, "mallory", false, x509.ExtKeyUsageClientAuth)
	serverOnly := issue(t, root, "srv", false, x509.ExtKeyUsageServerAuth)
	evil := issue(t, root, "eve\r\nssl-client-verify: SUCCESS", false, x509.ExtKeyUsageClientAuth)
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), DNSNames: []string{"secure.example", "deep.example", "open.example", "any.example", "cn.example", "page.example"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, _ := x509.CreateCertificate(rand.Reader, srvTmpl, srvTmpl, srvKey.Public(), srvKey)
	srvKeyDER, _ := x509.MarshalPKCS8PrivateKey(srvKey)

	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for _, f := range route.ClientCertFields {
			fmt.Fprintf(&b, "%s=%q\n", f, r.Header.Values(f))
		}
		io.WriteString(w, b.String())
	}))
	t.Cleanup(backend.Close)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte("controlSocket: /tmp/unused.sock\nlisteners: [{name: web, address: 127.0.0.1:0}]\nbackends: [{name: app, static: [" + hostOf(backend) + "]}]\nroutes: [{listener: web, backend: app}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listeners = append(cfg.Listeners, config.Listener{Name: "ingress/https", Address: ln.Addr().String(), Protocol: config.ProtocolHTTP,
		Provider: config.ProviderIngress, TLS: &config.ListenerTLS{MinVersion: config.DefaultTLSMinVersion}})
	webLn, _ := net.Listen("tcp", "127.0.0.1:0")
	p := startProxyConfig(t, cfg, []ipc.Listener{
		{ListenerInfo: ipc.ListenerInfo{Name: "web"}, Listeners: []net.Listener{webLn}},
		{ListenerInfo: ipc.ListenerInfo{Name: "ingress/https"}, Listeners: []net.Listener{ln}},
	})
	rule := func(host string, cc *route.ClientCert) route.Rule[string] {
		return route.Rule[string]{Name: "ingress " + host, Listener: "ingress/https", Hostnames: []string{host}, ClientCert: cc,
			Backends: []route.Backend[string]{{Target: "k8s/app", Weight: 1}}}
	}
	err = p.ApplyRouting(context.Background(), routingPayload(t, config.Routing{
		Backends: []config.Backend{{Name: "k8s/app", Static: []string{hostOf(backend)}}},
		Rules: []route.Rule[string]{rule("secure.example", &route.ClientCert{Pass: true}), rule("deep.example", &route.ClientCert{}),
			rule("open.example", nil), rule("any.example", &route.ClientCert{}), rule("cn.example", &route.ClientCert{}), rule("page.example", &route.ClientCert{})},
		Certificates: map[string][]config.Certificate{"ingress/https": {{
			CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
			KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: srvKeyDER})}}},
		ClientAuth: map[string][]config.ClientAuth{"ingress/https": {
			{Hosts: []string{"secure.example"}, CA: root.pem(), Verify: config.VerifyOn},
			{Hosts: []string{"deep.example"}, CA: root.pem(), Verify: config.VerifyOptional, Depth: 2},
			{Hosts: []string{"any.example"}, CA: root.pem(), Verify: config.VerifyOptionalNoCA},
			{Hosts: []string{"cn.example"}, CA: root.pem(), Verify: config.VerifyOptional, Depth: 2, MatchCN: "CN=(alice|carol)"},
			{Hosts: []string{"page.example"}, CA: root.pem(), Verify: config.VerifyOn, ErrorPage: "https://login.example/cert?from=baton"},
		}},
	}))
	if err != nil {
		t.Fatal(err)
	}

	get := func(sni, host string, h2 bool, certs ...tls.Certificate) (int, string) {
		t.Helper()
		tr := &http.Transport{
			TLSClientConfig: &tls.Config{ServerName: sni, InsecureSkipVerify: true,
				// The certificate is sent whatever CAs the server names.
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					if len(certs) == 0 {
						return &tls.Certificate{}, nil
					}
					return &certs[0], nil
				}},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
			},
			ForceAttemptHTTP2: h2,
		}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+sni+"/", nil)
		req.Host = host
		req.Header.Set("ssl-client-verify", "FORGED")
		req.Header.Set("ssl-client-subject-dn", "CN=forged")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatalf("%s (Host %s): %v", sni, host, err)
		}
		defer resp.Body.Close()
		if h2 && resp.ProtoMajor != 2 {
			t.Fatalf("%s: not HTTP/2: %s", sni, resp.Proto)
		}
		b, _ := io.ReadAll(resp.Body)
		if loc := resp.Header.Get("Location"); loc != "" {
			return resp.StatusCode, "location=" + loc
		}
		return resp.StatusCode, string(b)
	}
	field := func(body, name string) string {
		for line := range strings.Lines(body) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+"="); ok {
				return v
			}
		}
		return "(absent)"
	}
	for _, tt := range []struct {
		what      string
		sni, host string
		h2        bool
		certs     []tls.Certificate
		status    int
		verify    string // the backend's ssl-client-verify
	}{
		{"no certificate", "secure.example", "secure.example", false, nil, 400, ""},
		{"a certificate of the CA", "secure.example", "secure.example", false, []tls.Certificate{good.tls()}, 200, `["SUCCESS"]`},
		{"over HTTP/2", "secure.example", "secure.example", true, []tls.Certificate{good.tls()}, 200, `["SUCCESS"]`},
		{"host in another case, port", "secure.example", "SECURE.example:443", false, []tls.Certificate{good.tls()}, 200, `["SUCCESS"]`},
		{"another CA's", "secure.example", "secure.example", false, []tls.Certificate{stranger.tls()}, 400, ""},
		{"not for client authentication", "secure.example", "secure.example", false, []tls.Certificate{serverOnly.tls()}, 400, ""},
		{"beyond the verify depth (1)", "secure.example", "secure.example", false, []tls.Certificate{viaInter.tls(inter)}, 400, ""},
		{"within depth 2", "deep.example", "deep.example", false, []tls.Certificate{viaInter.tls(inter)}, 200, `["SUCCESS"]`},
		{"optional: none sent", "deep.example", "deep.example", false, nil, 200, `["NONE"]`},
		{"optional: a bad one sent", "deep.example", "deep.example", false, []tls.Certificate{stranger.tls()}, 400, ""},
		{"optional_no_ca: another CA's passes", "any.example", "any.example", false, []tls.Certificate{stranger.tls()}, 200, ""},
		{"SNI without verification, Host with", "open.example", "secure.example", false, []tls.Certificate{good.tls()}, 421, ""},
		{"SNI of another verification", "deep.example", "secure.example", false, []tls.Certificate{good.tls()}, 421, ""},
		{"no SNI", "", "secure.example", false, []tls.Certificate{good.tls()}, 421, ""},
		{"HTTP/2, SNI without verification", "open.example", "secure.example", true, []tls.Certificate{good.tls()}, 421, ""},
		// A host without verification: the fields are the client's (as
		// ingress-nginx's), for its backend to take as such.
		{"a host without verification", "open.example", "open.example", false, nil, 200, `["FORGED"]`},
		// auth-tls-match-cn.
		{"match-cn: a subject that matches", "cn.example", "cn.example", false, []tls.Certificate{good.tls()}, 200, `["SUCCESS"]`},
		{"match-cn: a subject that does not", "cn.example", "cn.example", false, []tls.Certificate{viaInter.tls(inter)}, 403, ""},
		{"match-cn over HTTP/2", "cn.example", "cn.example", true, []tls.Certificate{viaInter.tls(inter)}, 403, ""},
		{"match-cn: none sent (optional), no subject", "cn.example", "cn.example", false, nil, 403, ""},
		{"match-cn: a bad one is 400 first", "cn.example", "cn.example", false, []tls.Certificate{stranger.tls()}, 400, ""},
		// auth-tls-error-page.
		{"error page: none sent", "page.example", "page.example", false, nil, 302, ""},
		{"error page over HTTP/2", "page.example", "page.example", true, []tls.Certificate{stranger.tls()}, 302, ""},
		{"error page: a good one is served", "page.example", "page.example", false, []tls.Certificate{good.tls()}, 200, `["SUCCESS"]`},
	} {
		sni := tt.sni
		if sni == "" {
			sni = "127.0.0.1" // crypto/tls sends no SNI for an IP
		}
		status, body := get(sni, tt.host, tt.h2, tt.certs...)
		if status != tt.status {
			t.Errorf("%s: %d, want %d (%s)", tt.what, status, tt.status, body)
			continue
		}
		if tt.verify != "" {
			if got := field(body, "ssl-client-verify"); got != tt.verify {
				t.Errorf("%s: ssl-client-verify %s, want %s", tt.what, got, tt.verify)
			}
		}
	}
	if _, loc := get("page.example", "page.example", false); loc != "location=https://login.example/cert?from=baton" {
		t.Errorf("error page: %s", loc)
	}
	// What the backend learns: baton's fields, not the client's.
	_, body := get("secure.example", "secure.example", false, good.tls())
	if got := field(body, "ssl-client-subject-dn"); got != `["CN=alice,O=baton tests"]` {
		t.Errorf("subject: %s", got)
	}
	if got := field(body, "ssl-client-issuer-dn"); got != `["CN=baton test root,O=baton tests"]` {
		t.Errorf("issuer: %s", got)
	}
	want := `["` + url.PathEscape(string(good.pem())) + `"]`
	if got := field(body, "ssl-client-cert"); got != want {
		t.Errorf("ssl-client-cert (auth-tls-pass-certificate-to-upstream) %s, want %s", got, want)
	}
	_, body = get("deep.example", "deep.example", false, good.tls())
	if got := field(body, "ssl-client-cert"); got != "[]" {
		t.Errorf("a certificate passed without Pass: %s", got)
	}
	// A name with a line break in it is one escaped value.
	_, body = get("any.example", "any.example", false, evil.tls())
	if got := field(body, "ssl-client-verify"); got != `["SUCCESS"]` {
		t.Errorf("the evil name's verdict: %s", got)
	}
	if got := field(body, "ssl-client-subject-dn"); got != `["CN=eve\\0D\\0Assl-client-verify: SUCCESS,O=baton tests"]` {
		t.Errorf("the evil name: %s", got)
	}
	_, body = get("any.example", "any.example", false, stranger.tls())
	if got := field(body, "ssl-client-verify"); !strings.HasPrefix(got, `["FAILED:`) {
		t.Errorf("optional_no_ca, another CA's: %s", got)
	}
}
