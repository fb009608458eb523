package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"golang.org/x/net/http2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/internal/metrics"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy/kube"
)

// Upstream settings.
const (
	maxIdlePerAddress = 1024
	// ejectAfter consecutive connect failures take an endpoint out of
	// rotation for ejectBase, doubling with each ejection up to ejectMax.
	ejectAfter = 3
	ejectBase  = time.Second
	ejectMax   = 30 * time.Second
)

// backend is where a route sends requests: a set of endpoints, static or
// from a Kubernetes Service, replaced as a whole (atomically) when the
// Service changes. The request path reads the current set without a lock.
type backend struct {
	instance uint64 // this backend object's number, for kube.Target
	name     string
	cfg      config.Backend
	mode     string // "static", or a Kubernetes mode
	set      atomic.Pointer[endpointSet]
	next     atomic.Uint32 // round robin
	dialer   net.Dialer
	headMax  int
	lifetime time.Duration // of upstream connections; 0: unbounded
	// hashHeader is the hash-header balancer's field name, in lower case.
	hashHeader string
	// cookieAttrs are the sticky cookie's attributes but its expiry
	// ("; Path=/; HttpOnly").
	cookieAttrs string
	// responseTimeout bounds the wait for a response head, and each wait
	// for response body bytes.
	responseTimeout time.Duration
	// sendTimeout bounds each write of a request (upWriter).
	sendTimeout time.Duration

	mu     sync.Mutex // protects byAddr; held by updates only
	byAddr map[string]*endpoint

	requests, errors, retries, connectFailures atomic.Uint64
	// connectTime is how long new connections take (TCP, and TLS when
	// the backend has it); responseTime from a request's first attempt to
	// its response head.
	connectTime, responseTime metrics.Histogram

	// tlsConf, when set, is how connections to the endpoints speak TLS
	// (config tls); each endpoint has it with its ServerName.
	tlsConf *tls.Config
	// h2t is the HTTP/2 client of a backend whose protocol is h2c or h2;
	// nil for HTTP/1.1.
	h2t *http2.Transport
}

// endpoint is one upstream address and what the balancers track of it. It
// lives as long as the address stays in the backend's sets, so its pool and
// counters survive updates.
type endpoint struct {
	addr     string
	ap       netip.AddrPort // addr, when an IP address and port (not a host name)
	key      string         // the sticky cookie's value for it
	pool     *addrPool
	tlsConf  *tls.Config // the backend's, with this endpoint's ServerName; nil: plain TCP
	inflight atomic.Int64
	fails    atomic.Int32 // consecutive connect failures
	ejects   atomic.Int32 // ejections in a row
	ejected  atomic.Int64 // until, unix nanoseconds
}

// endpointSet is a backend's endpoints at one moment.
type endpointSet struct {
	// active is where new requests go: the ready endpoints, or, when none
	// is ready, the serving ones that are terminating (kube-proxy's rule).
	active []*endpoint
	// serving holds every serving endpoint by sticky key: a sticky client
	// may keep reaching a pod that is terminating but still serving.
	serving map[string]*endpoint
	// ring is the consistent-hash ring of active, for hash-header.
	ring        []ringPoint
	ready       int
	terminating int
	err         error // why there is no endpoint, if known
	updated     time.Time
}

// dialError marks a failure to connect, before anything was sent upstream.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// errNoEndpoint is a backend with nothing to send to: 503.
var errNoEndpoint = errors.New("no endpoint available")

// instances numbers the backends a worker makes (backend.instance).
var instances atomic.Uint64

func newBackend(bc config.Backend, headMax int) *backend {
	b := &backend{
		instance: instances.Add(1),
		name:     bc.Name,
		cfg:      bc,
		mode:     "static",
		dialer:   net.Dialer{Timeout: bc.ConnectTimeout.Std(), KeepAlive: 30 * time.Second},
		headMax:  headMax,
		lifetime: bc.ConnectionLifetime.Std(),
		byAddr:   make(map[string]*endpoint),

		hashHeader:      strings.ToLower(bc.HashHeader),
		responseTimeout: bc.ResponseTimeout.Std(),
		sendTimeout:     bc.SendTimeout.Std(),
	}
	b.tlsConf = upstreamTLS(bc.TLS)
	switch bc.Protocol {
	case config.ProtocolH2:
		b.tlsConf.NextProtos = []string{"h2"}
		fallthrough
	case config.ProtocolH2C:
		b.h2t = newH2Transport(&bc, headMax)
	}
	b.cookieAttrs = "; Path=" + cmp.Or(bc.CookiePath, "/")
	if ss := bc.CookieSameSite; ss != "" {
		b.cookieAttrs += "; SameSite=" + ss
		if ss == "None" {
			b.cookieAttrs += "; Secure" // browsers drop SameSite=None without it
		}
	}
	b.cookieAttrs += "; HttpOnly"
	if bc.Kubernetes != nil {
		b.mode = bc.Kubernetes.Mode
		b.set.Store(&endpointSet{err: errors.New("waiting for the Kubernetes caches")})
	} else {
		var eps []kube.Endpoint
		for _, a := range bc.Static {
			eps = append(eps, kube.Endpoint{Address: a, Ready: true, Serving: true})
		}
		b.update(eps, nil)
	}
	return b
}

// appendCookie appends to dst the sticky cookie (a Set-Cookie value)
// that names ep, with the backend's attributes; one with a max age
// expires then from now.
func (b *backend) appendCookie(dst []byte, ep *endpoint, now time.Time) []byte {
	dst = append(dst, b.cfg.Cookie...)
	dst = append(dst, '=')
	dst = append(dst, ep.key...)
	if d := b.cfg.CookieMaxAge.Std(); d > 0 {
		dst = append(dst, "; Max-Age="...)
		dst = strconv.AppendInt(dst, int64(d/time.Second), 10)
		dst = append(dst, "; Expires="...)
		dst = now.Add(d).UTC().AppendFormat(dst, http.TimeFormat)
	}
	return append(dst, b.cookieAttrs...)
}

// upstreamTLS is the client TLS config of a backend's tls settings, nil
// without them. Sessions are cached, so that new connections to an
// endpoint resume.
func upstreamTLS(t *config.BackendTLS) *tls.Config {
	if t == nil {
		return nil
	}
	conf := &tls.Config{
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify,
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"http/1.1"},
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
	}
	if len(t.CAPEM) > 0 {
		conf.RootCAs = x509.NewCertPool()
		conf.RootCAs.AppendCertsFromPEM(t.CAPEM) // the supervisor checked it
	}
	return conf
}

// endpointTLS is the backend's TLS config for the endpoint at addr: its
// host is the ServerName when the config names none.
func (b *backend) endpointTLS(addr string) *tls.Config {
	if b.tlsConf == nil || b.tlsConf.ServerName != "" {
		return b.tlsConf
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	conf := b.tlsConf.Clone()
	conf.ServerName = host
	return conf
}

// update installs a new set of endpoints. Endpoints that left, or became
// terminating, get no new requests, and their idle pooled connections are
// closed.
func (b *backend) update(eps []kube.Endpoint, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	set := &endpointSet{serving: make(map[string]*endpoint), err: err, updated: time.Now()}
	keep := make(map[string]bool, len(eps))
	var terminating []*endpoint
	for _, e := range eps {
		ep := b.byAddr[e.Address]
		if ep == nil {
			ap, _ := netip.ParseAddrPort(e.Address) // zero when a host name
			ep = &endpoint{addr: e.Address, ap: ap, key: stickyKey(e.Address), pool: newAddrPool(e.Address, maxIdlePerAddress, b.lifetime, b.cfg.IdleTimeout.Std()), tlsConf: b.endpointTLS(e.Address)}
			b.byAddr[e.Address] = ep
		}
		keep[e.Address] = true
		switch {
		case e.Ready && !e.Terminating:
			set.active = append(set.active, ep)
			set.ready++
			if e.NoReuse {
				ep.pool.retire() // its idle connections closed, none kept after a request
			} else {
				ep.pool.reopen()
			}
		case e.Serving:
			terminating = append(terminating, ep)
		}
		if e.Terminating {
			set.terminating++
			ep.pool.retire()
		}
		if e.Serving {
			set.serving[ep.key] = ep
		}
	}
	if len(set.active) == 0 {
		set.active = terminating
	}
	for addr, ep := range b.byAddr {
		if !keep[addr] {
			ep.pool.retire()
			delete(b.byAddr, addr)
		}
	}
	if b.cfg.Balancer == config.BalancerHashHeader {
		set.ring = buildRing(set.active)
	}
	if len(set.active) == 0 && set.err == nil {
		set.err = errNoEndpoint
	}
	b.set.Store(set)
}

// ejectedNow reports whether ep is out of rotation at now.
func (ep *endpoint) ejectedNow(now int64) bool { return ep.ejected.Load() > now }

// connectFailed counts a failed connect; enough in a row eject ep.
func (ep *endpoint) connectFailed() {
	if ep.fails.Add(1) < ejectAfter {
		return
	}
	ep.fails.Store(0)
	n := ep.ejects.Add(1)
	d := ejectBase << min(n-1, 5)
	ep.ejected.Store(time.Now().Add(min(d, ejectMax)).UnixNano())
}

// connected resets ep's failure counts once it connects again.
func (ep *endpoint) connected() {
	if ep.fails.Load() != 0 {
		ep.fails.Store(0)
	}
	if ep.ejected.Load() != 0 && !ep.ejectedNow(time.Now().UnixNano()) {
		ep.ejects.Store(0)
		ep.ejected.Store(0)
	}
}

// conn returns a connection to ep for w: a pooled one unless fresh, else
// a new one, whose dial w's abort cancels.
func (ep *endpoint) conn(w *upstreamWork, b *backend, fresh bool) (*upConn, error) {
	if !fresh {
		if uc := ep.pool.get(time.Now()); uc != nil {
			return uc, nil
		}
	}
	ctx, release := w.dialContext()
	defer release()
	start := time.Now()
	uc, err := ep.pool.dial(ctx, b, ep.tlsConf)
	if err != nil {
		ep.connectFailed()
		return nil, err
	}
	b.connectTime.Observe(time.Since(start))
	ep.connected()
	return uc, nil
}

// dialStream connects a TCP stream to an endpoint, moving on to another
// when a connect fails.
func (b *backend) dialStream(ctx context.Context) (net.Conn, *endpoint, error) {
	set := b.set.Load()
	var a attempt
	var errs []error
	for {
		ep := b.pick(set, &a)
		if ep == nil {
			if len(errs) == 0 {
				return nil, nil, fmt.Errorf("backend %s: %w", b.name, set.err)
			}
			return nil, nil, fmt.Errorf("backend %s: %w", b.name, errors.Join(errs...))
		}
		a.tried(ep)
		start := time.Now()
		// Keep-alive waits for the stream to live (tcpFrontend's
		// keepAliveAfter): a short one does not pay its system calls.
		var c net.Conn
		var sc *sockConn
		raw, err := false, error(nil)
		if ctx.Done() == nil { // dialRaw cannot be cancelled
			sc, raw, err = dialRaw(ep.ap, b.dialer.Timeout)
		}
		if raw && err == nil {
			c = sc
		} else if !raw {
			d := b.dialer
			d.KeepAlive = -1
			if c, err = d.DialContext(ctx, "tcp", ep.addr); err == nil {
				c = newSockConn(c)
			}
		}
		if err == nil && ep.tlsConf != nil {
			c, err = b.handshake(ctx, c, ep.tlsConf)
		}
		if err == nil {
			b.connectTime.Observe(time.Since(start))
			ep.connected()
			return c, ep, nil
		}
		ep.connectFailed()
		b.connectFailures.Add(1)
		errs = append(errs, err)
		if ctx.Err() != nil {
			return nil, nil, errors.Join(errs...)
		}
	}
}

// reap closes the backend's pooled connections idle past its idleTimeout.
func (b *backend) reap(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ep := range b.byAddr {
		ep.pool.reap(now)
	}
}

// retire stops pooling the backend's connections and closes the idle
// ones: it is no longer routed to (requests in flight finish, and close
// their connections).
func (b *backend) retire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ep := range b.byAddr {
		ep.pool.retire()
	}
}

func (b *backend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ep := range b.byAddr {
		ep.pool.closeIdle()
	}
}

// stats describes the backend for status.
func (b *backend) stats() ipc.BackendStats {
	set := b.set.Load()
	s := ipc.BackendStats{Name: b.name, Mode: b.mode, Ready: set.ready, Terminating: set.terminating, Serving: len(set.serving), UpdatedAt: set.updated,
		BackendCounters: ipc.BackendCounters{
			Requests:        b.requests.Load(),
			Errors:          b.errors.Load(),
			Retries:         b.retries.Load(),
			ConnectFailures: b.connectFailures.Load(),
		}}
	if set.err != nil {
		s.Error = set.err.Error()
	}
	return s
}
