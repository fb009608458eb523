package proxy

import (
	"sync"
	"sync/atomic"
)

// goPool runs functions on goroutines that it keeps between runs, up to
// maxIdle of them waiting. A new goroutine starts with a small stack that
// a connection's or a stream's work grows several times over, each growth
// a copy of the stack (measured: about a fifth of the worker's own CPU
// for HTTP/2 streams and new connections); a kept one has grown already.
// The garbage collector shrinks the stacks of goroutines that wait long.
type goPool struct {
	work    chan func()
	idle    atomic.Int32
	maxIdle int32
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func newGoPool(maxIdle int) *goPool {
	return &goPool{work: make(chan func()), maxIdle: int32(maxIdle), stop: make(chan struct{})}
}

// Go runs fn on a waiting goroutine, or a new one.
func (p *goPool) Go(fn func()) {
	select {
	case p.work <- fn:
		return
	default:
	}
	p.wg.Add(1)
	go p.run(fn)
}

func (p *goPool) run(fn func()) {
	defer p.wg.Done()
	for {
		fn()
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		select {
		case fn = <-p.work:
			p.idle.Add(-1)
		case <-p.stop:
			p.idle.Add(-1)
			return
		}
	}
}

// close ends the waiting goroutines, and waits for every one (those still
// running end when their function returns).
func (p *goPool) close() {
	p.once.Do(func() { close(p.stop) })
	p.wg.Wait()
}
