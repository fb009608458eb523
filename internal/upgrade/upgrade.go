// Package upgrade replaces a running supervisor process with a new one,
// started from the binary on disk, handing it descriptors and state.
//
// Invariant: at any moment there are one or two supervisor processes, and
// every handed-over descriptor has exactly the owners that use it: the
// package keeps no copy of its own. The old process lends its files to the
// new one for the exec only (duplicates, closed when Upgrade returns, on
// success and failure alike); the new process owns what it inherited, and
// what it does not take is closed when it says Ready. A listener that the
// new process later closes is therefore closed for good.
//
// Protocol (internal to baton): the old process starts the new one with its
// own arguments and environment, plus BATON_UPGRADE, which names the
// inherited descriptors 3, 4, … in order; one of them is a pipe on which
// the new process writes one byte once it serves, and one holds the state
// the old process handed over. The old process waits for that byte, the
// new process's exit, or a timeout.
package upgrade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// EnvVar carries the handover to the new process.
const EnvVar = "BATON_UPGRADE"

// DefaultTimeout bounds how long a new process may take to be ready.
const DefaultTimeout = time.Minute

// Errors.
var (
	// ErrInProgress refuses an upgrade while one runs.
	ErrInProgress = errors.New("upgrade: an upgrade is in progress")
	// ErrNotReady refuses an upgrade before this process said Ready.
	ErrNotReady = errors.New("upgrade: this process is not ready yet")
	// ErrExited reports a new process that exited before it was ready.
	ErrExited = errors.New("upgrade: the new process exited before it was ready")
	// ErrTimeout reports a new process that was not ready in time.
	ErrTimeout = errors.New("upgrade: the new process was not ready in time")
)

// Options configure an Upgrader.
type Options struct {
	// Binary is the new process's executable. Default: this process's,
	// as named at New (so that a binary replaced on disk is picked up).
	Binary string
	// Args are the new process's arguments after the binary. Default:
	// this process's.
	Args []string
	// Timeout bounds how long the new process may take to be ready.
	// Default: DefaultTimeout.
	Timeout time.Duration
	// PIDFile, when set, gets the serving process's pid: written at
	// Ready, atomically.
	PIDFile string
}

// handover is BATON_UPGRADE: what descriptor 3+i is.
type handover struct {
	Files []string `json:"files"` // names, in descriptor order
	Ready int      `json:"ready"` // index of the readiness pipe
	State int      `json:"state"` // index of the state, -1: none
}

// Upgrader is one supervisor process's side of upgrades.
type Upgrader struct {
	opts Options

	mu        sync.Mutex // protects the rest
	parent    bool
	inherited map[string]*os.File // handed over and not yet taken
	state     []byte
	readyPipe *os.File // to the previous process, until Ready
	ready     bool
	upgrading bool
	exit      chan struct{} // closed once a new process has taken over
}

// New returns the Upgrader of this process, taking over what a previous
// process handed over, if any. BATON_UPGRADE is removed from the
// environment, so that no child sees it.
func New(opts Options) (*Upgrader, error) {
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("upgrade: %w", err)
		}
		opts.Binary = exe
	}
	if opts.Args == nil {
		opts.Args = os.Args[1:]
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	u := &Upgrader{opts: opts, exit: make(chan struct{}), inherited: make(map[string]*os.File)}
	v, ok := os.LookupEnv(EnvVar)
	if !ok {
		return u, nil
	}
	os.Unsetenv(EnvVar)
	var h handover
	if err := json.Unmarshal([]byte(v), &h); err != nil {
		return nil, fmt.Errorf("upgrade: %s: %w", EnvVar, err)
	}
	u.parent = true
	for i, name := range h.Files {
		fd := 3 + i
		unix.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), name)
		switch i {
		case h.Ready:
			u.readyPipe = f
		case h.State:
			b, err := io.ReadAll(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("upgrade: read the handed-over state: %w", err)
			}
			u.state = b
		default:
			u.inherited[name] = f
		}
	}
	return u, nil
}

// HasParent reports whether this process was started by an upgrade.
func (u *Upgrader) HasParent() bool { return u.parent }

// File takes the inherited file called name: the caller owns it now. It
// returns nil when there is none.
func (u *Upgrader) File(name string) (*os.File, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f := u.inherited[name]
	delete(u.inherited, name)
	return f, nil
}

// State returns the state the previous process handed over, or nil.
func (u *Upgrader) State() []byte { return u.state }

// Ready says that this process serves: the PID file names it, the files
// inherited and not taken are closed, and a previous process learns that
// it may go.
func (u *Upgrader) Ready() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ready {
		return nil
	}
	u.ready = true
	for name, f := range u.inherited {
		f.Close()
		delete(u.inherited, name)
	}
	var errs []error
	if u.opts.PIDFile != "" {
		if err := writePIDFile(u.opts.PIDFile); err != nil {
			errs = append(errs, err)
		}
	}
	if u.readyPipe != nil {
		if _, err := u.readyPipe.Write([]byte{1}); err != nil {
			errs = append(errs, fmt.Errorf("upgrade: tell the previous process: %w", err))
		}
		u.readyPipe.Close()
		u.readyPipe = nil
	}
	return errors.Join(errs...)
}

// Exit is closed once a new process has taken over.
func (u *Upgrader) Exit() <-chan struct{} { return u.exit }

// Upgrade starts a new process from the binary on disk, lends it files
// (by name; the caller keeps them) and state, and waits until it is ready,
// exits, or the timeout passes. On success Exit is closed. Nothing it
// opened stays open on any outcome, and a new process that failed is
// killed and reaped.
func (u *Upgrader) Upgrade(files map[string]*os.File, state []byte) error {
	u.mu.Lock()
	switch {
	case !u.ready:
		u.mu.Unlock()
		return ErrNotReady
	case u.upgrading:
		u.mu.Unlock()
		return ErrInProgress
	}
	u.upgrading = true
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.upgrading = false
		u.mu.Unlock()
	}()

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	defer readyR.Close()
	defer readyW.Close() // the child holds its own copy
	h := handover{Ready: 0, State: -1, Files: []string{"ready"}}
	extra := []*os.File{readyW}
	if state != nil {
		sf, err := stateFile(state)
		if err != nil {
			return err
		}
		defer sf.Close()
		h.State = len(extra)
		h.Files = append(h.Files, "state")
		extra = append(extra, sf)
	}
	for name, f := range files {
		h.Files = append(h.Files, name)
		extra = append(extra, f)
	}
	env, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("upgrade: %w", err)
	}
	cmd := exec.Command(u.opts.Binary, u.opts.Args...)
	cmd.Env = append(os.Environ(), EnvVar+"="+string(env))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = extra
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("upgrade: start %s: %w", u.opts.Binary, err)
	}
	readyW.Close()

	// One byte on the pipe is ready; EOF is the new process gone (it held
	// the only write end left).
	got := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, _ := readyR.Read(b[:])
		got <- n == 1
	}()
	timer := time.NewTimer(u.opts.Timeout)
	defer timer.Stop()
	select {
	case ok := <-got:
		if ok {
			cmd.Process.Release() // it is the supervisor now; not ours to wait for
			close(u.exit)
			return nil
		}
		err = ErrExited
	case <-timer.C:
		err = ErrTimeout
		readyR.Close() // ends the reader
		<-got
	}
	cmd.Process.Kill()
	waitErr := cmd.Wait()
	if errors.Is(err, ErrExited) && waitErr != nil {
		err = fmt.Errorf("%w: %v", err, waitErr)
	}
	return err
}

// stateFile returns a file that holds b from its start, for a child to
// read: a memfd.
func stateFile(b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("baton-upgrade-state", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("upgrade: state: %w", err)
	}
	f := os.NewFile(uintptr(fd), "state")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("upgrade: state: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("upgrade: state: %w", err)
	}
	return f, nil
}

// writePIDFile writes this process's pid to path, atomically.
func writePIDFile(path string) error {
	dir, file := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, file+".*")
	if err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := fmt.Fprintf(tmp, "%d\n", os.Getpid()); err != nil {
		tmp.Close()
		return fmt.Errorf("pid file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pid file: %w", err)
	}
	return nil
}
