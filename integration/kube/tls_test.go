package kube

import "crypto/tls"

// insecureTLS trusts the test API server's self-signed certificate.
func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }
