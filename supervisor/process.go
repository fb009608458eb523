package supervisor

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// Launcher starts worker processes. The supervisor's state machine reaches
// the OS only through it, so tests can drive it with workers that live in
// the test process.
type Launcher interface {
	Launch(spec LaunchSpec) (Process, error)
}

// LaunchSpec says how to start one worker.
type LaunchSpec struct {
	// Path is the binary, read from disk at each launch so that a replaced
	// binary is picked up by the next generation.
	Path string
	// Args are the arguments, Args[0] included.
	Args []string
	// Env is the whole environment.
	Env []string
	// IPC is the worker's end of its supervisor socket; it becomes
	// descriptor 3 in the worker, named by $BATON_IPC_FD.
	IPC *os.File
	// Stdout and Stderr receive the worker's output.
	Stdout, Stderr io.Writer
	// Credential, when set, is the user and group the worker runs as
	// (supplementary groups as given: none to clear them).
	Credential *syscall.Credential
}

// Process is one started worker process.
type Process interface {
	// Pid is the process id, for display.
	Pid() int
	// Signal sends sig; after the process has been waited for it is a no-op
	// error, never a signal to a reused pid.
	Signal(sig os.Signal) error
	// Wait waits for the process to exit. It is called exactly once.
	Wait() error
}

// ExecLauncher starts workers with os/exec. Each worker gets its own process
// group, so that a terminal's ^C reaches only the supervisor, which drains
// the workers in order.
type ExecLauncher struct{}

// Launch starts the process described by spec.
func (ExecLauncher) Launch(spec LaunchSpec) (Process, error) {
	cmd := &exec.Cmd{
		Path:        spec.Path,
		Args:        spec.Args,
		Env:         spec.Env,
		Stdout:      spec.Stdout,
		Stderr:      spec.Stderr,
		ExtraFiles:  []*os.File{spec.IPC},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	return execProcess{cmd}, nil
}

type execProcess struct{ cmd *exec.Cmd }

func (p execProcess) Pid() int                   { return p.cmd.Process.Pid }
func (p execProcess) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }
func (p execProcess) Wait() error                { return p.cmd.Wait() }
