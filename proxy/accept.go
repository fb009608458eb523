package proxy

import (
	"errors"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
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
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				p.log.Error("accept", zap.String("listener", name), zap.Error(err))
				time.Sleep(10 * time.Millisecond) // EMFILE and the like
			}
			continue
		}
		p.stats.accepted.Add(1)
		p.stats.conns.Add(1)
		handle(c)
	}
}
