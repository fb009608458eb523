// Package config owns baton's configuration file: its schema, its defaults
// and its validation. A Config that Load returns is complete (every default
// filled in) and valid; nothing downstream checks it again.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-proxy/baton/proxy/route"
)

// Defaults for every setting that may be left out.
const (
	DefaultReadyTimeout      = 10 * time.Second
	DefaultDrainTimeout      = 30 * time.Second
	DefaultStopTimeout       = 30 * time.Second
	DefaultWorkerTimeout     = 10 * time.Second
	DefaultMaxDraining       = 4
	DefaultOrphanTimeout     = 5 * time.Minute
	DefaultWorkers           = 1
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultDrainIdleGrace    = time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	// DefaultMaxRequestsPerConnection is nginx's keepalive_requests.
	DefaultMaxRequestsPerConnection = 1000
	DefaultConnectTimeout           = 5 * time.Second
	DefaultResponseTimeout          = 60 * time.Second
	DefaultSendTimeout              = 60 * time.Second
	DefaultBackendIdle              = 30 * time.Second
	// DefaultStreamIdleTimeout is nginx's proxy_timeout for streams.
	DefaultStreamIdleTimeout = 10 * time.Minute
	DefaultProtocol          = ProtocolHTTP

	// MaxSize is the largest configuration file baton accepts. The
	// configuration travels to every worker in one message, which has a
	// size limit of its own.
	MaxSize = 128 << 10
	// MaxWorkers bounds workers per generation.
	MaxWorkers = 256
	// MaxSockets bounds the sockets of one reuseport group.
	MaxSockets = 256
)

// Listener protocols.
const (
	ProtocolHTTP = "http"
	ProtocolTCP  = "tcp"
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid config")

// Config is the whole configuration file.
type Config struct {
	// ControlSocket is the path of the control socket. Default: see
	// DefaultControlSocket.
	ControlSocket string `json:"controlSocket,omitempty"`
	// User and Group, names or numeric ids, are what workers run as; the
	// supervisor (started as root) binds every listener first, as nginx's
	// user directive. Group defaults to User's primary group.
	User  string `json:"user,omitempty"`
	Group string `json:"group,omitempty"`
	// ReadyTimeout bounds how long a new worker may take to report ready.
	ReadyTimeout Duration `json:"readyTimeout,omitempty"`
	// DrainTimeout bounds how long a draining worker may live.
	DrainTimeout Duration `json:"drainTimeout,omitempty"`
	// StopTimeout bounds a graceful stop's drain (SIGTERM, baton stop).
	StopTimeout Duration `json:"stopTimeout,omitempty"`
	// MaxDraining bounds the generations draining at once: past it, the
	// oldest draining generation is stopped early (its workers killed
	// after a second). Default 4.
	MaxDraining int `json:"maxDraining,omitempty"`
	// OrphanTimeout: when the supervisor dies (SIGKILL, OOM), its serving
	// workers keep serving and wait this long for the next baton run
	// with the same control socket to adopt them; then they drain and
	// exit. Default 5m; "0s" is not allowed (use a short one).
	OrphanTimeout Duration `json:"orphanTimeout,omitempty"`
	// WorkerTimeout: a worker of the active generation that sends no
	// message (stats come every second) for this long is killed and
	// restarted in its slot. Default 10s.
	WorkerTimeout Duration `json:"workerTimeout,omitempty"`
	// ShutdownDelay is how long a stop keeps serving, with /readyz
	// answering 503, before it closes the listeners and drains: the time
	// a load balancer needs to stop sending. Default 0.
	ShutdownDelay Duration `json:"shutdownDelay,omitempty"`
	// Workers is the number of worker processes per generation.
	Workers int `json:"workers,omitempty"`
	// HTTP holds the HTTP server settings shared by every http listener.
	HTTP HTTP `json:"http"`
	// Listeners are the sockets the supervisor owns.
	Listeners []Listener `json:"listeners"`
	// Backends are where requests go.
	Backends []Backend `json:"backends"`
	// Routes map a listener, host and path prefix to a backend.
	Routes []Route `json:"routes"`
	// Kubernetes says how to reach the API server, for backends that
	// route to Kubernetes Services.
	Kubernetes Kubernetes `json:"kubernetes"`
	// Gateway, when set, makes baton a Gateway API implementation: the
	// Gateways of its GatewayClasses are served, their HTTPRoutes routed.
	// A config with it needs no listeners, backends or routes of its own.
	Gateway *Gateway `json:"gateway,omitempty"`
	// Ingress, when set, makes baton an Ingress controller: the Ingresses
	// of its IngressClasses are served on Ingress.Address and
	// Ingress.TLSAddress. A config with it needs no listeners, backends or
	// routes of its own.
	Ingress *Ingress `json:"ingress,omitempty"`
	// Metrics is the supervisor's Prometheus endpoint.
	Metrics Metrics `json:"metrics"`
	// AccessLog, when its path is set, logs every request.
	AccessLog AccessLog `json:"accessLog"`
	// TrustedProxies are the addresses (CIDRs, or single IPs) of the
	// proxies in front of baton: their X-Forwarded-For chain is kept
	// (the client appended) and their X-Forwarded-Proto and -Host passed
	// on. From any other client these are replaced. Default: none.
	TrustedProxies []string `json:"trustedProxies,omitempty"`
	// Watch makes the supervisor watch the config file and every file it
	// names (Files), and reload when one changes content.
	Watch bool `json:"watch,omitempty"`
	// Canary is the automatic verdict on a canary (`baton reload
	// --canary`); without duration, only an operator decides.
	Canary Canary `json:"canary"`

	// Warnings are what loading the config found wrong but not fatal (an
	// expired certificate); not part of the file.
	Warnings []string `json:"-"`
}

// Canary configures the automatic verdict on a canary generation. The
// supervisor compares the canary's failure rate (5xx answers, the proxy's
// own included, and TCP streams no backend took) with the active
// generation's over the same time.
type Canary struct {
	// Duration: promote the canary this long after it started serving
	// if it is healthy. Zero: no automatic verdict.
	Duration Duration `json:"duration,omitempty"`
	// MinRequests is how many requests the canary must have served
	// before it is judged (default 100). A canary still short of them at
	// Duration is aborted: a version nobody tried is not promoted.
	MinRequests uint64 `json:"minRequests,omitempty"`
	// MaxErrorRatio: abort when the canary's failure rate exceeds this
	// many times the active's, and 1% (default 2).
	MaxErrorRatio float64 `json:"maxErrorRatio,omitempty"`
}

// AccessLog configures the access log: one line per request (and per TCP
// stream).
type AccessLog struct {
	// Path is "stderr" or a file, which the supervisor opens (appending)
	// and reopens on SIGUSR1 (logrotate); empty: no access log.
	Path string `json:"path,omitempty"`
	// Format is json (default) or combined (Apache's).
	Format string `json:"format,omitempty"`
}

// Access log formats.
const (
	AccessLogJSON     = "json"
	AccessLogCombined = "combined"
	AccessLogStderr   = "stderr"
)

// Metrics configures the Prometheus endpoint. Its counters are the
// supervisor's: they do not reset when workers or generations change.
type Metrics struct {
	// Address is host:port to serve /metrics on; empty: no endpoint. Read
	// at start only.
	Address string `json:"address,omitempty"`
	// StatusPage says who the status page (/ and /status.json) answers:
	// local (default: clients on loopback only, such as a browser on the
	// host or kubectl port-forward, while probes and Prometheus reach the
	// rest of the address from the network), on (every client of the
	// address), or off.
	StatusPage string `json:"statusPage,omitempty"`
}

// Metrics.StatusPage values.
const (
	StatusPageLocal = "local"
	StatusPageOn    = "on"
	StatusPageOff   = "off"
)

// Kubernetes holds the API server connection settings.
type Kubernetes struct {
	// Kubeconfig is a kubeconfig file. Default: the in-cluster config when
	// running in a pod, else $KUBECONFIG, else ~/.kube/config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
}

// HTTP holds HTTP server settings.
type HTTP struct {
	// ReadHeaderTimeout bounds reading a request's headers (slowloris).
	ReadHeaderTimeout Duration `json:"readHeaderTimeout,omitempty"`
	// IdleTimeout closes a keep-alive connection idle for that long.
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// DrainIdleGrace is how long a draining worker keeps an idle keep-alive
	// connection open, so that a client that reuses it at that instant is
	// answered (with Connection: close) instead of finding it closed.
	DrainIdleGrace Duration `json:"drainIdleGrace,omitempty"`
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int `json:"maxHeaderBytes,omitempty"`
	// MaxBodySize bounds a request body, for routes that do not set
	// their own: a larger one is answered 413. 0: no limit.
	MaxBodySize Size `json:"maxBodySize,omitempty"`
	// MaxRequestsPerConnection is the requests one client connection
	// serves (nginx's keepalive_requests, Envoy's
	// max_requests_per_connection): the last HTTP/1.1 response says
	// Connection: close; an HTTP/2 connection's last stream gets a GOAWAY
	// naming it. It bounds what one connection can make baton do, however
	// its streams end. Default DefaultMaxRequestsPerConnection.
	MaxRequestsPerConnection int `json:"maxRequestsPerConnection,omitempty"`
	// MaxConnections bounds each worker's client connections, of every
	// listener (nginx's worker_connections, HAProxy's maxconn): one
	// accepted beyond it is closed at once and counted
	// (baton_connections_refused_total); connections already admitted
	// are never failed for it. Default (0): the worker's limit of open
	// descriptors (RLIMIT_NOFILE) less a tenth of it (at least 64), kept
	// for upstream connections and files.
	MaxConnections int `json:"maxConnections,omitempty"`
}

// Listener is one listening address.
type Listener struct {
	// Name identifies the listener in routes and status.
	Name string `json:"name"`
	// Address is host:port for TCP (v4 or [v6]) or unix:/path.
	Address string `json:"address"`
	// Protocol is http or tcp.
	Protocol string `json:"protocol,omitempty"`
	// ReusePort opens Sockets sockets in one SO_REUSEPORT group.
	ReusePort bool `json:"reusePort,omitempty"`
	// Sockets is the size of the reuseport group. Zero means as many as
	// workers when the group is first opened; a reload keeps the group's
	// size unless Sockets asks for another (see supervisor).
	Sockets int `json:"sockets,omitempty"`
	// TLS, when set, terminates TLS on the listener: HTTP/1.1 and HTTP/2
	// (ALPN) for http, the raw stream for tcp.
	TLS *ListenerTLS `json:"tls,omitempty"`
	// ProxyProtocol requires every connection to start with a PROXY
	// protocol header (version 1 or 2, from a load balancer), whose
	// source address then counts as the client's. A connection without
	// one is closed.
	ProxyProtocol bool `json:"proxyProtocol,omitempty"`
	// IdleTimeout closes a stream of a tcp listener when neither side has
	// sent anything for this long (nginx's proxy_timeout, Envoy's
	// tcp_proxy idle_timeout), so that a peer that stays connected and
	// silent does not hold two descriptors for ever. Default
	// DefaultStreamIdleTimeout. http listeners use http.idleTimeout.
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// FreeBind binds Address even when no interface has it (IP_FREEBIND):
	// an address routed to the host, or one an interface gets later.
	FreeBind bool `json:"freeBind,omitempty"`
	// Provider names the route provider that made the listener (gateway):
	// its routes come from that provider's routing, not from routes.
	// Baton fills it in; a config file may not.
	Provider string `json:"provider,omitempty" schema:"-"`
}

// Gateway is the Gateway API's section.
type Gateway struct {
	// ControllerName: GatewayClasses naming it are baton's. Default
	// DefaultGatewayController.
	ControllerName string `json:"controllerName,omitempty"`
	// Addresses are the pool of each Gateway's address (status.addresses):
	// CIDRs or IPs. A single address serves one Gateway per port. They are
	// bound with IP_FREEBIND: routed to the host is enough.
	Addresses []string `json:"addresses"`
}

// Ingress is the Ingress controller's section.
type Ingress struct {
	// Address is where Ingress HTTP is served (default 0.0.0.0:80).
	Address string `json:"address,omitempty"`
	// TLSAddress is where Ingress HTTPS is served (default 0.0.0.0:443),
	// with the certificates of the Ingresses' TLS Secrets.
	TLSAddress string `json:"tlsAddress,omitempty"`
	// PublishService is the namespace/name of the Service that fronts
	// baton: its address goes to the Ingresses' status when Address is
	// unspecified (0.0.0.0 or ::).
	PublishService string `json:"publishService,omitempty"`
}

// Ingress defaults, and the IngressClass spec.controller baton answers
// to.
const (
	DefaultIngressAddress    = "0.0.0.0:80"
	DefaultIngressTLSAddress = "0.0.0.0:443"
	DefaultIngressController = "baton-proxy.github.io/ingress-controller"
)

// ProviderIngress is the Provider of the Ingress controller's listeners.
const ProviderIngress = "ingress"

// DefaultGatewayController is the Gateway API controllerName baton
// answers to.
const DefaultGatewayController = "baton-proxy.github.io/gateway"

// ProviderGateway is the Provider of the Gateway API's listeners.
const ProviderGateway = "gateway"

// Backend is a set of upstream addresses: static ones, or a Kubernetes
// Service's.
type Backend struct {
	// Name identifies the backend in routes.
	Name string `json:"name"`
	// Static lists host:port addresses.
	Static []string `json:"static,omitempty"`
	// Kubernetes routes to a Service instead.
	Kubernetes *KubeService `json:"kubernetes,omitempty"`
	// TLS, when set, makes baton speak TLS (HTTPS) to the endpoints.
	TLS *BackendTLS `json:"tls,omitempty"`
	// Protocol is what baton speaks to the endpoints: http1 (HTTP/1.1,
	// the default), h2c (HTTP/2 in cleartext, by prior knowledge) or h2
	// (HTTP/2 over TLS, agreed by ALPN: it needs tls). gRPC backends
	// need h2c or h2: only HTTP/2 carries trailers and streams both ways
	// at once.
	Protocol string `json:"protocol,omitempty"`
	// Balancer picks an address per request: round-robin (default),
	// least-request, cookie (sticky) or hash-header.
	Balancer string `json:"balancer,omitempty"`
	// HashHeader is the header hash-header hashes.
	HashHeader string `json:"hashHeader,omitempty"`
	// Cookie is the sticky cookie's name. Default: baton-<backend name>.
	Cookie string `json:"cookie,omitempty"`
	// CookiePath, CookieMaxAge and CookieSameSite are the sticky
	// cookie's attributes: its Path (default /), its Max-Age and Expires
	// (default none: a session cookie), its SameSite (Lax, Strict or None;
	// None adds Secure, which browsers require with it).
	CookiePath     string   `json:"cookiePath,omitempty"`
	CookieMaxAge   Duration `json:"cookieMaxAge,omitempty"`
	CookieSameSite string   `json:"cookieSameSite,omitempty"`
	// Retries is how many more attempts an idempotent request gets, on
	// another address, when it failed after being sent. A failed connect
	// is always retried on another address.
	Retries int `json:"retries,omitempty"`
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout Duration `json:"connectTimeout,omitempty"`
	// ResponseTimeout bounds the wait for a response head once the
	// request is sent, and each wait for more of a response body (nginx's
	// proxy_read_timeout). Past it the client gets a 504.
	ResponseTimeout Duration `json:"responseTimeout,omitempty"`
	// SendTimeout bounds each write of a request to the backend (nginx's
	// proxy_send_timeout: between two writes, not the whole request): a
	// backend that reads nothing that long fails the request.
	SendTimeout Duration `json:"sendTimeout,omitempty"`
	// IdleTimeout closes a pooled upstream connection unused this long.
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// ConnectionLifetime bounds how long an upstream keep-alive connection
	// is reused. Default: unbounded, except in clusterIP mode (10s), where
	// kube-proxy can only balance new connections.
	ConnectionLifetime Duration `json:"connectionLifetime,omitempty"`
}

// KubeService names a Kubernetes Service and how to reach it.
type KubeService struct {
	// Service is namespace/name.
	Service string `json:"service"`
	// Port is the Service port, by name or number.
	Port Port `json:"port"`
	// Mode is endpoints (default: the pods, from EndpointSlices) or
	// clusterIP (the Service's virtual IP, balanced by kube-proxy).
	Mode string `json:"mode,omitempty"`
}

// Namespace returns the Service's namespace.
func (k *KubeService) Namespace() string { ns, _, _ := strings.Cut(k.Service, "/"); return ns }

// Name returns the Service's name.
func (k *KubeService) Name() string { _, n, _ := strings.Cut(k.Service, "/"); return n }

// Kubernetes modes and balancers.
const (
	ModeEndpoints = "endpoints"
	ModeClusterIP = "clusterIP"

	BalancerRoundRobin   = "round-robin"
	BalancerLeastRequest = "least-request"
	BalancerCookie       = "cookie"
	BalancerHashHeader   = "hash-header"

	ProtocolHTTP1 = "http1"
	ProtocolH2C   = "h2c"
	ProtocolH2    = "h2"

	// DefaultClusterIPLifetime bounds upstream connections in clusterIP
	// mode, so that kube-proxy can spread load as pods come and go.
	DefaultClusterIPLifetime = 10 * time.Second
)

// Route sends what arrives on Listener for Host under PathPrefix to Backend.
type Route struct {
	Listener string `json:"listener"`
	// Host, or Hostnames: the hosts the route takes (exact, or "*."
	// and a suffix); none: any.
	Host      string   `json:"host,omitempty"`
	Hostnames []string `json:"hostnames,omitempty"`
	// PathPrefix takes the paths that begin with it, byte for byte (as
	// nginx's location prefixes); Path matches as the Gateway API does
	// (PathPrefix by whole segments, Exact, RegularExpression). At most
	// one of the two; neither: every path.
	PathPrefix string     `json:"pathPrefix,omitempty"`
	Path       *PathMatch `json:"path,omitempty"`
	// Method, Headers and QueryParams narrow the route further: every one
	// given must match.
	Method      string       `json:"method,omitempty"`
	Headers     []ValueMatch `json:"headers,omitempty"`
	QueryParams []ValueMatch `json:"queryParams,omitempty"`
	// Backend, or Backends with their weights: where the requests go
	// (none with Redirect).
	Backend  string            `json:"backend,omitempty"`
	Backends []WeightedBackend `json:"backends,omitempty"`
	// RequestHeaders and ResponseHeaders change the header fields on the
	// way up and back; Redirect answers with a redirect instead; Rewrite
	// changes the host and path sent upstream (the Gateway API's
	// filters).
	RequestHeaders  *HeaderFilter `json:"requestHeaders,omitempty"`
	ResponseHeaders *HeaderFilter `json:"responseHeaders,omitempty"`
	Redirect        *Redirect     `json:"redirect,omitempty"`
	Rewrite         *Rewrite      `json:"rewrite,omitempty"`
	// Mirrors get a copy of the requests (their answers are dropped).
	Mirrors []Mirror `json:"mirrors,omitempty"`
	// Timeouts bound the route's requests.
	Timeouts *RouteTimeouts `json:"timeouts,omitempty"`
	// MaxBodySize bounds a request body on this route (413 above it).
	// Default: http.maxBodySize.
	MaxBodySize Size `json:"maxBodySize,omitempty"`
	// BufferRequestBody reads request bodies up to this size whole before
	// a backend is chosen (nginx's proxy_request_buffering), so that a slow
	// client holds no backend connection; they reach the backend with a
	// Content-Length. A larger body is streamed as it comes (set
	// maxBodySize to the same size to refuse it instead). 0: stream every
	// body.
	BufferRequestBody Size `json:"bufferRequestBody,omitempty"`
}

// Path match types of Route.Path, the Gateway API's.
const (
	PathTypePrefix = "PathPrefix"
	PathTypeExact  = "Exact"
	PathTypeRegex  = "RegularExpression"
)

// PathMatch is a route's condition on the path.
type PathMatch struct {
	// Type is PathPrefix (the default), Exact or RegularExpression.
	Type  string `json:"type,omitempty"`
	Value string `json:"value"`
}

// ValueMatch is a condition on a header field or a query parameter.
type ValueMatch struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Type is Exact (the default) or RegularExpression (RE2, matching
	// the whole value).
	Type string `json:"type,omitempty"`
}

// SetDefaults fills in what b leaves out: timeouts, the balancer, the
// sticky cookie's name, the Kubernetes mode.
func (b *Backend) SetDefaults() {
	setDuration(&b.ConnectTimeout, DefaultConnectTimeout)
	setDuration(&b.ResponseTimeout, DefaultResponseTimeout)
	setDuration(&b.SendTimeout, DefaultSendTimeout)
	setDuration(&b.IdleTimeout, DefaultBackendIdle)
	if b.Balancer == "" {
		b.Balancer = BalancerRoundRobin
	}
	if b.Protocol == "" {
		b.Protocol = ProtocolHTTP1
	}
	if b.Balancer == BalancerCookie && b.Cookie == "" {
		b.Cookie = "baton-" + b.Name
	}
	if k := b.Kubernetes; k != nil {
		if k.Mode == "" {
			k.Mode = ModeEndpoints
		}
		if k.Mode == ModeClusterIP && b.ConnectionLifetime == 0 {
			b.ConnectionLifetime = Duration(DefaultClusterIPLifetime)
		}
	}
}

// Routing is a route provider's routing (the Gateway API controller's):
// backends in the config's terms, rules in the route model's, naming
// them. It goes from the provider to the workers through the supervisor
// (Supervisor.SetRouting), which does not read it; a worker serves it
// beside the config's own routes and backends, whose names it may not
// take.
type Routing struct {
	Backends []Backend            `json:"backends,omitempty"`
	Rules    []route.Rule[string] `json:"rules,omitempty"`
	// Certificates are the route providers' TLS listeners' certificates,
	// by listener (RoutingHead).
	Certificates map[string][]Certificate `json:"certificates,omitempty"`
	// ClientAuth is what those listeners ask of clients' certificates,
	// by listener (RoutingHead).
	ClientAuth map[string][]ClientAuth `json:"clientAuth,omitempty"`
}

// RoutingHead is the first line of an encoded routing: its backends and
// the certificates of route providers' TLS listeners, by listener name
// (served by SNI inside the workers: a new or rotated certificate is no
// handoff).
type RoutingHead struct {
	Backends     []Backend                `json:"backends,omitempty"`
	Certificates map[string][]Certificate `json:"certificates,omitempty"`
	ClientAuth   map[string][]ClientAuth  `json:"clientAuth,omitempty"`
}

// MarshalRouting encodes r as it travels: JSON lines, the first the head
// (RoutingHead), then one rule a line (compact JSON has no raw newline).
// A worker splits the lines without parsing them and decodes only the
// rules the last routing did not have (RoutingLines), so that a change of
// one route of a thousand costs one route's decoding.
func MarshalRouting(r Routing) ([]byte, error) {
	lines := make([][]byte, len(r.Rules))
	for i := range r.Rules {
		line, err := json.Marshal(&r.Rules[i])
		if err != nil {
			return nil, fmt.Errorf("routing rule %s: %w", r.Rules[i].Name, err)
		}
		lines[i] = line
	}
	return RoutingPayload(RoutingHead{Backends: r.Backends, Certificates: r.Certificates, ClientAuth: r.ClientAuth}, lines), nil
}

// RoutingPayload is MarshalRouting of a head and of rules encoded
// already, a line each (json.Marshal of a route.Rule[string]): a provider
// that keeps the lines of the rules that did not change encodes only the
// others.
func RoutingPayload(head RoutingHead, lines [][]byte) []byte {
	h, err := json.Marshal(head)
	if err != nil { // no value of a head's types fails to encode
		panic(fmt.Sprintf("config: encode routing head: %v", err))
	}
	b := bytes.NewBuffer(h)
	for _, line := range lines {
		b.WriteByte('\n')
		b.Write(line)
	}
	return b.Bytes()
}

// RoutingLines splits an encoded routing (MarshalRouting) into its head,
// decoded, and its rules' lines, not decoded.
func RoutingLines(payload []byte) (RoutingHead, [][]byte, error) {
	first, rest, _ := bytes.Cut(payload, []byte("\n"))
	var h RoutingHead
	if err := json.Unmarshal(first, &h); err != nil {
		return RoutingHead{}, nil, fmt.Errorf("routing head: %w", err)
	}
	var lines [][]byte
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		lines = append(lines, line)
	}
	return h, lines, nil
}

// HeaderFilter sets, adds and removes header fields: the fields set or
// removed are dropped, then set and add are written.
type HeaderFilter struct {
	Set    []Header `json:"set,omitempty"`
	Add    []Header `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// Header is a header field a filter writes.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Redirect is where a route redirects: what it leaves empty is the
// request's own (the port: the scheme's well-known one when the scheme
// changes, else the listener's).
type Redirect struct {
	Scheme     string        `json:"scheme,omitempty"`
	Hostname   string        `json:"hostname,omitempty"`
	Port       int           `json:"port,omitempty"`
	Path       *PathModifier `json:"path,omitempty"`
	StatusCode int           `json:"statusCode,omitempty"` // 301, 302 (default), 303, 307 or 308
}

// Rewrite is the host and path a request goes upstream with.
type Rewrite struct {
	Hostname string        `json:"hostname,omitempty"`
	Path     *PathModifier `json:"path,omitempty"`
}

// PathModifier replaces a path: all of it, or the prefix the route
// matched (by whole segments for a path of type PathPrefix, byte for byte
// for a pathPrefix, as nginx's proxy_pass with a URI). One of the two.
type PathModifier struct {
	ReplaceFullPath    *string `json:"replaceFullPath,omitempty"`
	ReplacePrefixMatch *string `json:"replacePrefixMatch,omitempty"`
}

// Mirror is a backend that gets a copy of a route's requests: those
// without a body, or with one read whole (bufferRequestBody).
type Mirror struct {
	Backend string `json:"backend"`
	// Percent of the requests mirrored, 1 to 100 (default 100).
	Percent int `json:"percent,omitempty"`
}

// RouteTimeouts bound a route's requests (the Gateway API's
// HTTPRouteTimeouts): Request from the request's start to its response's
// head, retries included; BackendRequest each attempt upstream (instead
// of the backend's responseTimeout). The answer past either is a 504.
type RouteTimeouts struct {
	Request        Duration `json:"request,omitempty"`
	BackendRequest Duration `json:"backendRequest,omitempty"`
}

// WeightedBackend is one of a route's backends and its share.
type WeightedBackend struct {
	Name string `json:"name"`
	// Weight is its share, relative to the route's other backends
	// (default 1); 0 sends it nothing.
	Weight *int `json:"weight,omitempty"`
}

// MaxBufferRequestBody bounds a route's bufferRequestBody: each client
// connection may hold that much memory.
const MaxBufferRequestBody = 64 << 20

// Load reads, parses, defaults and validates the file at path.
func Load(path string) (*Config, error) { return load(path, false) }

// LoadOffline is Load without the checks that depend on the machine it
// runs on (whether a Kubernetes API server can be found): for linting a
// config in CI, away from where it runs.
func LoadOffline(path string) (*Config, error) { return load(path, true) }

func load(path string, offline bool) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxSize+1)); err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	if buf.Len() > MaxSize {
		return nil, fmt.Errorf("config %s: %w: larger than %d bytes", path, ErrInvalid, MaxSize)
	}
	c, err := parse(buf.Bytes(), offline)
	var ps *Problems
	if errors.As(err, &ps) {
		ps.File = path
		return nil, ps
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse parses YAML (or JSON) config text, fills in defaults and validates.
// Unknown keys are errors: a misspelt key must not be silently ignored.
func Parse(data []byte) (*Config, error) { return parse(data, false) }

func parse(data []byte, offline bool) (*Config, error) {
	// The shape first, with positions, every problem at once; then the
	// decoding, of the same document (one YAML parser for both: YAML
	// 1.2, where on and yes are strings); then the values' own rules.
	doc, problems := checkShape(data)
	if len(problems) > 0 {
		return nil, &Problems{List: problems}
	}
	var v any
	if err := doc.Decode(&v); err != nil {
		return nil, &Problems{List: []Problem{{Line: doc.Line, Column: doc.Column, Message: err.Error()}}}
	}
	asJSON, err := json.Marshal(v)
	if err != nil {
		return nil, &Problems{List: []Problem{{Line: doc.Line, Column: doc.Column, Message: "a key that is not a string: " + err.Error()}}}
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(asJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil { // checkShape saw to it; a last guard
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, l := range c.Listeners {
		if l.Provider != "" {
			return nil, fmt.Errorf("%w: listeners: provider is baton's to fill in (the Gateway API's listeners come from its Gateways)", ErrInvalid)
		}
	}
	if c.hasTLSMaterial() {
		return nil, fmt.Errorf("%w: certPEM, keyPEM, clientCAPEM and caPEM are filled in by baton from the files: name the files (certFile, keyFile, clientCA, caFile)", ErrInvalid)
	}
	c.setDefaults()
	if err := c.validate(offline); err != nil {
		return nil, &Problems{List: locate(doc, err)}
	}
	if !offline {
		// The supervisor reads the key material, so that workers running
		// as another user need no access to the files.
		warnings, err := c.loadTLS()
		if err != nil {
			return nil, err
		}
		c.Warnings = warnings
	}
	return &c, nil
}

// Marshal encodes c as JSON, the form workers receive.
func (c *Config) Marshal() ([]byte, error) {
	return json.Marshal(c)
}

// Unmarshal decodes the JSON a worker received and validates it.
func Unmarshal(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) setDefaults() {
	if c.ControlSocket == "" {
		c.ControlSocket = DefaultControlSocket()
	}
	if c.Gateway != nil && c.Gateway.ControllerName == "" {
		c.Gateway.ControllerName = DefaultGatewayController
	}
	if in := c.Ingress; in != nil {
		if in.Address == "" {
			in.Address = DefaultIngressAddress
		}
		if in.TLSAddress == "" {
			in.TLSAddress = DefaultIngressTLSAddress
		}
	}
	setDuration(&c.ReadyTimeout, DefaultReadyTimeout)
	setDuration(&c.DrainTimeout, DefaultDrainTimeout)
	setDuration(&c.StopTimeout, DefaultStopTimeout)
	setDuration(&c.WorkerTimeout, DefaultWorkerTimeout)
	setDuration(&c.OrphanTimeout, DefaultOrphanTimeout)
	if c.AccessLog.Path != "" && c.AccessLog.Format == "" {
		c.AccessLog.Format = AccessLogJSON
	}
	if c.MaxDraining == 0 {
		c.MaxDraining = DefaultMaxDraining
	}
	if c.Canary.MinRequests == 0 {
		c.Canary.MinRequests = 100
	}
	if c.Canary.MaxErrorRatio == 0 {
		c.Canary.MaxErrorRatio = 2
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	setDuration(&c.HTTP.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDuration(&c.HTTP.IdleTimeout, DefaultIdleTimeout)
	setDuration(&c.HTTP.DrainIdleGrace, DefaultDrainIdleGrace)
	if c.HTTP.MaxHeaderBytes == 0 {
		c.HTTP.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.HTTP.MaxRequestsPerConnection == 0 {
		c.HTTP.MaxRequestsPerConnection = DefaultMaxRequestsPerConnection
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		if l.Protocol == "" {
			l.Protocol = DefaultProtocol
		}
		if l.TLS != nil && l.TLS.MinVersion == "" {
			l.TLS.MinVersion = DefaultTLSMinVersion
		}
		if l.Protocol == ProtocolTCP {
			setDuration(&l.IdleTimeout, DefaultStreamIdleTimeout)
		}
	}
	for i := range c.Backends {
		c.Backends[i].SetDefaults()
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.PathPrefix == "" && r.Path == nil && c.protocolOf(r.Listener) == ProtocolHTTP {
			r.PathPrefix = "/"
		}
		if r.MaxBodySize == 0 {
			r.MaxBodySize = c.HTTP.MaxBodySize
		}
	}
}

func setDuration(d *Duration, def time.Duration) {
	if *d == 0 {
		*d = Duration(def)
	}
}

func (c *Config) protocolOf(listener string) string {
	for _, l := range c.Listeners {
		if l.Name == listener {
			return l.Protocol
		}
	}
	return ""
}

// DefaultControlSocket is /run/baton/control.sock for root, else
// $XDG_RUNTIME_DIR/baton/control.sock, else /tmp/baton-UID/control.sock.
func DefaultControlSocket() string {
	uid := os.Geteuid()
	if uid == 0 {
		return "/run/baton/control.sock"
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		return filepath.Join(dir, "baton", "control.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("baton-%d", uid), "control.sock")
}
