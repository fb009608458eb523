package proxy

import (
	"io"
	"net"
	"time"

	"github.com/baton-proxy/baton/proxy/h1"
)

// tunnel copies both ways between a client and an upstream connection
// after a protocol switch (WebSocket), passing half-closes along, until
// both directions end.
func tunnel(client net.Conn, cr *h1.Reader, up net.Conn, ur *h1.Reader) {
	cr.SetDeadline(time.Time{})
	ur.SetDeadline(time.Time{})
	client.SetWriteDeadline(time.Time{})
	up.SetWriteDeadline(time.Time{})
	// The readers hold what came after the heads, then read on.
	join(client, cr, up, ur)
}

// join copies a's input (read from ar) to b and b's (from br) to a,
// passing each half-close along, until both directions have ended.
func join(a net.Conn, ar io.Reader, b net.Conn, br io.Reader) (aToB, bToA int64) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		aToB, _ = io.Copy(b, ar)
		closeWrite(b)
	}()
	bToA, _ = io.Copy(a, br)
	closeWrite(a)
	<-done
	return aToB, bToA
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}
