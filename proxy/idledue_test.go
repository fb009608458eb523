package proxy

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// dueSet is an idle set with no epoll instance and no goroutine, for the
// bookkeeping of its idle timeouts: its records are parked on one end
// of socket pairs, whose other ends the test reads.
func dueSet(t *testing.T) *idleSet {
	s := &idleSet{f: &httpFrontend{p: &Proxy{}}, stopped: true}
	t.Cleanup(func() {
		for fd, rec := range s.byFD {
			if rec.seq != 0 {
				unix.Close(fd)
			}
		}
	})
	return s
}

// parkPair parks one end of a new socket pair in s with the idle
// timeout until, and returns the other end.
func parkPair(t *testing.T, s *idleSet, until int64) (peer int, fd int) {
	t.Helper()
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[1]) })
	s.f.conns.Add(1)
	s.mu.Lock()
	s.record(p[0], parkedConn{until: until})
	s.mu.Unlock()
	return p[1], p[0]
}

// closedPeer says whether the socket at the other end of peer is closed.
func closedPeer(t *testing.T, peer int) bool {
	t.Helper()
	var b [1]byte
	n, err := unix.Read(peer, b[:]) // EAGAIN while it is open
	return n == 0 && err == nil
}

// The idle timeout (http.idleTimeout, nginx's keepalive_timeout) closes
// the connections whose time came and only those, taken from the head of
// the parks' queue: the look costs what is due, not a walk of every
// descriptor (issue 23: 100,000 connections a node).
func TestIdleExpireTakesWhatIsDue(t *testing.T) {
	s := dueSet(t)
	now := time.Now().UnixNano()
	sec := int64(time.Second)
	p1, _ := parkPair(t, s, now-2*sec)
	p2, _ := parkPair(t, s, now-sec)
	_, fd3 := parkPair(t, s, now+sec)
	_, fd4 := parkPair(t, s, now+sec/2) // parked after a later timeout: waits for it
	s.expire(time.Unix(0, now))
	if s.n != 2 {
		t.Fatalf("after the look: %d parked, want 2", s.n)
	}
	if !closedPeer(t, p1) || !closedPeer(t, p2) {
		t.Fatal("a connection past its idle timeout was not closed")
	}
	if s.byFD[fd3].seq == 0 || s.byFD[fd4].seq == 0 {
		t.Fatal("a connection before its idle timeout was taken")
	}
	s.expire(time.Unix(0, now+sec))
	if s.n != 0 {
		t.Fatalf("once both timeouts passed: %d parked, want 0", s.n)
	}
}

// A connection that wakes and parks again leaves its earlier park in the
// queue: those are skipped at their time, and dropped once they outnumber
// the parked, so that a connection woken every parkAfter for an
// idleTimeout (75 s: 750 parks) does not hold 750 entries.
func TestIdleExpireDropsStaleParks(t *testing.T) {
	s := dueSet(t)
	now := time.Now().UnixNano()
	peer, fd := parkPair(t, s, now+int64(time.Hour))
	for i := range 10_000 {
		s.mu.Lock()
		rec, ok := s.take(fd, 0)
		if !ok {
			s.mu.Unlock()
			t.Fatalf("re-park %d: not parked", i)
		}
		rec.until = now + int64(time.Hour) + int64(i)
		s.record(fd, rec)
		s.mu.Unlock()
	}
	s.expire(time.Unix(0, now))
	if n := len(s.due) - s.dueHead; n > 2*s.n+dueCompact {
		t.Fatalf("after 10,000 parks of one connection: %d entries queued, want at most %d", n, 2*s.n+dueCompact)
	}
	// An earlier park's timeout does not close the connection parked
	// again since.
	s.expire(time.Unix(0, now+int64(time.Hour)+5000))
	if s.n != 1 {
		t.Fatalf("at a stale park's timeout: %d parked, want 1", s.n)
	}
	s.expire(time.Unix(0, now+int64(time.Hour)+10_000))
	if s.n != 0 || !closedPeer(t, peer) {
		t.Fatalf("at its last park's timeout: %d parked, want 0, and the connection closed", s.n)
	}
}

// BenchmarkIdleExpire is the once-a-second look at the idle timeouts of
// 100,000 parked connections, none of them due: what it holds the set's
// lock for, and so what a park or a wake-up may wait behind.
func BenchmarkIdleExpire(b *testing.B) {
	s := &idleSet{f: &httpFrontend{p: &Proxy{}}, stopped: true}
	until := time.Now().Add(time.Hour).UnixNano()
	for fd := 3; fd < 100_003; fd++ {
		s.record(fd, parkedConn{until: until})
	}
	now := time.Now()
	for b.Loop() {
		s.expire(now)
	}
}
