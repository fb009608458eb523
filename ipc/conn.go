package ipc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// socketBuffer is the send and receive buffer asked for on a pair. The
// kernel caps it at net.core.wmem_max/rmem_max (times two); the default caps
// still leave room for a MaxFrame packet.
const socketBuffer = 2 * MaxFrame

// Conn is one end of a supervisor–worker SOCK_SEQPACKET socket. Send and
// Receive may be called from different goroutines; Close unblocks both.
type Conn struct {
	uc *net.UnixConn

	sendMu sync.Mutex // serialises Send
	recvMu sync.Mutex // serialises Receive; protects buf and oob
	buf    []byte
	oob    []byte
}

// NewPair returns a connected pair: the supervisor's end as a Conn, and the
// worker's end as a file to hand to the worker process (close-on-exec, as
// every descriptor baton opens; exec.Cmd.ExtraFiles clears the flag in the
// child only).
func NewPair() (*Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("ipc: socketpair: %w", err)
	}
	for _, fd := range fds {
		// Best effort: the kernel caps these at its maxima.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, socketBuffer)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, socketBuffer)
	}
	parent := os.NewFile(uintptr(fds[0]), "baton-ipc-supervisor")
	child := os.NewFile(uintptr(fds[1]), "baton-ipc-worker")
	c, err := FileConn(parent)
	parent.Close()
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	return c, child, nil
}

// FileConn returns a Conn on a duplicate of f, which must be an AF_UNIX
// SOCK_SEQPACKET socket. The caller still owns f.
func FileConn(f *os.File) (*Conn, error) {
	fc, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("ipc: %s: %w", f.Name(), err)
	}
	uc, ok := fc.(*net.UnixConn)
	if !ok || uc.LocalAddr().Network() != "unixpacket" {
		fc.Close()
		return nil, fmt.Errorf("ipc: %s is not a unix seqpacket socket", f.Name())
	}
	return newConn(uc), nil
}

// newConn returns a Conn on uc, a unix seqpacket connection.
func newConn(uc *net.UnixConn) *Conn {
	return &Conn{
		uc:  uc,
		buf: make([]byte, MaxFrame+1),
		oob: make([]byte, unix.CmsgSpace(MaxFiles*4)),
	}
}

// DialOrphan connects to the abstract socket name on which an orphaned
// worker waits (see Orphans), for an adoption.
func DialOrphan(name string) (*Conn, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("ipc: orphan %s: %w", name, err)
	}
	return newConn(uc), nil
}

// Peer returns the uid and pid of the process at the other end
// (SO_PEERCRED): the kernel's word, not the peer's.
func (c *Conn) Peer() (uid, pid int, err error) {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return -1, -1, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, -1, err
	}
	if cerr != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", cerr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}

// SetDeadline sets the deadline of Send and Receive.
func (c *Conn) SetDeadline(t time.Time) error { return c.uc.SetDeadline(t) }

// Send sends one message of type t with body v, and files with it. The
// files stay open and owned by the caller.
func (c *Conn) Send(t Type, v any, files ...*os.File) error {
	b, err := Encode(t, v)
	if err != nil {
		return err
	}
	if len(files) > MaxFiles {
		return fmt.Errorf("%w: %d descriptors (limit %d)", ErrTooLarge, len(files), MaxFiles)
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	err = withFds(files, func(fds []int) error {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		_, _, err := c.uc.WriteMsgUnix(b, oob, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("ipc: send %s: %w", t, err)
	}
	return nil
}

// Receive returns the next message and the descriptors that came with it
// (close-on-exec; the caller owns them). Once the peer is gone it returns
// io.EOF.
// A malformed message is an error; its descriptors are closed.
func (c *Conn) Receive() (Frame, []*os.File, error) {
	c.recvMu.Lock()
	defer c.recvMu.Unlock()
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
			// A peer that exits with a message of ours unread resets
			// the pair; either way it is gone.
			return Frame{}, nil, io.EOF
		case errors.Is(err, net.ErrClosed):
			return Frame{}, nil, err
		}
		return Frame{}, nil, fmt.Errorf("ipc: receive: %w", err)
	}
	files, ferr := parseRights(c.oob[:oobn])
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	switch {
	case ferr != nil:
		closeAll()
		return Frame{}, nil, ferr
	case n == 0 && oobn == 0:
		return Frame{}, nil, io.EOF
	case flags&unix.MSG_TRUNC != 0 || n > MaxFrame:
		closeAll()
		return Frame{}, nil, fmt.Errorf("%w: packet larger than %d bytes", ErrTooLarge, MaxFrame)
	case flags&unix.MSG_CTRUNC != 0:
		closeAll()
		return Frame{}, nil, fmt.Errorf("%w: more than %d descriptors", ErrTooLarge, MaxFiles)
	}
	fr, err := Decode(c.buf[:n])
	if err != nil {
		closeAll()
		return Frame{}, nil, err
	}
	fr.Body = append([]byte(nil), fr.Body...) // c.buf is reused
	return fr, files, nil
}

// withFds calls fn with the raw descriptors of files, holding each one open
// meanwhile. It reaches them through SyscallConn: File.Fd would switch a
// shared socket to blocking mode, for every process that holds it.
func withFds(files []*os.File, fn func(fds []int) error) error {
	fds := make([]int, 0, len(files))
	var next func(i int) error
	next = func(i int) error {
		if i == len(files) {
			return fn(fds)
		}
		rc, err := files[i].SyscallConn()
		if err != nil {
			return err
		}
		var inner error
		if err := rc.Control(func(fd uintptr) {
			fds = append(fds, int(fd))
			inner = next(i + 1)
		}); err != nil {
			return err
		}
		return inner
	}
	return next(0)
}

// parseRights returns the descriptors in a control message as files.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %w", ErrMalformed, err)
	}
	var files []*os.File
	var bad error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("%w: control message of level %d type %d", ErrMalformed, msgs[i].Header.Level, msgs[i].Header.Type)
			continue
		}
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			bad = fmt.Errorf("%w: rights: %w", ErrMalformed, err)
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("ipc-fd-%d", fd)))
		}
	}
	if bad != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, bad
	}
	return files, nil
}

// Close closes the connection. It is safe to call more than once.
func (c *Conn) Close() error {
	err := c.uc.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
