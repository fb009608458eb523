package route

import (
	"net/netip"
	"sync"
	"time"
)

// RateLimit bounds the requests a client (by its address) sends a rule:
// Rate a second, with bursts of Burst more (nginx's limit_req with burst
// and nodelay, as ingress-nginx's limit-rps and limit-rpm set it). The
// requests beyond it are answered 503 (ingress-nginx's
// limit-req-status-code). Each worker keeps its own count: a client whose
// connections land on several workers may send up to that many times the
// rate.
type RateLimit struct {
	Rate  float64 `json:",omitzero"` // requests a second
	Burst int     `json:",omitzero"`
}

// limiter is a rule's token buckets, one per client address. Buckets of
// clients idle for a minute are dropped as new ones come.
type limiter struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[netip.Addr]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(l *RateLimit) *limiter {
	return &limiter{rate: l.Rate, burst: float64(l.Burst) + 1, buckets: make(map[netip.Addr]*bucket)}
}

// limiterIdle is how long a client's bucket is kept after its last
// request; sweepEvery how often the buckets are swept, at most.
const (
	limiterIdle = time.Minute
	sweepEvery  = 10 * time.Second
)

// allow takes a token of client's bucket at now, and reports whether
// there was one.
func (l *limiter) allow(client netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > sweepEvery {
		for a, b := range l.buckets {
			if now.Sub(b.last) > limiterIdle {
				delete(l.buckets, a)
			}
		}
		l.swept = now
	}
	b := l.buckets[client]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[client] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Allow reports whether a request of client's may go on under c's rate
// limit (always, when it has none), taking its share.
func (c *Compiled[B]) Allow(client netip.Addr, now time.Time) bool {
	if c.limit == nil {
		return true
	}
	return c.limit.allow(client.Unmap(), now)
}

// connLimiter counts a rule's requests in flight by client address, for
// MaxConnections (nginx's limit_conn, which counts the connections with a
// request being served: a WebSocket counts while it is open).
type connLimiter struct {
	max int
	mu  sync.Mutex
	n   map[netip.Addr]int
}

// Acquire counts a request of client's in, and reports whether it may go
// on under c's MaxConnections (always, when it has none); one that may
// must be counted out with Release when it ends.
func (c *Compiled[B]) Acquire(client netip.Addr) bool {
	l := c.conns
	if l == nil {
		return true
	}
	client = client.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[client] >= l.max {
		return false
	}
	l.n[client]++
	return true
}

// Release counts out a request Acquire let go on.
func (c *Compiled[B]) Release(client netip.Addr) {
	l := c.conns
	if l == nil {
		return
	}
	client = client.Unmap()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[client]--; l.n[client] <= 0 {
		delete(l.n, client)
	}
}
