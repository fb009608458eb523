package proxy

import (
	"net"
	"runtime"
	"sync"
	"time"
)

// turnConnMax is what a turnConn holds before a write sends it at once.
const turnConnMax = 256 << 10

// turnConn is a backend's HTTP/2 connection whose writes wait for the end
// of the writer's turn, as proxy/h2's flushSoon does for clients: x/net's
// client flushes a request's HEADERS and its DATA apart (two writes a
// unary gRPC call, each with two deadline updates), and every
// WINDOW_UPDATE on its own. Write keeps the bytes and wakes the
// connection's flusher, which yields once to the back of the run queue
// before it sends: with a worker's single processor, whatever the
// goroutines that could run write meanwhile leaves in one write.
//
// Its own writes are bounded by timeout (the backend's sendTimeout); the
// deadlines x/net sets around its writes are ignored, since they would
// bound the wrong write. A failed write fails every later one, as x/net's
// sticky writer does; what is held when the connection closes is sent
// first, within a second.
type turnConn struct {
	net.Conn
	timeout time.Duration
	// grace bounds the write, at Close, of what is held (a second;
	// tests that are about order, not time, lengthen it).
	grace time.Duration

	wmu   sync.Mutex // held while writing to Conn: in order, one at a time
	spare []byte     // the buffer not in use, wmu held
	wdl   time.Time  // the write deadline set, wmu held

	mu     sync.Mutex // protects the fields below
	buf    []byte     // written, not sent yet
	queued bool       // the flusher was woken for buf
	closed bool
	err    error // the first failed write, or net.ErrClosed once closed

	wake chan struct{} // wakes run; closed by Close
	done chan struct{} // closed when run returns
}

// newTurnConn wraps c; Close ends its flusher.
func newTurnConn(c net.Conn, timeout time.Duration) *turnConn {
	tc := &turnConn{Conn: c, timeout: timeout, grace: time.Second, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go tc.run()
	return tc
}

// Write keeps p for the flusher, or sends everything held at once when
// that reaches turnConnMax (a backend slow to read then slows the writer,
// as a plain connection would).
func (c *turnConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if err := c.err; err != nil {
		c.mu.Unlock()
		return 0, err
	}
	c.buf = append(c.buf, p...)
	if len(c.buf) >= turnConnMax {
		c.mu.Unlock()
		return len(p), c.flush()
	}
	if !c.queued {
		c.queued = true
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	return len(p), nil
}

// run is the flusher.
func (c *turnConn) run() {
	defer close(c.done)
	for range c.wake {
		// A goroutine woken runs before the others that can run: yield
		// once, so that they write first.
		runtime.Gosched()
		c.flush()
	}
}

// flush sends what is held.
func (c *turnConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	p, err := c.buf, c.err
	c.buf, c.queued = c.spare[:0], false
	c.mu.Unlock()
	if err != nil || len(p) == 0 {
		c.spare = p[:0]
		return err
	}
	if c.timeout > 0 {
		if now := time.Now(); c.wdl.Sub(now) < c.timeout/2 {
			c.wdl = now.Add(c.timeout)
			c.Conn.SetWriteDeadline(c.wdl)
		}
	}
	_, err = c.Conn.Write(p)
	if cap(p) <= turnConnMax {
		c.spare = p[:0]
	} else {
		c.spare = nil // a burst's buffer is not kept
	}
	if err != nil {
		c.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
	}
	return err
}

// SetWriteDeadline is ignored: the flusher bounds its writes itself.
func (c *turnConn) SetWriteDeadline(time.Time) error { return nil }

// SetDeadline sets the read deadline only (see SetWriteDeadline).
func (c *turnConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

// Close sends what is held (a GOAWAY, a RST_STREAM) after the write
// under way, if any, both within a second; then closes the connection and
// waits for the flusher to end.
func (c *turnConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	// What is held is taken now, Write and the flusher fail from now on;
	// a write under way took its bytes earlier, so these go after it.
	p, err := c.buf, c.err
	c.buf, c.err = nil, net.ErrClosed
	close(c.wake)
	c.mu.Unlock()
	c.Conn.SetWriteDeadline(time.Now().Add(c.grace)) // bounds a write under way too
	if err == nil && len(p) > 0 {
		c.wmu.Lock()
		c.Conn.Write(p)
		c.wmu.Unlock()
	}
	err = c.Conn.Close()
	<-c.done
	return err
}
