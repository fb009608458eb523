//go:build openssl && cgo

package opensslrsa

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

// OpenSSL 3's libcrypto, opened at run time (dlopen), so that a binary
// built with OpenSSL runs where it is missing and needs no headers to
// build: the few functions it calls, declared here, take and return
// opaque pointers and ints.
typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_pkey_ctx_st EVP_PKEY_CTX;
typedef struct evp_md_st EVP_MD;

static struct {
	EVP_PKEY *(*d2i_PrivateKey)(int, EVP_PKEY **, const unsigned char **, long);
	void (*EVP_PKEY_free)(EVP_PKEY *);
	EVP_PKEY_CTX *(*EVP_PKEY_CTX_new)(EVP_PKEY *, void *);
	void (*EVP_PKEY_CTX_free)(EVP_PKEY_CTX *);
	int (*EVP_PKEY_sign_init)(EVP_PKEY_CTX *);
	int (*EVP_PKEY_sign)(EVP_PKEY_CTX *, unsigned char *, size_t *, const unsigned char *, size_t);
	int (*EVP_PKEY_CTX_set_rsa_padding)(EVP_PKEY_CTX *, int);
	int (*EVP_PKEY_CTX_set_rsa_pss_saltlen)(EVP_PKEY_CTX *, int);
	int (*EVP_PKEY_CTX_set_signature_md)(EVP_PKEY_CTX *, const EVP_MD *);
	const EVP_MD *(*EVP_get_digestbyname)(const char *);
	const char *(*OpenSSL_version)(int);
	void (*ERR_clear_error)(void);
} ossl;

// ossl_load opens libcrypto at path and binds ossl: NULL on success, else
// what is missing.
static const char *ossl_load(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		return path;
	}
#define BIND(f) if ((*(void **)&ossl.f = dlsym(h, #f)) == NULL) return #f
	BIND(d2i_PrivateKey);
	BIND(EVP_PKEY_free);
	BIND(EVP_PKEY_CTX_new);
	BIND(EVP_PKEY_CTX_free);
	BIND(EVP_PKEY_sign_init);
	BIND(EVP_PKEY_sign);
	BIND(EVP_PKEY_CTX_set_rsa_padding);
	BIND(EVP_PKEY_CTX_set_rsa_pss_saltlen);
	BIND(EVP_PKEY_CTX_set_signature_md);
	BIND(EVP_get_digestbyname);
	BIND(OpenSSL_version);
	BIND(ERR_clear_error);
#undef BIND
	return NULL;
}

static const char *ossl_version(void) { return ossl.OpenSSL_version(0); }

static EVP_PKEY *ossl_rsa_key(const unsigned char *der, long n) {
	// EVP_PKEY_RSA is NID_rsaEncryption, 6.
	return ossl.d2i_PrivateKey(6, NULL, &der, n);
}

static void ossl_free(EVP_PKEY *k) { ossl.EVP_PKEY_free(k); }

static EVP_MD *ossl_md(const char *name) { return (EVP_MD *)ossl.EVP_get_digestbyname(name); }

// ossl_sign signs digest with k: PSS with saltlen (-1: the digest's
// length) when pss is set, else PKCS #1 v1.5. It returns the signature's
// length, or 0.
static size_t ossl_sign(EVP_PKEY *k, EVP_MD *md, int pss, int saltlen,
		const unsigned char *digest, size_t dn, unsigned char *sig, size_t sn) {
	EVP_PKEY_CTX *ctx = ossl.EVP_PKEY_CTX_new(k, NULL);
	if (ctx == NULL) {
		return 0;
	}
	size_t n = sn;
	// RSA_PKCS1_PSS_PADDING is 6, RSA_PKCS1_PADDING 1.
	if (ossl.EVP_PKEY_sign_init(ctx) <= 0 ||
		ossl.EVP_PKEY_CTX_set_rsa_padding(ctx, pss ? 6 : 1) <= 0 ||
		(pss && ossl.EVP_PKEY_CTX_set_rsa_pss_saltlen(ctx, saltlen) <= 0) ||
		ossl.EVP_PKEY_CTX_set_signature_md(ctx, md) <= 0 ||
		ossl.EVP_PKEY_sign(ctx, sig, &n, digest, dn) <= 0) {
		n = 0;
		ossl.ERR_clear_error();
	}
	ossl.EVP_PKEY_CTX_free(ctx);
	return n;
}
*/
import "C"

import (
	"crypto"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"unsafe"
)

// Built reports whether this binary was built with OpenSSL (the openssl
// build tag, with cgo).
const Built = true

var (
	loadOnce sync.Once
	loadErr  error
	version  string
)

// load opens libcrypto once.
func load() error {
	loadOnce.Do(func() {
		path := C.CString("libcrypto.so.3")
		defer C.free(unsafe.Pointer(path))
		if missing := C.ossl_load(path); missing != nil {
			loadErr = fmt.Errorf("openssl: %s not found (OpenSSL 3's libcrypto)", C.GoString(missing))
			return
		}
		version = C.GoString(C.ossl_version())
		for h, name := range digestNames {
			cs := C.CString(name)
			if md := C.ossl_md(cs); md != nil {
				digests[h] = md
			}
			C.free(unsafe.Pointer(cs))
		}
	})
	return loadErr
}

// Version returns OpenSSL's version string, or why it cannot be used.
func Version() (string, error) {
	if err := load(); err != nil {
		return "", err
	}
	return version, nil
}

// signer is an RSA private key held by OpenSSL.
type signer struct {
	pub  *rsa.PublicKey
	key  *C.EVP_PKEY
	size int
}

// New returns a crypto.Signer that signs with k in OpenSSL: PSS (the
// options an *rsa.PSSOptions) and PKCS #1 v1.5 (a crypto.Hash), with
// SHA-256, SHA-384 or SHA-512, as TLS asks. The rand argument of Sign is
// not used: OpenSSL draws from its own generator.
func New(k *rsa.PrivateKey) (crypto.Signer, error) {
	if err := load(); err != nil {
		return nil, err
	}
	der := x509.MarshalPKCS1PrivateKey(k)
	key := C.ossl_rsa_key((*C.uchar)(unsafe.Pointer(&der[0])), C.long(len(der)))
	clear(der)
	if key == nil {
		return nil, errors.New("openssl: RSA key not accepted")
	}
	s := &signer{pub: &k.PublicKey, key: key, size: k.Size()}
	runtime.AddCleanup(s, func(key *C.EVP_PKEY) { C.ossl_free(key) }, key)
	return s, nil
}

// Public returns the key's public half.
func (s *signer) Public() crypto.PublicKey { return s.pub }

// Sign signs digest, a hash made with opts.HashFunc().
func (s *signer) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	h := opts.HashFunc()
	md := digests[h]
	if md == nil {
		return nil, fmt.Errorf("openssl: hash %v not supported", h)
	}
	if len(digest) != h.Size() {
		return nil, errors.New("openssl: digest length does not match its hash")
	}
	pss, salt := 0, 0
	if po, ok := opts.(*rsa.PSSOptions); ok {
		pss = 1
		switch po.SaltLength {
		case rsa.PSSSaltLengthEqualsHash:
			salt = -1 // RSA_PSS_SALTLEN_DIGEST
		case rsa.PSSSaltLengthAuto:
			salt = -3 // RSA_PSS_SALTLEN_MAX: what Go's rsa signs with for Auto
		default:
			salt = po.SaltLength
		}
	}
	sig := make([]byte, s.size)
	n := C.ossl_sign(s.key, md, C.int(pss), C.int(salt),
		(*C.uchar)(unsafe.Pointer(&digest[0])), C.size_t(len(digest)),
		(*C.uchar)(unsafe.Pointer(&sig[0])), C.size_t(len(sig)))
	runtime.KeepAlive(s)
	if n == 0 {
		return nil, errors.New("openssl: signing failed")
	}
	return sig[:n], nil
}

// digestNames are the hashes TLS signs with, by OpenSSL's names; digests
// holds the ones libcrypto has, from load on.
var (
	digestNames = map[crypto.Hash]string{
		crypto.SHA256: "SHA256",
		crypto.SHA384: "SHA384",
		crypto.SHA512: "SHA512",
	}
	digests = map[crypto.Hash]*C.EVP_MD{}
)
