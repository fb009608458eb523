package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countedConn counts the writes made to it.
type countedConn struct {
	net.Conn
	writes atomic.Int32
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// What one goroutine writes in its turn (x/net's client: a request's
// HEADERS, then its DATA, each flushed) reaches the backend in one write.
func TestTurnConnJoinsATurnsWrites(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a, b := net.Pipe()
	defer b.Close()
	cc := &countedConn{Conn: a}
	tc := newTurnConn(cc, time.Second)
	got := make(chan []byte, 1)
	go func() {
		p := make([]byte, 64)
		n, _ := io.ReadAtLeast(b, p, len("HEADERS DATA trailers"))
		got <- p[:n]
	}()
	for _, s := range []string{"HEADERS ", "DATA ", "trailers"} {
		if _, err := tc.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if p := <-got; string(p) != "HEADERS DATA trailers" {
		t.Fatalf("the backend read %q", p)
	}
	if n := cc.writes.Load(); n != 1 {
		t.Errorf("%d writes, want 1", n)
	}
	tc.Close()
}

// Writers taking turns with the flusher, and writes past turnConnMax that
// are sent at once: the backend reads every byte, in order.
func TestTurnConnKeepsOrder(t *testing.T) {
	a, b := net.Pipe()
	tc := newTurnConn(a, time.Minute)
	// What Close sends is bounded by a second: on a machine loaded enough
	// (CI beside another job), the last 66 KB through net.Pipe took longer
	// and were cut. This test is about order: no bound it can meet late.
	tc.grace = time.Minute
	var want bytes.Buffer
	read := make(chan []byte, 1)
	go func() {
		p, _ := io.ReadAll(b)
		read <- p
	}()
	var mu sync.Mutex // one writer at a time, as x/net's write lock
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				p := bytes.Repeat([]byte{byte('a' + w)}, 1+(i*997)%(turnConnMax/8))
				mu.Lock()
				want.Write(p)
				if _, err := tc.Write(p); err != nil {
					t.Error(err)
				}
				mu.Unlock()
				if i%7 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Wait()
	if err := tc.Close(); err != nil {
		t.Fatal(err)
	}
	if p := <-read; !bytes.Equal(p, want.Bytes()) {
		t.Fatalf("the backend read %d bytes, not the %d written in their order", len(p), want.Len())
	}
}

// A failed write fails every later one (x/net's writer is sticky too),
// and Close still returns with the flusher ended.
func TestTurnConnFailureSticks(t *testing.T) {
	a, b := net.Pipe()
	b.Close()
	tc := newTurnConn(a, time.Second)
	tc.Write([]byte("lost"))
	deadline := time.Now().Add(5 * time.Second)
	var err error
	for err == nil && time.Now().Before(deadline) {
		_, err = tc.Write([]byte("x"))
		runtime.Gosched()
	}
	if !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after the peer closed: %v, want io.ErrClosedPipe", err)
	}
	tc.Close()
	select {
	case <-tc.done:
	default:
		t.Fatal("the flusher still runs after Close")
	}
	if _, err := tc.Write([]byte("x")); err == nil {
		t.Error("a write after Close succeeded")
	}
}

// What is held when the connection closes (x/net's last GOAWAY or
// RST_STREAM) is sent before the close.
func TestTurnConnCloseSendsWhatIsHeld(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a, b := net.Pipe()
	tc := newTurnConn(a, time.Second)
	read := make(chan []byte, 1)
	go func() {
		p, _ := io.ReadAll(b)
		read <- p
	}()
	tc.Write([]byte("GOAWAY"))
	tc.Close() // before the flusher's turn
	if p := <-read; string(p) != "GOAWAY" {
		t.Fatalf("the backend read %q before the close, want GOAWAY", p)
	}
}
