package supervisor

import (
	"time"

	"github.com/baton-proxy/baton/internal/metrics"
	"github.com/baton-proxy/baton/ipc"
)

// Status is a snapshot of the supervisor, as `baton status -o json` prints it.
type Status struct {
	PID              int       `json:"pid"`
	Version          string    `json:"version,omitempty"`
	StartedAt        time.Time `json:"startedAt"`
	Binary           string    `json:"binary"`
	ActiveGeneration uint64    `json:"activeGeneration"`
	// Ready is true while an active generation serves and baton is not
	// stopping: what /readyz answers.
	Ready    bool `json:"ready"`
	Stopping bool `json:"stopping"`
	// PendingReloads counts reloads waiting for the running handoff; they
	// will be answered by one more handoff.
	PendingReloads int                `json:"pendingReloads"`
	Listeners      []ListenerStatus   `json:"listeners"`
	Generations    []GenerationStatus `json:"generations"`
	Handoffs       []Handoff          `json:"handoffs"`
	// PendingHandoff is the handoff running now, if any.
	PendingHandoff *Handoff `json:"pendingHandoff,omitempty"`
	// Canary is the canary running now, if any.
	Canary *CanaryStatus `json:"canary,omitempty"`
	// RoutingVersion numbers the route providers' routings (the Gateway
	// API's and Ingress's) the supervisor relayed to the workers, from 1;
	// 0: none. A worker whose RoutingVersion is lower has not applied
	// the last one yet (its Kubernetes caches may hold it up).
	RoutingVersion uint64 `json:"routingVersion,omitempty"`
	// Backends is what the active generation's first worker last reported
	// of its backends (endpoint counts, Kubernetes modes).
	Backends []ipc.BackendStats `json:"backends,omitempty"`
	// Totals are counters over the supervisor's life: they do not reset
	// when a worker or a generation is replaced.
	Totals Totals `json:"totals"`
	// Timeline is the client connections each live generation held, a
	// sample a second over the last five minutes, oldest first: a
	// handoff as it happened (the status page draws it).
	Timeline []Sample `json:"timeline,omitempty"`
}

// Sample is the connections of each generation that had a worker at one
// moment.
type Sample struct {
	At time.Time `json:"at"`
	// Connections by generation ID.
	Connections map[uint64]int64 `json:"connections"`
}

// Totals are the supervisor's lifetime counters.
type Totals struct {
	// Accepted, Requests and Errors sum every worker process's counters,
	// those that exited included.
	Accepted uint64 `json:"accepted"`
	Requests uint64 `json:"requests"`
	Errors   uint64 `json:"errors"`
	// Connections is the number open now, over all workers.
	Connections int64 `json:"connections"`
	// LogDropped counts log lines dropped, by the supervisor and every
	// worker, because the log destination did not keep up.
	LogDropped uint64 `json:"logDropped"`
	// TLSHandshakeErrors counts failed TLS handshakes, every worker's.
	TLSHandshakeErrors uint64 `json:"tlsHandshakeErrors"`
	// ProxyProtocolErrors counts connections closed for a missing or
	// malformed PROXY protocol header.
	ProxyProtocolErrors uint64 `json:"proxyProtocolErrors"`
	// Handoffs counts handoffs by outcome.
	Handoffs map[Outcome]uint64 `json:"handoffs"`
	// Series are the workers' metric series (request durations, upstream
	// times, TLS handshakes), summed over every worker process: for
	// /metrics, not the status JSON.
	Series []metrics.Series `json:"-"`
	// Backends counts, per backend name, what every worker sent it.
	Backends map[string]ipc.BackendCounters `json:"backends,omitempty"`
}

// ListenerStatus describes one listener of the active (or newest) config.
type ListenerStatus struct {
	Name      string `json:"name"`
	Network   string `json:"network"`
	Address   string `json:"address"`
	Protocol  string `json:"protocol,omitempty"`
	ReusePort bool   `json:"reusePort"`
	Sockets   int    `json:"sockets"`
	// AcceptQueue is, per socket, the connections waiting to be accepted
	// (TCP only).
	AcceptQueue []int `json:"acceptQueue,omitempty"`
	// Backlog is the accept queue's limit (TCP only).
	Backlog int `json:"backlog,omitempty"`
	// Steering is "bpf" when a steering program chooses the socket of each
	// new connection (canaries and resizing work), or why the kernel's
	// own hash does (a single socket, no CAP_BPF...).
	Steering string `json:"steering,omitempty"`
}

// GenerationStatus describes one generation.
type GenerationStatus struct {
	ID        uint64    `json:"id"`
	State     GenState  `json:"state"`
	Binary    string    `json:"binary"`
	StartedAt time.Time `json:"startedAt"`
	Reason    string    `json:"reason,omitempty"`
	// DrainReason says why it drains or drained: a handoff, a canary's
	// verdict, an adoption, a stop.
	DrainReason string         `json:"drainReason,omitempty"`
	Workers     []WorkerStatus `json:"workers"`
}

// WorkerStatus describes one worker slot.
type WorkerStatus struct {
	PID       int         `json:"pid"`
	Slot      int         `json:"slot"`
	State     WorkerState `json:"state"`
	Restarts  int         `json:"restarts"`
	StartedAt time.Time   `json:"startedAt"`
	// Connections is the number of client connections open now, as the
	// worker last reported; Accepted and Requests are its totals.
	Connections int64  `json:"connections"`
	Accepted    uint64 `json:"accepted"`
	Requests    uint64 `json:"requests"`
	Errors      uint64 `json:"errors"`
	// LastRestartReason says why the slot's process was last replaced
	// (it died, or was unresponsive for workerTimeout).
	LastRestartReason string `json:"lastRestartReason,omitempty"`
	// Waiting is what a worker that is not ready yet says it waits for.
	Waiting string `json:"waiting,omitempty"`
	// RoutingVersion is the version of the route providers' routing the
	// worker last reported it applied (Status.RoutingVersion); 0: none.
	// RoutingError says why it applied that one only in part.
	RoutingVersion uint64 `json:"routingVersion,omitempty"`
	RoutingError   string `json:"routingError,omitempty"`
}

// Handoff records one reload: what triggered it, between which generations,
// how it ended, and how long each phase took.
type Handoff struct {
	ID      int     `json:"id"`
	From    uint64  `json:"from"`
	To      uint64  `json:"to"`
	Trigger string  `json:"trigger"`
	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason"` // empty when ok
	// Coalesced counts the reload requests this handoff answered.
	Coalesced int       `json:"coalesced"`
	StartedAt time.Time `json:"startedAt"`
	// DurationMs is from the request to the outcome.
	DurationMs int64 `json:"durationMs"`
	// SpawnMs is until every worker process had started.
	SpawnMs int64 `json:"spawnMs"`
	// ReadyMs is until every new worker was ready (the handoff point).
	ReadyMs int64 `json:"readyMs"`
	// StartupMs is the slowest new worker's start-up, from its launch to
	// its ready: the part of ReadyMs that is the worker's own.
	StartupMs int64 `json:"startupMs"`
	// DrainMs is how long the previous generation took to drain and exit;
	// null until it has.
	DrainMs *int64 `json:"drainMs"`
	// Canary is set on a handoff started by `baton reload --canary`.
	Canary *CanaryRecord `json:"canary,omitempty"`
}

// CanaryRecord is what a canary handoff adds to its record.
type CanaryRecord struct {
	// Percent is the canary's share of new connections.
	Percent int `json:"percent"`
	// Verdict is "promoted" or "aborted" once decided; By says who
	// decided ("operator", "auto", "stop") and the handoff's Reason why.
	Verdict   string    `json:"verdict,omitempty"`
	By        string    `json:"by,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Requests and Failures are the canary's at the verdict;
	// ActiveRequests and ActiveFailures the active generation's over the
	// same time.
	Requests       uint64 `json:"requests,omitempty"`
	Failures       uint64 `json:"failures,omitempty"`
	ActiveRequests uint64 `json:"activeRequests,omitempty"`
	ActiveFailures uint64 `json:"activeFailures,omitempty"`
}

// CanaryStatus describes the running canary.
type CanaryStatus struct {
	Generation       uint64 `json:"generation"`
	ActiveGeneration uint64 `json:"activeGeneration"`
	// Percent is the share of new connections asked for; Share the one
	// it gets: the same where BPF steers, k/N of a group's sockets where
	// it cannot (Steering says which).
	Percent  int     `json:"percent"`
	Share    float64 `json:"share"`
	Steering string  `json:"steering"`
	// Handoff is the ID of the handoff that started it.
	Handoff   int       `json:"handoff"`
	StartedAt time.Time `json:"startedAt"`
	// Requests and Failures (5xx answers and TCP streams no backend
	// took) are the canary's; ActiveRequests and ActiveFailures the active
	// generation's since the canary started serving.
	Requests       uint64 `json:"requests"`
	Failures       uint64 `json:"failures"`
	ActiveRequests uint64 `json:"activeRequests"`
	ActiveFailures uint64 `json:"activeFailures"`
	// AutoVerdictInMs is the time left until the automatic verdict; null
	// when an operator decides. MinRequests and MaxErrorRatio are the
	// policy it follows.
	AutoVerdictInMs *int64  `json:"autoVerdictInMs"`
	MinRequests     uint64  `json:"minRequests,omitempty"`
	MaxErrorRatio   float64 `json:"maxErrorRatio,omitempty"`
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// RoutingBehind returns the ready workers that have not reported the last
// routing (RoutingVersion) applied: a worker that stays behind for long is
// stuck applying it (its log says why).
func (st *Status) RoutingBehind() []GenerationWorker {
	return st.routingWorkers(func(w *WorkerStatus) bool { return w.RoutingVersion < st.RoutingVersion })
}

// RoutingInPart returns the ready workers that applied the last routing
// only in part (their RoutingError says why).
func (st *Status) RoutingInPart() []GenerationWorker {
	return st.routingWorkers(func(w *WorkerStatus) bool { return w.RoutingVersion == st.RoutingVersion && w.RoutingError != "" })
}

// routingWorkers returns the ready workers that keep takes, once a routing
// was sent.
func (st *Status) routingWorkers(keep func(*WorkerStatus) bool) []GenerationWorker {
	if st.RoutingVersion == 0 {
		return nil
	}
	var out []GenerationWorker
	for _, g := range st.Generations {
		for _, w := range g.Workers {
			if w.State == WorkerReady && keep(&w) {
				out = append(out, GenerationWorker{Generation: g.ID, Worker: w})
			}
		}
	}
	return out
}

// GenerationWorker is a worker and its generation's ID.
type GenerationWorker struct {
	Generation uint64
	Worker     WorkerStatus
}
