package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockConn is a plain TCP connection of the HTTP/1.1 path whose reads and
// writes are made with raw system calls through its RawConn, waiting in
// the runtime's poller as net.TCPConn does. Two things are saved per
// request, measured in docs/benchmarks.md:
//
//   - net.TCPConn tells the scheduler about every system call (entersyscall),
//     and the runtime's monitor hands the processor of a worker whose
//     system call is slow to return (a busy machine preempted it) to another
//     thread, to be handed back afterwards: futex wake-ups and context
//     switches. A read or write of a non-blocking socket never blocks, so
//     it need not be announced.
//   - Go's Read tries a read before it waits, and right after a request is
//     sent upstream that read always finds nothing (EAGAIN). holdNext lets
//     the request's last write happen inside the wait for its response:
//     the wait is armed first (RawConn.Read resets the readiness), so no
//     readiness is missed.
//
// A sockConn's Read and Write may run at the same time (a tunnel's two
// directions): each has its own fields.
type sockConn struct {
	// Conn is the connection: a *net.TCPConn, or the *acceptedConn of a
	// socket that rawListener took.
	net.Conn
	rc syscall.RawConn

	// The read's buffer and results, for read, bound once as readFn so
	// that no closure is allocated per call.
	rp     []byte
	rn     int
	rerr   error
	readFn func(uintptr) bool
	sendFn func(uintptr) bool

	// The write's, likewise.
	wp      []byte
	wn      int
	werr    error
	writeFn func(uintptr) bool

	// What the last read said of the input: it came to its end (EOF),
	// or it left the socket empty (it returned less than it asked for).
	eof, short bool

	hold bool   // the next Write is held for the next Read
	held []byte // the bytes held: the writer's buffer, untouched until then

	// During a readSession: the socket, for readNow (-1 outside one).
	sfd int

	// lazyNoDelay: TCP_NODELAY is set before the connection's second
	// write, not at accept (nginx's way). A connection that answers once
	// and closes writes once, and a single write never waits for Nagle;
	// from the second on, a small write would wait for the first's ACK.
	lazyNoDelay bool
	wrote       bool

	// fd is the socket's descriptor (-1: unknown), for an idleSet.
	fd int32
	// wclosed: CloseWrite sent the FIN already, so Close need not
	// (Close may come from another goroutine: the drain's).
	wclosed atomic.Bool
}

// newSockConn returns c as a sockConn, or c itself when it is not plain
// TCP.
func newSockConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := newSockConnRaw(tc, rc)
	rc.Control(func(fd uintptr) { s.fd = int32(fd) })
	return s
}

// newSockConnRaw returns c, whose socket rc reaches, as a sockConn.
func newSockConnRaw(c net.Conn, rc syscall.RawConn) *sockConn {
	s := &sockConn{Conn: c, rc: rc, sfd: -1, fd: -1}
	s.readFn, s.sendFn, s.writeFn = s.read, s.sendThenRead, s.write
	return s
}

// CloseWrite shuts down the writing side of the connection (the peer
// reads EOF), with a raw system call, as Close sends its FIN.
func (c *sockConn) CloseWrite() error {
	var errno syscall.Errno
	if err := c.rc.Control(func(fd uintptr) { errno = shutdownWrite(fd) }); err != nil {
		return err
	}
	c.wclosed.Store(true)
	if errno != 0 {
		return os.NewSyscallError("shutdown", errno)
	}
	return nil
}

// Close closes the connection. Its FIN is sent first by a shutdown made
// as a raw system call (unless CloseWrite sent it): that is where the
// kernel does the work of closing (on loopback the peer's side of it too,
// tens of microseconds on a busy machine), and a system call announced to
// the scheduler that takes so long lets the runtime's monitor hand the
// processor to another thread. The close that follows only lets go of
// the descriptor. An acceptedConn does this itself, and only while its
// socket is in the runtime's poller (else its close is a raw one).
func (c *sockConn) Close() error {
	if _, ok := c.Conn.(*acceptedConn); !ok && !c.wclosed.Load() {
		c.rc.Control(shutdownWriteFn)
	}
	return c.Conn.Close()
}

// shutdownWrite sends fd's FIN: shutdown(SHUT_WR), raw.
func shutdownWrite(fd uintptr) syscall.Errno {
	_, _, e := unix.RawSyscall(unix.SYS_SHUTDOWN, fd, unix.SHUT_WR, 0)
	return e
}

// shutdownWriteFn is shutdownWrite for RawConn.Control.
func shutdownWriteFn(fd uintptr) { shutdownWrite(fd) }

// SyscallConn returns the connection's socket.
func (c *sockConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// holdNext makes the next Write (a bufio.Writer's Flush) return at once
// and leaves its bytes to the next Read, which sends them from inside its
// wait. The caller must not touch the slice written until then, and must
// Read next.
func (c *sockConn) holdNext() { c.hold = true }

// unhold cancels a holdNext that no Write took.
func (c *sockConn) unhold() { c.hold = false }

func (c *sockConn) Read(p []byte) (int, error) {
	if c.sfd >= 0 {
		// A second wait inside the session's would never end: the
		// session holds the connection's read lock.
		return 0, errInSession
	}
	if len(p) == 0 {
		return 0, nil
	}
	fn := c.readFn
	if c.held != nil {
		fn = c.sendFn
	}
	c.rp = p
	err := c.rc.Read(fn)
	n, rerr := c.rn, c.rerr
	c.rp, c.rn, c.rerr, c.held = nil, 0, nil, nil
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read reads once into rp; false means "nothing yet: wait".
func (c *sockConn) read(fd uintptr) bool {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&c.rp[0])), uintptr(len(c.rp)))
		switch e {
		case 0:
			c.rn = int(n)
			c.eof, c.short = n == 0, int(n) < len(c.rp)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			c.short = true
			return false
		}
		c.rerr = os.NewSyscallError("read", e)
		return true
	}
}

// sendThenRead writes the held bytes the first time, then reads.
func (c *sockConn) sendThenRead(fd uintptr) bool {
	if c.held == nil {
		return c.read(fd)
	}
	out := c.held
	c.held = nil
	for len(out) > 0 {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&out[0])), uintptr(len(out)))
		switch e {
		case 0:
			out = out[n:]
			continue
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// No room: the rest with a write that waits for it (under
			// the write deadline). Rare: the held bytes are a buffer's.
			if _, err := c.Conn.Write(out); err != nil {
				c.rerr = err
				return true
			}
			return false
		}
		c.rerr = os.NewSyscallError("write", e)
		return true
	}
	return false // sent: wait for the answer
}

// errWouldBlock is readNow's "nothing to read now".
var errWouldBlock = errors.New("read would block")

// errInSession is a Read made during a readSession, a bug: only readNow
// reads there.
var errInSession = errors.New("sockConn: Read inside a read session")

// readSession calls step inside one wait for the connection's input (one
// RawConn.Read) until step reports done; when it does not, the session
// waits for input (or the read deadline) and calls it again. Inside step,
// the connection is read with readNow, never with Read.
//
// What it saves: each Read arms the runtime's readiness anew before it
// reads, forgetting input whose arrival the poller saw before, so a Read
// must try a read before it may wait, and after a response that read
// finds nothing. Within one session readiness is armed once: input that
// arrives after a read that emptied the socket always ends the next wait.
// So a step that saw its last read return less than it asked for (the
// socket had nothing more) may wait at once, as nginx trusts a short read.
func (c *sockConn) readSession(step func() (done bool)) error {
	return c.rc.Read(func(fd uintptr) bool {
		c.sfd = int(fd)
		done := step()
		c.sfd = -1
		return done
	})
}

// readNow reads once into p inside a readSession, without waiting: it
// returns errWouldBlock when there is nothing to read, and 0, io.EOF at
// the end of the input.
func (c *sockConn) readNow(p []byte) (int, error) {
	c.rp = p
	ready := c.read(uintptr(c.sfd))
	n, err := c.rn, c.rerr
	c.rp, c.rn, c.rerr = nil, 0, nil
	switch {
	case !ready:
		return 0, errWouldBlock
	case err == nil && n == 0:
		return 0, io.EOF
	}
	return n, err
}

func (c *sockConn) Write(p []byte) (int, error) {
	if c.hold {
		c.hold, c.held = false, p
		return len(p), nil
	}
	if len(p) == 0 {
		return 0, nil
	}
	if c.lazyNoDelay {
		if c.wrote {
			c.lazyNoDelay = false
			c.rc.Control(setNoDelay)
		}
		c.wrote = true
	}
	c.wp = p
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wp, c.wn, c.werr = nil, 0, nil
	if err == nil {
		err = werr
	}
	return n, err
}

// write writes wp from wn on; false means "no room: wait".
func (c *sockConn) write(fd uintptr) bool {
	for c.wn < len(c.wp) {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.wp[c.wn])), uintptr(len(c.wp)-c.wn))
		switch e {
		case 0:
			c.wn += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			c.werr = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}

// setNoDelay sets TCP_NODELAY on the socket fd, which also sends at once
// what Nagle's algorithm was holding back.
func setNoDelay(fd uintptr) { rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) }

// setKeepAlive turns TCP keep-alive on for fd as Go's net package does by
// default (probes after 15 s idle, every 15 s, 9 of them): for connections
// that may be silent for long, TCP streams and tunnels, so that a peer gone
// without a word is noticed.
func setKeepAlive(fd uintptr) {
	rawSetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15)
	rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9)
}

// rawSetsockoptInt sets an integer socket option. Setting one never
// blocks, so, as sockConn's reads and writes, it is not announced to the
// scheduler.
func rawSetsockoptInt(fd uintptr, level, opt, value int) syscall.Errno {
	v := int32(value)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	return e
}
