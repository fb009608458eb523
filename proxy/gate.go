package proxy

import (
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// gatedListener is a listening socket whose accepting can be paused: how a
// canary takes its share of a reuseport group where BPF cannot steer
// (ipc.Accept). While it is paused Accept waits, and connections wait in
// the socket's queue for the other generation's workers, which accept on
// it meanwhile.
type gatedListener struct {
	net.Listener
	mu        sync.Mutex
	paused    bool
	resume    chan struct{} // closed when paused turns false
	closed    chan struct{}
	closeOnce sync.Once
}

func newGatedListener(ln net.Listener, paused bool) *gatedListener {
	l := &gatedListener{Listener: ln, closed: make(chan struct{}), resume: make(chan struct{})}
	if paused {
		l.paused = true
	} else {
		close(l.resume)
	}
	return l
}

// Accept waits while the listener is paused, then accepts.
func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		resume := l.resume
		l.mu.Unlock()
		select {
		case <-resume:
		case <-l.closed:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			continue // paused while waiting: setPaused woke it
		}
		return c, err
	}
}

// setPaused pauses or resumes accepting. A pause wakes an Accept waiting
// on the socket (through its deadline); an Accept already under way may
// still take one connection, which is served (the test sees this about
// once in 300 runs under -race): after it, none is taken until resumed.
func (l *gatedListener) setPaused(paused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if paused == l.paused {
		return
	}
	l.paused = paused
	d, _ := l.Listener.(interface{ SetDeadline(time.Time) error })
	if paused {
		l.resume = make(chan struct{})
		if d != nil {
			d.SetDeadline(time.Now())
		}
		return
	}
	if d != nil {
		d.SetDeadline(time.Time{})
	}
	close(l.resume)
}

// Close closes the socket and ends a waiting Accept.
func (l *gatedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// stopWaiting ends a waiting Accept, and every later one. Over a
// listener that can sweep its queue the socket stays open for sweep;
// over any other it is closed.
func (l *gatedListener) stopWaiting() {
	s, ok := l.Listener.(queueSweeper)
	if !ok {
		l.Close()
		return
	}
	l.closeOnce.Do(func() { close(l.closed) })
	s.stopWaiting()
}

// sweep takes the connections queued on the socket now, unless the
// listener is paused: those are another generation's to take.
func (l *gatedListener) sweep(handle func(net.Conn)) {
	l.mu.Lock()
	paused := l.paused
	l.mu.Unlock()
	if s, ok := l.Listener.(queueSweeper); ok && !paused {
		s.sweep(handle)
	}
}

// SetPaused applies the supervisor's pause set (ipc.Accept): per listener,
// the socket indexes not to accept on; every other socket is accepted on.
func (p *Proxy) SetPaused(paused map[string][]int) {
	p.gatesMu.Lock()
	defer p.gatesMu.Unlock()
	p.paused = paused
	for name, bySocket := range p.gates {
		for idx, g := range bySocket {
			g.setPaused(slices.Contains(paused[name], idx))
		}
	}
}

// gate wraps socket idx of listener name, paused as the last pause set
// says.
func (p *Proxy) gate(name string, idx int, ln net.Listener) net.Listener {
	p.gatesMu.Lock()
	defer p.gatesMu.Unlock()
	g := newGatedListener(ln, slices.Contains(p.paused[name], idx))
	if p.gates == nil {
		p.gates = make(map[string]map[int]*gatedListener)
	}
	if p.gates[name] == nil {
		p.gates[name] = make(map[int]*gatedListener)
	}
	p.gates[name][idx] = g
	return g
}
