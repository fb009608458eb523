package proxy

import (
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/opensslrsa"
)

// certSet is the certificates a route provider's TLS listener serves,
// from the routing (config.RoutingHead): picked by SNI, swapped whole by
// each routing, so that a new or rotated certificate needs no handoff.
type certSet struct {
	certs  []*tls.Certificate            // the first is the default
	byName map[string][]*tls.Certificate // by the leafs' DNS names, lower case ("*.x" as is)
}

// pick returns the certificate for a ClientHello: of those whose name is
// its server name, else of a wildcard's of one label, the first the
// client supports (an RSA-only client gets the RSA one of an ECDSA and
// RSA pair), else the first of them; with no name's, the first of all.
func (s *certSet) pick(hello *tls.ClientHelloInfo) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	cs := s.byName[name]
	if len(cs) == 0 {
		if _, rest, ok := strings.Cut(name, "."); ok {
			cs = s.byName["*."+rest]
		}
	}
	if len(cs) == 0 {
		cs = s.certs
	}
	for _, c := range cs {
		if hello.SupportsCertificate(c) == nil {
			return c
		}
	}
	return cs[0]
}

// providedCerts are the listeners whose certificates come with the
// routing: a route provider's TLS listeners, each with its current set
// (nil until a routing gives one). The map is made in New and never
// changes; the sets are swapped.
type providedCerts map[string]*atomic.Pointer[certSet]

// getCertificate is tls.Config.GetCertificate for listener: its routing's
// certificate for the hello; none (nil, nil) falls back to the config's
// own, and with none of those the handshake fails.
func (pc providedCerts) getCertificate(listener string) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	ptr := pc[listener]
	return func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if s := ptr.Load(); s != nil && len(s.certs) > 0 {
			return s.pick(hello), nil
		}
		return nil, nil
	}
}

// applyCertificates installs a routing's certificates: every provided
// listener gets its set (none: an empty one). A certificate whose PEM the
// last routing had is not parsed again. routingMu held.
func (p *Proxy) applyCertificates(byListener map[string][]config.Certificate) error {
	parsed := make(map[[32]byte]*tls.Certificate)
	var errs []error
	for name, ptr := range p.provided {
		set := &certSet{byName: map[string][]*tls.Certificate{}}
		for i, c := range byListener[name] {
			key := sha256.Sum256(append(append(append([]byte(nil), c.CertPEM...), 0), c.KeyPEM...))
			cert := p.parsedCerts[key]
			if cert == nil {
				pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
				if err != nil {
					errs = append(errs, fmt.Errorf("routing: listener %s certificate %d: %w", name, i, err))
					continue
				}
				if k, ok := pair.PrivateKey.(*rsa.PrivateKey); ok && opensslrsa.Built {
					pair.PrivateKey = p.opensslSigner(k)
				}
				cert = &pair
			}
			parsed[key] = cert
			set.certs = append(set.certs, cert)
			if cert.Leaf != nil {
				for _, n := range cert.Leaf.DNSNames {
					n = strings.ToLower(n)
					set.byName[n] = append(set.byName[n], cert)
				}
			}
		}
		ptr.Store(set)
	}
	for name := range byListener {
		if p.provided[name] == nil {
			errs = append(errs, fmt.Errorf("routing: certificates for listener %q, which takes none from the routing", name))
		}
	}
	p.parsedCerts = parsed
	return errors.Join(errs...)
}
