//go:build openssl && cgo

package opensslrsa

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"testing"
)

// TestSignVerifiesInGo: every signature OpenSSL makes verifies with Go's
// crypto/rsa, for each hash and padding TLS uses (RFC 8446 §4.2.3:
// rsa_pss_rsae_sha256/384/512 in TLS 1.3; RFC 5246 §7.4.1.4.1:
// PKCS #1 v1.5 in TLS 1.2), and one over a changed digest does not.
func TestSignVerifiesInGo(t *testing.T) {
	if v, err := Version(); err != nil {
		t.Fatal(err) // built with OpenSSL: libcrypto must load here
	} else {
		t.Log(v)
	}
	k, s := newKey(t)
	msg := []byte("TLS 1.3, server CertificateVerify")
	for _, h := range []crypto.Hash{crypto.SHA256, crypto.SHA384, crypto.SHA512} {
		hh := h.New()
		hh.Write(msg)
		d := hh.Sum(nil)
		for _, opts := range []crypto.SignerOpts{
			&rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: h},
			&rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto, Hash: h},
			h,
		} {
			sig, err := s.Sign(rand.Reader, d, opts)
			if err != nil {
				t.Fatalf("%v %T: %v", h, opts, err)
			}
			verify := func(d []byte) error {
				if po, ok := opts.(*rsa.PSSOptions); ok {
					return rsa.VerifyPSS(&k.PublicKey, h, d, sig, &rsa.PSSOptions{SaltLength: po.SaltLength})
				}
				return rsa.VerifyPKCS1v15(&k.PublicKey, h, d, sig)
			}
			if err := verify(d); err != nil {
				t.Errorf("%v %T %+v: Go does not verify OpenSSL's signature: %v", h, opts, opts, err)
			}
			d[0] ^= 1
			if verify(d) == nil {
				t.Errorf("%v %T: a signature verifies for another digest", h, opts)
			}
			d[0] ^= 1
		}
	}
}

// TestSignRefuses: what TLS never asks is an error, not a wrong signature.
func TestSignRefuses(t *testing.T) {
	_, s := newKey(t)
	if _, err := s.Sign(nil, make([]byte, 20), crypto.SHA1); err == nil {
		t.Error("SHA-1 signed")
	}
	if _, err := s.Sign(nil, make([]byte, 20), crypto.SHA256); err == nil {
		t.Error("a 20-byte digest signed as SHA-256")
	}
}

func BenchmarkSignPSS(b *testing.B) {
	k, s := newKey(b)
	d := sha256.Sum256([]byte("x"))
	opts := &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256}
	b.Run("openssl", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Sign(rand.Reader, d[:], opts); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			if _, err := k.Sign(rand.Reader, d[:], opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// newKey returns an RSA 2048 key and its OpenSSL signer.
func newKey(tb testing.TB) (*rsa.PrivateKey, crypto.Signer) {
	tb.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(k)
	if err != nil {
		tb.Fatal(err)
	}
	return k, s
}
