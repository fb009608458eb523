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
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
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
	tc, err := newTLSConfig(&config.ListenerTLS{Certificates: []config.Certificate{selfSigned(t, "a.example", ec), selfSigned(t, "a.example", rk)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	for _, tcase := range []struct {
		name   string
		client *tls.Config
		want   x509.PublicKeyAlgorithm
	}{
		{"any client", &tls.Config{ServerName: "a.example", InsecureSkipVerify: true}, x509.ECDSA},
		{"RSA only", &tls.Config{ServerName: "a.example", InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}}, x509.RSA},
	} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), tcase.client)
		if err != nil {
			t.Fatalf("%s: %v", tcase.name, err)
		}
		if got := c.ConnectionState().PeerCertificates[0].PublicKeyAlgorithm; got != tcase.want {
			t.Errorf("%s: got a %v certificate, want %v", tcase.name, got, tcase.want)
		}
		c.Close()
	}
}
