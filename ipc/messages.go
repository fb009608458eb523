package ipc

import (
	"encoding/json"
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
)

// Hello is the supervisor's first message to a worker. Its frame carries one
// descriptor for every entry of every listener's Sockets, in order.
type Hello struct {
	// Generation is the worker's generation, counting from 1.
	Generation uint64 `json:"generation"`
	// Slot is the worker's place in its generation, from 0 to Workers-1.
	Slot int `json:"slot"`
	// Workers is the number of workers in the generation.
	Workers int `json:"workers"`
	// Listeners describes the descriptors that came with the hello.
	Listeners []ListenerInfo `json:"listeners"`
	// Config is the worker's configuration, opaque to the protocol.
	Config json.RawMessage `json:"config,omitempty"`
	// Routing, when set, says that a Routing message follows the hello at
	// once: the routing a route provider of the supervisor's (the Gateway
	// API's controller) computed, which the worker applies before it says
	// ready.
	Routing bool `json:"routing,omitempty"`
	// TicketKeys are the TLS session-ticket keys, newest first: the first
	// encrypts, all decrypt. The supervisor owns them, rotates them (a
	// Tickets message), and hands the same ones to every worker and every
	// generation, so that a client resumes its session on any of them.
	TicketKeys [][]byte `json:"ticketKeys,omitempty"`
	// AccessLog, when set, says that the frame's last descriptor is a file
	// the worker appends its access log to. The supervisor opens it (and
	// reopens it: a LogFile message), so that a worker running as another
	// user need not.
	AccessLog bool `json:"accessLog,omitempty"`
	// Orphans, when set, asks the worker to outlive its supervisor: if the
	// supervisor dies while the worker serves, the worker keeps serving
	// and waits to be adopted (see Orphans). Nil: drain at once.
	Orphans *Orphans `json:"orphans,omitempty"`
	// Paused names, per listener, the sockets (indexes as in its Sockets)
	// the worker must not accept on until an Accept message says
	// otherwise: a canary's share where BPF cannot steer.
	Paused map[string][]int `json:"paused,omitempty"`
	// CanaryOf, when set, says the worker's generation started as a canary
	// beside that one. A supervisor adopting orphans of both aborts the
	// canary: promoting it would have drained the other.
	CanaryOf uint64 `json:"canaryOf,omitempty"`
}

// Orphans says how a worker waits for a new supervisor after its own died.
type Orphans struct {
	// Name prefixes the abstract unix socket (SOCK_SEQPACKET) the worker
	// listens on meanwhile: Name + "/" + its pid. A supervisor finds it
	// there (in /proc/net/unix) and adopts the worker.
	Name string `json:"name"`
	// Timeout bounds the wait: a worker not adopted by then drains and
	// exits, so that none runs unsupervised for long.
	Timeout time.Duration `json:"timeout"`
}

// Orphan is an orphaned worker's first message to the supervisor that
// connects to adopt it: what it is and serves. Its frame carries one
// descriptor per entry of every listener's Sockets, as a hello does; the
// supervisor takes the listening sockets back from them.
type Orphan struct {
	Generation uint64          `json:"generation"`
	Slot       int             `json:"slot"`
	Workers    int             `json:"workers"`
	Listeners  []ListenerInfo  `json:"listeners"`
	Config     json.RawMessage `json:"config,omitempty"`
	// TicketKeys are the worker's session-ticket keys, so that the
	// adopting supervisor can keep sessions resumable.
	TicketKeys [][]byte `json:"ticketKeys,omitempty"`
	// CanaryOf is the hello's.
	CanaryOf uint64 `json:"canaryOf,omitempty"`
	// Acks is the worker's Ready.Acks.
	Acks bool `json:"acks,omitempty"`
}

// Files is the number of descriptors the orphan's listeners announce.
func (o *Orphan) Files() int {
	n := 0
	for _, l := range o.Listeners {
		n += len(l.Sockets)
	}
	return n
}

// Routing replaces a worker's routing (see Hello.Routing), while it
// serves too: routes and backends change without a new generation. The
// payload, opaque to the protocol as Config is, is the content of the
// message's one descriptor, a sealed file of Size bytes (RoutingFile).
type Routing struct {
	Size int64 `json:"size"`
	// Version numbers the routings the supervisor relays, from 1; a
	// worker reports the last it applied (Stats.RoutingVersion).
	Version uint64 `json:"version,omitempty"`
}

// Tickets replaces a worker's TLS session-ticket keys after a rotation.
type Tickets struct {
	Keys [][]byte `json:"keys"`
}

// Adopted answers an Orphan: the connection is the worker's supervisor
// connection from now on.
type Adopted struct {
	Generation uint64 `json:"generation"`
}

// Files is the number of descriptors the hello announces.
func (h *Hello) Files() int {
	n := 0
	for _, l := range h.Listeners {
		n += len(l.Sockets)
	}
	if h.AccessLog {
		n++
	}
	return n
}

// Accept tells a worker which of its sockets to stop accepting on: per
// listener, the indexes (as in its Sockets); every socket not named is
// accepted on. Connections wait meanwhile in the socket's queue, for the
// other generation's workers to accept. Only sent to workers whose hello
// had Paused or to every worker of a generation beside a canary.
type Accept struct {
	Paused map[string][]int `json:"paused"`
}

// LogFile comes with one descriptor: the access log file, reopened (after
// a rotation). The worker writes there from now on.
type LogFile struct{}

// ListenerInfo describes one listener handed to a worker.
type ListenerInfo struct {
	// Name is the listener's name in the configuration.
	Name string `json:"name"`
	// Key names the listener's sockets in the supervisor (its group);
	// an orphan gives it back at adoption.
	Key string `json:"key,omitempty"`
	// ReusePort is set when the sockets form a SO_REUSEPORT group, of
	// GroupSize sockets.
	ReusePort bool `json:"reusePort,omitempty"`
	GroupSize int  `json:"groupSize,omitempty"`
	// Network is "tcp", "tcp4", "tcp6" or "unix".
	Network string `json:"network"`
	// Address is the address the sockets are bound to.
	Address string `json:"address"`
	// Protocol is what the worker should speak ("http", "tcp"), opaque to
	// the supervisor.
	Protocol string `json:"protocol,omitempty"`
	// Sockets are the indexes, in the listener's reuseport group, of the
	// sockets given to this worker; one descriptor each.
	Sockets []int `json:"sockets"`
	// Helps names those of Sockets that other workers of the generation
	// accept on as their own. The worker takes a connection from them
	// only when it is free, one at a time, so that a connection steered
	// to a worker that is busy or off its core waits for it no longer
	// than for another (see proxy's rawListener). A worker that ignores
	// it accepts on them as on its own.
	Helps []int `json:"helps,omitempty"`
}

// Ready tells the supervisor that the worker serves on every listener.
type Ready struct {
	// Acks says that the worker answers a Drain that asks for it
	// (Drain.Ack) with Stopped, once it accepts no more connections. The
	// supervisor waits for that before it reports a handoff done, so that
	// a connection made after the report reaches the new generation.
	Acks bool `json:"acks,omitempty"`
}

// Stopped tells the supervisor that a draining worker accepts no more
// connections: it has closed its copies of the listening sockets, and
// what is queued on them is the other generation's to accept.
type Stopped struct{}

// Failed tells the supervisor that the worker cannot serve, and why. The
// worker exits after sending it.
type Failed struct {
	Reason string `json:"reason"`
}

// Waiting is a worker's word, before it is ready, on what it waits for
// (the Kubernetes API server's error, say): the supervisor gives it as the
// reason when the worker is not ready in time.
type Waiting struct {
	Reason string `json:"reason"`
}

// MaxWaitingReason bounds a Waiting reason; the supervisor cuts longer ones.
const MaxWaitingReason = 1024

// Drain tells a worker to stop accepting, finish what it has, and exit
// before Deadline, when the supervisor kills what is left.
type Drain struct {
	Deadline time.Time `json:"deadline"`
	Reason   string    `json:"reason,omitempty"`
	// Closing says that the listening sockets close for good once the
	// workers' copies do (baton stops; the supervisor's are closed
	// already): a worker takes what is queued on them before it closes
	// its own, or the kernel would reset those connections.
	Closing bool `json:"closing,omitempty"`
	// Ack asks for a Stopped once the worker accepts no more. A worker
	// whose Ready had Acks sends it; others ignore it.
	Ack bool `json:"ack,omitempty"`
}

// Stats is a worker's periodic report of its counters.
type Stats struct {
	// Connections is the number of client connections open now.
	Connections int64 `json:"connections"`
	// Accepted is the number of client connections accepted so far.
	Accepted uint64 `json:"accepted"`
	// Requests is the number of requests (or TCP streams) served so far.
	Requests uint64 `json:"requests"`
	// Errors is the number of requests answered with a proxy error.
	Errors uint64 `json:"errors"`
	// LogDropped counts the log lines the worker dropped because its log
	// destination did not keep up (optional).
	LogDropped uint64 `json:"logDropped,omitempty"`
	// TLSHandshakeErrors counts failed TLS handshakes (optional).
	TLSHandshakeErrors uint64 `json:"tlsHandshakeErrors,omitempty"`
	// ProxyProtocolErrors counts connections closed for a missing or
	// malformed PROXY protocol header (optional).
	ProxyProtocolErrors uint64 `json:"proxyProtocolErrors,omitempty"`
	// Failures counts requests answered with a server error (5xx, the
	// backend's or the proxy's own) and TCP streams no backend took: what
	// a canary is judged by (optional).
	Failures uint64 `json:"failures,omitempty"`
	// Series are the worker's metric series, cumulative since it started
	// (optional).
	Series []metrics.Series `json:"series,omitempty"`
	// Backends describes the worker's backends (optional).
	Backends []BackendStats `json:"backends,omitempty"`
	// RoutingVersion is the Version of the last routing the worker
	// applied; 0: none (optional). RoutingError says why it applied that
	// one only in part (a rule left out, Kubernetes endpoints not in
	// place in time); empty: in whole.
	RoutingVersion uint64 `json:"routingVersion,omitempty"`
	RoutingError   string `json:"routingError,omitempty"`
}

// AddCounters adds o's counters (those that only grow) to s's.
func (s *Stats) AddCounters(o *Stats) {
	s.Accepted += o.Accepted
	s.Requests += o.Requests
	s.Errors += o.Errors
	s.Failures += o.Failures
	s.LogDropped += o.LogDropped
	s.TLSHandshakeErrors += o.TLSHandshakeErrors
	s.ProxyProtocolErrors += o.ProxyProtocolErrors
}

// BackendStats describes one backend of a worker: where its endpoints come
// from and how many it has.
type BackendStats struct {
	Name string `json:"name"`
	// Mode is "static", or the Kubernetes mode: endpoints or clusterIP.
	Mode string `json:"mode"`
	// Ready endpoints take new requests; Terminating ones are going away
	// (they take requests only when none is ready); Serving counts every
	// endpoint that still answers.
	Ready       int `json:"ready"`
	Terminating int `json:"terminating"`
	Serving     int `json:"serving"`
	// UpdatedAt is when the endpoints last changed.
	UpdatedAt time.Time `json:"updatedAt"`
	// Error says why there is no endpoint, when there is none.
	Error string `json:"error,omitempty"`
	BackendCounters
}

// BackendCounters count what a worker sent to a backend since it started.
type BackendCounters struct {
	// Requests (and TCP streams) routed to the backend.
	Requests uint64 `json:"requests"`
	// Errors answered by the proxy itself: 502, 503 (nothing serving), 504.
	Errors uint64 `json:"errors"`
	// Retries of a request on a new connection or another endpoint.
	Retries uint64 `json:"retries"`
	// ConnectFailures to the backend's endpoints.
	ConnectFailures uint64 `json:"connectFailures"`
}

// Add adds o to c.
func (c *BackendCounters) Add(o BackendCounters) {
	c.Requests += o.Requests
	c.Errors += o.Errors
	c.Retries += o.Retries
	c.ConnectFailures += o.ConnectFailures
}

// Request is a control socket command.
type Request struct {
	// Command is "status", "reload", "promote", "abort", "upgrade" or
	// "stop".
	Command string `json:"command"`
	// Canary, with reload, starts the new generation as a canary taking
	// this percent (1 to 99) of the new connections.
	Canary int `json:"canary,omitempty"`
}

// Response answers a Request.
type Response struct {
	// OK is false when the command failed; Error says why.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Result is the command's result (status, or the handoff a reload
	// ran), as JSON.
	Result json.RawMessage `json:"result,omitempty"`
}
