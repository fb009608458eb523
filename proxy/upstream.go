package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
)

// writeBufSize is the write buffer of client and upstream connections.
const writeBufSize = 4 << 10

// Upstream keep-alive settings.
const (
	// clientWriteTimeout bounds each wait to write to a client.
	clientWriteTimeout = 60 * time.Second
)

// upConn is one connection to a backend address, with its buffers.
type upConn struct {
	c       net.Conn
	rd      *h1.Reader
	bw      *bufio.Writer
	pool    *addrPool
	created time.Time
	idle    time.Time // when it was put back
	reuse   bool      // it served a request before this one
	wdl     time.Time // the write deadline last set
	fd      int       // c's descriptor (the socket's, under TLS), for alive; -1 when it has none
	tls     *tls.Conn // c, when the backend speaks TLS
	sock    *sockConn // c, when it is plain TCP
	// sendTimeout bounds each write to c (bw writes through upWriter).
	sendTimeout time.Duration
}

// upWriter is what an upConn's bw writes to: its connection, each write
// within the backend's sendTimeout from its start (nginx's
// proxy_send_timeout), so that a body streamed for longer than that
// still goes while the backend reads it.
type upWriter struct{ uc *upConn }

func (w upWriter) Write(p []byte) (int, error) {
	extendWriteDeadline(w.uc.c, &w.uc.wdl, time.Now(), w.uc.sendTimeout)
	return w.uc.c.Write(p)
}

// extendWriteDeadline is reader.extendDeadline for writes.
func extendWriteDeadline(c net.Conn, dl *time.Time, now time.Time, timeout time.Duration) {
	if dl.Sub(now) < timeout/2 {
		*dl = now.Add(timeout)
		c.SetWriteDeadline(*dl)
	}
}

// addrPool holds the idle connections to one address. It is a buffered
// channel: taking and returning need no lock of ours. The channel is made
// at the first put: of a Service of thousands of endpoints, a worker
// holds idle connections to few, and an empty pool costs no 8 KiB of
// buffer (a nil channel takes nothing and gives nothing, which every
// select of the pool's takes as empty).
type addrPool struct {
	addr     string
	size     int
	idleCh   atomic.Pointer[chan *upConn]
	lifetime time.Duration // a connection older than this is not reused; 0: no limit
	// idleTimeout: a connection unused this long is closed, not reused
	// (the backend's idleTimeout; below the common backend keep-alive
	// timeouts, and the peek before every reuse covers the shorter ones).
	idleTimeout time.Duration
	// retired is set while the endpoint is terminating or gone:
	// connections are closed instead of pooled.
	retired atomic.Bool
	// h2 are the address's HTTP/2 connections (backends[].protocol h2c
	// or h2), made at first use.
	h2 atomic.Pointer[h2Conns]
}

// h2Conns is the address's HTTP/2 connection pool, made if need be.
func (p *addrPool) h2Conns() *h2Conns {
	if c := p.h2.Load(); c != nil {
		return c
	}
	p.h2.CompareAndSwap(nil, &h2Conns{retired: p.retired.Load()})
	return p.h2.Load()
}

// reopen pools connections again, for an endpoint that serves again.
func (p *addrPool) reopen() {
	p.retired.Store(false)
	if c := p.h2.Load(); c != nil {
		c.reopen()
	}
}

func newAddrPool(addr string, size int, lifetime, idleTimeout time.Duration) *addrPool {
	return &addrPool{addr: addr, size: size, lifetime: lifetime, idleTimeout: idleTimeout}
}

// idle is the pool's channel, nil before the first put.
func (p *addrPool) idle() chan *upConn {
	if c := p.idleCh.Load(); c != nil {
		return *c
	}
	return nil
}

// idleForPut is the pool's channel, made if need be.
func (p *addrPool) idleForPut() chan *upConn {
	if c := p.idle(); c != nil {
		return c
	}
	c := make(chan *upConn, p.size)
	if p.idleCh.CompareAndSwap(nil, &c) {
		return c
	}
	return p.idle()
}

// retire stops pooling and closes the idle connections.
func (p *addrPool) retire() {
	p.retired.Store(true)
	if c := p.h2.Load(); c != nil {
		c.retire()
	}
	p.closeIdle()
}

// get returns an idle connection that is still clean, or nil. Each is
// peeked at first (a non-blocking read): one that has reached EOF, or has
// bytes that no request asked for (a backend's stray or smuggled
// response), is closed, never used: those bytes would become the next
// client's response.
func (p *addrPool) get(now time.Time) *upConn {
	idle := p.idle()
	for {
		select {
		case uc := <-idle:
			if now.Sub(uc.idle) > p.idleTimeout || !uc.alive() {
				uc.c.Close()
				continue
			}
			uc.reuse = true
			return uc
		default:
			return nil
		}
	}
}

// put returns uc to the pool, or closes it when the pool is full.
func (p *addrPool) put(uc *upConn, now time.Time) {
	if p.retired.Load() || (p.lifetime > 0 && now.Sub(uc.created) > p.lifetime) {
		uc.c.Close()
		return
	}
	uc.idle = now
	select {
	case p.idleForPut() <- uc:
		if p.retired.Load() {
			p.closeIdle() // retired meanwhile: its closeIdle may have run before this put
		}
	default:
		uc.c.Close()
	}
}

// reap closes the pooled connections idle longer than the pool's
// idleTimeout, so that they do not hold the backend's resources until the
// next request comes.
func (p *addrPool) reap(now time.Time) {
	if c := p.h2.Load(); c != nil {
		c.reap(now, p.lifetime)
	}
	idle := p.idle()
	for range len(idle) {
		select {
		case uc := <-idle:
			if now.Sub(uc.idle) > p.idleTimeout {
				uc.c.Close()
				continue
			}
			select {
			case idle <- uc: // back, with its own idle time
			default:
				uc.c.Close()
			}
		default:
			return
		}
	}
}

// closeIdle closes every pooled connection (of HTTP/2 ones, those that
// carry no stream).
func (p *addrPool) closeIdle() {
	if c := p.h2.Load(); c != nil {
		c.closeIdle()
	}
	idle := p.idle()
	for {
		select {
		case uc := <-idle:
			uc.c.Close()
		default:
			return
		}
	}
}

// dial opens a new connection to the pool's address, over TLS with
// tconf when it is set.
func (p *addrPool) dial(ctx context.Context, b *backend, tconf *tls.Config) (*upConn, error) {
	c, err := b.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, &dialError{err}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c = newSockConn(c)
	uc := &upConn{pool: p, created: time.Now(), fd: peekFD(c)}
	if tconf == nil {
		uc.sock, _ = c.(*sockConn)
	} else {
		if c, err = b.handshake(ctx, c, tconf); err != nil {
			return nil, err
		}
		uc.tls = c.(*tls.Conn)
	}
	uc.c, uc.rd, uc.sendTimeout = c, h1.NewReader(c, b.headMax), b.sendTimeout
	uc.bw = bufio.NewWriterSize(upWriter{uc}, writeBufSize)
	return uc, nil
}

// handshake runs the client side of TLS on c, a new connection, within
// the backend's connectTimeout. A failure is a failed connect: nothing
// was sent, and the next endpoint may be tried.
func (b *backend) handshake(ctx context.Context, c net.Conn, tconf *tls.Config) (net.Conn, error) {
	if t := b.dialer.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	tc := tls.Client(c, tconf)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, &dialError{fmt.Errorf("tls handshake: %w", err)}
	}
	return tc, nil
}

// peekFD returns c's descriptor, for alive, or -1. The descriptor is
// valid while c is open, and an upConn is closed only by its owner, which
// is also the only one to peek at it.
func peekFD(c net.Conn) int {
	fd := -1
	withFD(c, func(f uintptr) { fd = int(f) })
	return fd
}

// withFD calls fn with c's socket, when c has one (syscall.Conn) and it is
// open.
func withFD(c net.Conn, fn func(fd uintptr)) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		rc.Control(fn)
	}
}

// alive peeks at an idle connection without blocking: an idle upstream
// connection has nothing to say, so EOF or data means it is unusable. One
// recvfrom, without allocating: it runs before every reuse.
func (uc *upConn) alive() bool {
	if uc.fd < 0 {
		return true
	}
	if fdReadable(uc.fd) {
		return false
	}
	var b [1]byte
	if uc.tls != nil {
		// TLS may hold decrypted bytes, or whole records, that the
		// socket no longer shows: a read that may not wait returns them
		// (a timeout leaves a tls.Conn usable).
		uc.tls.SetReadDeadline(time.Unix(1, 0))
		n, err := uc.tls.Read(b[:])
		uc.tls.SetReadDeadline(time.Time{})
		return n == 0 && isTimeout(err)
	}
	return true
}

// pendingInput reports whether a client connection has bytes waiting in the
// kernel, without reading them or blocking (and regardless of deadlines).
func pendingInput(c net.Conn) bool {
	pending := false
	withFD(c, func(fd uintptr) { pending = fdPending(int(fd)) }) // at every client connection's close
	return pending
}
