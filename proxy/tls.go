package proxy

import (
	"crypto"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/opensslrsa"
	"go.uber.org/zap"
)

// newTLSConfig builds a listener's TLS server config from the key material
// the supervisor read (the worker reads no file). alpn lists the protocols
// to offer, in order of preference.
func (p *Proxy) newTLSConfig(lc *config.ListenerTLS, alpn []string) (*tls.Config, error) {
	min, _ := config.TLSVersion(lc.MinVersion)
	tc := &tls.Config{MinVersion: min, NextProtos: alpn}
	for i, c := range lc.Certificates {
		pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
		if err != nil {
			return nil, fmt.Errorf("tls certificate %d (%s): %w", i, c.CertFile, err)
		}
		if k, ok := pair.PrivateKey.(*rsa.PrivateKey); ok && opensslrsa.Built {
			pair.PrivateKey = p.opensslSigner(k)
		}
		// The first is the default; SNI picks among them by their names.
		tc.Certificates = append(tc.Certificates, pair)
	}
	if len(lc.ClientCAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(lc.ClientCAPEM) {
			return nil, fmt.Errorf("tls clientCA %s: no certificate", lc.ClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// opensslSigner returns k held by OpenSSL, in a binary built with it, or
// k itself when OpenSSL's libcrypto cannot be used here; it logs which,
// once per worker.
func (p *Proxy) opensslSigner(k *rsa.PrivateKey) crypto.Signer {
	s, err := opensslrsa.New(k)
	p.opensslOnce.Do(func() {
		if err != nil {
			p.log.Warn("RSA keys sign in Go, not OpenSSL", zap.Error(err))
			return
		}
		v, _ := opensslrsa.Version()
		p.log.Info("RSA keys sign in OpenSSL", zap.String("openssl", v))
	})
	if err != nil {
		return k
	}
	return s
}

// tlsVersionName is a TLS version as the access log writes it.
func tlsVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "1.3"
	case tls.VersionTLS12:
		return "1.2"
	}
	return "other"
}

// setTicketKeys installs the supervisor's session-ticket keys (newest
// first) in every TLS config, so that sessions resume across workers and
// generations. Without keys, crypto/tls keeps its own, per process.
func (p *Proxy) setTicketKeys(keys [][]byte) {
	var ks [][32]byte
	for _, k := range keys {
		if len(k) == 32 {
			ks = append(ks, [32]byte(k))
		}
	}
	if len(ks) == 0 {
		return
	}
	for _, tc := range p.tlsConfigs {
		tc.SetSessionTicketKeys(ks)
	}
}
