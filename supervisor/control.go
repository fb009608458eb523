package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/internal/accept"
	"github.com/baton-proxy/baton/ipc"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// requestTimeout bounds reading a control request.
const requestTimeout = 10 * time.Second

// Control commands.
const (
	CommandStatus  = "status"
	CommandReload  = "reload"
	CommandStop    = "stop"
	CommandUpgrade = "upgrade"
	CommandPromote = "promote"
	CommandAbort   = "abort"
)

// listenControl opens the control socket: mode 0600 in a directory created
// 0700 when missing. The directory must be baton's own and writable by no
// one else, or another local user could swap the socket and answer for
// baton. A socket file left by a dead supervisor is replaced; a live one is
// an error. The returned lock (an flock on path.lock, held until it is
// closed) keeps two supervisors starting at once from both replacing a
// stale socket, and from both adopting its orphans.
func listenControl(path string) (*net.UnixListener, *os.File, error) {
	if err := controlDir(path); err != nil {
		return nil, nil, err
	}
	lock, err := lockControl(path)
	if err != nil {
		return nil, nil, err
	}
	ln, err := bindControl(path)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	return ln, lock, nil
}

// controlDir makes the control socket's directory (0700) when it is
// missing, and checks it.
func controlDir(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("control socket directory: %w", err)
		}
	}
	return checkControlDir(dir)
}

// lockControl takes the control socket's lock, path.lock.
func lockControl(path string) (*os.File, error) {
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("control socket lock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("control socket %s: another baton holds its lock (%s.lock): %w", path, path, err)
	}
	return lock, nil
}

// bindControl makes the socket at path, 0600 from the start, replacing a
// stale one; the caller holds the lock.
func bindControl(path string) (*net.UnixListener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: another baton is running", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
	}
	old := unix.Umask(0o177) // the socket is created 0600 from the start
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// controlCheckEvery is how often the loop looks whether the control socket
// is still at its path.
const controlCheckEvery = 5 * time.Second

// checkControl makes the control socket again when its path is gone (a
// cleanup of /run or /tmp, an operator's rm, its directory removed): until
// then `baton status` and `baton reload` cannot reach this supervisor,
// though signals still do. It runs every controlCheckEvery and at every
// SIGHUP, from the loop. A path that exists is left alone, whatever it is;
// the directory must pass the same checks as at start, and the lock is
// taken again when its file went too (a supervisor started meanwhile that
// holds it owns the path now: this one then stays without one, and says
// so).
func (s *Supervisor) checkControl() {
	st := &s.state
	if s.ctl == nil || s.ctlPath == "" || st.stopping || st.upgrading || st.upgraded {
		return
	}
	path := s.ctlPath
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		s.ctlLost = ""
		return
	}
	ln, err := s.remakeControl(path)
	if err != nil {
		if msg := err.Error(); msg != s.ctlLost {
			s.ctlLost = msg
			s.log.Error("control socket removed, and it cannot be made again: baton status and baton reload cannot reach this supervisor (signals still do)", zap.String("path", path), zap.Error(err))
		}
		return
	}
	s.ctlLost = ""
	old := s.ctl
	old.SetUnlinkOnClose(false) // its path is the new socket's
	old.Close()
	s.ctl = ln
	s.owned.Add(1)
	go s.serveControl(ln)
	s.log.Warn("control socket was removed: made it again", zap.String("path", path))
}

// remakeControl makes the control socket at path again, with its lock.
func (s *Supervisor) remakeControl(path string) (*net.UnixListener, error) {
	if err := controlDir(path); err != nil {
		return nil, err
	}
	if !sameFile(s.ctlLock, path+".lock") {
		lock, err := lockControl(path)
		if err != nil {
			return nil, err
		}
		if s.ctlLock != nil {
			s.ctlLock.Close()
		}
		s.ctlLock = lock
	}
	return bindControl(path)
}

// sameFile reports whether f is open on the file at path.
func sameFile(f *os.File, path string) bool {
	if f == nil {
		return false
	}
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(path)
	return err == nil && os.SameFile(a, b)
}

// checkControlDir refuses a control socket directory that is not a
// directory of baton's own uid, or that others may write to.
func checkControlDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("control socket directory %s is not a directory (a symlink?): refusing it; remove it or set controlSocket elsewhere", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("control socket directory %s is owned by uid %d, not baton's (%d): another user could replace the socket and answer for baton; remove it or set controlSocket elsewhere", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("control socket directory %s is writable by others (mode %04o): another user could replace the socket; chmod go-w it or set controlSocket elsewhere", dir, fi.Mode().Perm())
	}
	return nil
}

// serveControl answers control connections until ln is closed.
// A failed accept (out of descriptors) is retried: the control plane must
// outlive it.
func (s *Supervisor) serveControl(ln *net.UnixListener) {
	defer s.owned.Done()
	accept.Loop(ln, s.log, "control", func(c net.Conn) {
		s.owned.Add(1)
		go s.serveControlConn(c.(*net.UnixConn))
	})
}

// serveControlConn answers one request from a peer of our own uid (or root).
func (s *Supervisor) serveControlConn(c *net.UnixConn) {
	defer s.owned.Done()
	defer c.Close()
	uid, err := ipc.PeerUID(c)
	if err != nil || (uid != os.Geteuid() && uid != 0) {
		s.log.Warn("control socket: peer refused", zap.Int("uid", uid), zap.Error(err))
		writeResponse(c, ipc.Response{Error: "permission denied"})
		return
	}
	c.SetReadDeadline(time.Now().Add(requestTimeout))
	fr, err := ipc.ReadFrame(c)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			writeResponse(c, ipc.Response{Error: err.Error()})
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	var req ipc.Request
	if fr.Type != ipc.TypeRequest {
		err = fmt.Errorf("%w: %s on the control socket", ipc.ErrUnexpected, fr.Type)
	} else {
		err = fr.Unmarshal(&req)
	}
	if err != nil {
		writeResponse(c, ipc.Response{Error: err.Error()})
		return
	}
	writeResponse(c, s.command(req))
}

func (s *Supervisor) command(req ipc.Request) ipc.Response {
	switch req.Command {
	case CommandStatus:
		st, ok := s.Status()
		if !ok {
			return ipc.Response{Error: ErrStopping.Error()}
		}
		return result(true, "", st)
	case CommandReload:
		if req.Canary != 0 {
			h := s.ReloadCanary(req.Canary)
			if h.Outcome != OutcomeCanary {
				return result(false, fmt.Sprintf("canary %s: %s", h.Outcome, h.Reason), h)
			}
			return result(true, "", h)
		}
		h := s.Reload("control")
		if h.Outcome != OutcomeOK {
			return result(false, fmt.Sprintf("reload %s: %s", h.Outcome, h.Reason), h)
		}
		return result(true, "", h)
	case CommandPromote, CommandAbort:
		var h Handoff
		want := OutcomeOK
		if req.Command == CommandPromote {
			h = s.Promote()
		} else {
			h, want = s.Abort(), OutcomeAborted
		}
		if h.Outcome != want {
			return result(false, fmt.Sprintf("%s %s: %s", req.Command, h.Outcome, h.Reason), h)
		}
		return result(true, "", h)
	case CommandStop:
		s.Stop(false)
		<-s.done
		return ipc.Response{OK: true}
	case CommandUpgrade:
		if err := s.Upgrade(); err != nil {
			return ipc.Response{Error: "upgrade failed: " + err.Error()}
		}
		return ipc.Response{OK: true}
	}
	return ipc.Response{Error: fmt.Sprintf("unknown command %q", req.Command)}
}

func result(ok bool, errText string, v any) ipc.Response {
	b, err := json.Marshal(v)
	if err != nil {
		return ipc.Response{Error: err.Error()}
	}
	return ipc.Response{OK: ok, Error: errText, Result: b}
}

func writeResponse(c net.Conn, r ipc.Response) {
	c.SetWriteDeadline(time.Now().Add(requestTimeout))
	ipc.WriteFrame(c, ipc.TypeResponse, r)
}
