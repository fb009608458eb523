package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

// ListenerTLS terminates TLS on a listener, or, on a tcp listener with
// Mode passthrough, routes TLS connections by the server name of their
// ClientHello without terminating them.
type ListenerTLS struct {
	// Mode is TLSTerminate (default) or TLSPassthrough: a tcp listener
	// reads each connection's ClientHello (SNI), picks the route whose
	// host takes that name (exact, or "*." and a suffix; a route without
	// host takes the rest, and connections without SNI), and hands the
	// connection, its ClientHello included, to the route's backend as a
	// TCP stream. baton holds no key: the backend terminates TLS.
	Mode string `json:"mode,omitempty"`
	// Certificates are the server's certificates; SNI picks one by its
	// names, and the first is the default.
	Certificates []Certificate `json:"certificates"`
	// MinVersion is the lowest TLS version accepted: "1.2" (default) or
	// "1.3".
	MinVersion string `json:"minVersion,omitempty"`
	// ClientCA, when set, is a PEM file of CAs: clients must present a
	// certificate that one of them signed.
	ClientCA string `json:"clientCA,omitempty"`
	// ClientCAPEM is ClientCA's content, read by the supervisor (which may
	// run as root while workers do not); not for the config file.
	ClientCAPEM []byte `json:"clientCAPEM,omitempty" schema:"-"`
}

// Certificate is a certificate chain and its key, as PEM files.
type Certificate struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// CertPEM and KeyPEM are the files' content, read by the supervisor;
	// not for the config file.
	CertPEM []byte `json:"certPEM,omitempty" schema:"-"`
	KeyPEM  []byte `json:"keyPEM,omitempty" schema:"-"`
}

// ClientAuth is how a route provider's TLS listener verifies the
// certificates of the clients of some hosts (ingress-nginx's auth-tls-*
// annotations, nginx's ssl_verify_client): the handshake of a client that
// names one of Hosts asks for a certificate signed by CA, and each request
// for one of them is refused (400) unless its connection's certificate
// verifies as Verify asks.
type ClientAuth struct {
	// Hosts are exact names or "*.suffix" (one label more).
	Hosts []string `json:"hosts"`
	// CA is the certificates a client's must chain to, PEM.
	CA []byte `json:"ca"`
	// Verify is VerifyOn (a verified certificate is required),
	// VerifyOptional (one sent must verify) or VerifyOptionalNoCA (one
	// sent is passed on, verified or not).
	Verify string `json:"verify"`
	// Depth bounds the certificates between the client's and the CA's
	// (nginx's ssl_verify_depth: 1, the CA signed the client's); 0 is 1.
	Depth int `json:"depth,omitempty"`
	// MatchCN, when set, is a regular expression (RE2, unanchored, as
	// nginx's ~) that a verified certificate's subject (RFC 2253, "CN=...")
	// must match: a request of a client whose does not is refused (403),
	// as ingress-nginx's auth-tls-match-cn does.
	MatchCN string `json:"matchCN,omitempty"`
	// ErrorPage, when set, is an absolute http(s) URL that a request
	// refused for its certificate (none, or one that does not verify) is
	// redirected to (302) instead of answered 400, as ingress-nginx's
	// auth-tls-error-page does.
	ErrorPage string `json:"errorPage,omitempty"`
}

// ClientAuth.Verify values, nginx's ssl_verify_client.
const (
	VerifyOn           = "on"
	VerifyOptional     = "optional"
	VerifyOptionalNoCA = "optional_no_ca"
)

// BackendTLS is how baton speaks TLS to a backend's endpoints.
type BackendTLS struct {
	// ServerName is sent (SNI) and must be a name of the endpoint's
	// certificate. Default: the endpoint's host, usually its IP address
	// (nginx's proxy_ssl_name is the upstream's name likewise).
	ServerName string `json:"serverName,omitempty"`
	// CAFile is a PEM file of the CAs that sign the endpoints'
	// certificates. Default: the system's roots.
	CAFile string `json:"caFile,omitempty"`
	// CAPEM is CAFile's content, read by the supervisor; not for the
	// config file.
	CAPEM []byte `json:"caPEM,omitempty" schema:"-"`
	// InsecureSkipVerify accepts any certificate: for tests, never for
	// traffic that matters (a warning says so at every load).
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// DefaultTLSMinVersion is the lowest TLS version accepted by default.
const DefaultTLSMinVersion = "1.2"

// TLSVersion returns the crypto/tls constant of a minVersion.
func TLSVersion(v string) (uint16, bool) {
	switch v {
	case "1.2":
		return tls.VersionTLS12, true
	case "1.3":
		return tls.VersionTLS13, true
	}
	return 0, false
}

// ListenerTLS.Mode values.
const (
	TLSTerminate   = "terminate"
	TLSPassthrough = "passthrough"
)

// Passthrough reports whether t routes TLS without terminating it.
func (t *ListenerTLS) Passthrough() bool { return t != nil && t.Mode == TLSPassthrough }

// checkTLS validates a listener's TLS settings (not the files). A route
// provider's listener may have no certificate of its own: its
// certificates come with the routing (RoutingHead).
func checkTLS(t *ListenerTLS, where string, provided bool, bad func(string, ...any)) {
	switch t.Mode {
	case "", TLSTerminate:
	case TLSPassthrough:
		if len(t.Certificates) > 0 || t.ClientCA != "" {
			bad("%s: tls.mode passthrough holds no key and terminates nothing: no certificates or clientCA", where)
		}
		return
	default:
		bad("%s: tls.mode must be terminate or passthrough, not %q", where, t.Mode)
	}
	if _, ok := TLSVersion(t.MinVersion); !ok {
		bad("%s: tls.minVersion must be 1.2 or 1.3 (older TLS is refused), not %q", where, t.MinVersion)
	}
	if len(t.Certificates) == 0 && !provided {
		bad("%s: tls needs at least one certificate", where)
	}
	for i, c := range t.Certificates {
		if (c.CertFile == "" || c.KeyFile == "") && (len(c.CertPEM) == 0 || len(c.KeyPEM) == 0) {
			bad("%s: tls.certificates[%d] needs certFile and keyFile", where, i)
		}
	}
}

// loadTLS reads every listener's certificates, keys and client CAs into
// the config, checks that each key matches its certificate, and returns
// warnings (a certificate that expired, or is not valid yet).
func (c *Config) loadTLS() (warnings []string, err error) {
	now := time.Now()
	for i := range c.Listeners {
		l := &c.Listeners[i]
		t := l.TLS
		if t == nil {
			continue
		}
		for j := range t.Certificates {
			cert := &t.Certificates[j]
			if cert.CertPEM, err = os.ReadFile(cert.CertFile); err != nil {
				return nil, fmt.Errorf("%w: listener %q: tls certificate: %w", ErrInvalid, l.Name, err)
			}
			if cert.KeyPEM, err = os.ReadFile(cert.KeyFile); err != nil {
				return nil, fmt.Errorf("%w: listener %q: tls key: %w", ErrInvalid, l.Name, err)
			}
			pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
			if err != nil {
				return nil, fmt.Errorf("%w: listener %q: tls certificate %s with key %s: %w", ErrInvalid, l.Name, cert.CertFile, cert.KeyFile, err)
			}
			leaf := pair.Leaf
			if leaf == nil {
				if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
					return nil, fmt.Errorf("%w: listener %q: tls certificate %s: %w", ErrInvalid, l.Name, cert.CertFile, err)
				}
			}
			switch {
			case now.After(leaf.NotAfter):
				warnings = append(warnings, fmt.Sprintf("listener %q: certificate %s expired on %s", l.Name, cert.CertFile, leaf.NotAfter.Format(time.RFC3339)))
			case now.Before(leaf.NotBefore):
				warnings = append(warnings, fmt.Sprintf("listener %q: certificate %s is not valid before %s", l.Name, cert.CertFile, leaf.NotBefore.Format(time.RFC3339)))
			}
		}
		if t.ClientCA != "" {
			if t.ClientCAPEM, err = os.ReadFile(t.ClientCA); err != nil {
				return nil, fmt.Errorf("%w: listener %q: tls clientCA: %w", ErrInvalid, l.Name, err)
			}
			if block, _ := pem.Decode(t.ClientCAPEM); block == nil || !x509.NewCertPool().AppendCertsFromPEM(t.ClientCAPEM) {
				return nil, fmt.Errorf("%w: listener %q: tls clientCA %s holds no PEM certificate", ErrInvalid, l.Name, t.ClientCA)
			}
		}
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		t := b.TLS
		switch {
		case t == nil:
			continue
		case t.InsecureSkipVerify:
			warnings = append(warnings, fmt.Sprintf("backend %q: tls.insecureSkipVerify: any certificate is accepted, so anyone on the path can pose as the backend", b.Name))
		}
		if t.CAFile != "" {
			if t.CAPEM, err = os.ReadFile(t.CAFile); err != nil {
				return nil, fmt.Errorf("%w: backend %q: tls caFile: %w", ErrInvalid, b.Name, err)
			}
			if !x509.NewCertPool().AppendCertsFromPEM(t.CAPEM) {
				return nil, fmt.Errorf("%w: backend %q: tls caFile %s holds no PEM certificate", ErrInvalid, b.Name, t.CAFile)
			}
		}
	}
	return warnings, nil
}

// Files returns the files the config names for baton to read, as they
// are written (a relative path is the working directory's): TLS
// certificates, keys and client CAs, and the kubeconfig when set.
func (c *Config) Files() []string {
	var files []string
	for _, l := range c.Listeners {
		if l.TLS == nil {
			continue
		}
		for _, cert := range l.TLS.Certificates {
			files = append(files, cert.CertFile, cert.KeyFile)
		}
		if l.TLS.ClientCA != "" {
			files = append(files, l.TLS.ClientCA)
		}
	}
	for _, b := range c.Backends {
		if b.TLS != nil && b.TLS.CAFile != "" {
			files = append(files, b.TLS.CAFile)
		}
	}
	if c.Kubernetes.Kubeconfig != "" {
		files = append(files, c.Kubernetes.Kubeconfig)
	}
	return files
}

// hasTLSMaterial reports whether the config carries key material, which
// only the supervisor puts there.
func (c *Config) hasTLSMaterial() bool {
	for _, l := range c.Listeners {
		if l.TLS == nil {
			continue
		}
		if len(l.TLS.ClientCAPEM) > 0 {
			return true
		}
		for _, cert := range l.TLS.Certificates {
			if len(cert.CertPEM) > 0 || len(cert.KeyPEM) > 0 {
				return true
			}
		}
	}
	for _, b := range c.Backends {
		if b.TLS != nil && len(b.TLS.CAPEM) > 0 {
			return true
		}
	}
	return false
}
