package proxy

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A goPool runs every function; a goroutine that finished one takes the
// next instead of a new one starting; no more than maxIdle wait; close
// ends the waiting ones and waits for those still running.
func TestGoPool(t *testing.T) {
	p := newGoPool(2)
	var ran atomic.Int32
	var wg sync.WaitGroup
	waitIdle := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); p.idle() != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d goroutines wait, want %d", p.idle(), want)
			}
		}
	}
	// One at a time, each once the last one's goroutine waits: that one
	// goroutine serves them all (a new one each time would leave two
	// waiting).
	for i := range 100 {
		if i > 0 {
			waitIdle(1)
		}
		wg.Add(1)
		p.Go(func() { ran.Add(1); wg.Done() })
		wg.Wait()
	}
	if n := ran.Load(); n != 100 {
		t.Fatalf("%d of 100 functions ran", n)
	}
	waitIdle(1)
	// Ten at once: ten goroutines; afterwards two of them wait.
	release := make(chan struct{})
	wg.Add(10)
	for range 10 {
		p.Go(func() { wg.Done(); <-release })
	}
	wg.Wait()
	close(release)
	waitIdle(2)
	block := make(chan struct{})
	started := make(chan struct{})
	p.Go(func() { close(started); <-block })
	<-started
	closed := make(chan struct{})
	go func() { p.close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("close returned while a function still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(block)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return once the functions ended")
	}
}
