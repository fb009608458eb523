package supervisor

import "fmt"

// GenState is a generation's state.
type GenState int

// Generation states and their legal transitions.
const (
	// GenStarting: workers launched, not all ready. Next: GenActive, GenFailed.
	GenStarting GenState = iota
	// GenActive: serving; at most one generation is active. Next: GenDraining.
	GenActive
	// GenDraining: told to drain. Next: GenExited.
	GenDraining
	// GenFailed: a worker failed before all were ready; killed. Final.
	GenFailed
	// GenExited: every worker has exited. Final.
	GenExited
	// GenCanary: serving a share of the new connections beside the active
	// generation (canary.go). Next: GenActive (promoted), GenDraining
	// (aborted).
	GenCanary
)

var genStateNames = [...]string{"starting", "active", "draining", "failed", "exited", "canary"}

func (s GenState) String() string {
	if int(s) < len(genStateNames) {
		return genStateNames[s]
	}
	return fmt.Sprintf("GenState(%d)", int(s))
}

// MarshalText writes the state's name.
func (s GenState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *GenState) UnmarshalText(b []byte) error {
	return unmarshalName(b, genStateNames[:], (*int)(s))
}

// WorkerState is a worker slot's state.
type WorkerState int

// Worker states and their legal transitions.
const (
	// WorkerStarting: launched, no ready yet. Next: WorkerReady, WorkerBackoff
	// (active generation), WorkerFailed (starting generation), WorkerDraining.
	WorkerStarting WorkerState = iota
	// WorkerReady: serving. Next: WorkerDraining, WorkerBackoff, WorkerFailed.
	WorkerReady
	// WorkerDraining: told to drain. Next: WorkerExited.
	WorkerDraining
	// WorkerBackoff: died in the active generation; restarts when its
	// backoff ends. Next: WorkerStarting, WorkerExited.
	WorkerBackoff
	// WorkerFailed: failed, or killed because its generation failed. Final.
	WorkerFailed
	// WorkerExited: exited after draining. Final.
	WorkerExited
)

var workerStateNames = [...]string{"starting", "ready", "draining", "restarting", "failed", "exited"}

func (s WorkerState) String() string {
	if int(s) < len(workerStateNames) {
		return workerStateNames[s]
	}
	return fmt.Sprintf("WorkerState(%d)", int(s))
}

// MarshalText writes the state's name.
func (s WorkerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state's name.
func (s *WorkerState) UnmarshalText(b []byte) error {
	return unmarshalName(b, workerStateNames[:], (*int)(s))
}

// Outcome is how a handoff ended.
type Outcome string

// Handoff outcomes.
const (
	// OutcomePending: the new generation is starting.
	OutcomePending Outcome = "pending"
	// OutcomeOK: the new generation is active; the old one drains.
	OutcomeOK Outcome = "ok"
	// OutcomeFailed: the new generation failed and was killed; the old one
	// still serves.
	OutcomeFailed Outcome = "failed"
	// OutcomeRefused: the config was invalid (or the supervisor stopping);
	// nothing was started.
	OutcomeRefused Outcome = "refused"
	// OutcomeCanary: the new generation serves as a canary, beside the
	// old one; a verdict makes it ok (promoted) or aborted.
	OutcomeCanary Outcome = "canary"
	// OutcomeAborted: the canary was aborted and drains; the old
	// generation takes every new connection again.
	OutcomeAborted Outcome = "aborted"
)

func unmarshalName(b []byte, names []string, v *int) error {
	for i, n := range names {
		if n == string(b) {
			*v = i
			return nil
		}
	}
	return fmt.Errorf("unknown state %q", b)
}
