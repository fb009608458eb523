//go:build !(openssl && cgo)

package opensslrsa

import (
	"crypto"
	"crypto/rsa"
	"errors"
)

// Built reports whether this binary was built with OpenSSL (the openssl
// build tag, with cgo).
const Built = false

var errNotBuilt = errors.New("built without OpenSSL (make build OPENSSL=1)")

// Version returns OpenSSL's version string, or why it cannot be used.
func Version() (string, error) { return "", errNotBuilt }

// New returns a crypto.Signer that signs with k in OpenSSL: in this
// build, an error.
func New(k *rsa.PrivateKey) (crypto.Signer, error) { return nil, errNotBuilt }
