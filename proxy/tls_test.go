package proxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/opensslrsa"
	"go.uber.org/zap"
)

// selfSigned returns a PEM certificate and key for name, with key.
func selfSigned(t *testing.T, name string, key crypto.Signer) config.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return config.Certificate{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
}

// Two certificates for one name, ECDSA first: a client that can verify
// ECDSA gets it, one that cannot gets the RSA one (docs/operations.md).
func TestTLSDualCertificates(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	tc, err := (&Proxy{log: zap.NewNop()}).newTLSConfig(&config.ListenerTLS{Certificates: []config.Certificate{selfSigned(t, "a.example", ec), selfSigned(t, "a.example", rk)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveHandshakes(t, tc)
	for _, tcase := range []struct {
		name   string
		client *tls.Config
		want   x509.PublicKeyAlgorithm
	}{
		{"any client", &tls.Config{ServerName: "a.example", InsecureSkipVerify: true}, x509.ECDSA},
		{"RSA only", &tls.Config{ServerName: "a.example", InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, x509.RSA},
	} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tcase.client)
		if err != nil {
			t.Fatalf("%s: %v", tcase.name, err)
		}
		if got := c.ConnectionState().PeerCertificates[0].PublicKeyAlgorithm; got != tcase.want {
			t.Errorf("%s: got a %v certificate, want %v", tcase.name, got, tcase.want)
		}
		c.Close()
	}
}

// serveHandshakes serves TLS handshakes with tc on a loopback port until
// the test ends, and returns its address.
func serveHandshakes(t *testing.T, tc *tls.Config) string {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	return serveConns(t, ln, func(c net.Conn) { c.(*tls.Conn).Handshake() })
}

// An RSA key signs in OpenSSL in a binary built with it, in Go otherwise,
// and either way the handshake's signature verifies at the client, in TLS
// 1.3 (CertificateVerify, RFC 8446 §4.4.3) and 1.2 (ServerKeyExchange, RFC
// 5246 §7.4.3). PKCS #1 v1.5, which Go's client never asks for, is
// checked in package opensslrsa.
func TestTLSRSASigner(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := (&Proxy{log: zap.NewNop()}).newTLSConfig(&config.ListenerTLS{Certificates: []config.Certificate{selfSigned(t, "r.example", rk)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, inGo := tc.Certificates[0].PrivateKey.(*rsa.PrivateKey); inGo == opensslrsa.Built {
		t.Fatalf("built with OpenSSL %v, key signs in Go %v", opensslrsa.Built, inGo)
	}
	addr := serveHandshakes(t, tc)
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: "r.example", InsecureSkipVerify: true, MinVersion: v, MaxVersion: v})
		if err != nil {
			t.Fatalf("TLS %x: %v", v, err)
		}
		c.Close()
	}
}

// A route provider's TLS listener serves the certificates of the routing
// (config.RoutingHead), by SNI, swapped inside the worker: a certificate
// added or rotated needs no handoff. A name of none is served the first;
// a wildcard takes one label; the ECDSA and RSA pair of one name serves a
// client the one it can verify; certificates for a listener that takes
// none from the routing are refused, the rest installed.
func TestProvidedCertificates(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	p := &Proxy{log: zap.NewNop(), provided: providedCerts{"ingress/https": new(atomic.Pointer[certSet])}}
	tc, err := p.newTLSConfig(&config.ListenerTLS{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.GetCertificate = p.provided.getCertificate("ingress/https")
	addr := serveHandshakes(t, tc)
	served := func(name string, rsaOnly bool) string {
		t.Helper()
		cc := &tls.Config{ServerName: name, InsecureSkipVerify: true}
		if rsaOnly {
			cc.MaxVersion, cc.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cc)
		if err != nil {
			return "handshake failed"
		}
		defer c.Close()
		leaf := c.ConnectionState().PeerCertificates[0]
		return leaf.DNSNames[0] + "/" + leaf.PublicKeyAlgorithm.String()
	}
	if got := served("a.example", false); got != "handshake failed" {
		t.Errorf("before any routing: %s", got)
	}
	err = p.applyCertificates(map[string][]config.Certificate{
		"ingress/https": {selfSigned(t, "a.example", ec), selfSigned(t, "a.example", rk), selfSigned(t, "*.b.example", ec)},
		"web":           {selfSigned(t, "c.example", ec)},
	}, nil)
	if err == nil || !strings.Contains(err.Error(), `listener "web"`) {
		t.Errorf("certificates for a listener that takes none: %v", err)
	}
	for _, tt := range []struct {
		name    string
		rsaOnly bool
		want    string
	}{
		{"a.example", false, "a.example/ECDSA"},
		{"A.example", true, "a.example/RSA"},
		{"x.b.example", false, "*.b.example/ECDSA"},
		{"y.x.b.example", false, "a.example/ECDSA"}, // one label only: the default
		{"", false, "a.example/ECDSA"},
	} {
		if got := served(tt.name, tt.rsaOnly); got != tt.want {
			t.Errorf("%q (RSA only %v): %s, want %s", tt.name, tt.rsaOnly, got, tt.want)
		}
	}
	// Rotated: the next routing's certificate serves, with no new
	// listener; one parsed already is kept.
	kept := p.parsedCerts
	if err := p.applyCertificates(map[string][]config.Certificate{"ingress/https": {selfSigned(t, "d.example", ec)}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := served("a.example", false); got != "d.example/ECDSA" {
		t.Errorf("after the rotation: %s", got)
	}
	if len(kept) != 3 || len(p.parsedCerts) != 1 {
		t.Errorf("parsed certificates kept: %d, then %d", len(kept), len(p.parsedCerts))
	}
}
