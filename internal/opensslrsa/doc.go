// Package opensslrsa signs with RSA keys in OpenSSL 3's libcrypto, opened
// at run time, for the binaries built with it (the openssl build tag, with
// cgo: `make build OPENSSL=1`). Go's RSA, constant-time and portable, signs
// a TLS handshake's PSS signature (2048 bits) about four times slower than
// OpenSSL's on x86-64, which bounds full RSA handshakes per second; the
// default build stays static and signs in Go.
package opensslrsa
