package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// streamLoop relays the TCP streams of one tcp listener that neither
// terminates TLS nor reads a PROXY header, TLS passthrough included, as
// nginx's stream module does: from one epoll set of its own, in one
// goroutine, with raw system calls. A connection costs no goroutine, no
// *os.File (whose creation and close are system calls announced to the
// scheduler, which wake the runtime's monitor) and no registration in the
// runtime's poller; a stream holds a buffer only while bytes wait to be
// written. Measured in docs/design.md ("TCP streams: what a connection
// costs"): the per-connection CPU of the goroutine relay was 1.6 times
// nginx's, this loop's is nginx's.
//
// The loop waits for its epoll set in the runtime's poller (an epoll
// descriptor is readable while it has events), so it parks as any
// goroutine does. A stream whose backend must be reached otherwise (a
// host name to resolve, TLS to originate) is handed to the goroutine
// relay (streamTo).
type streamLoop struct {
	f    *tcpFrontend
	epfd int
	file *os.File // epfd, as the runtime's poller waits on it
	rc   syscall.RawConn

	mu      sync.Mutex // held while the loop handles events, and to add or close streams
	sides   sideTable
	closing bool // drain deadline passed: close, do not start
	// asleep: the loop waits with no deadline, having no stream to sweep;
	// the next stream added sets it.
	asleep bool
	free   [][]byte
	evs    [64]unix.EpollEvent
	// now is when the events at hand were taken (or the stream at hand
	// added): the clock is read once for them, as nginx reads it once a
	// turn of its loop, not for each time a stream records.
	now time.Time
	// again holds the streams that used their turn with more to move,
	// to be moved on after the events at hand; spare is its other half.
	again, spare []*loopStream
	// wheel holds the streams by their next check (schedule).
	wheel streamWheel

	done chan struct{} // closed when run returns
}

// loopSweepEvery is how often the loop looks for streams past a deadline
// (a ClientHello or a connect that takes too long) and turns TCP
// keep-alive on for streams past keepAliveAfter: the deadlines hold to
// within it.
const loopSweepEvery = 250 * time.Millisecond

// loopBufSize is a relay buffer's size, taken while bytes wait to be
// written (nginx's proxy_buffer_size for streams is 16k).
const loopBufSize = 16 << 10

// loopTurn is what one direction of a stream moves before the loop turns
// to the other streams: a stream whose two ends keep up with each other
// would otherwise keep the loop, and its other streams wait.
const loopTurn = 4 * loopBufSize

// Stream states.
const (
	stateHello   = iota // passthrough: reading the ClientHello
	stateConnect        // the backend's connect under way
	stateRelay
)

type loopStream struct {
	a, b     loopSide // client, backend
	state    uint8
	start    time.Time
	deadline time.Time // of stateHello and stateConnect
	keepOn   bool      // TCP keep-alive on
	// activeAt is when bytes last moved (or the relay started): the
	// stream is closed once silent for the listener's idleTimeout.
	activeAt time.Time
	// checkAt is the time of the stream's next check (Unix nanoseconds),
	// in the loop's wheel at wslot, wpos-1 (wpos 0: not in it).
	checkAt     int64
	wslot, wpos int32
	queued      bool // in the loop's again
	ended       bool
	hello       []byte    // passthrough: what came before the route was known
	scan        helloScan // how far hello is whole
	backend     *backend
	ep          *endpoint
	set         *endpointSet
	att         attempt
	dialed      time.Time
	entry       *accessEntry
	remote      *net.TCPAddr
}

// sideTable holds a loop's sockets by descriptor. Descriptors are small
// numbers, the lowest free one first, so a slice indexed by them finds a
// socket without hashing: the map it replaced took a tenth of the loop's
// user CPU for TLS passthrough (docs/design.md).
type sideTable struct {
	by []*loopSide // by descriptor; nil: not the loop's
	n  int         // how many are not nil
}

func (t *sideTable) get(fd int32) *loopSide {
	if fd < 0 || int(fd) >= len(t.by) {
		return nil
	}
	return t.by[fd]
}

func (t *sideTable) add(s *loopSide) {
	if s.fd >= len(t.by) {
		t.by = append(t.by, make([]*loopSide, s.fd+1-len(t.by))...)
	}
	if t.by[s.fd] == nil {
		t.n++
	}
	t.by[s.fd] = s
}

func (t *sideTable) del(fd int) {
	if fd < len(t.by) && t.by[fd] != nil {
		t.by[fd] = nil
		t.n--
	}
}

// loopSide is one socket of a stream, and the bytes read from it that the
// other side has not taken yet.
type loopSide struct {
	fd    int
	peer  *loopSide
	st    *loopStream
	buf   []byte // a relay buffer, held while pend is not empty
	pend  []byte // read, not yet written to peer
	moved int64

	readable bool // an event said so, and no read has emptied the socket since
	rdhup    bool // the peer sent its FIN (or the socket failed): read to the end
	writable bool
	eof      bool // read returned 0
	shut     bool // the EOF was passed on: peer's writing side shut
}

func newStreamLoop(f *tcpFrontend) (*streamLoop, error) {
	fd, file, rc, err := pollableEpoll("stream-epoll")
	if err != nil {
		return nil, fmt.Errorf("stream loop: %w", err)
	}
	l := &streamLoop{f: f, epfd: fd, file: file, rc: rc, done: make(chan struct{})}
	l.wheel.tick = time.Now().UnixNano() / int64(loopSweepEvery)
	return l, nil
}

// run handles the loop's events until stop. With no stream it waits
// without a deadline: an idle worker is not woken to sweep nothing.
func (l *streamLoop) run() {
	defer close(l.done)
	for {
		l.mu.Lock()
		l.asleep = l.sides.n == 0
		if l.asleep {
			l.file.SetReadDeadline(time.Time{})
		} else {
			l.file.SetReadDeadline(time.Now().Add(loopSweepEvery))
		}
		l.mu.Unlock()
		err := l.rc.Read(l.step)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			l.mu.Lock()
			l.now = time.Now()
			l.sweep()
			l.mu.Unlock()
		default:
			return // closed
		}
	}
}

// stop ends run, once no stream is left, and waits for it.
func (l *streamLoop) stop() {
	l.file.Close()
	<-l.done
}

// closeAll closes every stream now: the drain's deadline passed.
func (l *streamLoop) closeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	for _, s := range l.sides.by {
		if s != nil && s == &s.st.a {
			l.end(s.st)
		}
	}
}

// step handles the events there are, under l.mu; false: none are left,
// wait.
func (l *streamLoop) step(uintptr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.epfd), uintptr(unsafe.Pointer(&l.evs[0])), uintptr(len(l.evs)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			r = 0
		}
		if r == 0 && len(l.again) == 0 {
			return false
		}
		l.now = time.Now()
		for _, ev := range l.evs[:r] {
			s := l.sides.get(ev.Fd)
			if s == nil {
				continue // its stream ended with an earlier event of this batch
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				s.readable = true
				s.rdhup = s.rdhup || ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0
			}
			if ev.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				s.writable = true
			}
			l.progress(s.st)
		}
		q := l.again
		l.again = l.spare[:0]
		for _, st := range q {
			st.queued = false
			if !st.ended {
				l.progress(st)
			}
		}
		l.spare = q[:0]
		if int(r) < len(l.evs) && len(l.again) == 0 {
			// Every event there was is handled. Another wait would most
			// likely find none; one that came meanwhile has made the
			// epoll descriptor ready again in the runtime's poller
			// (edge-triggered: a new event, a new edge), so the wait
			// this returns to ends at once.
			return false
		}
	}
}

// add takes over c, a connection its listener accepted, and starts its
// stream: routed now, or, with passthrough, once its ClientHello has come.
func (l *streamLoop) add(c *bareConn) {
	f := l.f
	now := time.Now()
	st := &loopStream{start: now, remote: c.remote}
	st.a = loopSide{fd: c.take(), st: st, writable: true}
	st.b = loopSide{fd: -1, st: st}
	st.a.peer, st.b.peer = &st.b, &st.a
	if al := f.p.access; al != nil {
		e := &accessEntry{start: st.start, listener: f.name, proto: protoTCP, status: 400, upstream: -1, generation: f.p.Generation}
		e.client = c.remote.AddrPort().Addr().Unmap().AppendTo(nil)
		st.entry = e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
	if l.closing {
		l.end(st)
		return
	}
	if !l.watch(&st.a) {
		l.end(st)
		return
	}
	if l.asleep {
		// The stream's deadlines need the sweep.
		l.asleep = false
		l.file.SetReadDeadline(now.Add(loopSweepEvery))
	}
	if f.passthrough {
		st.state, st.deadline = stateHello, st.start.Add(f.p.cfg.HTTP.ReadHeaderTimeout.Std())
		l.schedule(st)
		return // the first event brings the hello
	}
	b := f.backend
	if b == nil {
		b, _ = f.p.pickStream(f.name, "")
	}
	l.connectTo(st, b)
}

// watch adds s's socket to the epoll set, edge-triggered.
func (l *streamLoop) watch(s *loopSide) bool {
	l.sides.add(s)
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(s.fd)}
	_, _, e := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(l.epfd), unix.EPOLL_CTL_ADD, uintptr(s.fd), uintptr(unsafe.Pointer(&ev)), 0, 0)
	return e == 0
}

// progress moves st on as far as it goes now, and ends it once both
// directions have ended or one failed.
func (l *streamLoop) progress(st *loopStream) {
	switch st.state {
	case stateHello:
		l.readHello(st)
		return
	case stateConnect:
		if !st.b.writable {
			return
		}
		l.connected(st)
		if st.state != stateRelay {
			return
		}
	}
	okA, okB := l.relay(&st.a), l.relay(&st.b)
	if !okA || !okB || st.a.shut && st.b.shut {
		l.end(st)
	}
}

// readHello reads what came of the ClientHello, and once it is whole
// routes the stream by its server name.
func (l *streamLoop) readHello(st *loopStream) {
	a := &st.a
	// What is read is bounded: past maxClientHello the parser refuses it
	// (a client's hello is read whole before it is looked at).
	for a.readable && len(st.hello) < maxClientHello {
		buf := l.get()
		p := buf[:min(len(buf), maxClientHello-len(st.hello))]
		n, e := rawRead(a.fd, p)
		switch {
		case e == unix.EAGAIN:
			a.readable = false
		case e != 0:
			l.put(buf)
			l.end(st)
			return
		case n == 0:
			a.readable, a.eof = false, true
		case st.hello == nil:
			// The first bytes stay in the relay buffer they came in: a
			// hello that comes at once is parsed and sent on from there.
			st.hello, a.buf = buf[:n], buf
			a.readable = n == len(p) || a.rdhup
			continue
		default:
			st.hello = append(st.hello, p[:n]...)
			a.readable = n == len(p) || a.rdhup
		}
		l.put(buf)
	}
	if !a.eof && len(st.hello) < maxClientHello && !st.scan.whole(st.hello) {
		if a.buf != nil {
			// Not whole at once: while the client takes its time, what
			// came is held in memory of its size, not in a relay buffer.
			st.hello = bytes.Clone(st.hello)
			l.put(a.buf)
			a.buf = nil
		}
		return
	}
	sni, err := clientHelloName(st.hello, maxClientHello)
	if err != nil {
		l.f.p.log.Debug("tls passthrough: no ClientHello", zap.String("listener", l.f.name), zap.Stringer("client", st.remote), zap.Error(err))
		l.end(st)
		return
	}
	if st.entry != nil {
		st.entry.sni = sni
	}
	b, _ := l.f.p.pickStream(l.f.name, sni)
	if b == nil {
		l.end(st) // closed with nothing sent, as the Gateway API asks of a name no route takes
		return
	}
	// What came, the hello and anything after it, goes first.
	a.pend = st.hello
	l.connectTo(st, b)
}

// connectTo starts the stream's connect to b.
func (l *streamLoop) connectTo(st *loopStream, b *backend) {
	if b == nil {
		l.end(st)
		return
	}
	p := l.f.p
	p.stats.requests.Add(1)
	b.requests.Add(1)
	st.backend, st.set, st.dialed = b, b.set.Load(), l.now
	if st.entry != nil {
		st.entry.backend, st.entry.status = b.name, 502
	}
	l.dialNext(st)
}

// dialNext connects to the next endpoint of the stream's backend to try,
// or fails the stream when none is left.
func (l *streamLoop) dialNext(st *loopStream) {
	b := st.backend
	ep := b.pick(st.set, &st.att)
	if ep == nil {
		l.failed(st)
		return
	}
	st.att.tried(ep)
	st.ep = ep
	if !ep.ap.IsValid() || ep.tlsConf != nil {
		l.handOff(st)
		return
	}
	fd, e := rawDial(ep.ap)
	if e != 0 && e != unix.EINPROGRESS {
		l.connectFailed(st, os.NewSyscallError("connect", e))
		return
	}
	st.b = loopSide{fd: fd, st: st, peer: &st.a, writable: e == 0}
	st.state, st.deadline = stateConnect, l.now.Add(b.dialer.Timeout)
	if b.dialer.Timeout <= 0 {
		st.deadline = time.Time{}
	}
	if !l.watch(&st.b) {
		l.connectFailed(st, errors.New("epoll_ctl"))
		return
	}
	if e == 0 {
		l.connected(st)
		return
	}
	l.schedule(st)
}

// connected learns how the connect under way went (its socket is
// writable): made, the stream relays; failed, the next endpoint is tried.
func (l *streamLoop) connected(st *loopStream) {
	var soErr int32
	size := uint32(4)
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(st.b.fd), unix.SOL_SOCKET, unix.SO_ERROR, uintptr(unsafe.Pointer(&soErr)), uintptr(unsafe.Pointer(&size)), 0)
	if e == 0 && soErr != 0 {
		e = syscall.Errno(soErr)
	}
	if e != 0 {
		l.connectFailed(st, os.NewSyscallError("connect", e))
		return
	}
	took := l.now.Sub(st.dialed)
	st.backend.connectTime.Observe(took)
	st.ep.connected()
	st.state, st.deadline, st.activeAt = stateRelay, time.Time{}, l.now
	if e := st.entry; e != nil {
		e.upstream, e.endpoint, e.status = took, st.ep.addr, 200
	}
	l.schedule(st)
}

// connectFailed counts a failed connect and tries the next endpoint.
func (l *streamLoop) connectFailed(st *loopStream, err error) {
	st.ep.connectFailed()
	st.backend.connectFailures.Add(1)
	l.f.p.log.Debug("tcp upstream", zap.String("listener", l.f.name), zap.String("endpoint", st.ep.addr), zap.Error(err))
	l.unwatch(&st.b)
	l.dialNext(st)
}

// failed ends a stream no endpoint took.
func (l *streamLoop) failed(st *loopStream) {
	p := l.f.p
	p.stats.errors.Add(1)
	p.stats.failures.Add(1)
	st.backend.errors.Add(1)
	if e := st.entry; e != nil {
		e.upstream = l.now.Sub(st.dialed)
	}
	l.end(st)
}

// handOff gives the stream to the goroutine relay, for a backend the
// loop does not reach itself (a host name, or TLS to originate).
func (l *streamLoop) handOff(st *loopStream) {
	f := l.f
	p := f.p
	fd := st.a.fd
	unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(l.epfd), unix.EPOLL_CTL_DEL, uintptr(fd), 0, 0, 0)
	l.sides.del(fd)
	st.a.fd, st.ended = -1, true
	l.wheel.remove(st)
	st.a.buf, st.a.pend = nil, nil // the hello, st.hello, goes with the stream
	l.unwatch(&st.b)
	c, err := acceptedSock(fd, st.remote, nil)
	if err != nil {
		unix.Close(fd)
		l.f.streams.Done()
		p.stats.conns.Add(-1)
		return
	}
	f.mu.Lock()
	f.conns[c] = nil
	f.mu.Unlock()
	f.gp.Go(func() { f.relayFrom(c, st.backend, st.hello, st.entry) })
}

// unwatch closes s's socket, if open (which takes it out of the epoll
// set).
func (l *streamLoop) unwatch(s *loopSide) {
	if s.fd < 0 {
		return
	}
	l.sides.del(s.fd)
	unix.RawSyscall(unix.SYS_CLOSE, uintptr(s.fd), 0, 0)
	s.fd = -1
	if s.buf != nil {
		l.put(s.buf)
		s.buf, s.pend = nil, nil
	}
}

// end closes both sockets of st and accounts for it.
func (l *streamLoop) end(st *loopStream) {
	if st.ended {
		return
	}
	st.ended = true
	l.wheel.remove(st)
	in, out := st.a.moved, st.b.moved
	l.unwatch(&st.a)
	l.unwatch(&st.b)
	p := l.f.p
	p.stats.conns.Add(-1)
	if e := st.entry; e != nil {
		e.bytesIn, e.bytesOut, e.bodyOut = in, out, out
		p.access.log(e)
	}
	l.f.streams.Done()
}

// relay moves what src reads to its peer; false: the stream failed.
func (l *streamLoop) relay(src *loopSide) bool {
	dst := src.peer
	turn := 0
	for {
		if len(src.pend) > 0 {
			if !dst.writable {
				return true
			}
			n, e := rawWrite(dst.fd, src.pend)
			switch e {
			case 0:
				src.pend = src.pend[n:]
				src.moved += int64(n)
				src.st.activeAt = l.now
				if len(src.pend) == 0 && src.buf != nil {
					l.put(src.buf)
					src.buf, src.pend = nil, nil
				}
				continue
			case unix.EAGAIN:
				dst.writable = false
				return true
			}
			return false
		}
		if src.eof {
			if !src.shut && !dst.shut {
				// The peer's FIN, passed on. Once the other direction
				// has ended too the stream's close sends it.
				unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(dst.fd), unix.SHUT_WR, 0)
			}
			src.shut = true
			return true
		}
		if !src.readable {
			return true
		}
		if turn >= loopTurn {
			if st := src.st; !st.queued {
				st.queued = true
				l.again = append(l.again, st)
			}
			return true
		}
		if src.buf == nil {
			src.buf = l.get()
		}
		n, e := rawRead(src.fd, src.buf)
		switch {
		case e == unix.EAGAIN:
			src.readable = false
			l.put(src.buf)
			src.buf = nil
			return true
		case e != 0:
			return false
		case n == 0:
			src.eof = true
			l.put(src.buf)
			src.buf = nil
		default:
			src.pend = src.buf[:n]
			turn += n
			// A short read emptied the socket: the next bytes bring an
			// event (edge-triggered), unless the peer's FIN came
			// already, whose event was the last.
			src.readable = n == len(src.buf) || src.rdhup
		}
	}
}

// sweep checks the streams whose check time came (check), as of l.now.
func (l *streamLoop) sweep() {
	l.wheel.due(l.now, l.check)
}

// check ends st if past its deadline (a ClientHello or connect that took
// too long: the connect moves on to the next endpoint) or silent past the
// listener's idleTimeout, and turns TCP keep-alive on once it has lived
// keepAliveAfter; then schedules its next check.
func (l *streamLoop) check(st *loopStream) {
	now := l.now
	switch {
	case !st.deadline.IsZero() && now.After(st.deadline):
		if st.state == stateConnect {
			l.connectFailed(st, os.ErrDeadlineExceeded)
		} else {
			l.end(st)
		}
	case st.state == stateRelay && !st.keepOn && now.Sub(st.start) >= keepAliveAfter:
		st.keepOn = true
		setKeepAlive(uintptr(st.a.fd))
		setKeepAlive(uintptr(st.b.fd))
	}
	if st.state == stateRelay && !st.ended && l.f.idle > 0 && now.Sub(st.activeAt) >= l.f.idle {
		l.end(st) // silent both ways past listeners[].idleTimeout
	}
	if !st.ended {
		l.schedule(st)
	}
}

// schedule puts st in the wheel at its next check, after l.now: its
// deadline while it reads a ClientHello or connects; once it relays,
// keepAliveAfter from its start until keep-alive is on, and idleTimeout
// from when bytes last moved. One that needs none is not in it.
func (l *streamLoop) schedule(st *loopStream) {
	l.wheel.remove(st)
	var at time.Time
	switch st.state {
	case stateHello, stateConnect:
		at = st.deadline
	case stateRelay:
		if !st.keepOn {
			at = st.start.Add(keepAliveAfter)
		}
		if idle := l.f.idle; idle > 0 && (at.IsZero() || st.activeAt.Add(idle).Before(at)) {
			at = st.activeAt.Add(idle)
		}
	}
	if at.IsZero() || st.ended {
		return
	}
	st.checkAt = max(at.UnixNano(), l.now.UnixNano()+1)
	l.wheel.add(st)
}

func (l *streamLoop) get() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, loopBufSize)
}

// put keeps b for the next stream; a few are kept, as many as the loop's
// streams hold at once at most.
func (l *streamLoop) put(b []byte) {
	if len(l.free) < 64 {
		l.free = append(l.free, b[:loopBufSize])
	}
}

// rawRead reads once from the non-blocking socket fd.
func rawRead(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != unix.EINTR {
			return int(n), e
		}
	}
}

// rawWrite writes once to the non-blocking socket fd.
func rawWrite(fd int, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != unix.EINTR {
			return int(n), e
		}
	}
}

// rawDial opens a non-blocking socket and starts its connect to ap, with
// raw system calls; TCP_NODELAY is set, as nginx's stream module does.
func rawDial(ap netip.AddrPort) (int, syscall.Errno) {
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	var rsa unix.RawSockaddrAny
	var size uintptr
	family := unix.AF_INET
	if ap.Addr().Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa))
		sa.Family, sa.Addr, size = unix.AF_INET, ap.Addr().As4(), unix.SizeofSockaddrInet4
		putPort(&sa.Port, ap.Port())
	} else {
		family = unix.AF_INET6
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&rsa))
		sa.Family, sa.Addr, size = unix.AF_INET6, ap.Addr().As16(), unix.SizeofSockaddrInet6
		putPort(&sa.Port, ap.Port())
	}
	r, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	fd := int(r)
	setNoDelay(uintptr(fd))
	_, _, e = unix.RawSyscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), size)
	if e != 0 && e != unix.EINPROGRESS {
		unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
		return -1, e
	}
	return fd, e
}

// putPort stores port in a sockaddr's port field, in network byte order.
func putPort(field *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(field))
	b[0], b[1] = byte(port>>8), byte(port)
}

// bareConn is a connection a rawListener took for a stream loop: its
// descriptor, not in the runtime's poller. It is a net.Conn only to pass
// through the accept path (counted, refused over the limit: Close); the
// loop takes its descriptor.
type bareConn struct {
	fd     atomic.Int64 // -1 once taken or closed
	remote *net.TCPAddr
	local  net.Addr
}

var errBareConn = errors.New("bareConn: not readable or writable: a stream loop's")

func newBareConn(fd int, remote *net.TCPAddr, local net.Addr) *bareConn {
	c := &bareConn{remote: remote, local: local}
	c.fd.Store(int64(fd))
	return c
}

// take returns the descriptor, the caller's to close from then on.
func (c *bareConn) take() int { return int(c.fd.Swap(-1)) }

func (c *bareConn) Read([]byte) (int, error)  { return 0, errBareConn }
func (c *bareConn) Write([]byte) (int, error) { return 0, errBareConn }

// Close closes the descriptor unless it was taken.
func (c *bareConn) Close() error {
	if fd := c.take(); fd >= 0 {
		unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0)
	}
	return nil
}
func (c *bareConn) LocalAddr() net.Addr              { return c.local }
func (c *bareConn) RemoteAddr() net.Addr             { return c.remote }
func (c *bareConn) SetDeadline(time.Time) error      { return nil }
func (c *bareConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bareConn) SetWriteDeadline(time.Time) error { return nil }

// helloScan follows a ClientHello's records as they arrive, so that the
// hello is parsed once, when whole: parsing what has come at every piece
// would cost the square of its size, for a client sending it a few bytes
// at a time.
type helloScan struct {
	off  int     // where the first record not yet whole starts
	hs   int     // handshake bytes in the whole records
	head [4]byte // the handshake message's type and length
}

// whole reports whether buf, what has come so far, holds the whole
// ClientHello, or holds what readClientHello refuses: either way, time
// to parse it.
func (h *helloScan) whole(buf []byte) bool {
	for len(buf)-h.off >= 5 {
		hdr := buf[h.off : h.off+5]
		n := int(hdr[3])<<8 | int(hdr[4])
		if hdr[0] != 22 || hdr[1] >= 0x10 || n == 0 || n > maxRecord || h.off+5+n > maxClientHello {
			return true // not a hello's record: the parser says why
		}
		if len(buf) < h.off+5+n {
			return false
		}
		if h.hs < len(h.head) {
			copy(h.head[h.hs:], buf[h.off+5:h.off+5+n])
		}
		h.hs += n
		h.off += 5 + n
		if h.hs >= len(h.head) {
			body := int(h.head[1])<<16 | int(h.head[2])<<8 | int(h.head[3])
			if h.head[0] != 1 || body > maxHandshake || h.hs >= 4+body {
				return true
			}
		}
	}
	return false
}
