package h2

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// blockUntilReset is a handler whose request is "at the backend" until
// its stream is reset or the test ends; it counts the handlers running at
// once, and the most there ever were.
type blockUntilReset struct {
	running, most, started atomic.Int32
	stop                   chan struct{}
}

func newBlockUntilReset(t *testing.T) *blockUntilReset {
	b := &blockUntilReset{stop: make(chan struct{})}
	t.Cleanup(func() { close(b.stop) })
	return b
}

func (b *blockUntilReset) serve(s *Stream) {
	b.started.Add(1)
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for {
		m := b.most.Load()
		if n <= m || b.most.CompareAndSwap(m, n) {
			break
		}
	}
	reset := make(chan struct{})
	s.OnReset(func() { close(reset) })
	select {
	case <-reset:
	case <-b.stop:
	}
	s.OnReset(nil)
	s.Reset(http2.ErrCodeCancel)
}

// MadeYouReset (CVE-2025-8671): the client never sends RST_STREAM itself,
// it sends a frame that makes the server reset a stream whose request is
// under way, freeing its slot while the backend still works on it. Each
// form is answered as RFC 9113 allows and the connection ends: WINDOW_UPDATE
// 0 (§6.9) and DATA after END_STREAM (§5.1) at once, as connection errors
// (§5.4.1); the stream errors no client needs to raise (a body longer than
// its content-length, §8.1.1; a stream depending on itself, §5.3.1; a
// stream window past 2^31-1, §6.9.1) count against the reset budget, as the
// client's own resets do, and past it the connection gets ENHANCE_YOUR_CALM.
// No more handlers ever run at once than SETTINGS_MAX_CONCURRENT_STREAMS.
func TestMadeYouReset(t *testing.T) {
	post := []string{":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/", "content-length", "1"}
	for _, tc := range []struct {
		name string
		end  bool // the HEADERS end the stream
		// provoke sends the frame that makes the server reset stream id.
		provoke func(rc *rawClient, id uint32) error
		want    http2.ErrCode
		// once: the first provocation ends the connection.
		once bool
	}{
		{"WINDOW_UPDATE 0", false, func(rc *rawClient, id uint32) error {
			return rc.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id, []byte{0, 0, 0, 0}) // the Framer refuses to write it
		}, http2.ErrCodeProtocol, true},
		{"DATA after END_STREAM", true, func(rc *rawClient, id uint32) error { return rc.fr.WriteData(id, false, []byte("x")) }, http2.ErrCodeStreamClosed, true},
		{"DATA past content-length", false, func(rc *rawClient, id uint32) error { return rc.fr.WriteData(id, true, []byte("xy")) }, http2.ErrCodeEnhanceYourCalm, false},
		{"PRIORITY on itself", false, func(rc *rawClient, id uint32) error {
			return rc.fr.WritePriority(id, http2.PriorityParam{StreamDep: id, Weight: 1})
		}, http2.ErrCodeEnhanceYourCalm, false},
		{"stream window overflow", false, func(rc *rawClient, id uint32) error { return rc.fr.WriteWindowUpdate(id, maxWindow) }, http2.ErrCodeEnhanceYourCalm, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newBlockUntilReset(t)
			// A stream's handler counts against the limit until it has
			// returned, which may be a while after its reset went out
			// (one processor, the race detector): the limit leaves room
			// for those lagging behind the pacing below.
			const maxStreams = 100
			addr := server(t, Config{MaxStreams: maxStreams, MaxRequests: 100000}, h.serve)
			rc := dialRaw(t, addr)
			// Paced as the attack is: each stream's reset is awaited
			// before the next stream opens, so that no stream is ever
			// refused for going over the limit (which ends a connection
			// on its own).
			var g *http2.GoAwayFrame
			for id := uint32(1); g == nil && id < 20000; id += 2 {
				fields := post
				if tc.end {
					fields = get("/")
				}
				rc.headers(id, tc.end, fields...)
				if err := tc.provoke(rc, id); err != nil {
					t.Fatal(err)
				}
				f := rc.until("RST_STREAM or GOAWAY", func(f http2.Frame) bool {
					r, ok := f.(*http2.RSTStreamFrame)
					_, away := f.(*http2.GoAwayFrame)
					return away || ok && r.StreamID == id
				})
				g, _ = f.(*http2.GoAwayFrame)
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.ErrCode == http2.ErrCodeRefusedStream {
					t.Fatalf("stream %d refused", id)
				}
			}
			if g == nil {
				t.Fatal("the connection outlived 10,000 resets")
			}
			if g.ErrCode != tc.want {
				t.Errorf("GOAWAY %v, want %v", g.ErrCode, tc.want)
			}
			rc.closed()
			if n := h.started.Load(); tc.once && n > 1 || !tc.once && n > 2*minResets+maxStreams {
				t.Errorf("%d requests reached the handler before the connection ended", n)
			}
			if m := h.most.Load(); m > maxStreams {
				t.Errorf("%d handlers ran at once, above SETTINGS_MAX_CONCURRENT_STREAMS %d", m, maxStreams)
			}
		})
	}
}

// Resets count toward the budget whoever sends them, once per stream: a
// client that resets streams baton already reset is not counted twice,
// and a connection whose resets stay below half of its streams lives on.
func TestResetBudgetIsShared(t *testing.T) {
	h := newBlockUntilReset(t)
	addr := server(t, Config{MaxStreams: 1000, MaxRequests: 100000}, h.serve)
	rc := dialRaw(t, addr)
	post := []string{":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/", "content-length", "1"}
	// 4 * minResets streams: one in four reset by baton (a body past its
	// length), one in four by the client, the others left running: never
	// more than half reset.
	id := uint32(1)
	for i := range 4 * minResets {
		rc.headers(id, false, post...)
		switch i % 4 {
		case 2:
			rc.fr.WriteData(id, true, []byte("xy"))
			rc.until("RST_STREAM PROTOCOL_ERROR", rstOf(id, http2.ErrCodeProtocol))
			rc.fr.WriteRSTStream(id, http2.ErrCodeCancel) // crosses baton's: not counted again
		case 3:
			rc.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}
		id += 2
	}
	// 2*minResets resets of 4*minResets streams: within the budget. A
	// PING answered shows the connection still serves.
	rc.fr.WritePing(false, [8]byte{'a', 'l', 'i', 'v', 'e'})
	rc.until("the PING's answer", func(f http2.Frame) bool {
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
	// A reset by baton for every stream from here on tips it, paced so
	// that no stream is refused.
	for {
		rc.headers(id, false, post...)
		rc.fr.WriteData(id, true, []byte("xy"))
		f := rc.until("RST_STREAM or GOAWAY", func(f http2.Frame) bool {
			_, ok := f.(*http2.GoAwayFrame)
			return ok || rstOf(id, http2.ErrCodeProtocol)(f)
		})
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			break
		}
		id += 2
	}
	rc.closed()
}

// A connection serves MaxRequests streams in all (nginx's
// keepalive_requests): the last one gets a GOAWAY NO_ERROR naming it and
// is served; a stream opened after it is not processed (the client may
// retry it elsewhere, RFC 9113 §6.8), and the connection ends.
func TestMaxRequests(t *testing.T) {
	var served atomic.Int32
	addr := server(t, Config{MaxRequests: 3}, func(s *Stream) { served.Add(1); echo(s) })
	rc := dialRaw(t, addr)
	for _, id := range []uint32{1, 3, 5, 7} {
		rc.headers(id, true, get("/")...)
	}
	responses := map[uint32]bool{}
	var last uint32
	for f := rc.next(); f != nil; f = rc.next() {
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				t.Errorf("GOAWAY %v, want NO_ERROR", f.ErrCode)
			}
			last = f.LastStreamID
		case *http2.MetaHeadersFrame:
			responses[f.StreamID] = true
		case *http2.RSTStreamFrame:
			t.Errorf("stream %d reset (%v)", f.StreamID, f.ErrCode)
		}
	}
	if last != 5 {
		t.Errorf("GOAWAY names stream %d, want 5", last)
	}
	if !responses[1] || !responses[3] || !responses[5] || responses[7] {
		t.Errorf("responses on %v, want streams 1, 3 and 5 only", responses)
	}
	if n := served.Load(); n != 3 {
		t.Errorf("%d requests served, want 3", n)
	}
}

// Frames that cross the final GOAWAY (a PING, a stream the client opened
// before it saw the GOAWAY, that stream's DATA) reach a connection whose
// writing side is closed already: they are read and dropped while the
// reading lingers, never answered with a write that fails and resets the
// connection under the GOAWAY (RFC 9113 §6.8: the client must be able to
// read it, and retries the streams it left out). The reset made Go's
// client fail streams it would have retried ("client connection force
// closed").
func TestFramesAfterGoAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		served <- NewConn(c, Config{MaxRequests: 1, PrefaceTimeout: 5 * time.Second, IdleTimeout: time.Minute, WriteTimeout: 5 * time.Second}, echo).Serve()
	}()
	rc := dialRaw(t, ln.Addr().String())
	rc.headers(1, true, get("/")...)
	// The final GOAWAY and the response, in either order: the response's
	// goroutine may write before the reader has sent the GOAWAY.
	var away, answered bool
	rc.until("the final GOAWAY and the response", func(f http2.Frame) bool {
		away = away || goAway(http2.ErrCodeNo)(f)
		answered = answered || responseOn(1)(f)
		return away && answered
	})
	rc.closed() // the writing side closed: the server's reader waits for a frame
	if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	rc.headers(3, false, ":method", "POST", ":scheme", "http", ":authority", "example.test", ":path", "/late", "content-length", "4")
	if err := rc.fr.WriteData(3, true, []byte("late")); err != nil {
		t.Fatal(err)
	}
	rc.c.(*net.TCPConn).CloseWrite()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v, want the lingering close's nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running 10s after the client closed")
	}
}

// A header block dripped a byte at a time (a slowloris on HPACK, with
// CONTINUATION frames that each keep the connection from being idle) is
// bounded by HeaderTimeout from its HEADERS frame on, as an HTTP/1.1 head
// is by readHeaderTimeout: the connection ends with GOAWAY.
func TestHeaderTimeout(t *testing.T) {
	var served atomic.Int32
	addr := server(t, Config{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: 60 * time.Second}, func(s *Stream) { served.Add(1); echo(s) })
	rc := dialRaw(t, addr)
	blk := rc.block(append(get("/"), "x-a", "slow")...)
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:1], EndStream: true})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 1; i < len(blk)-1; i++ {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
			if rc.fr.WriteContinuation(1, false, blk[i:i+1]) != nil {
				return
			}
		}
		<-stop // the block is never finished
	}()
	rc.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	rc.closed()
	if served.Load() != 0 {
		t.Error("the dripped request was served")
	}
}

// A header block that arrives whole within HeaderTimeout is served, and
// the connection then waits the idle timeout, not HeaderTimeout.
func TestHeaderTimeoutLeavesTheIdleTimeout(t *testing.T) {
	addr := server(t, Config{HeaderTimeout: 100 * time.Millisecond, IdleTimeout: 60 * time.Second}, echo)
	rc := dialRaw(t, addr)
	rc.headers(1, true, get("/")...)
	rc.until("the response", responseOn(1))
	// Several header timeouts later, the connection still serves.
	time.Sleep(400 * time.Millisecond)
	rc.headers(3, true, get("/")...)
	rc.until("the second response", responseOn(3))
}
