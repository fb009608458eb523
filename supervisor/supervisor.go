// Package supervisor owns baton's listening sockets and worker processes.
//
// Invariant: every listening socket stays open, in the supervisor, from the
// moment a config names it until the last generation that used it has
// exited; and at any moment each socket of the active generation's listeners
// has a worker accepting on it, or a worker of that slot being restarted.
// Connections therefore wait in a kernel accept queue during a handoff or a
// restart; none is refused or reset.
//
// A generation is Workers processes started from one config and one binary:
//
//	starting ──all ready──▶ active ──next generation active──▶ draining ──all exited──▶ exited
//	   │
//	   └──a worker fails, exits, or misses the ready deadline──▶ failed
//
// One goroutine, the loop, owns all of this state; signals, the control
// socket and the worker processes reach it as events. The supervisor knows
// nothing of HTTP: what a worker speaks is the worker's business.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/internal/steer"
	"go.uber.org/zap"
)

// Defaults for Options.
const (
	// DefaultWorkerCommand is the subcommand that makes baton a worker.
	DefaultWorkerCommand = "worker"
	// MinRestartBackoff and MaxRestartBackoff bound the wait before a dead
	// worker of the active generation is restarted; it doubles with each
	// consecutive failure and resets once a worker stays up StableAfter.
	MinRestartBackoff = 100 * time.Millisecond
	MaxRestartBackoff = 5 * time.Second
	StableAfter       = 10 * time.Second
	// HistoryLength is how many handoffs and finished generations status
	// keeps.
	HistoryLength = 50
	// EarlyStopGrace is how long a draining generation stopped early for
	// MaxDraining has before its workers are killed.
	EarlyStopGrace = time.Second
)

// Config is what the supervisor needs of a configuration. Load functions
// build it from the config file; Payload reaches every worker untouched.
type Config struct {
	// WatchFiles, when set, are files (absolute paths) whose change of
	// content makes the supervisor reload, after WatchDebounce: the config
	// file and those it names (watch: true).
	WatchFiles []string
	// ControlSocket is the control socket's path; read at start only.
	ControlSocket string
	// Workers is the number of worker processes per generation.
	Workers int
	// ReadyTimeout bounds how long a new worker may take to be ready.
	ReadyTimeout time.Duration
	// DrainTimeout bounds how long a draining worker may live.
	DrainTimeout time.Duration
	// StopTimeout bounds a graceful stop's drain.
	StopTimeout time.Duration
	// MaxDraining bounds the generations draining at once: past it, the
	// oldest is stopped early (killed after EarlyStopGrace). 0: no bound.
	MaxDraining int
	// OrphanTimeout: when the supervisor dies, its serving workers keep
	// serving and wait this long for a new supervisor (same control
	// socket) to adopt them, then drain and exit. 0: they drain at once.
	OrphanTimeout time.Duration
	// WorkerTimeout: a ready worker of the active generation that has
	// reported stats and then sends nothing for this long is killed and
	// restarted in its slot. 0: never.
	WorkerTimeout time.Duration
	// ShutdownDelay is how long a stop keeps every listener accepting and
	// serving, with readiness off, before it closes them and drains: the
	// time a load balancer needs to take baton out of rotation.
	ShutdownDelay time.Duration
	// Listeners are the listening sockets.
	Listeners []ListenerSpec
	// Payload is the worker's configuration, sent in its hello.
	Payload json.RawMessage
	// WorkerCredential, when set, is the user and group workers run as:
	// the supervisor binds the listeners, workers only use them.
	WorkerCredential *syscall.Credential
	// AccessLogPath, when set, is a file the supervisor opens (and
	// reopens on ReopenLogs) and hands to every worker for its access log.
	AccessLogPath string
	// Warnings are logged when the config is loaded (an expired
	// certificate): not reasons to refuse it.
	Warnings []string
	// Canary is the automatic verdict on a canary started from this
	// config.
	Canary CanaryPolicy
}

// ListenerSpec describes one listener.
type ListenerSpec struct {
	Name     string
	Network  string // tcp, tcp4, tcp6 or unix
	Address  string
	Protocol string // opaque; passed to workers
	// ReusePort opens Sockets sockets in one SO_REUSEPORT group.
	ReusePort bool
	// Sockets is the group's size. Zero: Workers (on a reload too when
	// the group is steered; without steering, whatever size it has).
	Sockets int
	// FreeBind binds the address even when no interface has it
	// (IP_FREEBIND): an address routed to the host (ip route add local),
	// as a Gateway's from a pool.
	FreeBind bool
}

// Options configure a Supervisor. Load is required.
type Options struct {
	// Load reads and validates the configuration. It is called at start
	// and at every reload; an error refuses the reload.
	Load func() (*Config, error)
	// Binary is the worker binary. Default: this process's executable, as
	// named at start (so that a binary replaced on disk is picked up).
	Binary string
	// Args are the worker's arguments after the binary. Default:
	// DefaultWorkerCommand.
	Args []string
	// Env is added to the worker's environment (which is this process's).
	Env []string
	// Launcher starts workers. Default: ExecLauncher.
	Launcher Launcher
	// Logger receives the supervisor's logs. Default: none.
	Logger *zap.Logger
	// Notify, when set, receives service notifications as sd_notify(3)
	// assignments (READY=1, RELOADING=1, STOPPING=1, MAINPID=, STATUS=,
	// WATCHDOG=1), sent from the loop.
	Notify func(assignments ...string)
	// WatchdogInterval, when set, makes the loop send WATCHDOG=1 this
	// often: a loop that stops answering stops the pings.
	WatchdogInterval time.Duration
	// LogDropped, when set, reports how many log lines the supervisor's
	// log destination dropped; status adds it to the workers' counts.
	LogDropped func() uint64
	// Version is reported by status.
	Version string
	// Upgrader, when set, lets the supervisor hand its sockets to a new
	// supervisor process (SIGUSR2, `baton upgrade`) and take them over
	// from an old one. *upgrade.Upgrader implements it.
	Upgrader Upgrader
	// Steer, when set, loads a steering program for each TCP reuseport
	// group (steer.New): canaries and resizing a group need one. An error
	// leaves the group to the kernel's hash, and says why.
	Steer func() (*steer.Group, error)
}

// Upgrader hands listening sockets from one supervisor process to the next:
// the new process inherits them, starts its own generation, and once that
// is ready the old one drains and exits.
type Upgrader interface {
	// File takes a file the previous process handed over (the caller
	// owns it), or returns nil.
	File(name string) (*os.File, error)
	// State returns what the previous process handed over, or nil.
	State() []byte
	// Upgrade starts the new process, lending it files (the caller keeps
	// them) and state, and waits until it is ready.
	Upgrade(files map[string]*os.File, state []byte) error
	// Ready says this process serves (a new one: the old may exit).
	Ready() error
	// Exit is closed once a new process has taken over.
	Exit() <-chan struct{}
	// HasParent reports whether this process is an upgrade.
	HasParent() bool
}

// Errors.
var (
	// ErrStopping refuses a reload that arrives during a stop.
	ErrStopping = errors.New("supervisor: stopping")
	// ErrStartFailed is returned by Run when the first generation fails.
	ErrStartFailed = errors.New("supervisor: first generation failed")
	// ErrUpgrading refuses a reload or an upgrade while an upgrade runs.
	ErrUpgrading = errors.New("supervisor: an upgrade is in progress")
	// ErrNoUpgrader refuses an upgrade when the supervisor cannot hand over.
	ErrNoUpgrader = errors.New("supervisor: self-upgrade not available")
	// ErrPID1 refuses an upgrade when the supervisor is PID 1 (a
	// container's init): the old process's exit would end the container.
	ErrPID1 = errors.New("supervisor: baton is PID 1 (a container's init): an upgrade would end the container when the old supervisor exits; reload to run a new worker binary, and replace the container (a rolling update) to replace the supervisor")
)

// Supervisor runs generations of workers on sockets it owns.
type Supervisor struct {
	opts   Options
	log    *zap.Logger
	events chan event
	done   chan struct{} // closed when the loop has ended
	owned  sync.WaitGroup

	// The control socket, set by Run, and made again by the loop
	// (checkControl) when its path is removed.
	ctl     *net.UnixListener
	ctlLock *os.File // its lock, when this process made the socket
	ctlPath string   // where it is
	ctlLost string   // why it could not be made again, last logged

	// The rest is owned by the loop.
	state loopState
}

// New returns a supervisor; Run starts it.
func New(opts Options) (*Supervisor, error) {
	if opts.Load == nil {
		return nil, errors.New("supervisor: Options.Load is required")
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.Binary = exe
	}
	if opts.Args == nil {
		opts.Args = []string{DefaultWorkerCommand}
	}
	if opts.Launcher == nil {
		opts.Launcher = ExecLauncher{}
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Supervisor{
		opts:   opts,
		log:    opts.Logger.Named("supervisor"),
		events: make(chan event),
		done:   make(chan struct{}),
	}, nil
}

// send delivers ev to the loop, unless the loop has ended.
func (s *Supervisor) send(ev event) bool {
	select {
	case s.events <- ev:
		return true
	case <-s.done:
		return false
	}
}

// Reload asks for a reload and waits for its handoff to be decided: ok,
// failed or refused. Reloads asked for while one runs are coalesced into the
// next one. trigger says who asked ("signal", "control").
func (s *Supervisor) Reload(trigger string) Handoff {
	reply := make(chan Handoff, 1)
	return s.await(trigger, reloadEvent{trigger: trigger, reply: reply}, reply)
}

// ReloadCanary starts a canary: a new generation, from the config and
// binary on disk, that takes percent of the new connections beside the
// active one. It waits until the canary serves (outcome canary), failed or
// was refused.
func (s *Supervisor) ReloadCanary(percent int) Handoff {
	reply := make(chan Handoff, 1)
	return s.await("canary", reloadEvent{trigger: "canary", canary: percent, reply: reply}, reply)
}

// Promote makes the running canary the active generation; the old one
// drains. It returns the canary's handoff, decided.
func (s *Supervisor) Promote() Handoff {
	reply := make(chan Handoff, 1)
	return s.await("promote", verdictEvent{promote: true, reply: reply}, reply)
}

// Abort drains the running canary; see Promote.
func (s *Supervisor) Abort() Handoff {
	reply := make(chan Handoff, 1)
	return s.await("abort", verdictEvent{reply: reply}, reply)
}

// await sends ev, whose reply channel is reply, and waits for the handoff
// it answers; refused when the supervisor is gone.
func (s *Supervisor) await(trigger string, ev event, reply chan Handoff) Handoff {
	refused := Handoff{Trigger: trigger, Outcome: OutcomeRefused, Reason: ErrStopping.Error()}
	if !s.send(ev) {
		return refused
	}
	select {
	case h := <-reply:
		return h
	case <-s.done:
		return refused
	}
}

// ReloadAsync asks for a reload without waiting (a signal handler's way).
func (s *Supervisor) ReloadAsync(trigger string) {
	s.send(reloadEvent{trigger: trigger})
}

// Upgrade starts a new supervisor process from the binary on disk, hands it
// the listening sockets and waits until its first generation is ready;
// this process then drains its workers and exits.
func (s *Supervisor) Upgrade() error {
	reply := make(chan error, 1)
	if !s.send(upgradeEvent{reply: reply}) {
		return ErrStopping
	}
	select {
	case err := <-reply:
		return err
	case <-s.done:
		return ErrStopping
	}
}

// UpgradeAsync asks for an upgrade without waiting (a signal handler's way).
func (s *Supervisor) UpgradeAsync() {
	s.send(upgradeEvent{})
}

// Stop asks for a graceful stop: readiness turns off at once; after
// ShutdownDelay the listening sockets close (a new connection is refused)
// and the workers drain; then Run returns. A second Stop, or now, kills
// the workers at once.
func (s *Supervisor) Stop(now bool) {
	s.send(stopEvent{now: now})
}

// Status returns a snapshot of the supervisor's state.
func (s *Supervisor) Status() (Status, bool) {
	return s.StatusContext(context.Background())
}

// StatusContext is Status, giving up when ctx ends: false then says that
// the loop did not answer in time (or has ended).
func (s *Supervisor) StatusContext(ctx context.Context) (Status, bool) {
	return s.status(ctx, false)
}

// Brief is StatusContext without the timeline: what probes and the
// metrics page read, asked for every few seconds, need no copy of it.
func (s *Supervisor) Brief(ctx context.Context) (Status, bool) {
	return s.status(ctx, true)
}

func (s *Supervisor) status(ctx context.Context, brief bool) (Status, bool) {
	reply := make(chan Status, 1)
	select {
	case s.events <- statusEvent{reply: reply, brief: brief}:
	case <-s.done:
		return Status{}, false
	case <-ctx.Done():
		return Status{}, false
	}
	select {
	case st := <-reply:
		return st, true
	case <-s.done:
		return Status{}, false
	case <-ctx.Done():
		return Status{}, false
	}
}

// Done is closed when Run has ended.
func (s *Supervisor) Done() <-chan struct{} { return s.done }
