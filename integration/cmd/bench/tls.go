package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/baton-proxy/baton/integration/internal/load"
)

// makeCerts writes a server certificate for bench.example, self-signed,
// with an ECDSA P-256 key and with an RSA 2048 one: every target serves
// the same files.
func makeCerts(dir string) (map[string]tlsFiles, error) {
	out := map[string]tlsFiles{}
	for _, kind := range []string{"ecdsa", "rsa"} {
		var key crypto.Signer
		var err error
		if kind == "rsa" {
			key, err = rsa.GenerateKey(rand.Reader, 2048)
		} else {
			key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		}
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()),
			Subject:      pkix.Name{CommonName: "bench.example"},
			DNSNames:     []string{"bench.example"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			return nil, err
		}
		kder, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
		f := tlsFiles{cert: filepath.Join(dir, kind+".crt"), key: filepath.Join(dir, kind+".key"), combined: filepath.Join(dir, kind+".pem")}
		for path, b := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.combined: append(append([]byte{}, certPEM...), keyPEM...)} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				return nil, err
			}
		}
		out[kind] = f
	}
	return out, nil
}

// tlsResult is one target's TLS figures: new connections per second with
// full handshakes (ECDSA, RSA) and resumed ones, HTTP/1.1 keep-alive over
// TLS, and HTTP/2 over TLS.
type tlsResult struct {
	FullECDSA *load.Result `json:"fullEcdsa"`
	FullRSA   *load.Result `json:"fullRsa"`
	Resumed   *load.Result `json:"resumed"`
	KeepAlive *load.Result `json:"keepAlive"`
	H2        *load.Result `json:"h2"`
	// Passthrough: new TLS connections routed by SNI without being
	// terminated (the backend's handshake), where the target can.
	Passthrough *load.Result `json:"passthrough,omitempty"`
}

// accessLogResult is baton's keep-alive rate with the access log off and
// on (JSON to a file), taking turns, and the workers' CPU time per
// request.
type accessLogResult struct {
	Off *load.Result `json:"off"`
	On  *load.Result `json:"on"`
	// OffCPU and OnCPU are microseconds of worker CPU (user and system)
	// per request.
	OffCPU float64 `json:"offCpuMicros,omitempty"`
	OnCPU  float64 `json:"onCpuMicros,omitempty"`
}

// tlsHandoffs runs HTTPS load, keep-alive and new connections that resume
// their sessions, while reloading the target every ReloadEvery: failures,
// and how many new connections resumed across the reloads.
func (b *bench) tlsHandoffs(t target) (handoffRun, error) {
	return b.reloadUnderLoad(t, b.s.TLSHandoffRun, "-http", t.HTTPSAddr(), "-tls", "-tls-resume",
		"-keepalive", "4", "-newconn", "4", "-retry")
}
