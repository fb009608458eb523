package proxy

import (
	"net"
	"testing"
	"time"
)

// A paused listener takes no connection, even one Accept was already
// waiting for; the connection waits in the socket's queue and is taken
// once resumed. Close ends a paused Accept.
func TestGatedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := newGatedListener(ln, false)
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := g.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	// Let Accept wait on the socket, then pause it.
	time.Sleep(10 * time.Millisecond)
	g.setPaused(true)
	// The Accept that was already waiting may still take one connection
	// (it raced the pause; it is served, never dropped); after it none.
	for tries := 0; ; tries++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		select {
		case sc, ok := <-accepted:
			if !ok {
				t.Fatal("Accept ended while paused")
			}
			if tries > 0 {
				t.Fatal("a paused listener accepted a second connection")
			}
			sc.Close()
			continue
		case <-time.After(100 * time.Millisecond):
		}
		break
	}
	g.setPaused(false)
	select {
	case sc := <-accepted:
		sc.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the queued connection was not accepted after resume")
	}
	g.setPaused(true)
	g.Close()
	select {
	case _, ok := <-accepted:
		if ok {
			t.Fatal("accepted after close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a paused Accept")
	}
}
