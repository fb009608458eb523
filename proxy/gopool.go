package proxy

import "sync"

// goPool runs functions on goroutines that it keeps between runs, up to
// maxIdle of them waiting. A new goroutine starts with a small stack that
// a connection's or a stream's work grows several times over, each growth
// a copy of the stack (measured: about a fifth of the worker's own CPU
// for HTTP/2 streams and new connections); a kept one has grown already.
// The garbage collector shrinks the stacks of goroutines that wait long.
type goPool struct {
	mu      sync.Mutex
	waiting []chan func() // the waiting goroutines' hand-in, the latest last
	closed  bool
	maxIdle int
	wg      sync.WaitGroup
}

func newGoPool(maxIdle int) *goPool { return &goPool{maxIdle: maxIdle} }

// Go runs fn on a waiting goroutine, the one that waited least (its stack
// and caches the warmest), or a new one. A goroutine counts as waiting
// only once it can take fn: its hand-in is buffered, so Go never blocks
// and never starts a goroutine while one waits. (With an unbuffered
// channel, a goroutine between "I wait" and its receive made Go start
// another: TestGoPool failed on it in CI.)
func (p *goPool) Go(fn func()) {
	p.mu.Lock()
	if n := len(p.waiting); n > 0 {
		in := p.waiting[n-1]
		p.waiting[n-1] = nil
		p.waiting = p.waiting[:n-1]
		p.mu.Unlock()
		in <- fn
		return
	}
	p.mu.Unlock()
	p.wg.Add(1)
	go p.run(fn)
}

func (p *goPool) run(fn func()) {
	defer p.wg.Done()
	in := make(chan func(), 1)
	for fn != nil {
		fn()
		p.mu.Lock()
		if p.closed || len(p.waiting) >= p.maxIdle {
			p.mu.Unlock()
			return
		}
		p.waiting = append(p.waiting, in)
		p.mu.Unlock()
		fn = <-in // nil: the pool closed
	}
}

// idle reports how many goroutines wait (for tests).
func (p *goPool) idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting)
}

// close ends the waiting goroutines, and waits for every one (those still
// running end when their function returns).
func (p *goPool) close() {
	p.mu.Lock()
	p.closed = true
	for _, in := range p.waiting {
		in <- nil
	}
	p.waiting = nil
	p.mu.Unlock()
	p.wg.Wait()
}
