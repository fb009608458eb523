package proxy

import (
	"net"
	"sync"

	"github.com/baton-proxy/baton/internal/accept"
)

// acceptor runs a frontend's accept loops, one per listener, until the
// listeners close.
type acceptor struct {
	lns    []net.Listener
	handle func(net.Conn) // counts, then hands over
	wg     sync.WaitGroup
}

// queueSweeper is a listener whose Accept can be ended while its socket
// stays open, so that the connections queued on it are taken before it
// closes.
type queueSweeper interface {
	// stopWaiting ends a waiting Accept, and every later one, with
	// net.ErrClosed.
	stopWaiting()
	// sweep hands the connections queued now to handle, without
	// waiting. Only once the accept loop has returned.
	sweep(handle func(net.Conn))
}

// start accepts on every listener of lns and hands each connection to
// handle, counting it.
func (a *acceptor) start(p *Proxy, name string, lns []net.Listener, handle func(net.Conn)) {
	a.lns = lns
	a.handle = func(c net.Conn) {
		p.stats.accepted.Add(1)
		if n := p.stats.conns.Add(1); p.maxConns > 0 && n > p.maxConns { // 0: no limit (a Proxy not from New)
			p.stats.conns.Add(-1)
			p.refuse(name, c)
			return
		}
		handle(c)
	}
	for _, ln := range lns {
		a.wg.Go(func() { accept.Loop(ln, p.log, name, a.handle) })
	}
}

// stop ends the accept loops and closes the listeners. Usually the
// sockets stay open in the supervisor and the next generation; only this
// worker stops taking connections from them. With sweep they are closing
// for good (baton stops, and the supervisor has closed its copies): the
// connections the kernel has already queued on a socket are taken and
// served before it closes, since closing a listening socket resets them
// (the client sees its connection accepted, then reset), while a
// connection that comes after the close is refused, which a client or a
// load balancer can act on.
func (a *acceptor) stop(sweep bool) {
	for _, ln := range a.lns {
		if s, ok := ln.(queueSweeper); ok && sweep {
			s.stopWaiting()
		} else {
			ln.Close()
		}
	}
	a.wg.Wait()
	if !sweep {
		return
	}
	for _, ln := range a.lns {
		if s, ok := ln.(queueSweeper); ok {
			s.sweep(a.handle)
		}
		ln.Close()
	}
}
