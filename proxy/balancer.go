package proxy

import (
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/baton-proxy/baton/internal/config"
)

// attempt is one request's walk over a backend's endpoints: the endpoints
// already tried (a retry goes elsewhere), and what pins it to one.
type attempt struct {
	done   [4]*endpoint
	more   []*endpoint
	sticky *endpoint // the endpoint a sticky cookie names
	hash   uint64    // hash of the hash-header value
	hashed bool
}

func (a *attempt) tried(ep *endpoint) {
	for i := range a.done {
		if a.done[i] == nil {
			a.done[i] = ep
			return
		}
	}
	a.more = append(a.more, ep)
}

func (a *attempt) has(ep *endpoint) bool {
	for _, d := range a.done {
		if d == ep {
			return true
		}
	}
	return slices.Contains(a.more, ep)
}

// pick returns the endpoint for the next try of a, or nil when every
// endpoint has been tried. Ejected endpoints are skipped unless nothing
// else is left.
func (b *backend) pick(set *endpointSet, a *attempt) *endpoint {
	var now int64 // read the clock only when an endpoint was ever ejected
	usable := func(ep *endpoint) bool {
		if a.has(ep) {
			return false
		}
		until := ep.ejected.Load()
		if until == 0 {
			return true
		}
		if now == 0 {
			now = time.Now().UnixNano()
		}
		return until <= now
	}
	if ep := a.sticky; ep != nil && usable(ep) {
		return ep
	}
	n := len(set.active)
	if n == 0 {
		return nil
	}
	switch {
	case a.hashed && len(set.ring) > 0:
		if ep := set.ringPick(a.hash, usable); ep != nil {
			return ep
		}
	case b.cfg.Balancer == config.BalancerLeastRequest && n > 1:
		// The power of two choices: the less busy of two at random.
		i, j := rand.IntN(n), rand.IntN(n-1)
		if j >= i {
			j++
		}
		x, y := set.active[i], set.active[j]
		if y.inflight.Load() < x.inflight.Load() {
			x, y = y, x
		}
		if usable(x) {
			return x
		}
		if usable(y) {
			return y
		}
	}
	start := int(b.next.Add(1) - 1)
	for i := range n {
		if ep := set.active[(start+i)%n]; usable(ep) {
			return ep
		}
	}
	// Every untried endpoint is ejected: better one of them than none.
	for i := range n {
		if ep := set.active[(start+i)%n]; !a.has(ep) {
			return ep
		}
	}
	return nil
}

// stickyKey is the cookie value that names an endpoint: stable across
// workers and generations, and not the address itself.
func stickyKey(addr string) string {
	h := fnv.New64a()
	h.Write([]byte(addr))
	return strconv.FormatUint(h.Sum64(), 36)
}

func hashBytes(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return mix(h.Sum64())
}

// mix spreads FNV's output (splitmix64's finaliser).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// ringPoint is a point of the consistent-hash ring.
type ringPoint struct {
	hash uint64
	ep   *endpoint
}

// pointsPerEndpoint places each endpoint this many times on the ring, so
// that load spreads evenly and an endpoint leaving moves only its share.
const pointsPerEndpoint = 64

func buildRing(eps []*endpoint) []ringPoint {
	ring := make([]ringPoint, 0, len(eps)*pointsPerEndpoint)
	for _, ep := range eps {
		base := hashBytes([]byte(ep.addr))
		for i := range pointsPerEndpoint {
			ring = append(ring, ringPoint{hash: mix(base + uint64(i)), ep: ep})
		}
	}
	slices.SortFunc(ring, func(a, b ringPoint) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
	return ring
}

// ringPick returns the first usable endpoint clockwise from h.
func (s *endpointSet) ringPick(h uint64, usable func(*endpoint) bool) *endpoint {
	i, _ := slices.BinarySearchFunc(s.ring, h, func(p ringPoint, h uint64) int {
		switch {
		case p.hash < h:
			return -1
		case p.hash > h:
			return 1
		}
		return 0
	})
	for k := range min(len(s.ring), 4*pointsPerEndpoint) {
		if ep := s.ring[(i+k)%len(s.ring)].ep; usable(ep) {
			return ep
		}
	}
	return nil
}
