package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/internal/config"
)

// Upstream connection pool settings.
const (
	maxIdlePerAddress = 1024
	upstreamIdle      = 90 * time.Second
)

// backend is a set of upstream addresses balanced round robin. A failed
// connect is retried on the next address: nothing was sent, so it is safe
// for any request and any TCP stream.
type backend struct {
	name      string
	addrs     []string
	next      atomic.Uint32
	dialer    net.Dialer
	pools     []*addrPool // HTTP/1.1 keep-alive connections, one pool per address
	headMax   int
	transport *http.Transport        // the HTTP/2 frontend's way upstream
	proxy     *httputil.ReverseProxy // the HTTP/2 frontend's proxy
}

// dialError marks a failure to connect, before anything was sent upstream.
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func newBackend(bc config.Backend, headMax int) *backend {
	b := &backend{
		name:    bc.Name,
		addrs:   bc.Static,
		dialer:  net.Dialer{Timeout: bc.ConnectTimeout.Std(), KeepAlive: 30 * time.Second},
		headMax: headMax,
	}
	for _, a := range bc.Static {
		b.pools = append(b.pools, newAddrPool(a, maxIdlePerAddress))
	}
	b.transport = &http.Transport{
		DialContext:           b.dialAddr,
		MaxIdleConns:          0, // no global limit; per address below
		MaxIdleConnsPerHost:   maxIdlePerAddress,
		IdleConnTimeout:       upstreamIdle,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
	}
	return b
}

func (b *backend) dialAddr(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := b.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, &dialError{err}
	}
	return c, nil
}

// first returns where the next request's walk over the addresses starts.
func (b *backend) first() int {
	return int(b.next.Add(1)-1) % len(b.addrs)
}

// dial connects to the next address in turn, trying each once.
func (b *backend) dial(ctx context.Context) (net.Conn, error) {
	start := b.first()
	var errs []error
	for i := range b.addrs {
		addr := b.addrs[(start+i)%len(b.addrs)]
		c, err := b.dialAddr(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("backend %s: %w", b.name, errors.Join(errs...))
}

// conn returns a connection for one request: a pooled one to the next
// address in turn, else a new one; a failed connect moves on to the next
// address. fresh skips the pools.
func (b *backend) conn(ctx context.Context, fresh bool) (*upConn, error) {
	start := b.first()
	now := time.Now()
	var err error
	for i := range b.pools {
		p := b.pools[(start+i)%len(b.pools)]
		if !fresh {
			if uc := p.get(now); uc != nil {
				return uc, nil
			}
		}
		var uc *upConn
		if uc, err = p.dial(ctx, &b.dialer, b.headMax); err == nil {
			return uc, nil
		}
	}
	return nil, fmt.Errorf("backend %s: %w", b.name, err)
}

// RoundTrip sends req to the next address in turn, moving on to the next
// one when the connection fails before anything was sent.
func (b *backend) RoundTrip(req *http.Request) (*http.Response, error) {
	var body *onceBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &onceBody{rc: req.Body}
	}
	start := b.first()
	var err error
	for i := range b.addrs {
		r := *req
		u := *req.URL
		u.Host = b.addrs[(start+i)%len(b.addrs)]
		r.URL = &u
		if body != nil {
			r.Body = body
		}
		var resp *http.Response
		resp, err = b.transport.RoundTrip(&r)
		if err == nil {
			return resp, nil
		}
		var de *dialError
		if !errors.As(err, &de) || (body != nil && body.read.Load()) || req.Context().Err() != nil {
			break
		}
	}
	if body != nil {
		body.rc.Close()
	}
	return nil, err
}

// onceBody keeps a request body open across connect retries: the transport
// closes the body of a request it could not send, but nothing was read from
// it, so the next attempt can still send it.
type onceBody struct {
	rc   io.ReadCloser
	read atomic.Bool
}

func (b *onceBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.rc.Read(p)
}

func (b *onceBody) Close() error { return nil } // the server closes the real body

func (b *backend) close() {
	b.transport.CloseIdleConnections()
	for _, p := range b.pools {
		p.closeIdle()
	}
}
