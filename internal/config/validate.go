package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/route"
)

// Validate checks c and returns every problem found, joined, each wrapping
// ErrInvalid. It expects defaults to be filled in.
func (c *Config) Validate() error { return c.validate(false) }

// validate is Validate; offline skips what depends on this machine.
func (c *Config) validate(offline bool) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}

	for name, d := range map[string]Duration{
		"readyTimeout":           c.ReadyTimeout,
		"drainTimeout":           c.DrainTimeout,
		"stopTimeout":            c.StopTimeout,
		"workerTimeout":          c.WorkerTimeout,
		"http.readHeaderTimeout": c.HTTP.ReadHeaderTimeout,
		"http.idleTimeout":       c.HTTP.IdleTimeout,
		"http.drainIdleGrace":    c.HTTP.DrainIdleGrace,
	} {
		if d.Std() < time.Millisecond {
			bad("%s must be at least 1ms, not %s", name, d)
		}
	}
	if c.Canary.Duration < 0 || (c.Canary.Duration > 0 && c.Canary.Duration.Std() < time.Second) {
		bad("canary.duration must be at least 1s, not %s", c.Canary.Duration)
	}
	if r := c.Canary.MaxErrorRatio; r < 0 || (r > 0 && r < 1) {
		bad("canary.maxErrorRatio must be at least 1 (a canary failing no more than the active generation), not %g", r)
	}
	if c.WorkerTimeout.Std() < 2*time.Second {
		// Workers report every second: less would kill healthy ones.
		bad("workerTimeout must be at least 2s (workers report every second), not %s", c.WorkerTimeout)
	}
	if c.HTTP.DrainIdleGrace >= c.DrainTimeout {
		bad("http.drainIdleGrace (%s) must be shorter than drainTimeout (%s)", c.HTTP.DrainIdleGrace, c.DrainTimeout)
	}
	if f := c.AccessLog.Format; f != "" && f != AccessLogJSON && f != AccessLogCombined {
		bad("accessLog.format must be json or combined, not %q", f)
	}
	if p := c.AccessLog.Path; p != "" && p != AccessLogStderr && !strings.HasPrefix(p, "/") {
		bad("accessLog.path must be stderr or an absolute path, not %q", p)
	}
	for _, p := range c.TrustedProxies {
		if _, err := ParsePrefix(p); err != nil {
			bad("trustedProxies: %q is not a CIDR or an IP address", p)
		}
	}
	if c.Group != "" && c.User == "" {
		bad("group %q needs a user (workers run as user, with group as their group)", c.Group)
	}
	if c.MaxDraining < 1 || c.MaxDraining > 64 {
		bad("maxDraining must be between 1 and 64, not %d", c.MaxDraining)
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		bad("workers must be between 1 and %d, not %d", MaxWorkers, c.Workers)
	}
	if c.HTTP.MaxHeaderBytes < 1024 {
		bad("http.maxHeaderBytes must be at least 1024, not %d", c.HTTP.MaxHeaderBytes)
	}
	if c.HTTP.MaxConnections < 0 {
		bad("http.maxConnections must be 0 (from the descriptor limit) or more, not %d", c.HTTP.MaxConnections)
	}
	if c.HTTP.MaxRequestsPerConnection < 1 {
		bad("http.maxRequestsPerConnection must be at least 1, not %d", c.HTTP.MaxRequestsPerConnection)
	}
	switch c.Metrics.StatusPage {
	case "", StatusPageLocal, StatusPageOn, StatusPageOff:
	default:
		bad("metrics.statusPage must be local, on or off, not %q", c.Metrics.StatusPage)
	}
	if a := c.Metrics.Address; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil || checkPort(port) != nil {
			bad("metrics.address must be host:port, not %q", a)
		}
	}
	if !strings.HasPrefix(c.ControlSocket, "/") {
		bad("controlSocket must be an absolute path, not %q", c.ControlSocket)
	}

	listeners := make(map[string]*Listener)
	addresses := make(map[string]string)
	if len(c.Listeners) == 0 && c.Gateway == nil && c.Ingress == nil {
		bad("no listeners")
	}
	if in := c.Ingress; in != nil {
		for _, a := range []struct{ key, v string }{{"ingress.address", in.Address}, {"ingress.tlsAddress", in.TLSAddress}} {
			if _, err := netip.ParseAddrPort(a.v); err != nil {
				bad("%s: %q is not an IP address and port", a.key, a.v)
			}
		}
		if in.Address == in.TLSAddress {
			bad("ingress: address and tlsAddress are both %q", in.Address)
		}
		if ps := in.PublishService; ps != "" {
			if ns, name, ok := strings.Cut(ps, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
				bad("ingress.publishService: %q is not namespace/name", ps)
			}
		}
		if c.Kubernetes.Kubeconfig == "" && !defaultKubeconfig() && !offline {
			bad("ingress: there is no way to reach an API server: not in a pod, no $KUBECONFIG, no ~/.kube/config; set kubernetes.kubeconfig (or baton check --offline to lint it elsewhere)")
		}
	}
	if g := c.Gateway; g != nil {
		if len(g.Addresses) == 0 {
			bad("gateway.addresses: a pool of addresses for the Gateways (CIDRs or IPs)")
		}
		for _, a := range g.Addresses {
			if _, err := ParsePrefix(a); err != nil {
				bad("gateway.addresses: %q is not a CIDR or an IP address", a)
			}
		}
		if c.Kubernetes.Kubeconfig == "" && !defaultKubeconfig() && !offline {
			bad("gateway: there is no way to reach an API server: not in a pod, no $KUBECONFIG, no ~/.kube/config; set kubernetes.kubeconfig (or baton check --offline to lint it elsewhere)")
		}
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		where := fmt.Sprintf("listeners[%d]", i)
		if l.Name != "" {
			where = fmt.Sprintf("listener %q", l.Name)
		}
		switch {
		case l.Name == "":
			bad("%s: name is required", where)
		case listeners[l.Name] != nil:
			bad("%s: name used twice", where)
		default:
			listeners[l.Name] = l
		}
		network, addr, err := l.Network()
		if err != nil {
			bad("%s: %v", where, err)
		} else if other, ok := addresses[network+" "+addr]; ok && !strings.HasSuffix(addr, ":0") {
			bad("%s: address %s already used by listener %q", where, l.Address, other)
		} else {
			addresses[network+" "+addr] = l.Name
		}
		if l.Protocol != ProtocolHTTP && l.Protocol != ProtocolTCP {
			bad("%s: protocol must be %q or %q, not %q", where, ProtocolHTTP, ProtocolTCP, l.Protocol)
		}
		if l.Sockets < 0 || l.Sockets > MaxSockets {
			bad("%s: sockets must be between 1 and %d, not %d", where, MaxSockets, l.Sockets)
		}
		if !l.ReusePort && l.Sockets > 1 {
			bad("%s: sockets: %d needs reusePort: true (without it all workers share one socket)", where, l.Sockets)
		}
		if l.ReusePort && network == "unix" {
			bad("%s: reusePort applies to TCP listeners only", where)
		}
		if l.IdleTimeout != 0 && l.Protocol != ProtocolTCP {
			bad("%s: idleTimeout is for tcp listeners (an http listener's connections use http.idleTimeout)", where)
		}
		if l.IdleTimeout > 0 && l.IdleTimeout.Std() < time.Millisecond {
			// As every other duration: a stream closed at the loop's
			// first look is a mistake, not a setting.
			bad("%s: idleTimeout must be at least 1ms (left out: %s), not %s", where, DefaultStreamIdleTimeout, l.IdleTimeout)
		}
		if l.TLS != nil {
			checkTLS(l.TLS, where, l.Provider != "", bad)
			if l.TLS.Passthrough() && l.Protocol != ProtocolTCP {
				bad("%s: tls.mode passthrough needs protocol tcp (an http listener terminates TLS to read requests)", where)
			}
		}
	}

	backends := make(map[string]*Backend)
	for i := range c.Backends {
		b := &c.Backends[i]
		where := fmt.Sprintf("backends[%d]", i)
		if b.Name != "" {
			where = fmt.Sprintf("backend %q", b.Name)
		}
		switch {
		case b.Name == "":
			bad("%s: name is required", where)
		case backends[b.Name] != nil:
			bad("%s: name used twice", where)
		default:
			backends[b.Name] = b
		}
		switch {
		case b.Kubernetes != nil && len(b.Static) > 0:
			bad("%s: give static or kubernetes, not both", where)
		case b.Kubernetes != nil:
			checkKube(b, where, bad)
		case len(b.Static) == 0:
			bad("%s: static needs at least one address", where)
		}
		switch b.Balancer {
		case BalancerRoundRobin, BalancerLeastRequest, BalancerCookie:
		case BalancerHashHeader:
			if b.HashHeader == "" {
				bad("%s: balancer hash-header needs hashHeader (the header to hash)", where)
			}
		default:
			bad("%s: balancer must be round-robin, least-request, cookie or hash-header, not %q", where, b.Balancer)
		}
		switch b.Protocol {
		case ProtocolHTTP1:
		case ProtocolH2C:
			if b.TLS != nil {
				bad("%s: protocol h2c is HTTP/2 without TLS, and the backend has tls: say h2", where)
			}
		case ProtocolH2:
			if b.TLS == nil {
				bad("%s: protocol h2 is HTTP/2 over TLS: give tls (or say h2c for cleartext)", where)
			}
		default:
			bad("%s: protocol must be http1, h2c or h2, not %q", where, b.Protocol)
		}
		if p := b.CookiePath; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == ';' || r == 0x7f || r > 0x7e })) {
			bad("%s: cookiePath %q is not a path (no ';', no control or non-ASCII character)", where, p)
		}
		switch b.CookieSameSite {
		case "", "Lax", "Strict", "None":
		default:
			bad("%s: cookieSameSite must be Lax, Strict or None, not %q", where, b.CookieSameSite)
		}
		if b.CookieMaxAge.Std() < 0 {
			bad("%s: cookieMaxAge is negative", where)
		}
		if b.Retries < 0 || b.Retries > 10 {
			bad("%s: retries must be between 0 and 10, not %d", where, b.Retries)
		}
		for _, a := range b.Static {
			if err := checkHostPort(a); err != nil {
				bad("%s: static address %q: %v", where, a, err)
			}
		}
		for key, d := range map[string]Duration{"connectTimeout": b.ConnectTimeout, "responseTimeout": b.ResponseTimeout, "sendTimeout": b.SendTimeout, "idleTimeout": b.IdleTimeout} {
			if d.Std() < time.Millisecond {
				bad("%s: %s must be at least 1ms, not %s", where, key, d)
			}
		}
	}

	// Where the API server is depends on the machine: offline, not
	// checked.
	switch k := c.Kubernetes.Kubeconfig; {
	case offline:
	case k != "":
		if _, err := os.Stat(k); err != nil {
			bad("kubernetes.kubeconfig: %v", err)
		}
	case c.usesKubernetes() && !defaultKubeconfig():
		bad("backends name Kubernetes Services, but there is no way to reach an API server: not in a pod, no $KUBECONFIG, no ~/.kube/config; set kubernetes.kubeconfig (or baton check --offline to lint it elsewhere)")
	}

	seen := make(map[string]int)
	routed := make(map[string]int)
	for i, r := range c.Routes {
		where := fmt.Sprintf("routes[%d]", i)
		l := listeners[r.Listener]
		if l == nil {
			bad("%s: listener %q is not defined", where, r.Listener)
		} else {
			routed[r.Listener]++
			switch l.Protocol {
			case ProtocolTCP:
				passthrough := l.TLS.Passthrough()
				if !passthrough && (r.Host != "" || len(r.Hostnames) > 0) {
					bad("%s: listener %q is tcp: a host needs tls.mode passthrough (routes by the ClientHello's server name)", where, r.Listener)
				}
				if r.PathPrefix != "" || r.Path != nil || r.Method != "" || len(r.Headers) > 0 || len(r.QueryParams) > 0 || r.BufferRequestBody != 0 ||
					r.RequestHeaders != nil || r.ResponseHeaders != nil || r.Redirect != nil || r.Rewrite != nil || len(r.Mirrors) > 0 || r.Timeouts != nil {
					bad("%s: listener %q is tcp: only host (with tls passthrough) and backend apply (no path, matches, bufferRequestBody or filters)", where, r.Listener)
				}
				if passthrough {
					for _, h := range append([]string{r.Host}, r.Hostnames...) {
						if err := checkHost(h); err != nil {
							bad("%s: host %q: %v", where, h, err)
						}
					}
				} else if routed[r.Listener] > 1 {
					bad("%s: listener %q is tcp and already has a route", where, r.Listener)
				}
			case ProtocolHTTP:
				checkRouteMatch(where, &r, bad)
				checkRouteFilters(where, &r, bad)
				if r.BufferRequestBody > MaxBufferRequestBody {
					bad("%s: bufferRequestBody must be at most %s, not %s", where, Size(MaxBufferRequestBody), r.BufferRequestBody)
				}
			}
		}
		switch {
		case r.Redirect != nil && (r.Backend != "" || len(r.Backends) > 0):
			bad("%s: a route that redirects sends nowhere: no backend", where)
		case r.Redirect != nil:
		case r.Backend != "" && len(r.Backends) > 0:
			bad("%s: backend and backends: name one or the other", where)
		case r.Backend == "" && len(r.Backends) == 0:
			bad("%s: no backend", where)
		case r.Backend != "" && backends[r.Backend] == nil:
			bad("%s: backend %q is not defined", where, r.Backend)
		}
		for j, b := range r.Backends {
			if backends[b.Name] == nil {
				bad("%s.backends[%d]: backend %q is not defined", where, j, b.Name)
			}
			if b.Weight != nil && (*b.Weight < 0 || *b.Weight > MaxWeight) {
				bad("%s.backends[%d]: weight must be from 0 to %d, not %d", where, j, MaxWeight, *b.Weight)
			}
		}
		for j, m := range r.Mirrors {
			if backends[m.Backend] == nil {
				bad("%s.mirrors[%d]: backend %q is not defined", where, j, m.Backend)
			}
			if m.Percent < 0 || m.Percent > 100 {
				bad("%s.mirrors[%d]: percent must be from 1 to 100, not %d", where, j, m.Percent)
			}
		}
		if to := r.Timeouts; to != nil {
			if to.Request < 0 || to.Request > 0 && to.Request.Std() < time.Millisecond || to.BackendRequest < 0 || to.BackendRequest > 0 && to.BackendRequest.Std() < time.Millisecond {
				bad("%s.timeouts: each at least 1ms, or 0 for none", where)
			}
			if to.Request > 0 && to.BackendRequest > to.Request {
				bad("%s.timeouts: backendRequest (%s) longer than request (%s)", where, to.BackendRequest, to.Request)
			}
		}
		if len(r.Backends) > 1 && l != nil && l.Protocol == ProtocolTCP {
			bad("%s: listener %q is tcp: one backend", where, r.Listener)
		}
		k := r.matchKey()
		if j, dup := seen[k]; dup {
			bad("%s: matches the same requests as routes[%d] (same listener, hosts, path and conditions)", where, j)
		}
		seen[k] = i
	}
	for _, l := range c.Listeners {
		if l.Name != "" && routed[l.Name] == 0 && l.Provider == "" {
			bad("listener %q has no route", l.Name)
		}
	}
	return errors.Join(errs...)
}

// Network returns the network and address to listen on: "unix" and a path,
// or "tcp4", "tcp6" or "tcp" (a host name) and host:port.
func (l *Listener) Network() (network, address string, err error) {
	if path, ok := strings.CutPrefix(l.Address, "unix:"); ok {
		if !strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "@") {
			return "", "", fmt.Errorf("unix socket path must be absolute, not %q", path)
		}
		return "unix", path, nil
	}
	host, port, err := net.SplitHostPort(l.Address)
	if err != nil {
		return "", "", fmt.Errorf("address %q: want host:port, [v6]:port or unix:/path", l.Address)
	}
	if err := checkPort(port); err != nil {
		return "", "", fmt.Errorf("address %q: %w", l.Address, err)
	}
	if host == "" {
		return "tcp", l.Address, nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "tcp", l.Address, nil
	}
	if ip.Is4() || ip.Is4In6() {
		return "tcp4", l.Address, nil
	}
	return "tcp6", l.Address, nil
}

func checkKube(b *Backend, where string, bad func(string, ...any)) {
	k := b.Kubernetes
	ns, name, ok := strings.Cut(k.Service, "/")
	if !ok || !dnsLabel(ns) || !dnsLabel(name) {
		bad("%s: kubernetes.service must be namespace/name, not %q", where, k.Service)
	}
	if k.Port.Name == "" && (k.Port.Number < 1 || k.Port.Number > 65535) {
		bad("%s: kubernetes.port must be a Service port name or number", where)
	}
	switch k.Mode {
	case ModeEndpoints:
	case ModeClusterIP:
		if b.Balancer != BalancerRoundRobin {
			bad("%s: balancer %s needs mode endpoints: in clusterIP mode kube-proxy picks the pod", where, b.Balancer)
		}
	default:
		bad("%s: kubernetes.mode must be endpoints or clusterIP, not %q", where, k.Mode)
	}
}

// dnsLabel reports whether s is an RFC 1123 label, as namespaces and
// Service names are.
func dnsLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' && i > 0 && i < len(s)-1) {
			return false
		}
	}
	return true
}

func checkHostPort(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return errors.New("want host:port")
	}
	if host == "" {
		return errors.New("host is empty")
	}
	return checkPort(port)
}

func checkPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// MaxWeight is the largest weight of a route's backend (the Gateway API's
// bound).
const MaxWeight = 1000000

// checkRouteMatch checks what an http route matches on.
func checkRouteMatch(where string, r *Route, bad func(string, ...any)) {
	if err := checkHost(r.Host); err != nil {
		bad("%s: host %q: %v", where, r.Host, err)
	}
	for j, h := range r.Hostnames {
		if err := checkHost(h); err != nil || h == "" {
			bad("%s.hostnames[%d]: %q: want a host name without port, optionally starting with *.", where, j, h)
		}
	}
	checkPath := func(key, p string) {
		if !strings.HasPrefix(p, "/") {
			bad("%s: %s must start with /, not %q", where, key, p)
		} else if n, err := h1.NormalizePath(nil, []byte(p)); err != nil || string(n) != p {
			// Requests are matched in normalised form: a path in any
			// other form would never match.
			bad("%s: %s %q is not in normal form (write %q: no dot-segments, unreserved characters unescaped, hex in upper case)", where, key, p, n)
		}
	}
	switch {
	case r.PathPrefix != "" && r.Path != nil:
		bad("%s: pathPrefix and path: give one or the other", where)
	case r.Path != nil:
		switch r.Path.Type {
		case "", PathTypePrefix, PathTypeExact:
			checkPath("path.value", r.Path.Value)
		case PathTypeRegex:
			if _, err := regexp.Compile(r.Path.Value); err != nil {
				bad("%s: path.value %q: %v", where, r.Path.Value, err)
			}
		default:
			bad("%s: path.type must be PathPrefix, Exact or RegularExpression, not %q", where, r.Path.Type)
		}
	case r.PathPrefix != "":
		checkPath("pathPrefix", r.PathPrefix)
	}
	if r.Method != "" && !h1.IsToken(r.Method) {
		bad("%s: method %q is not a token", where, r.Method)
	}
	for key, vs := range map[string][]ValueMatch{"headers": r.Headers, "queryParams": r.QueryParams} {
		for j, v := range vs {
			if v.Name == "" || key == "headers" && !h1.IsToken(v.Name) {
				bad("%s.%s[%d]: name %q is not a field name", where, key, j, v.Name)
			}
			switch v.Type {
			case "", "Exact":
			case PathTypeRegex:
				if _, err := regexp.Compile(v.Value); err != nil {
					bad("%s.%s[%d]: value %q: %v", where, key, j, v.Value, err)
				}
			default:
				bad("%s.%s[%d]: type must be Exact or RegularExpression, not %q", where, key, j, v.Type)
			}
		}
	}
}

// checkRouteFilters checks a route's filters.
func checkRouteFilters(where string, r *Route, bad func(string, ...any)) {
	for key, f := range map[string]*HeaderFilter{"requestHeaders": r.RequestHeaders, "responseHeaders": r.ResponseHeaders} {
		if f == nil {
			continue
		}
		names := append([]string(nil), f.Remove...)
		for _, h := range append(append([]Header(nil), f.Set...), f.Add...) {
			names = append(names, h.Name)
			if strings.ContainsAny(h.Value, "\r\n\x00") || h.Value != strings.TrimSpace(h.Value) {
				bad("%s.%s: the value of %q has a control character or surrounding space", where, key, h.Name)
			}
		}
		for _, n := range names {
			switch {
			case !h1.IsToken(n):
				bad("%s.%s: %q is not a field name", where, key, n)
			case route.Reserved(n):
				bad("%s.%s: %q is baton's to write (framing, Host, X-Forwarded-*): a filter cannot change it", where, key, n)
			}
		}
	}
	if r.Redirect != nil && r.Rewrite != nil {
		bad("%s: redirect and rewrite: a route does one or the other", where)
	}
	prefixMatch := r.PathPrefix != "" || r.Path != nil && (r.Path.Type == "" || r.Path.Type == PathTypePrefix)
	checkModifier := func(key string, m *PathModifier) {
		if m == nil {
			return
		}
		switch {
		case (m.ReplaceFullPath == nil) == (m.ReplacePrefixMatch == nil):
			bad("%s.%s: one of replaceFullPath and replacePrefixMatch", where, key)
		case m.ReplaceFullPath != nil:
			if p := *m.ReplaceFullPath; !strings.HasPrefix(p, "/") {
				bad("%s.%s.replaceFullPath must start with /, not %q", where, key, p)
			} else if n, err := h1.NormalizePath(nil, []byte(p)); err != nil || string(n) != p {
				bad("%s.%s.replaceFullPath %q is not in normal form (write %q)", where, key, p, n)
			}
		default:
			p := *m.ReplacePrefixMatch
			if !prefixMatch {
				bad("%s.%s.replacePrefixMatch needs a prefix to replace: a pathPrefix, or a path of type PathPrefix", where, key)
			}
			if p != "" {
				if !strings.HasPrefix(p, "/") {
					bad("%s.%s.replacePrefixMatch must start with /, not %q", where, key, p)
				} else if n, err := h1.NormalizePath(nil, []byte(p)); err != nil || string(n) != p {
					bad("%s.%s.replacePrefixMatch %q is not in normal form (write %q)", where, key, p, n)
				}
			}
		}
	}
	if rd := r.Redirect; rd != nil {
		if rd.Scheme != "" && rd.Scheme != "http" && rd.Scheme != "https" {
			bad("%s.redirect.scheme must be http or https, not %q", where, rd.Scheme)
		}
		if err := checkHost(rd.Hostname); err != nil || strings.HasPrefix(rd.Hostname, "*") {
			bad("%s.redirect.hostname %q: want a host name without port", where, rd.Hostname)
		}
		if rd.Port < 0 || rd.Port > 65535 {
			bad("%s.redirect.port must be from 1 to 65535, not %d", where, rd.Port)
		}
		switch rd.StatusCode {
		case 0, 301, 302, 303, 307, 308:
		default:
			bad("%s.redirect.statusCode must be 301, 302, 303, 307 or 308, not %d", where, rd.StatusCode)
		}
		checkModifier("redirect.path", rd.Path)
	}
	if rw := r.Rewrite; rw != nil {
		if err := checkHost(rw.Hostname); err != nil || strings.HasPrefix(rw.Hostname, "*") {
			bad("%s.rewrite.hostname %q: want a host name without port", where, rw.Hostname)
		}
		checkModifier("rewrite.path", rw.Path)
	}
}

// matchKey is what two routes that match the same requests share.
func (r *Route) matchKey() string {
	hosts := append([]string{strings.ToLower(r.Host)}, r.Hostnames...)
	for i := range hosts {
		hosts[i] = strings.ToLower(hosts[i])
	}
	slices.Sort(hosts)
	p := PathMatch{Value: r.PathPrefix, Type: "byte prefix"}
	if r.Path != nil {
		p = *r.Path
	}
	return fmt.Sprintf("%s|%q|%q|%s|%q|%q", r.Listener, hosts, p, r.Method, r.Headers, r.QueryParams)
}

// checkHost accepts "", a host name, or a wildcard "*.example.com".
func checkHost(h string) error {
	if h == "" {
		return nil
	}
	name := strings.TrimPrefix(h, "*.")
	if strings.ContainsAny(name, "*/: ") {
		return errors.New("want a host name without port, optionally starting with *.")
	}
	return nil
}

func (c *Config) usesKubernetes() bool {
	for _, b := range c.Backends {
		if b.Kubernetes != nil {
			return true
		}
	}
	return false
}

// defaultKubeconfig reports whether client-go's defaults find a config:
// in-cluster, $KUBECONFIG, or ~/.kube/config.
func defaultKubeconfig() bool {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return true
	}
	for _, p := range filepath.SplitList(os.Getenv("KUBECONFIG")) {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		if _, err := os.Stat(filepath.Join(home, ".kube", "config")); err == nil {
			return true
		}
	}
	return false
}

// ParsePrefix parses a CIDR, or a single address as its /32 or /128.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}
