// Package logsink is a log destination that never blocks its callers.
//
// Lines go into a bounded queue that one goroutine writes out. When the
// destination does not keep up (a pipe nobody reads, a stalled terminal),
// the queue fills and further lines are dropped and counted, instead of
// blocking the supervisor's loop or a worker's request path in a write.
// Once a write succeeds again, a line says how many were dropped. A
// destination that is gone (EPIPE) drops everything, counted, and is not
// fatal.
package logsink

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLines is the queue's length, in lines: a burst of this many is
// absorbed while the destination catches up.
const DefaultLines = 1024

// Sink is a zapcore.WriteSyncer that never blocks.
type Sink struct {
	out     io.Writer
	lines   chan []byte
	dropped atomic.Uint64 // lines dropped, ever
	pending atomic.Int64  // lines queued and not yet written
	once    sync.Once
	done    chan struct{} // closed by Close; the writer then ends
	exited  chan struct{} // closed when the writer has ended
}

// closeWait bounds Close's wait for the writer to end once the queue is
// written out (or given up on): a write in progress may never return.
const closeWait = 100 * time.Millisecond

// New starts a sink writing to out, with a queue of n lines.
func New(out io.Writer, n int) *Sink {
	s := &Sink{out: out, lines: make(chan []byte, n), done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(s.exited)
		s.run()
	}()
	return s
}

// Write queues a copy of p, one log line; it drops it when the queue is
// full. It never fails and never blocks.
func (s *Sink) Write(p []byte) (int, error) {
	select {
	case s.lines <- append([]byte(nil), p...):
		s.pending.Add(1)
	default:
		s.dropped.Add(1)
	}
	return len(p), nil
}

// Dropped returns how many lines were dropped so far.
func (s *Sink) Dropped() uint64 { return s.dropped.Load() }

// Sync waits for the queue to be written out, for up to a second, and
// gives up sooner when the destination makes no progress for 100ms (a
// stalled pipe must not hold up an exit).
func (s *Sink) Sync() error {
	deadline := time.Now().Add(time.Second)
	last, lastMove := s.pending.Load(), time.Now()
	for n := last; n > 0 && time.Now().Before(deadline); n = s.pending.Load() {
		if n != last {
			last, lastMove = n, time.Now()
		} else if time.Since(lastMove) > 100*time.Millisecond {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// Close writes out what it can within a second, then stops the writer. It
// never waits on the destination for longer than that: a writer stuck in
// a write that the destination does not take (a pipe nobody reads) is
// left to end with the process, so that an exit is never held up by a
// log line.
func (s *Sink) Close() error {
	s.Sync()
	s.once.Do(func() { close(s.done) })
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-s.exited:
	case <-t.C:
	}
	return nil
}

// run writes queued lines until Close. After drops, the first line that
// goes through is preceded by one saying how many were lost.
func (s *Sink) run() {
	var reported uint64
	for {
		select {
		case p := <-s.lines:
			if d := s.dropped.Load(); d > reported {
				msg := fmt.Sprintf("{\"level\":\"warn\",\"logger\":\"log\",\"msg\":\"log lines dropped: the log destination did not keep up\",\"dropped\":%d,\"droppedTotal\":%d}\n", d-reported, d)
				if _, err := s.out.Write([]byte(msg)); err == nil {
					reported = d
				}
			}
			if _, err := s.out.Write(p); err != nil {
				s.dropped.Add(1) // gone (EPIPE) or failing: counted, not fatal
			}
			s.pending.Add(-1)
		case <-s.done:
			return
		}
	}
}
