package proxy

import (
	"net"
	"sync"

	"github.com/baton-proxy/baton/internal/accept"
)

// acceptor runs a frontend's accept loops, one per listener, until the
// listeners close.
type acceptor struct {
	lns []net.Listener
	wg  sync.WaitGroup
}

// start accepts on every listener of lns and hands each connection to
// handle, counting it.
func (a *acceptor) start(p *Proxy, name string, lns []net.Listener, handle func(net.Conn)) {
	a.lns = lns
	for _, ln := range lns {
		a.wg.Go(func() { acceptLoop(p, name, ln, handle) })
	}
}

// stop closes the listeners and waits for the loops. The sockets stay open
// in the supervisor and the next generation; only this worker stops taking
// connections from them.
func (a *acceptor) stop() {
	for _, ln := range a.lns {
		ln.Close()
	}
	a.wg.Wait()
}

func acceptLoop(p *Proxy, name string, ln net.Listener, handle func(net.Conn)) {
	accept.Loop(ln, p.log, name, func(c net.Conn) {
		p.stats.accepted.Add(1)
		p.stats.conns.Add(1)
		handle(c)
	})
}
