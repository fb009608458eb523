package proxy

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// parkAfter is how long a plain keep-alive connection waits for its next
// request in its own goroutine before it is parked in its frontend's
// idleSet: a wait times out after parkAfter/2 to parkAfter (the lazy
// deadline), so a connection whose requests come close together never
// parks, and one that sits idle soon costs next to nothing.
const parkAfter = 100 * time.Millisecond

// idleScan is how often an idleSet looks for parked connections past
// their idle timeout: they are closed within idleScan of it.
const idleScan = time.Second

// idleSet holds an http frontend's plain keep-alive connections that have
// waited for their next request longer than parkAfter, as nginx holds its
// idle connections in its event loop: no goroutine, no h1conn, no buffer,
// not even a sockConn or an *os.File. A parked connection's socket is a
// duplicate descriptor that only the set's own epoll instance watches
// (the original, which the runtime's poller watched, is closed), and what
// the connection needs to go on is a parkedConn in a slice indexed by that
// descriptor: a parked connection costs no allocation at all
// (docs/design.md, "What an idle connection costs").
//
// When input arrives, or the client closes, the set hands the socket to a
// goroutine of the frontend's pool, which wraps it again and serves it as
// any connection (resume). At its idle timeout a parked connection is
// closed; a drain closes those still parked after its grace (closeAll).
// Either serves instead a request that is arriving at that moment, as the
// drain's wake-up of an unparked idle connection does.
//
// The epoll instance is itself waited on in the runtime's poller (an epoll
// descriptor is readable while it has events), by one goroutine, run: no
// thread is held by the wait.
//
// A socket stays in the epoll instance, edge-triggered, while the
// connection woken from it is served, so that parking it again costs no
// system call (adopt): an event then, which finds nothing parked, marks
// the record pending instead, and the park looks at the socket. A served
// connection that has to wait in the runtime's poller (a body, an
// upgrade) leaves the set first (leave), or every segment it reads would
// wake the set for nothing.
type idleSet struct {
	f    *httpFrontend
	epfd int
	ep   *os.File // epfd, as the runtime's poller waits on it
	rc   syscall.RawConn

	// run's: the last wait's events, and the connections they woke.
	events [128]unix.EpollEvent
	woken  []woken
	waitFn func(uintptr) bool
	done   chan struct{} // closed when run returns

	// after is how long a connection waits for its next request before
	// it parks (nanoseconds): parkAfter, unless a test changes it.
	after atomic.Int64

	mu     sync.Mutex   // protects the fields below
	byFD   []parkedConn // by descriptor; seq 0: none
	n      int          // how many are parked
	seq    uint32       // numbers each park, so that a stale event is known
	closed bool         // no more parks (closeAll, stop)
	// stopped: epfd is closed, or about to be (stop), and its number may
	// be another descriptor's soon: no epoll_ctl on it any more.
	stopped bool
	// due lists the parks in the order they came, which is the order of
	// their idle timeouts to within parkAfter (every connection of a
	// frontend has the same idleTimeout, counted from when it went idle,
	// and parks parkAfter/2 to parkAfter after that): expire takes the
	// timed-out ones from its head, in O(due), where a walk of byFD was
	// O(descriptors) each idleScan, under mu (0.29-0.36 ms at 100,000
	// parked, where this look takes 20 ns: BenchmarkIdleExpire). An entry whose connection woke since is
	// stale (its seq is not the slot's): expire skips it, and drops the
	// stale ones when they outnumber the parked (dueCompact).
	due     []parkDue
	dueHead int
}

// parkedConn is what a parked connection's next h1conn needs.
type parkedConn struct {
	seq uint32 // the park's number; 0: the slot is free
	// held (seq 0): the descriptor was woken from the set and is likely
	// still in its epoll instance, armed, unless the connection has
	// closed it since (or left the set: leave). A hint: it says whether
	// a park on that number needs an epoll_ctl.
	held bool
	// pending (held): input or a hang-up came while the connection was
	// served, and its event found nothing parked to wake; the next park
	// (adopt) looks at the socket instead.
	pending bool

	requests int32 // served so far (maxRequestsPerConnection)
	until    int64 // its idle timeout, in Unix nanoseconds
	remote   netip.AddrPort
	ln       *net.TCPListener // it was accepted on (LocalAddr)
	// What sockConn knew of TCP_NODELAY: set already, or not yet and
	// the connection has written once.
	noDelay, wrote bool
}

// parkDue is a park in idleSet.due: its descriptor, its number and its
// idle timeout (Unix nanoseconds).
type parkDue struct {
	fd    int32
	seq   uint32
	until int64
}

// woken is a connection taken out of the set to be served or closed: its
// socket and its record; hup: the client closed its side (or the socket
// failed).
type woken struct {
	fd  int
	rec parkedConn
	hup bool
}

// newIdleSet makes f's idle set and starts its goroutine.
func newIdleSet(f *httpFrontend) (*idleSet, error) {
	epfd, ep, rc, err := pollableEpoll("idle-epoll")
	if err != nil {
		return nil, fmt.Errorf("idle connections: %w", err)
	}
	s := &idleSet{f: f, epfd: epfd, ep: ep, rc: rc, done: make(chan struct{})}
	s.after.Store(int64(parkAfter))
	s.waitFn = s.collect
	go s.run()
	return s, nil
}

// park takes the socket fd of an idle connection with nothing buffered
// and nothing unsent, as a duplicate that only the set watches, until
// input arrives or until rec.until. It reports whether it took it (not
// once closing); the caller then closes its own descriptor (the socket
// lives on in the duplicate) and forgets the connection.
func (s *idleSet) park(fd int, rec parkedConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if fd < len(s.byFD) && s.byFD[fd].held {
		// Woken from the set before: its registration there must go
		// before the descriptor closes, since the duplicate keeps the
		// socket open (epoll's entries are per open socket, not per
		// descriptor number).
		s.unwatch(fd)
		s.byFD[fd] = parkedConn{}
	}
	r, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return false
	}
	dup := int(r)
	if !s.watch(dup, rec) {
		unix.RawSyscall(unix.SYS_CLOSE, uintptr(dup), 0, 0)
		return false
	}
	return true
}

// adopt parks fd itself, a connection's descriptor handed over
// (lazySock.handOver), as park does a duplicate. A connection woken from
// the set and served without waiting in the runtime's poller comes back
// so: its descriptor is still in the set's epoll instance, armed, and
// the record alone parks it, where park would make a dup, an add and a
// close, after the delete of the wake-up. When an event came while it
// was served (pending), adopt looks at the socket, and wakes the
// connection as that event would have, unless nothing is there to read.
// fromSet says the connection was woken from this set: only then is a
// held record its own. A held record outlives the connection that closes
// its descriptor, and the number comes back with the next socket, which
// must be added to the epoll instance, or it would be parked and never
// woken. false: not parked (the set is closing, or epoll failed): fd is
// still the caller's, to end.
func (s *idleSet) adopt(fd int, rec parkedConn, fromSet bool) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	if !fromSet || fd >= len(s.byFD) || !s.byFD[fd].held {
		ok := s.watch(fd, rec)
		s.mu.Unlock()
		return ok
	}
	pending := s.byFD[fd].pending
	seq := s.record(fd, rec)
	s.mu.Unlock()
	if pending && fdReadable(fd) {
		// Taken back unless an event has taken it since (then that
		// wake-up serves it).
		s.mu.Lock()
		rec, ok := s.take(fd, seq)
		s.mu.Unlock()
		if ok {
			s.wake(woken{fd: fd, rec: rec})
		}
	}
	return true
}

// leave takes fd, a connection woken from the set and being served, out
// of the set's epoll instance: it waits in the runtime's poller from now
// on (lazySock.poll), and parks again as a duplicate, if it does.
func (s *idleSet) leave(fd int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fd < len(s.byFD) && s.byFD[fd].held {
		s.unwatch(fd)
		s.byFD[fd] = parkedConn{}
	}
}

// unwatch takes fd out of the epoll instance, unless the set has
// stopped; mu held.
func (s *idleSet) unwatch(fd int) {
	if !s.stopped {
		epollCtl(s.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
}

// watch adds fd to the epoll instance, edge-triggered (an event for
// each arrival of input, and for the hang-up), and records rec as its
// park; mu held.
func (s *idleSet) watch(fd int, rec parkedConn) bool {
	// Added under the lock, so that an event (due at once when input
	// came meanwhile: epoll reports it) finds the record.
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	if e := epollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); e != 0 {
		if e != unix.EEXIST || epollCtl(s.epfd, unix.EPOLL_CTL_MOD, fd, &ev) != 0 {
			return false
		}
	}
	s.record(fd, rec)
	return true
}

// record numbers rec's park and records it for fd, and returns its
// number; mu held.
func (s *idleSet) record(fd int, rec parkedConn) uint32 {
	s.seq++
	if s.seq == 0 {
		s.seq++
	}
	rec.seq, rec.held, rec.pending = s.seq, false, false
	if fd >= len(s.byFD) {
		s.byFD = append(s.byFD, make([]parkedConn, fd+1-len(s.byFD)+len(s.byFD)/2)...)
	}
	s.byFD[fd] = rec
	s.n++
	s.due = append(s.due, parkDue{fd: int32(fd), seq: rec.seq, until: rec.until})
	return rec.seq
}

// count is how many connections are parked.
func (s *idleSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// take removes the connection parked on fd, if its park is seq (0: any),
// and returns its record; false when there is none. mu held.
func (s *idleSet) take(fd int, seq uint32) (parkedConn, bool) {
	if fd < 0 || fd >= len(s.byFD) {
		return parkedConn{}, false
	}
	rec := s.byFD[fd]
	if rec.seq == 0 || seq != 0 && rec.seq != seq {
		return parkedConn{}, false
	}
	s.byFD[fd] = parkedConn{held: true}
	s.n--
	return rec, true
}

// run waits for the parked connections' input, and every idleScan for
// their idle timeouts, until the set stops.
func (s *idleSet) run() {
	defer close(s.done)
	next := time.Now().Add(idleScan) // the next look at the idle timeouts
	for {
		// The wait serves what wakes (collect) and ends at the next
		// look's deadline, or when the set stops.
		s.ep.SetReadDeadline(next)
		err := s.rc.Read(s.waitFn)
		if err != nil && !isTimeout(err) {
			return // stopped
		}
		if now := time.Now(); !now.Before(next) {
			s.expire(now)
			next = now.Add(idleScan)
		}
	}
}

// collect takes the events due, without waiting, and serves or closes
// the connections they woke. It says false, "wait", once it has taken
// every event there was: one that comes after its last look has made the
// epoll descriptor ready again in the runtime's poller (a new event, a
// new edge), so the wait ends at once. Waiting again from here, not
// returning to run, spares each wake-up a second epoll_pwait that would
// find nothing, and run's deadline a reset.
func (s *idleSet) collect(uintptr) bool {
	for {
		var n int
		for {
			r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(s.epfd), uintptr(unsafe.Pointer(&s.events[0])), uintptr(len(s.events)), 0, 0, 0)
			if e != unix.EINTR {
				n = int(r)
				if e != 0 {
					n = 0
				}
				break
			}
		}
		if n <= 0 {
			return false
		}
		s.mu.Lock()
		for _, ev := range s.events[:n] {
			fd := int(ev.Fd)
			if rec, ok := s.take(fd, 0); ok {
				hup := ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
				s.woken = append(s.woken, woken{fd, rec, hup})
			} else if fd < len(s.byFD) && s.byFD[fd].held {
				s.byFD[fd].pending = true // being served: its next park looks
			}
		}
		s.mu.Unlock()
		for i, w := range s.woken {
			s.woken[i] = woken{}
			if w.hup {
				s.end(w) // most often nothing to serve: closed here, no goroutine
			} else {
				s.wake(w)
			}
		}
		s.woken = s.woken[:0]
		if n < len(s.events) {
			return false
		}
	}
}

// wake serves w's connection in a goroutine of the frontend's pool. Its
// socket stays in the epoll instance for the next park (adopt); when the
// connection closes instead, the close takes it out.
func (s *idleSet) wake(w woken) {
	s.f.gp.Go(func() { s.f.resume(w.fd, &w.rec) })
}

// expire ends the connections whose idle timeout has passed: those at
// the head of due. One parked just behind a later timeout (by less than
// parkAfter/2) is ended at the next look, within idleScan.
func (s *idleSet) expire(now time.Time) {
	t := now.UnixNano()
	var ended []woken
	s.mu.Lock()
	for s.dueHead < len(s.due) && s.due[s.dueHead].until <= t {
		d := s.due[s.dueHead]
		s.due[s.dueHead] = parkDue{}
		s.dueHead++
		if r, ok := s.take(int(d.fd), d.seq); ok {
			ended = append(ended, woken{fd: int(d.fd), rec: r})
		}
	}
	s.compactDue()
	s.mu.Unlock()
	for _, w := range ended {
		s.end(w)
	}
}

// dueCompact is how far the stale entries of idleSet.due may outnumber
// the parked connections before compactDue drops them.
const dueCompact = 64

// compactDue drops due's head, once taken, and its stale entries once
// there are more of them than parks: a connection that wakes and parks
// again leaves one behind each time, until its timeout would have come.
// Each drop walks the entries left, at most 2n+dueCompact, after at
// least n+dueCompact parks since the last: constant work a park. mu held.
func (s *idleSet) compactDue() {
	live := s.due[s.dueHead:]
	if len(live) > 2*s.n+dueCompact {
		k := 0
		for _, d := range live {
			if s.byFD[d.fd].seq == d.seq {
				live[k] = d
				k++
			}
		}
		clear(live[k:])
		live = live[:k]
	} else if s.dueHead < len(s.due)/2 {
		return // the head's slots are reused once they are half
	}
	n := copy(s.due, live)
	clear(s.due[n:])
	s.due, s.dueHead = s.due[:n], 0
}

// end closes w's connection, taken out of the set, unless a request of
// its client is there to be read: that one is served (with Connection:
// close, when the worker drains).
func (s *idleSet) end(w woken) {
	if fdPending(w.fd) {
		s.wake(w)
		return
	}
	s.mu.Lock()
	s.unwatch(w.fd)
	s.mu.Unlock()
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(w.fd), 0, 0) // no input unread: a FIN, not a reset
	s.f.closed()
}

// closeAll ends the set: it parks no more, and ends what it holds. The
// drain calls it once its grace is over, as it wakes the idle connections
// that are not parked.
func (s *idleSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	var all []woken
	for fd := range s.byFD {
		if s.byFD[fd].seq != 0 {
			r, _ := s.take(fd, 0)
			all = append(all, woken{fd: fd, rec: r})
		}
	}
	s.mu.Unlock()
	for _, w := range all {
		s.end(w)
	}
}

// stop ends what is parked and the set's goroutine.
func (s *idleSet) stop() {
	s.closeAll()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.ep.Close()
	<-s.done
}

// epollCtl is epoll_ctl(2), raw: the idle set's system calls never block
// (epoll_ctl, epoll_pwait with a zero timeout, fcntl, close), so they are
// not announced to the scheduler, as sockConn's are not. An announced one
// wakes the runtime's monitor thread (sysmon) when the process was idle,
// and it then polls every 20 µs for a while: on the wake of every parked
// connection (docs/design.md, "What waking a parked connection costs").
func epollCtl(epfd, op, fd int, ev *unix.EpollEvent) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	return e
}

// fdReadable reports whether a read of socket fd would not wait: input,
// the end of it, or an error.
func fdReadable(fd int) bool {
	_, errno := peekByte(fd)
	return errno != unix.EAGAIN
}

// fdPending reports whether socket fd has input to read.
func fdPending(fd int) bool {
	n, errno := peekByte(fd)
	return errno == 0 && n > 0
}

// peekByte peeks at one byte of socket fd without waiting. Raw, as
// sockConn's reads: a non-blocking peek need not be announced to the
// scheduler.
func peekByte(fd int) (int, unix.Errno) {
	var b [1]byte
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}

// pollableEpoll makes an epoll instance that the runtime's poller waits
// on (an epoll descriptor is readable while it has events): its
// descriptor, as an *os.File, and the RawConn whose Read waits for it.
func pollableEpoll(name string) (epfd int, f *os.File, rc syscall.RawConn, err error) {
	epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return -1, nil, nil, fmt.Errorf("epoll_create1: %w", err)
	}
	// Non-blocking, or os.NewFile would not give it to the poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return -1, nil, nil, err
	}
	f = os.NewFile(uintptr(epfd), name)
	if rc, err = f.SyscallConn(); err != nil {
		f.Close()
		return -1, nil, nil, err
	}
	return epfd, f, rc, nil
}
