package proxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// errClientGone ends the upstream work of a request whose client went
// away: its HTTP/2 stream was reset or its connection closed.
var errClientGone = errors.New("the client went away")

// statusClientGone is the status the access log and the metrics give a
// request whose client went away before its response: nginx's 499.
const statusClientGone = 499

// upstreamWork is the upstream side of the request a client connection
// (h1conn) or an HTTP/2 stream (h2exchange) is serving, which the client's
// side can end at once: when the stream is reset or its connection ends
// (package h2's OnReset), when an HTTP/1.1 client closes its connection
// while its request is upstream (Proxy.watchClients). Ending it cancels a
// dial under way, interrupts the upstream connection in use (its owner
// then closes it: one cut mid-request is never pooled), and makes sure no
// other attempt follows. This is nginx's proxy_ignore_client_abort off.
type upstreamWork struct {
	mu      sync.Mutex // protects what follows
	aborted bool
	up      *upConn            // the upstream connection in use
	cancel  context.CancelFunc // the dial's, while one runs

	// For watchClients (HTTP/1.1 only): the client's connection while a
	// request is upstream (inflight), the request's number on it, and
	// the number the watcher last saw in flight.
	client   net.Conn
	inflight bool
	seq      uint64
	seen     uint64
	watcher  *clientWatcher // counts the HTTP/1.1 requests upstream; nil: none
}

// clientWatcher lets watchClients sleep while no HTTP/1.1 request is
// upstream: an idle worker is not woken ten times a second, nor made to
// look over its idle connections, for nothing.
type clientWatcher struct {
	upstream atomic.Int64  // HTTP/1.1 requests upstream now
	wake     chan struct{} // one buffered: a request went upstream while none was
	scans    atomic.Int64  // looks over the connections, for tests
}

func newClientWatcher() *clientWatcher {
	return &clientWatcher{wake: make(chan struct{}, 1)}
}

// add counts a request going upstream, and wakes the watcher if it was
// the only one.
func (cw *clientWatcher) add() {
	if cw.upstream.Add(1) == 1 {
		select {
		case cw.wake <- struct{}{}:
		default:
		}
	}
}

// done counts a request back from upstream.
func (cw *clientWatcher) done() { cw.upstream.Add(-1) }

// begin readies w for a request of client (nil for an HTTP/2 stream, whose
// connection watches itself).
func (w *upstreamWork) begin(client net.Conn) {
	w.mu.Lock()
	w.aborted, w.up, w.client = false, nil, client
	w.inflight = client != nil
	w.seq++
	w.mu.Unlock()
	if client != nil && w.watcher != nil {
		w.watcher.add()
	}
}

// end ends the request's upstream work, and reports whether it was
// aborted.
func (w *upstreamWork) end() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight && w.watcher != nil {
		w.watcher.done()
	}
	w.inflight, w.client, w.up = false, nil, nil
	return w.aborted
}

// abort ends the upstream work: the dial under way is cancelled, the
// connection in use interrupted. It never blocks (package h2 calls it under
// its connection's lock).
func (w *upstreamWork) abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abortLocked()
}

func (w *upstreamWork) abortLocked() {
	w.aborted = true
	if w.cancel != nil {
		w.cancel()
	}
	if w.up != nil {
		w.up.c.SetDeadline(time.Unix(1, 0))
	}
}

// isAborted reports whether the work was aborted.
func (w *upstreamWork) isAborted() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.aborted
}

// using records the upstream connection in use (nil: none any more), and
// reports whether the work goes on.
func (w *upstreamWork) using(uc *upConn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.up = uc
	return !w.aborted
}

// dialContext is the context of a dial for w, cancelled by abort, and the
// function that lets go of it once the dial is done.
func (w *upstreamWork) dialContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	if w.aborted {
		cancel()
	} else {
		w.cancel = cancel
	}
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		cancel()
	}
}

// clientCheckEvery is how often watchClients looks at the HTTP/1.1
// clients whose request is upstream. A client that closes its connection
// has its upstream work ended within one to two of these.
const clientCheckEvery = 100 * time.Millisecond

// watchClients ends the upstream work of HTTP/1.1 requests whose client
// has closed its connection, until Drain. An HTTP/1.1 connection is read
// only between requests, so nothing else notices a client that leaves
// while its request waits on a slow backend; nginx learns it from epoll
// (EPOLLRDHUP), baton looks, every clientCheckEvery, at the requests that
// were upstream at the previous look: a request served faster costs no
// system call. A client counts as gone, as in nginx, once it has sent its
// FIN or reset the connection, whatever it sent before. While no request
// is upstream it sleeps until one goes there.
func (p *Proxy) watchClients() {
	tick := time.NewTicker(clientCheckEvery)
	defer tick.Stop()
	var slow []*h1conn
	for {
		select {
		case <-tick.C:
		case <-p.stopReaper:
			return
		}
		if p.clients.upstream.Load() == 0 {
			tick.Stop()
			select {
			case <-p.clients.wake:
			case <-p.stopReaper:
				return
			}
			tick.Reset(clientCheckEvery)
			continue
		}
		p.clients.scans.Add(1)
		for _, f := range p.https {
			slow = f.slowRequests(slow[:0])
			for _, hc := range slow {
				hc.work.abortIfClientGone()
			}
		}
		clear(slow)
	}
}

// slowRequests appends the connections whose request was upstream at the
// last look and still is (the same request) to dst.
func (f *httpFrontend) slowRequests(dst []*h1conn) []*h1conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	for hc := range f.live {
		w := &hc.work
		w.mu.Lock()
		if w.inflight && !w.aborted {
			if w.seen == w.seq {
				dst = append(dst, hc)
			}
			w.seen = w.seq
		}
		w.mu.Unlock()
	}
	return dst
}

// abortIfClientGone aborts w when the request it serves is still upstream
// and its client has closed its connection.
func (w *upstreamWork) abortIfClientGone() {
	w.mu.Lock()
	c, seq := w.client, w.seq
	w.mu.Unlock()
	if c == nil || !peerClosed(c) {
		return
	}
	w.mu.Lock()
	if w.inflight && w.seq == seq {
		w.abortLocked()
	}
	w.mu.Unlock()
}

// tcpEstablished is TCP_ESTABLISHED of linux/tcp_states.h.
const tcpEstablished = 1

// peerClosed reports whether the peer of c, a client connection, has
// closed its side or reset the connection: its TCP state is no longer
// ESTABLISHED (CLOSE_WAIT after its FIN, CLOSE after a reset), or, on a
// socket without TCP_INFO, a peek finds the end of the input.
func peerClosed(c net.Conn) bool {
	for {
		nc, ok := c.(interface{ NetConn() net.Conn }) // TLS, PROXY protocol
		if !ok {
			break
		}
		c = nc.NetConn()
	}
	closed := false
	withFD(c, func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			closed = info.State != tcpEstablished
			return
		}
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		closed = err == nil && n == 0
	})
	return closed
}
