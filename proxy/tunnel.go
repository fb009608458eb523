package proxy

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
)

// tunnel copies both ways between a client and an upstream connection
// after a protocol switch (WebSocket), passing half-closes along, until
// both directions end.
func tunnel(client net.Conn, cr *h1.Reader, up net.Conn, ur *h1.Reader, spawn func(func())) {
	cr.SetDeadline(time.Time{})
	ur.SetDeadline(time.Time{})
	client.SetWriteDeadline(time.Time{})
	up.SetWriteDeadline(time.Time{})
	// The readers hold what came after the heads, then read on.
	join(client, cr, up, ur, spawn)
}

// join copies a's input (read from ar) to b and b's (from br) to a,
// passing each half-close along, until both directions have ended. The
// first direction runs in a goroutine that spawn starts (a pool's: a new
// one's stack would grow on every stream), which join waits for.
func join(a net.Conn, ar io.Reader, b net.Conn, br io.Reader, spawn func(func())) (aToB, bToA int64) {
	done := make(chan struct{})
	spawn(func() {
		defer close(done)
		aToB = relay(b, ar)
		closeWrite(b)
	})
	bToA = relay(a, br)
	closeWrite(a)
	<-done
	return aToB, bToA
}

// relayBufs holds the relays' buffers between streams: a short stream
// (connect, one message, close) would otherwise allocate and clear 64 KiB.
var relayBufs = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}

const relayBufSize = 32 << 10

// relay copies src to dst with reads and writes, as nginx's stream module
// does, through each side's own Read and Write (a sockConn's): io.Copy
// would let a TCP connection splice, or write with net.TCPConn's Write,
// which for the small messages of most streams costs more system calls.
func relay(dst io.Writer, src io.Reader) int64 {
	buf := relayBufs.Get().(*[]byte)
	n, _ := io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *buf)
	relayBufs.Put(buf)
	return n
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}
