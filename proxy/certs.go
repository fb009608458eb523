package proxy

import (
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/opensslrsa"
	"github.com/baton-proxy/baton/proxy/route"
)

// certSet is the certificates a route provider's TLS listener serves,
// from the routing (config.RoutingHead): picked by SNI, swapped whole by
// each routing, so that a new or rotated certificate needs no handoff.
type certSet struct {
	certs  []*tls.Certificate            // the first is the default
	byName map[string][]*tls.Certificate // by the leafs' DNS names, lower case ("*.x" as is)
	// auth is what the clients of a host must show (config.ClientAuth),
	// by host, lower case ("*.x" as is); nil when no host asks.
	auth map[string]*clientAuth
}

// authFor returns the client authentication of host (a server name or a
// request's host, without port), or nil: an exact name's, else a
// wildcard's of one label.
func (s *certSet) authFor(host string) *clientAuth {
	if len(s.auth) == 0 {
		return nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a := s.auth[host]; a != nil {
		return a
	}
	if _, rest, ok := strings.Cut(host, "."); ok {
		return s.auth["*."+rest]
	}
	return nil
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

// getConfigForClient is tls.Config.GetConfigForClient for listener, whose
// config is base: a hello naming a host whose clients must show a
// certificate gets base asking for one (nil, nil: base as it is).
func (pc providedCerts) getConfigForClient(listener string, base *tls.Config) func(*tls.ClientHelloInfo) (*tls.Config, error) {
	ptr := pc[listener]
	return func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if s := ptr.Load(); s != nil {
			if a := s.authFor(hello.ServerName); a != nil {
				return a.config(base), nil
			}
		}
		return nil, nil
	}
}

// applyCertificates installs a routing's certificates and client
// authentication: every provided listener gets its set (none: an empty
// one). A certificate whose PEM the last routing had is not parsed again,
// nor a client authentication (so that connections keep their verdicts:
// tlsPeer). routingMu held.
func (p *Proxy) applyCertificates(byListener map[string][]config.Certificate, auth map[string][]config.ClientAuth) error {
	parsed := make(map[[32]byte]*tls.Certificate)
	parsedAuth := make(map[[32]byte]*clientAuth)
	var errs []error
	for name, ptr := range p.provided {
		set := &certSet{byName: map[string][]*tls.Certificate{}}
		for i, ca := range auth[name] {
			a, err := p.clientAuth(name, &ca, parsedAuth)
			if err != nil {
				errs = append(errs, fmt.Errorf("routing: listener %s client authentication %d: %w", name, i, err))
				continue
			}
			if set.auth == nil {
				set.auth = map[string]*clientAuth{}
			}
			for _, h := range ca.Hosts {
				h = strings.ToLower(h)
				if set.auth[h] == nil { // the first of a host's
					set.auth[h] = a
				}
			}
		}
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
	for name := range auth {
		if p.provided[name] == nil {
			errs = append(errs, fmt.Errorf("routing: client authentication for listener %q, which takes none from the routing", name))
		}
	}
	p.parsedCerts, p.parsedAuth = parsed, parsedAuth
	return errors.Join(errs...)
}

// clientAuth is a config.ClientAuth ready for handshakes and requests.
// One is kept from a routing to the next while its CA, Verify and Depth
// are the same, so that a connection's verdict (tlsPeer) holds.
type clientAuth struct {
	verify string // config.ClientAuth.Verify
	depth  int    // at least 1
	pool   *x509.CertPool
	// matchCN, when set, must match a verified certificate's subject
	// (403 otherwise); errorPage, when set, is where a refused
	// certificate is redirected (302) rather than answered 400.
	matchCN   *regexp.Regexp
	errorPage string

	once sync.Once
	tc   *tls.Config // the handshake's (config)
}

// clientAuth returns the clientAuth of ca on listener: the last
// routing's, when it had the same, else a new one. It is recorded in
// parsed.
func (p *Proxy) clientAuth(listener string, ca *config.ClientAuth, parsed map[[32]byte]*clientAuth) (*clientAuth, error) {
	switch ca.Verify {
	case config.VerifyOn, config.VerifyOptional, config.VerifyOptionalNoCA:
	default:
		return nil, fmt.Errorf("verify %q: not on, optional or optional_no_ca", ca.Verify)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00%s\x00", listener, ca.Verify, ca.Depth, ca.MatchCN, ca.ErrorPage)
	h.Write(ca.CA)
	var key [32]byte
	h.Sum(key[:0])
	if a := parsed[key]; a != nil {
		return a, nil
	}
	a := p.parsedAuth[key]
	if a == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca.CA) {
			return nil, errors.New("no CA certificate in the PEM")
		}
		a = &clientAuth{verify: ca.Verify, depth: max(ca.Depth, 1), pool: pool, errorPage: ca.ErrorPage}
		if ca.MatchCN != "" {
			re, err := regexp.Compile(ca.MatchCN)
			if err != nil {
				return nil, fmt.Errorf("matchCN: %w", err)
			}
			a.matchCN = re
		}
		if ca.ErrorPage != "" && !validErrorPage(ca.ErrorPage) {
			return nil, fmt.Errorf("errorPage %q: not an absolute http or https URL", ca.ErrorPage)
		}
	}
	parsed[key] = a
	return a, nil
}

// config returns base asking for a client certificate, naming a's CAs.
// It asks and does not verify (tls.RequestClientCert): each request is
// checked against its host's clientAuth (check), so that a client without
// a certificate is answered 400, as nginx does, rather than failing the
// handshake without a word. Session tickets are off: a session resumed
// skips the request for a certificate, and one made for another host
// holds another's.
func (a *clientAuth) config(base *tls.Config) *tls.Config {
	a.once.Do(func() {
		c := base.Clone()
		c.GetConfigForClient = nil
		c.ClientAuth, c.ClientCAs = tls.RequestClientCert, a.pool
		c.SessionTicketsDisabled = true
		a.tc = c
	})
	return a.tc
}

// peerVerdict is a connection's certificate checked against a host's
// clientAuth: whether its requests are served, and the ClientCertFields
// lines they go upstream with.
type peerVerdict struct {
	auth   *clientAuth
	refuse bool   // answered 400, or redirected to auth.errorPage
	forbid bool   // the subject does not match auth.matchCN: answered 403
	lines  []byte // ssl-client-verify, -subject-dn, -issuer-dn
	cert   []byte // the ssl-client-cert line
}

// check verifies certs (a connection's, the client's first) as a asks:
// signed through at most a.depth certificates by one of a's CAs, for
// client authentication.
func (a *clientAuth) check(certs []*x509.Certificate) *peerVerdict {
	v := &peerVerdict{auth: a}
	verdict := "NONE"
	if len(certs) == 0 {
		v.refuse = a.verify == config.VerifyOn
	} else {
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		chains, err := certs[0].Verify(x509.VerifyOptions{Roots: a.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err == nil && !slices.ContainsFunc(chains, func(ch []*x509.Certificate) bool { return len(ch) <= a.depth+1 }) {
			err = fmt.Errorf("the chain is longer than the verify depth %d", a.depth)
		}
		verdict = "SUCCESS"
		if err != nil {
			verdict = "FAILED:" + err.Error()
			v.refuse = a.verify != config.VerifyOptionalNoCA
		}
		subject := certs[0].Subject.String()
		v.forbid = a.matchCN != nil && !a.matchCN.MatchString(subject)
		v.lines = appendField(v.lines, "ssl-client-subject-dn", subject)
		v.lines = appendField(v.lines, "ssl-client-issuer-dn", certs[0].Issuer.String())
		v.cert = appendField(nil, "ssl-client-cert", url.PathEscape(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certs[0].Raw}))))
	}
	if len(certs) == 0 {
		// nginx's $ssl_client_s_dn is empty then, and matches no CN=.
		v.forbid = a.matchCN != nil && !a.matchCN.MatchString("")
	}
	v.lines = appendField(v.lines, "ssl-client-verify", verdict)
	return v
}

// validErrorPage reports whether u may be an error page's Location: an
// absolute http or https URL with a host, and no byte that would end or
// split a header field (the value is written into one as it is).
func validErrorPage(u string) bool {
	for i := range len(u) {
		if u[i] <= ' ' || u[i] >= 0x7f {
			return false
		}
	}
	pu, err := url.Parse(u)
	return err == nil && (pu.Scheme == "http" || pu.Scheme == "https") && pu.Host != ""
}

// appendField appends the line "name: value\r\n", value's bytes outside
// printable ASCII escaped as RFC 4514 does (\XX): a certificate's names
// and a verification's error are the client's words, and a line break
// in them would be a field of the client's own making.
func appendField(dst []byte, name, value string) []byte {
	dst = append(append(dst, name...), ": "...)
	for i := range len(value) {
		c := value[i]
		if c < ' ' || c >= 0x7f {
			dst = append(dst, '\\', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return append(dst, "\r\n"...)
}

// tlsPeer is the client side of a TLS connection, for the client
// authentication of its requests' hosts: its last verdict is kept, so
// that a certificate is verified once per connection and host
// authentication.
type tlsPeer struct {
	conn *tls.Conn // nil: not TLS
	last atomic.Pointer[peerVerdict]
}

// reset makes tp the peer of c (nil: not TLS).
func (tp *tlsPeer) reset(c *tls.Conn) {
	tp.conn = c
	tp.last.Store(nil)
}

// verdict returns the verdict of a on tp's certificate.
func (tp *tlsPeer) verdict(a *clientAuth) *peerVerdict {
	if v := tp.last.Load(); v != nil && v.auth == a {
		return v
	}
	v := a.check(tp.conn.ConnectionState().PeerCertificates)
	tp.last.Store(v)
	return v
}

// checkClient checks a request on listener for host against the client
// authentication of that host (none: 0). It answers 421 when the
// connection's server name is of another authentication (nginx's answer
// to a Host that differs from the SNI where clients are verified: the
// handshake asked for another's certificate, or none), 400 when the
// connection's certificate does not do, as nginx does (routeCertErrorPage
// when the host has an error page: ingress-nginx's error_page 495 496),
// 403 when its subject does not match the host's MatchCN (ingress-nginx's
// auth-tls-match-cn); else 0, with the verdict for the upstream fields.
func (p *Proxy) checkClient(listener string, host []byte, peer *tlsPeer) (*peerVerdict, int) {
	if peer == nil || peer.conn == nil { // plain HTTP: no map lookup
		return nil, 0
	}
	ptr := p.provided[listener]
	if ptr == nil {
		return nil, 0
	}
	s := ptr.Load()
	if s == nil || len(s.auth) == 0 {
		return nil, 0
	}
	a := s.authFor(string(route.RequestHost(host)))
	if a == nil {
		return nil, 0
	}
	if s.authFor(peer.conn.ConnectionState().ServerName) != a {
		return nil, 421
	}
	v := peer.verdict(a)
	switch {
	case v.refuse && a.errorPage != "":
		return v, routeCertErrorPage
	case v.refuse:
		return v, 400
	case v.forbid:
		return v, 403
	}
	return v, 0
}
