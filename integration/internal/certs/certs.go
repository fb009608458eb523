// Package certs makes test certificates: a CA, server certificates it
// signs (ECDSA P-256 or RSA 2048) and client certificates, as PEM files.
package certs

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
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority for tests.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
	Pool *x509.CertPool
}

// NewCA makes a CA.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	return ca
}

// Options shape a certificate.
type Options struct {
	RSA       bool          // RSA 2048 instead of ECDSA P-256
	Client    bool          // for client authentication
	NotAfter  time.Duration // from now; default a day; negative: expired
	SerialNum int64
}

// Issue makes a certificate for names and returns its PEM and its key's.
func (ca *CA) Issue(t testing.TB, names []string, o Options) (certPEM, keyPEM []byte) {
	t.Helper()
	var key crypto.Signer
	if o.RSA {
		key, _ = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if o.NotAfter == 0 {
		o.NotAfter = 24 * time.Hour
	}
	if o.SerialNum == 0 {
		o.SerialNum = time.Now().UnixNano()
	}
	usage := x509.ExtKeyUsageServerAuth
	if o.Client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(o.SerialNum),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     time.Now().Add(o.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// Write writes a certificate and its key into dir as name.crt and
// name.key, and returns their paths.
func Write(t testing.TB, dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Pair parses a certificate and key for a tls.Config.
func Pair(t testing.TB, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	p, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
