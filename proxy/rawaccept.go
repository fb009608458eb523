package proxy

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/baton-proxy/baton/internal/sockfd"
	"golang.org/x/sys/unix"
)

// rawListener accepts a TCP listener's connections with accept4 itself,
// waiting in the runtime's poller as net.TCPListener does. What it saves per connection, measured in
// docs/benchmarks.md: net.TCPListener's Accept sets TCP_NODELAY and four
// TCP keep-alive options and asks for the local address (six system
// calls, each announced to the scheduler); nginx makes none of them. Here
// TCP_NODELAY waits for the connection's second write (sockConn), the
// keep-alive options are set only where a connection may be silent for
// long (TCP streams once they have lived a second, tunnels when they
// start: keepAlive), and the
// local address is asked for only when someone wants it.
//
// The listener's own RawConn cannot wait (net's listeners refuse Read),
// so a rawListener waits on a duplicate of the socket's descriptor held
// as a pollable *os.File; the net.TCPListener stays open beside it, for
// whoever else holds it (an orphaned worker hands it to the next
// supervisor), and is closed with it.
//
// One goroutine accepts on a rawListener at a time (the accept loop).
type rawListener struct {
	*net.TCPListener
	f      *os.File // the duplicate Accept waits on
	rc     syscall.RawConn
	closed atomic.Bool
	// bare: Accept returns *bareConn, a descriptor for a stream loop,
	// not a *sockConn in the runtime's poller.
	bare bool
	// helping, when set, says the socket is another worker's own
	// (ipc.ListenerInfo.Helps), and whether this worker has room to help.
	// Accept takes one connection a wake-up from it, and none while
	// helping says no, so that its owner takes what it can and this
	// worker takes what would wait for an owner that is busy or off its
	// core.
	helping func() bool
	// rest: the connection taken, Accept waits for the socket's next
	// wake-up before it takes another (helping).
	rest bool
	// lookAfter is how long after a connection taken from a helped socket
	// Accept looks at its queue again, arrival or not, and takes what has
	// been left there (helpLookAfter; tests change it). Wake-ups come
	// with arrivals: without the look, what an owner busy or stopped left
	// in its queue when arrivals stopped would wait for it.
	lookAfter time.Duration
	// looking: the look is under way, Accept takes from the helped
	// socket until its queue is empty or the worker has no room.
	looking bool

	dlMu sync.Mutex // protects deadline and look, and orders setting the file's deadline
	// deadline is SetDeadline's; look, when the next look is due (zero:
	// none). The wait's deadline is the earlier of the two.
	deadline, look time.Time

	// accept's results, bound once as acceptFn so that no closure is
	// allocated per call.
	nfd      int
	rsa      unix.RawSockaddrAny
	rsaLen   uint32
	aerr     syscall.Errno
	acceptFn func(uintptr) bool
}

// newRawListener returns ln as a rawListener when it is TCP, else ln.
func newRawListener(ln net.Listener) net.Listener {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return ln
	}
	f, err := sockfd.Dup(tl, "listener")
	if err != nil {
		return ln
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return ln
	}
	l := &rawListener{TCPListener: tl, f: f, rc: rc, lookAfter: helpLookAfter}
	l.acceptFn = l.accept
	return l
}

// Accept waits for a connection and returns it as a *sockConn. Its
// errors are net.TCPListener's: net.ErrClosed once the listener is
// closed, os.ErrDeadlineExceeded past its deadline.
func (l *rawListener) Accept() (net.Conn, error) {
	for {
		l.nfd, l.aerr = -1, 0
		if err := l.rc.Read(l.acceptFn); err != nil {
			if l.closed.Load() {
				return nil, net.ErrClosed // the file says "use of closed file"
			}
			if l.helping != nil && errors.Is(err, os.ErrDeadlineExceeded) && l.lookDue() {
				l.looking = true
				continue
			}
			return nil, err
		}
		switch l.aerr {
		case 0:
		case unix.ECONNABORTED:
			continue // gone before it was taken, as net retries
		default:
			return nil, os.NewSyscallError("accept4", l.aerr)
		}
		if l.helping != nil {
			l.lookLater()
		}
		return l.newConn()
	}
}

// helpLookAfter is how long after taking a connection from a socket it
// helps with a worker looks at that socket's queue again. While the owner
// takes its connections the look finds the queue empty, once per period
// of load (one accept that finds nothing).
const helpLookAfter = 20 * time.Millisecond

// lookLater sets the next look at a helped socket's queue, unless one is
// set.
func (l *rawListener) lookLater() {
	l.dlMu.Lock()
	defer l.dlMu.Unlock()
	if l.look.IsZero() {
		l.look = time.Now().Add(l.lookAfter)
		l.setWait()
	}
}

// lookDue says whether the wait that passed its deadline passed the
// look's rather than SetDeadline's: then the look is taken off, and
// the queue is to be looked at.
func (l *rawListener) lookDue() bool {
	l.dlMu.Lock()
	defer l.dlMu.Unlock()
	now := time.Now()
	if l.look.IsZero() || now.Before(l.look) || !l.deadline.IsZero() && !now.Before(l.deadline) {
		return false
	}
	l.look = time.Time{}
	l.setWait()
	return true
}

// setWait sets the file's deadline, the earlier of SetDeadline's and the
// look's; under dlMu.
func (l *rawListener) setWait() error {
	d := l.deadline
	if !l.look.IsZero() && (d.IsZero() || l.look.Before(d)) {
		d = l.look
	}
	return l.f.SetDeadline(d)
}

// SetDeadline sets the deadline of the wait in Accept.
func (l *rawListener) SetDeadline(t time.Time) error {
	l.dlMu.Lock()
	defer l.dlMu.Unlock()
	l.deadline = t
	return l.setWait()
}

// Close ends a waiting Accept and closes the listener.
func (l *rawListener) Close() error {
	l.stopWaiting()
	return l.TCPListener.Close()
}

// stopWaiting ends a waiting Accept, and every later one, with
// net.ErrClosed; the socket stays open, its queue kept for sweep.
func (l *rawListener) stopWaiting() {
	if !l.closed.Swap(true) {
		l.f.Close()
	}
}

// sweep takes the connections queued on the socket now, without waiting,
// and hands each to handle, a helped socket's as well: its owner is
// sweeping too, and the socket closes for good. It is for a listener
// whose accept loop has ended (stopWaiting, then the loop's return): it
// uses the loop's fields.
func (l *rawListener) sweep(handle func(net.Conn)) {
	rc, err := l.TCPListener.SyscallConn()
	if err != nil {
		return
	}
	l.helping, l.rest, l.looking = nil, false, false
	for {
		l.nfd, l.aerr = -1, 0
		got := false
		if rc.Control(func(fd uintptr) { got = l.accept(fd) }) != nil || !got {
			return // closed, or nothing queued (EAGAIN)
		}
		switch l.aerr {
		case 0:
		case unix.ECONNABORTED:
			continue
		default:
			return
		}
		if c, err := l.newConn(); err == nil {
			handle(c)
		}
	}
}

// accept takes one connection; false means "none yet: wait". From a
// socket it helps, it takes one a wake-up (the first call after a
// connection was taken waits), or during a look as many as are queued,
// and only while the worker has room.
func (l *rawListener) accept(fd uintptr) bool {
	if l.helping != nil {
		if l.rest && !l.looking {
			l.rest = false
			return false
		}
		if !l.helping() {
			l.looking, l.rest = false, false
			return false
		}
	}
	for {
		l.rsaLen = uint32(unsafe.Sizeof(l.rsa))
		r, _, e := unix.RawSyscall6(unix.SYS_ACCEPT4, fd, uintptr(unsafe.Pointer(&l.rsa)), uintptr(unsafe.Pointer(&l.rsaLen)), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch e {
		case 0:
			l.nfd, l.rest = int(r), l.helping != nil
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// The queue is empty: the next wake-up is an arrival's.
			l.looking, l.rest = false, false
			return false
		}
		l.aerr = e
		return true
	}
}

// newConn wraps the descriptor accepted.
func (l *rawListener) newConn() (net.Conn, error) {
	if l.bare {
		return newBareConn(l.nfd, sockaddrTCP(&l.rsa), l.TCPListener.Addr()), nil
	}
	c, err := acceptedSock(l.nfd, sockaddrTCP(&l.rsa), l.TCPListener)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// acceptedSock wraps fd, a connected non-blocking socket that ln accepted
// from remote, as a sockConn, TCP_NODELAY not set yet. The socket joins
// the runtime's poller when something first waits for it (lazySock).
func acceptedSock(fd int, remote *net.TCPAddr, ln *net.TCPListener) (*sockConn, error) {
	s := newLazySock(fd)
	c := newSockConnRaw(&acceptedConn{s: s, remote: remote, ln: ln}, s)
	c.lazyNoDelay, c.fd = true, int32(fd)
	return c, nil
}

// sockaddrTCP returns the TCP address in rsa (IPv4 or IPv6).
func sockaddrTCP(rsa *unix.RawSockaddrAny) *net.TCPAddr {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), ntohs(sa.Port)))
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		return net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), ntohs(sa.Port)))
	}
	return &net.TCPAddr{}
}

// ntohs turns a port in network byte order, as a sockaddr holds it, into
// a number.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// acceptedConn is a TCP connection that rawListener took (or dialRaw
// made): its socket a lazySock, which waits in the runtime's poller
// (deadlines included) as a net.TCPConn does, once it has to wait.
type acceptedConn struct {
	s      *lazySock
	remote *net.TCPAddr
	ln     *net.TCPListener // for LocalAddr when the socket cannot say; nil when dialed
	local  net.Addr
}

// Read and Write wait in the runtime's poller: the socket joins it.
func (c *acceptedConn) Read(p []byte) (int, error) {
	ps, err := c.s.poll()
	if err != nil {
		return 0, err
	}
	return ps.f.Read(p)
}

func (c *acceptedConn) Write(p []byte) (int, error) {
	ps, err := c.s.poll()
	if err != nil {
		return 0, err
	}
	return ps.f.Write(p)
}

// Close sends the connection's FIN and closes its socket.
func (c *acceptedConn) Close() error { return c.s.close(true) }

// closeDup closes the connection's descriptor without a FIN: a duplicate
// of it carries the connection on (an idleSet's).
func (c *acceptedConn) closeDup() error { return c.s.close(false) }

func (c *acceptedConn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr returns the address the client connected to, asked of the
// socket the first time.
func (c *acceptedConn) LocalAddr() net.Addr {
	if c.local == nil {
		c.local = &net.TCPAddr{}
		if c.ln != nil {
			c.local = c.ln.Addr()
		}
		c.s.Control(func(fd uintptr) {
			if sa, err := unix.Getsockname(int(fd)); err == nil {
				switch sa := sa.(type) {
				case *unix.SockaddrInet4:
					c.local = net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)))
				case *unix.SockaddrInet6:
					c.local = net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)))
				}
			}
		})
	}
	return c.local
}

func (c *acceptedConn) SetDeadline(t time.Time) error      { return c.s.setDeadline(t, true, true) }
func (c *acceptedConn) SetReadDeadline(t time.Time) error  { return c.s.setDeadline(t, true, false) }
func (c *acceptedConn) SetWriteDeadline(t time.Time) error { return c.s.setDeadline(t, false, true) }

// CloseWrite shuts down the writing side: the peer reads EOF.
func (c *acceptedConn) CloseWrite() error {
	var err error
	if cerr := c.s.Control(func(fd uintptr) { err = unix.Shutdown(int(fd), unix.SHUT_WR) }); cerr != nil {
		return cerr
	}
	return err
}

// SyscallConn returns the socket.
func (c *acceptedConn) SyscallConn() (syscall.RawConn, error) { return c.s, nil }

// keepAlive turns TCP keep-alive on for c's socket, through TLS and a
// PROXY header.
func keepAlive(c net.Conn) {
	for {
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = nc.NetConn()
	}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(setKeepAlive)
		}
	}
}

// deferAccept sets TCP_DEFER_ACCEPT on a listening socket of an http
// listener (1 s, as nginx's "listen ... deferred"; off: 0): the kernel
// hands over a connection once its first bytes have arrived, so a worker
// is not woken for a connection with nothing to read yet, and its first
// read finds the request. Every client of an http listener speaks first
// (HTTP, TLS, the PROXY protocol); one silent past the second is handed
// over all the same. The option belongs to the socket, shared with the
// supervisor and every generation: each generation sets it as its config
// says.
func deferAccept(ln net.Listener, on bool) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return
	}
	v := 0
	if on {
		v = 1
	}
	rc.Control(func(fd uintptr) { rawSetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, v) })
}

// dialRaw connects to ap as rawListener accepts: a non-blocking socket
// of its own, waited on in the runtime's poller through an *os.File,
// within timeout. What net.Dialer adds and a stream does not need: the
// local and peer addresses asked of the socket (two system calls),
// TCP_NODELAY at once (sockConn sets it before the second write). It
// returns the connection as a sockConn; ok is false when ap is the zero
// AddrPort, an endpoint given by name (the caller dials otherwise).
func dialRaw(ap netip.AddrPort, timeout time.Duration) (c *sockConn, ok bool, err error) {
	if !ap.IsValid() {
		return nil, false, nil
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	var family int
	var sa unix.Sockaddr
	if ap.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, true, os.NewSyscallError("socket", err)
	}
	connected := false
	switch err := unix.Connect(fd, sa); err {
	case nil:
		connected = true
	case unix.EINPROGRESS:
	default:
		unix.Close(fd)
		return nil, true, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: os.NewSyscallError("connect", err)}
	}
	c, err = acceptedSock(fd, net.TCPAddrFromAddrPort(ap), nil)
	if err != nil {
		return nil, true, err
	}
	if !connected {
		// Writable once the connection is made or failed. Each look asks
		// connect again, which says where it stands (EISCONN: made;
		// EALREADY: under way; else why it failed): RawConn.Write forgets
		// the readiness the poller saw before it, so a look must come
		// before every wait.
		var soErr error
		if timeout > 0 {
			c.Conn.SetWriteDeadline(time.Now().Add(timeout))
		}
		werr := c.rc.Write(func(fd uintptr) bool {
			switch err := unix.Connect(int(fd), sa); err {
			case unix.EALREADY, unix.EINPROGRESS, unix.EINTR:
				return false
			case nil, unix.EISCONN:
			default:
				soErr = err
			}
			return true
		})
		c.Conn.SetWriteDeadline(time.Time{})
		if werr == nil && soErr != nil {
			werr = os.NewSyscallError("connect", soErr)
		}
		if werr != nil {
			c.Conn.Close()
			return nil, true, &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: werr}
		}
	}
	return c, true, nil
}
