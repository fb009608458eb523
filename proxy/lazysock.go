package proxy

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lazySock is the socket of an acceptedConn, and its RawConn. It joins
// the runtime's poller only when something must wait for it: until then
// its reads and writes are made on the descriptor as it is, and most
// connections never wait (a client with TCP_DEFER_ACCEPT has sent its
// request by the time it is accepted, and the answer fits the socket's
// buffer). What joining costs is what nginx does not pay, per connection:
// os.NewFile's fcntl and the epoll_ctl of its registration and of its
// removal, the *os.File and its finalizer, and a close announced to the
// scheduler, which wakes the runtime's monitor whenever the worker was
// idle (docs/design.md, "New connections: the runtime's part").
//
// The descriptor is counted while a raw use of it is under way, as
// os.File counts its own: a Close that comes meanwhile (the drain's, from
// another goroutine) lets the last use close it, so that a use never
// reaches another socket that got the same number.
type lazySock struct {
	fd int
	// state counts the raw uses under way, in steps of useStep; bit 0
	// (sockClosed) says closed, bit 1 (sockFIN) that the close sends a
	// FIN. The last use after the close closes the descriptor.
	state atomic.Int64
	// polled is the socket in the runtime's poller, once something
	// waited; then it owns the descriptor's close.
	polled atomic.Pointer[polledSock]

	mu sync.Mutex // serializes joining the poller, Close, and deadlines
	// The deadlines set before joining (Unix nanoseconds; 0: none).
	rdl, wdl atomic.Int64
	// set is the idle set the socket was woken from, if it was: joining
	// the poller takes it out of the set's epoll instance (idleSet.leave).
	set *idleSet
}

// lazySock's state bits.
const (
	sockClosed = 1
	sockFIN    = 2
	useStep    = 4
)

// polledSock is a lazySock's socket as an *os.File in the runtime's poller.
type polledSock struct {
	f  *os.File
	rc syscall.RawConn
}

func newLazySock(fd int) *lazySock { return &lazySock{fd: fd} }

// hold counts a raw use of the descriptor; false once closed.
func (s *lazySock) hold() bool {
	for {
		v := s.state.Load()
		if v&sockClosed != 0 {
			return false
		}
		if s.state.CompareAndSwap(v, v+useStep) {
			return true
		}
	}
}

// release ends a raw use; the last one after a Close closes.
func (s *lazySock) release() {
	if v := s.state.Add(-useStep); v < useStep && v&sockClosed != 0 {
		s.finish(v&sockFIN != 0)
	}
}

// expired reports whether the deadline d (Unix nanoseconds) has passed.
func expired(d int64) bool { return d != 0 && time.Now().UnixNano() >= d }

// Control calls fn with the descriptor.
func (s *lazySock) Control(fn func(fd uintptr)) error {
	if !s.hold() {
		return net.ErrClosed
	}
	fn(uintptr(s.fd))
	s.release()
	return nil
}

// Read calls fn with the descriptor until it returns true, waiting for
// input between calls, as RawConn.Read does: the first call is made on the
// descriptor as it is, and the socket joins the poller only if fn asks to
// wait.
func (s *lazySock) Read(fn func(fd uintptr) bool) error {
	return s.use(fn, &s.rdl, (*polledSock).read)
}

// Write is Read's twin for output.
func (s *lazySock) Write(fn func(fd uintptr) bool) error {
	return s.use(fn, &s.wdl, (*polledSock).write)
}

func (p *polledSock) read(fn func(uintptr) bool) error  { return p.rc.Read(fn) }
func (p *polledSock) write(fn func(uintptr) bool) error { return p.rc.Write(fn) }

// use is Read and Write: dl is the direction's deadline before joining,
// wait the polled socket's RawConn method.
func (s *lazySock) use(fn func(uintptr) bool, dl *atomic.Int64, wait func(*polledSock, func(uintptr) bool) error) error {
	if p := s.polled.Load(); p != nil {
		return wait(p, fn)
	}
	if !s.hold() {
		return net.ErrClosed
	}
	if expired(dl.Load()) {
		s.release()
		return os.ErrDeadlineExceeded
	}
	done := fn(uintptr(s.fd))
	s.release()
	if done {
		return nil
	}
	p, err := s.poll()
	if err != nil {
		return err
	}
	return wait(p, fn)
}

// poll returns the socket in the runtime's poller, joining it first if it
// has not: the deadlines set so far go with it.
func (s *lazySock) poll() (*polledSock, error) {
	if p := s.polled.Load(); p != nil {
		return p, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.polled.Load(); p != nil {
		return p, nil
	}
	if s.state.Load()&sockClosed != 0 {
		return nil, net.ErrClosed
	}
	f := os.NewFile(uintptr(s.fd), "tcp")
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err // not a socket: cannot be
	}
	if d := s.rdl.Load(); d != 0 {
		f.SetReadDeadline(time.Unix(0, d))
	}
	if d := s.wdl.Load(); d != 0 {
		f.SetWriteDeadline(time.Unix(0, d))
	}
	p := &polledSock{f: f, rc: rc}
	s.polled.Store(p)
	if s.set != nil {
		s.set.leave(s.fd)
	}
	return p, nil
}

// setDeadline sets the read deadline, the write deadline, or both.
func (s *lazySock) setDeadline(t time.Time, read, write bool) error {
	if p := s.polled.Load(); p != nil {
		return p.setDeadline(t, read, write)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.polled.Load(); p != nil {
		return p.setDeadline(t, read, write)
	}
	if s.state.Load()&sockClosed != 0 {
		return net.ErrClosed
	}
	var d int64
	if !t.IsZero() {
		d = t.UnixNano()
	}
	if read {
		s.rdl.Store(d)
	}
	if write {
		s.wdl.Store(d)
	}
	return nil
}

func (p *polledSock) setDeadline(t time.Time, read, write bool) error {
	switch {
	case read && write:
		return p.f.SetDeadline(t)
	case read:
		return p.f.SetReadDeadline(t)
	}
	return p.f.SetWriteDeadline(t)
}

// close closes the socket, at once or when the raw use under way ends.
// fin: a polled socket sends its FIN with a raw shutdown first, which is
// where the kernel does the work of closing (the close that follows, a
// system call announced to the scheduler, only lets go of the
// descriptor); an unpolled one is closed with a raw close, which does all
// of it. Without fin (a parked connection's descriptor, whose duplicate
// lives on) no FIN is sent.
func (s *lazySock) close(fin bool) error {
	bits := int64(sockClosed)
	if fin {
		bits |= sockFIN
	}
	s.mu.Lock()
	v := s.state.Load()
	for v&sockClosed == 0 && !s.state.CompareAndSwap(v, v|bits) {
		v = s.state.Load()
	}
	s.mu.Unlock()
	if v&sockClosed != 0 {
		return net.ErrClosed
	}
	if v == 0 {
		return s.finish(fin)
	}
	return nil // the last use closes it
}

// handOver gives up the descriptor, still open, to the caller, and leaves
// the socket closed: no use under way, and not in the runtime's poller
// (then the *os.File owns it). false: the socket keeps it.
func (s *lazySock) handOver() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.polled.Load() != nil || !s.state.CompareAndSwap(0, sockClosed) {
		return -1, false
	}
	return s.fd, true
}

// finish closes the descriptor: once, after close and the last use.
func (s *lazySock) finish(fin bool) error {
	if p := s.polled.Load(); p != nil {
		if fin {
			shutdownWrite(uintptr(s.fd))
		}
		return p.f.Close()
	}
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, uintptr(s.fd), 0, 0); e != 0 {
		return os.NewSyscallError("close", e)
	}
	return nil
}
