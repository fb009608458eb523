package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"sync"

	"go.uber.org/zap"
)

// tcpFrontend proxies raw TCP streams from one listener to a backend.
type tcpFrontend struct {
	name    string
	p       *Proxy
	backend *backend
	tls     *tls.Config // terminate TLS when set
	acc     acceptor
	streams sync.WaitGroup // proxied streams

	mu      sync.Mutex            // protects conns and closing
	conns   map[net.Conn]net.Conn // client to upstream (nil while dialing)
	closing bool                  // drain deadline passed: close, do not start
}

func newTCPFrontend(name string, p *Proxy, b *backend) *tcpFrontend {
	return &tcpFrontend{name: name, p: p, backend: b, conns: make(map[net.Conn]net.Conn)}
}

func (f *tcpFrontend) serve(lns []net.Listener) {
	f.acc.start(f.p, f.name, lns, func(c net.Conn) {
		if f.tls != nil {
			c = tls.Server(c, f.tls) // the handshake happens in the copy
		}
		f.mu.Lock()
		f.conns[c] = nil
		f.mu.Unlock()
		f.streams.Add(1)
		go f.proxy(c)
	})
}

// proxy copies one stream both ways, passing half-closes along, until both
// directions have ended.
func (f *tcpFrontend) proxy(c net.Conn) {
	defer f.streams.Done()
	defer func() {
		c.Close()
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		f.p.stats.conns.Add(-1)
	}()
	f.p.stats.requests.Add(1)
	f.backend.requests.Add(1)
	up, _, err := f.backend.dialStream(context.Background())
	if err != nil {
		f.p.stats.errors.Add(1)
		f.backend.errors.Add(1)
		f.p.log.Debug("tcp upstream", zap.String("listener", f.name), zap.Error(err))
		return
	}
	defer up.Close()
	f.mu.Lock()
	closing := f.closing
	f.conns[c] = up
	f.mu.Unlock()
	if closing {
		return
	}
	join(c, c, up, up)
}

func (f *tcpFrontend) stopAccepting() { f.acc.stop() }

// drain lets the streams finish; at ctx's end it closes them.
func (f *tcpFrontend) drain(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		f.streams.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		f.mu.Lock()
		f.closing = true
		for c, up := range f.conns {
			c.Close()
			if up != nil {
				up.Close()
			}
		}
		f.mu.Unlock()
		<-done
	}
}
