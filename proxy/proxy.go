// Package proxy is baton's worker: an HTTP (1.1 and h2c) and TCP reverse
// proxy serving on the listeners a supervisor hands it.
//
// A Proxy is built from one config: its routes never change (a new config
// is a new generation of workers); only its backends' endpoint sets do,
// each swapped whole when its Kubernetes Service changes. Draining is
// one-way: once Drain starts, every HTTP/1 response asks the client to
// close, and no listener accepts again.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"github.com/baton-proxy/baton/ipc"
	"github.com/baton-proxy/baton/proxy/kube"
	"github.com/baton-proxy/baton/proxy/route"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Proxy is one worker's proxy.
type Proxy struct {
	cfg *config.Config
	log *zap.Logger
	// routes are the compiled routes, swapped whole when they change.
	routes atomic.Pointer[routeTable]
	// dynamic are the backends of a route provider's routing, by name,
	// swapped whole with the routes (ApplyRouting, which routingMu
	// serializes).
	dynamic   atomic.Pointer[map[string]*backend]
	routingMu sync.Mutex
	// yamlPrepared are the config's own routes, compiled; prepared the
	// last routing's rules by their line (buildRoutes; routingMu).
	yamlPrepared []*route.Prepared[*backend]
	prepared     map[string]preparedRule
	// provided are the certificates of the route providers' TLS
	// listeners, from the routing; parsedCerts the last routing's, by a
	// hash of their PEM, parsedAuth its client authentications
	// (applyCertificates; routingMu).
	provided    providedCerts
	parsedCerts map[[32]byte]*tls.Certificate
	parsedAuth  map[[32]byte]*clientAuth
	// kube is the worker's Kubernetes watch, when one runs: started for
	// the config's Services, or by the first routing that names one; its
	// targets change with the routing.
	kubeMu         sync.Mutex // protects kube, kubeStop, kubeDone
	kube           *kube.Watcher
	kubeStop       func()
	kubeDone       <-chan struct{}
	testKubeSource kube.Source   // set by tests
	kubeSyncWait   time.Duration // a routing's wait for new Services; 0: defaultKubeSyncWait (tests set it)
	backends       map[string]*backend
	https          []*httpFrontend
	tcps           []*tcpFrontend
	draining       atomic.Bool
	stats          counters
	// gates are the listening sockets by listener and socket index, and
	// paused the pause set they follow (SetPaused).
	gatesMu sync.Mutex
	gates   map[string]map[int]*gatedListener
	paused  map[string][]int
	fails   failLog
	// changed signals (capacity 1) that a backend's endpoints or the
	// routing changed, so that the worker reports them at once.
	changed chan struct{}
	// routing is the last routing applied, for Stats.
	routing atomic.Pointer[appliedRouting]
	// reaper closes idle upstream connections, and watches the clients
	// of requests upstream (watchClients); Drain ends both.
	stopReaper chan struct{}
	// clients wakes watchClients while HTTP/1.1 requests are upstream.
	clients  *clientWatcher
	stopOnce sync.Once
	// stopAccepting runs StopAccepting once.
	stopAccepting sync.Once
	reaper        sync.WaitGroup
	// logDropped reports the worker's dropped log lines; nil: none.
	logDropped func() uint64
	// tlsConfigs are the TLS listeners' configs, built by Serve.
	tlsConfigs []*tls.Config
	// opensslOnce logs, once, whether RSA keys sign in OpenSSL.
	opensslOnce sync.Once
	// TicketKeys, set before Serve, are the TLS session-ticket keys to
	// start with (newest first); setTicketKeys replaces them.
	TicketKeys [][]byte
	// Generation is the worker's generation, for the access log.
	Generation uint64
	// access is the access log; nil when off.
	access *accessLog
	// trusted are the trusted proxies' addresses.
	trusted []netip.Prefix
	// badHeaders logs connections refused for their PROXY header;
	// overLimit those refused for maxConns.
	badHeaders, overLimit everySecond
	// maxConns is http.maxConnections: the most client connections the
	// worker holds at once.
	maxConns int64
	// listenerMetrics are each listener's request, TLS and PROXY
	// protocol metrics; built by New, read-only after.
	listenerMetrics map[string]*listenerMetrics
}

// counters are the worker's statistics, reported to the supervisor.
type counters struct {
	conns    atomic.Int64
	accepted atomic.Uint64
	// refused counts connections closed at accept: the worker had
	// maxConns already.
	refused  atomic.Uint64
	requests atomic.Uint64
	errors   atomic.Uint64
	// tlsHandshakeErrors counts failed TLS handshakes.
	tlsHandshakeErrors atomic.Uint64
	// proxyProtocolErrors counts connections closed for a missing or
	// malformed PROXY protocol header.
	proxyProtocolErrors atomic.Uint64
	// failures counts requests answered 5xx (the backend's or the
	// proxy's own) and TCP streams no backend took.
	failures atomic.Uint64
}

// New compiles cfg's backends and routes.
func New(cfg *config.Config, log *zap.Logger) *Proxy {
	p := &Proxy{cfg: cfg, log: log, backends: make(map[string]*backend), changed: make(chan struct{}, 1), stopReaper: make(chan struct{}), clients: newClientWatcher()}
	p.fails.log = log
	p.badHeaders.log = log
	p.overLimit.log = log
	p.maxConns = int64(cfg.HTTP.MaxConnections)
	if p.maxConns == 0 {
		p.maxConns = defaultMaxConns()
	}
	for _, s := range cfg.TrustedProxies {
		if pfx, err := config.ParsePrefix(s); err == nil { // validated
			p.trusted = append(p.trusted, pfx)
		}
	}
	p.listenerMetrics = make(map[string]*listenerMetrics, len(cfg.Listeners))
	for i := range cfg.Listeners {
		p.listenerMetrics[cfg.Listeners[i].Name] = newListenerMetrics(cfg, &cfg.Listeners[i], &p.stats.failures)
	}
	for _, bc := range cfg.Backends {
		p.backends[bc.Name] = newBackend(bc, cfg.HTTP.MaxHeaderBytes)
	}
	p.provided = providedCerts{}
	for _, lc := range cfg.Listeners {
		if lc.Provider != "" && lc.TLS != nil {
			p.provided[lc.Name] = new(atomic.Pointer[certSet])
		}
	}
	// The config was validated: every rule compiles.
	for _, r := range yamlRules(cfg, p.backends) {
		prep, err := route.Prepare(&r)
		if err != nil {
			log.Error("routes", zap.Error(err))
			continue
		}
		p.yamlPrepared = append(p.yamlPrepared, prep)
	}
	p.routes.Store(route.Build(p.yamlPrepared, nil))
	return p
}

// Serve starts serving on the listeners the supervisor handed over. Each
// must be a listener of the config, and every listener of the config must
// have at least one socket. Serve returns once every socket is being
// accepted on.
func (p *Proxy) Serve(listeners []ipc.Listener) error {
	got := make(map[string][]net.Listener)
	for _, l := range listeners {
		for i, ln := range l.Listeners {
			idx := i
			if i < len(l.Sockets) {
				idx = l.Sockets[i]
			}
			if lc := p.listenerConfig(l.Name); lc != nil {
				deferAccept(ln, lc.Protocol == config.ProtocolHTTP)
				ln = newRawListener(ln)
				if rl, ok := ln.(*rawListener); ok {
					rl.bare = loopServes(lc)
					if slices.Contains(l.Helps, idx) {
						rl.helping = p.spareForHelp
					}
				}
			}
			got[l.Name] = append(got[l.Name], p.gate(l.Name, idx, ln))
		}
	}
	for name := range got {
		if p.listenerConfig(name) == nil {
			return fmt.Errorf("listener %q handed over is not in the config", name)
		}
	}
	for _, lc := range p.cfg.Listeners {
		lns := got[lc.Name]
		if len(lns) == 0 {
			return fmt.Errorf("listener %q: no socket handed over", lc.Name)
		}
		var tc *tls.Config
		if lc.TLS != nil && !lc.TLS.Passthrough() {
			alpn := []string{"h2", "http/1.1"}
			if lc.Protocol == config.ProtocolTCP {
				alpn = nil
			}
			var err error
			if tc, err = p.newTLSConfig(lc.TLS, alpn); err != nil {
				return fmt.Errorf("listener %q: %w", lc.Name, err)
			}
			if p.provided[lc.Name] != nil {
				tc.GetCertificate = p.provided.getCertificate(lc.Name)
				tc.GetConfigForClient = p.provided.getConfigForClient(lc.Name, tc)
			}
			p.tlsConfigs = append(p.tlsConfigs, tc)
		}
		switch lc.Protocol {
		case config.ProtocolHTTP:
			f := newHTTPFrontend(lc.Name, p)
			f.tls, f.proxyProtocol, f.metrics = tc, lc.ProxyProtocol, p.listenerMetrics[lc.Name]
			p.https = append(p.https, f)
			f.serve(lns)
		case config.ProtocolTCP:
			// A route provider's listener (TCPRoute, TLSRoute) and one
			// with passthrough route each connection; the config's own
			// others have one route, and their backend is picked here.
			var b *backend
			if !lc.TLS.Passthrough() && lc.Provider == "" {
				rule, _ := p.routes.Load().Match(lc.Name, &route.Request{Path: []byte("/")})
				if rule == nil || len(rule.Backends) == 0 {
					return fmt.Errorf("listener %q: no route", lc.Name)
				}
				b = rule.Backends[0].Target
			}
			f := newTCPFrontend(lc.Name, p, b)
			f.tls, f.proxyProtocol, f.passthrough = tc, lc.ProxyProtocol, lc.TLS.Passthrough()
			f.idle = lc.IdleTimeout.Std() // the config's defaults gave it one, route providers' listeners too
			if loopServes(&lc) {
				var err error
				if f.loop, err = newStreamLoop(f); err != nil {
					return fmt.Errorf("listener %q: %w", lc.Name, err)
				}
			}
			p.tcps = append(p.tcps, f)
			f.serve(lns)
		}
	}
	p.setTicketKeys(p.TicketKeys)
	p.reaper.Go(p.reapIdle)
	p.reaper.Go(p.watchClients)
	return nil
}

// reapIdle closes pooled upstream connections once they pass their
// backend's idleTimeout, checking a few times per shortest timeout, until
// Drain.
func (p *Proxy) reapIdle() {
	every := 5 * time.Second
	for _, b := range p.backends {
		every = min(every, b.cfg.IdleTimeout.Std()/4)
	}
	// A routing's backends have their own idle timeouts: the default
	// one's quarter bounds the look at them too.
	every = min(every, config.DefaultBackendIdle/4)
	tick := time.NewTicker(max(every, 50*time.Millisecond))
	defer tick.Stop()
	memTick := time.NewTicker(time.Second)
	defer memTick.Stop()
	var mw memWatch
	for {
		select {
		case now := <-tick.C:
			p.eachBackend(func(b *backend) { b.reap(now) })
		case <-memTick.C:
			if mw.tick(p.stats.conns.Load()-p.parkedConns(), p.stats.accepted.Load()) {
				runtime.GC() // the pools' buffers (sync.Pool) go at the second GC
				debug.FreeOSMemory()
			}
		case <-p.stopReaper:
			return
		}
	}
}

// memWatch says when a worker should return the memory that connections
// no longer use to the system: the runtime keeps freed pages for a while,
// and a GC only runs when the heap grows, so a worker that served 10,000
// connections would hold their memory long after they closed or parked
// (operators size proxies by RSS). It says so once the active connections
// (neither closed nor parked) fell to half their peak, by at least
// giveBackConns; or once giveBackConns connections came since the last
// time and none came in the last tick (a wave of connections that went
// idle, which never makes a peak of active ones: they park at once).
type memWatch struct {
	peak         int64  // active connections, most since the last time
	acceptedThen uint64 // connections accepted, the last time
	lastAccepted uint64 // at the last tick
}

// giveBackConns is the change in connections that makes memWatch say so:
// a few MiB.
const giveBackConns = 1000

// tick takes the active connections and the count of those accepted, at
// one of the reaper's ticks, and reports whether to give memory back now.
func (m *memWatch) tick(active int64, accepted uint64) bool {
	quiet := accepted == m.lastAccepted
	m.lastAccepted = accepted
	m.peak = max(m.peak, active)
	fell := m.peak-active >= giveBackConns && active <= m.peak/2
	wave := accepted-m.acceptedThen >= giveBackConns && quiet
	if !fell && !wave {
		return false
	}
	m.peak, m.acceptedThen = active, accepted
	return true
}

// parkedConns counts the connections parked in the frontends' idle sets.
func (p *Proxy) parkedConns() int64 {
	n := 0
	for _, f := range p.https {
		if f.idle != nil {
			n += f.idle.count()
		}
	}
	return int64(n)
}

func (p *Proxy) listenerConfig(name string) *config.Listener {
	for i := range p.cfg.Listeners {
		if p.cfg.Listeners[i].Name == name {
			return &p.cfg.Listeners[i]
		}
	}
	return nil
}

// StopAccepting stops every accept, and returns once none can happen any
// more. closing says that the listening sockets close for good with this
// worker's copies (baton stops): the connections already queued on them
// are taken and served first. Drain calls it; calling it before lets the
// worker say it stopped (ipc.Worker.StoppedAccepting).
func (p *Proxy) StopAccepting(closing bool) {
	p.stopAccepting.Do(func() {
		p.draining.Store(true)
		for _, f := range p.https {
			f.acc.stop(closing)
		}
		for _, f := range p.tcps {
			f.acc.stop(closing)
		}
	})
}

// Drain stops accepting (StopAccepting) and finishes every connection,
// and returns when none is left or ctx ends (when it closes what is
// left).
func (p *Proxy) Drain(ctx context.Context, closing bool) {
	p.StopAccepting(closing)
	var wg sync.WaitGroup
	for _, f := range p.https {
		wg.Go(func() { f.drain(ctx, p.cfg.HTTP.DrainIdleGrace.Std()) })
	}
	for _, f := range p.tcps {
		wg.Go(func() { f.drain(ctx) })
	}
	wg.Wait()
	p.stopOnce.Do(func() { close(p.stopReaper) })
	p.reaper.Wait()
	p.eachBackend((*backend).close)
}

// Stats returns the worker's counters.
func (p *Proxy) Stats() ipc.Stats {
	s := ipc.Stats{
		Connections: p.stats.conns.Load(),
		Accepted:    p.stats.accepted.Load(),
		Requests:    p.stats.requests.Load(),
		Errors:      p.stats.errors.Load(),

		TLSHandshakeErrors:  p.stats.tlsHandshakeErrors.Load(),
		ProxyProtocolErrors: p.stats.proxyProtocolErrors.Load(),
		Failures:            p.stats.failures.Load(),
		Series:              p.series(),
	}
	if r := p.routing.Load(); r != nil {
		s.RoutingVersion, s.RoutingError = r.version, r.err
	}
	if p.logDropped != nil {
		s.LogDropped = p.logDropped()
	}
	if p.access != nil {
		s.LogDropped += p.access.dropped.Load()
	}
	for _, bc := range p.cfg.Backends {
		s.Backends = append(s.Backends, p.backends[bc.Name].stats())
	}
	for _, b := range p.dynamicBackends() {
		s.Backends = append(s.Backends, b.stats())
	}
	return s
}

// KubeTargets returns the Kubernetes Services the config's backends name.
func (p *Proxy) KubeTargets() []kube.Target { return p.kubeTargets(nil) }

// configErrors reports what the first endpoints showed to be a mistake of
// the config rather than a state of the cluster: a headless Service in
// clusterIP mode.
func (p *Proxy) configErrors() error {
	var errs []error
	for _, bc := range p.cfg.Backends {
		if err := p.backends[bc.Name].set.Load().err; kube.Headless(err) {
			errs = append(errs, fmt.Errorf("backend %s: %w", bc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// ApplyKube installs new endpoint sets, each for its backend alone: the
// other backends, and the routes, stay as they are.
func (p *Proxy) ApplyKube(us []kube.Update) {
	dynamic := p.dynamicBackends()
	for _, u := range us {
		if b := p.backends[u.Backend]; b != nil {
			b.update(u.Endpoints, u.Err)
		} else if b := dynamic[u.Backend]; b != nil {
			b.update(u.Endpoints, u.Err)
		}
	}
	p.statsChanged()
}

// statsChanged has the worker report its stats now, not at the next tick:
// what the status shows changed (endpoints, the routing applied).
func (p *Proxy) statsChanged() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// isTrusted reports whether a client's address is a trusted proxy's.
func (p *Proxy) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, pfx := range p.trusted {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// badProxyHeader counts and logs (at most a line a second) a connection
// closed for its PROXY protocol header. The usual cause is a listener with
// proxyProtocol: true behind a balancer that does not send one, or a
// client that reached it directly.
// defaultMaxConns is http.maxConnections' default: RLIMIT_NOFILE (the
// soft limit, which Go raises to the hard one at start) less a tenth of
// it, at least 64, for upstream connections, listeners and files.
func defaultMaxConns() int64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		return 1 << 30
	}
	n := int64(rl.Cur)
	return max(n-max(64, n/10), 1)
}

// spareForHelp says whether the worker has room to take connections
// from the sockets it helps with (rawListener.helping): while it holds under
// half of http.maxConnections. Past that it takes only its own, as
// steered, so that helping cannot bring it to its limit while the
// worker it helps has room (the limit refuses a connection at accept).
func (p *Proxy) spareForHelp() bool {
	return p.maxConns <= 0 || p.stats.conns.Load() < p.maxConns/2
}

// refuse closes c, accepted on listener beyond the worker's
// http.maxConnections, and counts it.
func (p *Proxy) refuse(listener string, c net.Conn) {
	p.stats.refused.Add(1)
	if m := p.listenerMetrics[listener]; m != nil {
		m.refused.Add(1)
	}
	c.Close()
	p.overLimit.warn("connection refused: http.maxConnections reached", zap.String("listener", listener),
		zap.Int64("maxConnections", p.maxConns))
}

func (p *Proxy) badProxyHeader(listener string, c net.Conn, err error) {
	p.stats.proxyProtocolErrors.Add(1)
	if m := p.listenerMetrics[listener]; m != nil {
		m.proxyProtocolErrors.Add(1)
	}
	p.badHeaders.warn("PROXY protocol header refused", zap.String("listener", listener),
		zap.Stringer("peer", c.RemoteAddr()), zap.Error(err))
}
