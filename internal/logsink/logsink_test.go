package logsink

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallWriter blocks every write until released, as a pipe nobody reads.
type stallWriter struct {
	mu      sync.Mutex
	release chan struct{}
	buf     bytes.Buffer
}

func (w *stallWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *stallWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestWriteNeverBlocksAndCountsDrops(t *testing.T) {
	out := &stallWriter{release: make(chan struct{})}
	s := New(out, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			s.Write([]byte("line " + strings.Repeat("x", i%50) + "\n"))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked on a stalled destination")
	}
	if d := s.Dropped(); d < 1000-9 {
		t.Fatalf("dropped %d of 1000 lines with a queue of 8 and a stalled writer", d)
	}
	close(out.release)
	s.Sync() // the queue drains once the destination moves
	s.Write([]byte("after\n"))
	s.Close()
	got := out.String()
	if !strings.Contains(got, `"msg":"log lines dropped`) || !strings.HasSuffix(got, "after\n") {
		t.Fatalf("after the stall the destination got %q; want the drop report, then the lines", got)
	}
}

// Close returns although the destination takes nothing (a pipe nobody
// reads): an exit is never held up by a log write (issue 20, problem 3:
// SIGTERM waited for someone to read the supervisor's stderr).
func TestCloseDoesNotWaitOnAStuckDestination(t *testing.T) {
	out := &stallWriter{release: make(chan struct{})}
	defer close(out.release)
	s := New(out, 8)
	s.Write([]byte("the line in the stuck write\n"))
	s.Write([]byte("a line still queued\n"))
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited on a destination that takes nothing")
	}
}
