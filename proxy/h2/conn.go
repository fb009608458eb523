// Package h2 is the server side of HTTP/2 (RFC 9113) for one client
// connection: its frames, streams, flow control and graceful end, with the
// limits that keep a client from costing more than its share. Each request
// is handed to a Handler in a goroutine of its own, as a Stream whose body
// it reads and whose response it writes.
//
// Frames are parsed by golang.org/x/net/http2's Framer (the parser behind
// net/http's HTTP/2), header blocks decoded by its hpack package; the
// state machine, flow control and writing are this package's, so that a
// response goes out as the handler writes it, without the goroutine hops
// and per-request allocations of net/http's server.
package h2

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Defaults and limits.
const (
	// DefaultMaxStreams is the concurrent streams a client may open
	// (SETTINGS_MAX_CONCURRENT_STREAMS): nginx's default.
	DefaultMaxStreams = 128
	// DefaultMaxRequests is the streams a connection serves in its life
	// before a graceful GOAWAY: nginx's keepalive_requests.
	DefaultMaxRequests = 1000
	// streamWindow and connWindow are the receive windows baton grants
	// for a stream's body and for the connection: the most request body a
	// client can have in flight, and so the most a stream (a connection)
	// buffers.
	streamWindow = 256 << 10
	connWindow   = 1 << 20
	// frameSize is the largest frame read (the default
	// SETTINGS_MAX_FRAME_SIZE, not raised) and written.
	frameSize = 16384
	// initialWindow is a peer's window before its SETTINGS say otherwise.
	initialWindow = 65535
	maxWindow     = 1<<31 - 1
	// lingerTimeout bounds the reading that follows a GOAWAY, so that
	// closing does not reset the connection under the GOAWAY.
	lingerTimeout = time.Second
	// shutdownPingTimeout is how long the first GOAWAY of a graceful end
	// waits for its PING's answer before the final one.
	shutdownPingTimeout = time.Second
	// Abuse limits: past them the connection gets GOAWAY with
	// ENHANCE_YOUR_CALM. Streams refused for going over
	// SETTINGS_MAX_CONCURRENT_STREAMS; streams reset while their handler
	// ran beyond half of those opened, whoever reset them: the client
	// (HTTP/2 Rapid Reset, CVE-2023-44487) or baton, for a frame the
	// client sent to make it (MadeYouReset, CVE-2025-8671); and DATA
	// frames without data that do not end the stream (CVE-2019-9518).
	maxRefused    = 64
	minResets     = 128
	maxEmptyFrame = 256
)

// Config are a connection's settings and limits.
type Config struct {
	// MaxStreams is SETTINGS_MAX_CONCURRENT_STREAMS; 0: DefaultMaxStreams.
	// Handlers count until they return, reset or not, so a connection
	// never has more requests than this under way.
	MaxStreams uint32
	// MaxRequests is the streams the connection serves in all; the last
	// one opened gets a GOAWAY (NO_ERROR) naming it, and the connection
	// ends once its streams are done. 0: DefaultMaxRequests.
	MaxRequests int
	// MaxHeaderListSize bounds a request's decoded header fields
	// (SETTINGS_MAX_HEADER_LIST_SIZE); a larger request is answered 431.
	MaxHeaderListSize uint32
	// PrefaceTimeout bounds the wait for the client's preface and first
	// SETTINGS; HeaderTimeout bounds a header block, from the first byte
	// of its HEADERS frame to the end of its last CONTINUATION (0: only
	// IdleTimeout bounds it); IdleTimeout closes a connection without
	// streams for that long; WriteTimeout bounds each wait to write, and a
	// stream's wait for the client to open its flow-control window.
	PrefaceTimeout, HeaderTimeout, IdleTimeout, WriteTimeout time.Duration
	// Logf, when set, is told of protocol errors (at debug level).
	Logf func(format string, args ...any)
	// Go, when set, runs the handlers (a pool of goroutines); else each
	// runs in a goroutine of its own.
	Go func(func())
}

// Handler serves one stream: it reads the request and writes the
// response. It runs in its own goroutine; the Stream is valid until it
// returns.
type Handler func(*Stream)

// Errors a handler sees.
var (
	// ErrStreamReset: the stream was reset (by the client, or by baton
	// for a protocol error) or the connection ended; nothing more can be
	// sent on it.
	ErrStreamReset = errors.New("http2: stream reset")
	// ErrStalled: the client kept the stream's flow-control window shut
	// for longer than WriteTimeout.
	ErrStalled = errors.New("http2: flow-control window shut too long")
	errPreface = errors.New("http2: bad client preface")
	// errWriteClosed: a frame after the connection's writing side closed
	// (finish). Not the client's fault: a PING, or DATA of a stream the
	// final GOAWAY left out, can cross the GOAWAY; the answer is dropped
	// and the reading lingers on, never a reset under the GOAWAY.
	errWriteClosed = errors.New("http2: frame after the connection's writing side closed")
)

var clientPreface = []byte(http2.ClientPreface)

// Conn is one client connection speaking HTTP/2.
type Conn struct {
	c   net.Conn
	cfg Config
	h   Handler
	rd  countReader
	fr  *http2.Framer
	// headers decodes the header blocks the Framer reads.
	headers *headerReader

	// The writing side: one writer at a time, frames gathered in bw and
	// flushed by the last writer of a burst (see unlockWrite).
	wmu       sync.Mutex
	waiting   atomic.Int32
	bw        *bufio.Writer
	wantFlush bool
	wdl       time.Time
	wfail     error
	hdr       [9]byte

	// A flush asked for by flushSoon and not yet made; flushFn is the
	// goroutine's function, bound once.
	flushQueued atomic.Bool
	flushFn     func()

	// The connection's state, under mu. cond is signalled when a send
	// window grows, a stream is reset, or the connection ends.
	mu         sync.Mutex
	cond       sync.Cond
	streams    map[uint32]*Stream
	maxID      uint32 // the highest stream the client opened
	opened     int    // streams opened
	active     int    // handlers running
	sendWindow int64  // the connection's send window
	peerWindow int64  // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int    // the largest frame to send
	recvWindow int64  // what the client may still send on the connection
	unacked    int64  // body bytes read, not yet given back
	goAway     bool   // no new streams: GOAWAY sent (final) or received
	started    bool   // our SETTINGS were sent
	shutdown   bool   // Shutdown began (or is to, once started)
	finishing  bool   // the write side is closed; reading lingers
	closed     bool   // Serve ended: waits fail
	resets     int    // streams reset while their handler ran, by either side
	refused    int
	empty      int

	handlers sync.WaitGroup
}

// NewConn returns c as an HTTP/2 connection served by h. Serve runs it.
func NewConn(c net.Conn, cfg Config, h Handler) *Conn {
	if cfg.MaxStreams == 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = DefaultMaxRequests
	}
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = 1 << 20
	}
	sc := &Conn{c: c, cfg: cfg, h: h, streams: make(map[uint32]*Stream),
		sendWindow: initialWindow, peerWindow: initialWindow, peerFrame: frameSize, recvWindow: connWindow}
	sc.cond.L = &sc.mu
	sc.flushFn = sc.flushQueuedNow
	// A small read buffer: frame heads and small frames are read
	// through it, a frame larger than it straight into the Framer's
	// buffer (bufio reads a large Read directly), so that an idle
	// connection holds 2 KiB here rather than 16.
	sc.rd.r = bufio.NewReaderSize(c, readBufSize)
	sc.fr = http2.NewFramer(nil, &sc.rd)
	sc.fr.SetReuseFrames()
	sc.fr.SetMaxReadFrameSize(frameSize)
	sc.fr.MaxHeaderListSize = cfg.MaxHeaderListSize
	sc.headers = newHeaderReader()
	return sc
}

// countReader counts the bytes the Framer took, so that a read deadline
// that passes between frames can be told from one that cut a frame.
type countReader struct {
	r *bufio.Reader
	n int64
}

func (r *countReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}

func (sc *Conn) logf(format string, args ...any) {
	if sc.cfg.Logf != nil {
		sc.cfg.Logf(format, args...)
	}
}

// Serve runs the connection until it ends, and waits for its handlers.
// It does not close c.
func (sc *Conn) Serve() error {
	err := sc.serve()
	sc.mu.Lock()
	sc.closed = true
	for _, s := range sc.streams {
		s.resetLocked()
	}
	sc.cond.Broadcast()
	sc.mu.Unlock()
	sc.handlers.Wait()
	return err
}

func (sc *Conn) serve() error {
	// Our SETTINGS first (RFC 9113 §3.4), and the connection's window.
	sc.lockWrite()
	sc.frameLocked(http2.FrameSettings, 0, 0, settingsPayload(sc.cfg))
	var inc [4]byte
	putUint32(inc[:], connWindow-initialWindow)
	sc.frameLocked(http2.FrameWindowUpdate, 0, 0, inc[:])
	sc.unlockWrite(true)
	sc.mu.Lock()
	sc.started = true
	shutdown := sc.shutdown
	sc.shutdown = false
	sc.mu.Unlock()
	if shutdown {
		sc.Shutdown() // asked for before the SETTINGS went out
	}

	sc.c.SetReadDeadline(time.Now().Add(sc.cfg.PrefaceTimeout))
	var p [24]byte
	if _, err := io.ReadFull(&sc.rd, p[:]); err != nil {
		return fmt.Errorf("http2: reading the client preface: %w", err)
	}
	if string(p[:]) != string(clientPreface) {
		return errPreface
	}
	first := true
	var deadline time.Time
	for {
		sc.mu.Lock()
		finishing := sc.finishing
		sc.mu.Unlock()
		if finishing {
			// Read what the client still sends, so that closing does not
			// reset the connection under the GOAWAY, until it closes or
			// the lingering ends.
			sc.c.SetReadDeadline(time.Now().Add(lingerTimeout))
			io.Copy(io.Discard, &sc.rd)
			return nil
		}
		before := sc.rd.n
		// The next frame's header, before the Framer reads the frame: a
		// header block gets HeaderTimeout for all of it, and what a
		// frame's type says of its errors is known.
		typ, headerBlock := http2.FrameType(0), false
		hdr, err := sc.rd.r.Peek(9)
		if err == nil {
			typ = http2.FrameType(hdr[3])
			if typ == http2.FrameHeaders && sc.cfg.HeaderTimeout > 0 {
				headerBlock = true
				sc.c.SetReadDeadline(time.Now().Add(sc.cfg.HeaderTimeout))
			}
		}
		var f http2.Frame
		if err == nil {
			f, err = sc.fr.ReadFrame()
			if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
				f, err = sc.headers.read(sc.fr, hf, sc.cfg.MaxHeaderListSize)
			}
		}
		if headerBlock && (err == nil || !isTimeout(err)) {
			deadline = time.Now().Add(sc.cfg.IdleTimeout)
			sc.c.SetReadDeadline(deadline)
		}
		if err != nil {
			if !isTimeout(err) || sc.werr() != nil {
				if err = sc.readError(typ, err); err != nil {
					return err
				}
				continue
			}
			// The idle timeout: a connection whose streams are still
			// being served is not idle, unless the client stopped in
			// the middle of a frame, or of a header block.
			sc.mu.Lock()
			busy, finishing := sc.active > 0, sc.finishing
			sc.mu.Unlock()
			if finishing {
				continue
			}
			if busy && !headerBlock && sc.rd.n == before && sc.rd.r.Buffered() == 0 {
				deadline = time.Now().Add(sc.cfg.IdleTimeout)
				sc.c.SetReadDeadline(deadline)
				continue
			}
			if headerBlock {
				sc.logf("http2: a header block not complete within %v", sc.cfg.HeaderTimeout)
			}
			sc.goAwayNow(http2.ErrCodeNo)
			continue
		}
		if first {
			// The preface ends with a SETTINGS frame (RFC 9113 §3.4).
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				sc.goAwayNow(http2.ErrCodeProtocol)
				continue
			}
			first = false
		}
		if now := time.Now(); deadline.Sub(now) < sc.cfg.IdleTimeout/2 {
			deadline = now.Add(sc.cfg.IdleTimeout)
			sc.c.SetReadDeadline(deadline)
		}
		if err := sc.process(f); err != nil && !errors.Is(err, errWriteClosed) {
			if err = sc.readError(typ, err); err != nil {
				return err
			}
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readError handles an error of reading or processing a frame of type
// typ: a connection error gets a GOAWAY (and the reading lingers), a
// stream error resets the stream; anything else (the client went away,
// or a write failed) is returned, and ends the connection.
func (sc *Conn) readError(typ http2.FrameType, err error) error {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se) && typ == http2.FrameWindowUpdate:
		// A WINDOW_UPDATE of 0 on a stream: a stream error (RFC 9113
		// §6.9) that any endpoint may treat as a connection error
		// (§5.4.1), as nginx does. A client only sends one to make the
		// server reset a stream whose request is under way
		// (MadeYouReset, CVE-2025-8671).
		sc.logf("http2: connection error: %v (WINDOW_UPDATE)", err)
		sc.goAwayNow(http2.ErrCodeProtocol)
		return nil
	case errors.As(err, &se):
		// A malformed header block (RFC 9113 §8.1.1): the stream is
		// reset, its ID used up all the same.
		sc.logf("http2: stream %d: %v", se.StreamID, err)
		return sc.streamError(se.StreamID, se.Code)
	case errors.As(err, &ce):
		sc.logf("http2: connection error: %v", err)
		sc.goAwayNow(http2.ErrCode(ce))
		return nil
	case errors.Is(err, http2.ErrFrameTooLarge):
		sc.logf("http2: connection error: %v", err)
		sc.goAwayNow(http2.ErrCodeFrameSize)
		return nil
	}
	return err
}

// werr returns the write error that ended the connection, if any.
func (sc *Conn) werr() error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	return sc.wfail
}

// process handles one frame. A ConnectionError ends the connection.
func (sc *Conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return sc.processHeaders(f)
	case *http2.DataFrame:
		return sc.processData(f)
	case *http2.SettingsFrame:
		return sc.processSettings(f)
	case *http2.WindowUpdateFrame:
		return sc.processWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			if f.Data == shutdownPing {
				sc.finalGoAway()
			}
			return nil
		}
		return sc.writeFrame(http2.FramePing, http2.FlagPingAck, 0, f.Data[:], true)
	case *http2.RSTStreamFrame:
		return sc.processRST(f)
	case *http2.PriorityFrame:
		// Priorities are advisory and ignored; one naming its own
		// stream is malformed (RFC 9113 §5.3.1).
		if f.StreamDep == f.StreamID {
			return sc.streamError(f.StreamID, http2.ErrCodeProtocol)
		}
		return nil
	case *http2.GoAwayFrame:
		sc.mu.Lock()
		sc.goAway = true
		sc.mu.Unlock()
		sc.maybeFinish()
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients do not push (RFC 9113 §8.4)
	case *http2.ContinuationFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // only after HEADERS, which the Framer joins
	}
	return nil // unknown frame types are ignored (RFC 9113 §4.1)
}

// settingsPayload is baton's SETTINGS: the streams a client may open, each
// stream's receive window, the header list size, and no server push.
func settingsPayload(cfg Config) []byte {
	var b []byte
	add := func(id http2.SettingID, v uint32) {
		b = append(b, byte(id>>8), byte(id), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	add(http2.SettingMaxConcurrentStreams, cfg.MaxStreams)
	add(http2.SettingInitialWindowSize, streamWindow)
	add(http2.SettingMaxHeaderListSize, cfg.MaxHeaderListSize)
	return b
}

func (sc *Conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	// The writing side is held from before the new values apply until
	// the ACK is queued: DATA that a window opened by these settings lets
	// a stream send goes out after the ACK, never before it. A client
	// may wait for the ACK before it looks for that DATA (h2spec 6.9.2/1
	// does, and dropped the DATA it met first), as nginx's one loop
	// answers. Lock order: the writing side, then mu.
	sc.lockWrite()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			// Every open stream's window moves by the difference (RFC
			// 9113 §6.9.2), and may not pass 2^31-1.
			sc.mu.Lock()
			delta := int64(s.Val) - sc.peerWindow
			sc.peerWindow = int64(s.Val)
			for _, st := range sc.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					sc.mu.Unlock()
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			sc.cond.Broadcast()
			sc.mu.Unlock()
		case http2.SettingMaxFrameSize:
			sc.mu.Lock()
			sc.peerFrame = min(int(s.Val), frameSize)
			sc.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		sc.unlockWrite(false)
		return err
	}
	sc.frameLocked(http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
	return sc.unlockWrite(true)
}

func (sc *Conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	inc := int64(f.Increment)
	sc.mu.Lock()
	if f.StreamID == 0 {
		ok := sc.sendWindow+inc <= maxWindow
		if ok {
			sc.sendWindow += inc
			sc.cond.Broadcast()
		}
		sc.mu.Unlock()
		if !ok {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		return nil
	}
	s := sc.streams[f.StreamID]
	switch {
	case s == nil && f.StreamID > sc.maxID:
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream (RFC 9113 §5.1)
	case s == nil:
		sc.mu.Unlock()
		return nil // a closed one: late, ignored
	case s.sendWindow+inc > maxWindow:
		sc.mu.Unlock()
		return sc.streamError(f.StreamID, http2.ErrCodeFlowControl)
	}
	s.sendWindow += inc
	sc.cond.Broadcast()
	sc.mu.Unlock()
	return nil
}

func (sc *Conn) processRST(f *http2.RSTStreamFrame) error {
	sc.mu.Lock()
	s := sc.streams[f.StreamID]
	if s == nil {
		idle := f.StreamID > sc.maxID
		sc.mu.Unlock()
		if idle {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	abusive := sc.countResetLocked(s)
	s.abortLocked()
	sc.mu.Unlock()
	if abusive {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

// countResetLocked counts a reset of s, by either side, while its handler
// runs (its request may be at a backend already: resets that free a slot
// of SETTINGS_MAX_CONCURRENT_STREAMS are what Rapid Reset and MadeYouReset
// amplify), and reports whether the connection has had too many: more
// than minResets, and more than half of the streams it opened.
func (sc *Conn) countResetLocked(s *Stream) bool {
	if !s.handlerDone && !s.reset {
		sc.resets++
	}
	return sc.resets >= minResets && sc.resets*2 > sc.opened
}

// streamError resets stream id with code: a stream error of the client's
// making (RFC 9113 §5.4.2). A reset of a stream whose handler runs counts
// against the reset budget; past it, the connection ends.
func (sc *Conn) streamError(id uint32, code http2.ErrCode) error {
	sc.mu.Lock()
	abusive := false
	if s := sc.streams[id]; s != nil {
		abusive = sc.countResetLocked(s)
		s.abortLocked()
	} else if id > sc.maxID {
		sc.maxID = id
	}
	sc.mu.Unlock()
	if err := sc.writeRST(id, code); err != nil {
		return err
	}
	if abusive {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

func (sc *Conn) writeRST(id uint32, code http2.ErrCode) error {
	var p [4]byte
	putUint32(p[:], uint32(code))
	return sc.writeFrame(http2.FrameRSTStream, 0, id, p[:], true)
}

// processData takes a DATA frame: flow control first (padding counts),
// then the stream's body.
func (sc *Conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	length := int64(f.Length)
	data := f.Data()
	sc.mu.Lock()
	if length > sc.recvWindow {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	sc.recvWindow -= length
	s := sc.streams[id]
	var code http2.ErrCode
	switch {
	case s == nil && id > sc.maxID:
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	case s != nil && s.remoteDone && !s.reset:
		// DATA after the client ended the stream itself: a stream
		// error (RFC 9113 §5.1, half-closed (remote)) that no race can
		// explain, and a way to make baton reset a stream whose request
		// is under way (MadeYouReset, CVE-2025-8671): the connection
		// ends (§5.4.1).
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	case s == nil || s.remoteDone:
		code = http2.ErrCodeStreamClosed // reset: this DATA crossed the RST_STREAM
	case length > s.recvWindow:
		code = http2.ErrCodeFlowControl
	case s.ContentLength >= 0 && (s.recvTotal+int64(len(data)) > s.ContentLength ||
		f.StreamEnded() && s.recvTotal+int64(len(data)) != s.ContentLength):
		// The body disagrees with its content-length: malformed (RFC
		// 9113 §8.1.1).
		code = http2.ErrCodeProtocol
	}
	if code != 0 {
		// Not the stream's: the connection's window is given back.
		sc.unacked += length
		abusive := false
		if s != nil {
			abusive = sc.countResetLocked(s)
			s.abortLocked()
		}
		sc.mu.Unlock()
		if err := sc.giveBack(nil); err != nil {
			return err
		}
		if err := sc.writeRST(id, code); err != nil {
			return err
		}
		if abusive {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		return nil
	}
	s.recvWindow -= length
	s.recvTotal += int64(len(data))
	sc.unacked += length - int64(len(data)) // padding: given back at once
	if len(data) == 0 && !f.StreamEnded() {
		sc.empty++
		if sc.empty > maxEmptyFrame {
			sc.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	if s.handlerDone || s.reset {
		sc.unacked += int64(len(data)) // nobody reads it
	} else {
		s.body = append(s.body, data...)
	}
	if f.StreamEnded() {
		s.remoteDone = true
		s.closeIfDoneLocked()
	}
	s.wake()
	sc.mu.Unlock()
	return sc.giveBack(nil)
}

// giveBack sends WINDOW_UPDATE frames for what was read (or dropped)
// since the last ones, once that is half a window: for the connection,
// and for s when it is set and still receiving.
func (sc *Conn) giveBack(s *Stream) error {
	sc.mu.Lock()
	var conn, stream int64
	if sc.unacked >= connWindow/2 {
		conn, sc.unacked = sc.unacked, 0
		sc.recvWindow += conn
	}
	if s != nil && !s.remoteDone && s.unacked >= streamWindow/2 {
		stream, s.unacked = s.unacked, 0
		s.recvWindow += stream
	}
	sc.mu.Unlock()
	if conn == 0 && stream == 0 {
		return nil
	}
	sc.lockWrite()
	var p [4]byte
	if conn > 0 {
		putUint32(p[:], uint32(conn))
		sc.frameLocked(http2.FrameWindowUpdate, 0, 0, p[:])
	}
	if stream > 0 {
		putUint32(p[:], uint32(stream))
		sc.frameLocked(http2.FrameWindowUpdate, 0, s.id, p[:])
	}
	return sc.unlockWrite(true)
}

// processHeaders opens a stream (or takes a stream's trailers).
func (sc *Conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // client streams are odd (RFC 9113 §5.1.1)
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		return sc.streamError(id, http2.ErrCodeProtocol)
	}
	sc.mu.Lock()
	if s := sc.streams[id]; s != nil {
		// Trailers: they end the stream and carry no pseudo-header.
		// An HTTP/1.1 upstream gets none; an HTTP/2 one, those kept.
		if s.remoteDone {
			sc.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		}
		if !f.StreamEnded() || len(f.PseudoFields()) > 0 || f.Truncated {
			sc.mu.Unlock()
			return sc.streamError(id, http2.ErrCodeProtocol)
		}
		s.trailers = keepTrailers(f.RegularFields())
		s.remoteDone = true
		s.closeIfDoneLocked()
		s.wake()
		sc.mu.Unlock()
		return nil
	}
	if id <= sc.maxID {
		sc.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeStreamClosed) // a closed stream, or IDs out of order (RFC 9113 §5.1.1)
	}
	sc.maxID = id
	if sc.goAway {
		sc.mu.Unlock()
		return nil // after our final GOAWAY: not processed, the client retries it elsewhere
	}
	if sc.active >= int(sc.cfg.MaxStreams) {
		sc.refused++
		refused := sc.refused
		sc.mu.Unlock()
		if refused > maxRefused {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		return sc.writeRST(id, http2.ErrCodeRefusedStream)
	}
	s := &Stream{sc: sc, id: id, sendWindow: sc.peerWindow, recvWindow: streamWindow, remoteDone: f.StreamEnded()}
	if f.Truncated {
		s.ContentLength, s.TooLarge = -1, true
	} else {
		var err error
		if s.Request, err = ParseRequest(f.Fields, f.StreamEnded()); err != nil {
			sc.mu.Unlock()
			sc.logf("http2: stream %d: %v", id, err)
			return sc.writeRST(id, http2.ErrCodeProtocol)
		}
	}
	sc.streams[id] = s
	sc.opened++
	sc.active++
	last := sc.opened >= sc.cfg.MaxRequests
	sc.handlers.Add(1)
	sc.mu.Unlock()
	sc.spawn(func() { sc.run(s) })
	if last {
		// The connection's last stream (nginx's keepalive_requests):
		// a GOAWAY names it, streams opened after it are not processed
		// (the client retries them on a new connection), and the
		// connection ends once its streams are done.
		sc.finalGoAway()
	}
	return nil
}

// run runs the handler of s, then ends the stream.
func (sc *Conn) run(s *Stream) {
	defer sc.handlers.Done()
	sc.h(s)
	s.finish()
}

// shutdownPing is the PING of a graceful end.
var shutdownPing = [8]byte{'b', 'a', 't', 'o', 'n', 'e', 'n', 'd'}

// Shutdown ends the connection gracefully (RFC 9113 §6.8): a GOAWAY that
// admits every stream the client may have opened meanwhile, and a PING;
// once the PING is answered (or a second has passed), a GOAWAY naming the
// last stream that will be served. Streams opened after that are not
// processed: the client retries them on a new connection. The connection
// closes once its streams are done.
func (sc *Conn) Shutdown() {
	sc.mu.Lock()
	if sc.shutdown || sc.goAway || sc.closed || !sc.started {
		sc.shutdown = true // when not started: Serve starts it
		sc.mu.Unlock()
		sc.maybeFinish()
		return
	}
	sc.shutdown = true
	sc.mu.Unlock()
	sc.lockWrite()
	sc.frameLocked(http2.FrameGoAway, 0, 0, goAwayPayload(maxWindow, http2.ErrCodeNo))
	sc.frameLocked(http2.FramePing, 0, 0, shutdownPing[:])
	sc.unlockWrite(true)
	time.AfterFunc(shutdownPingTimeout, sc.finalGoAway)
}

// Close closes the connection at once.
func (sc *Conn) Close() error { return sc.c.Close() }

// finalGoAway sends the GOAWAY with the last stream served. The frame is
// queued under the write lock taken before goAway is set (as in
// goAwayNow): a stream that ends meanwhile and finds the connection done
// (maybeFinish) flushes it before closing, instead of closing under it.
func (sc *Conn) finalGoAway() {
	sc.lockWrite()
	sc.mu.Lock()
	if sc.goAway || sc.closed {
		sc.mu.Unlock()
		sc.unlockWrite(false)
		return
	}
	sc.goAway = true
	last := sc.maxID
	sc.mu.Unlock()
	sc.frameLocked(http2.FrameGoAway, 0, 0, goAwayPayload(last, http2.ErrCodeNo))
	sc.unlockWrite(true)
	sc.maybeFinish()
}

// goAwayNow sends GOAWAY with code and the last stream opened, ends every
// stream, and closes the connection's writing side at once: for an error,
// or an idle connection.
func (sc *Conn) goAwayNow(code http2.ErrCode) {
	sc.lockWrite()
	sc.mu.Lock()
	if sc.finishing {
		sc.mu.Unlock()
		sc.unlockWrite(false)
		return
	}
	sc.goAway = true
	last := sc.maxID
	for _, s := range sc.streams {
		s.resetLocked()
	}
	sc.mu.Unlock()
	sc.frameLocked(http2.FrameGoAway, 0, 0, goAwayPayload(last, code))
	sc.unlockWrite(true)
	sc.finish()
}

// maybeFinish closes the writing side once no stream is left after a
// GOAWAY.
func (sc *Conn) maybeFinish() {
	sc.mu.Lock()
	done := sc.goAway && sc.active == 0
	sc.mu.Unlock()
	if done {
		sc.finish()
	}
}

// finish flushes, closes the writing side and lets the reading linger
// (see serveOn) for a while.
func (sc *Conn) finish() {
	sc.mu.Lock()
	if sc.finishing {
		sc.mu.Unlock()
		return
	}
	sc.finishing = true
	sc.mu.Unlock()
	// Everything written so far goes out before the writing side closes,
	// even with other writers queued: unlockWrite would leave the flush
	// to them, and they would find the connection closed, the GOAWAY
	// that explains it never sent.
	sc.lockWrite()
	sc.wantFlush = false
	if sc.wfail == nil && sc.bw.Buffered() > 0 {
		sc.extendWriteDeadline()
		if err := sc.bw.Flush(); err != nil {
			sc.writeFailed(err)
		}
	}
	if sc.wfail == nil {
		sc.wfail = errWriteClosed
	}
	sc.releaseWriter()
	sc.wmu.Unlock()
	if cw, ok := sc.c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		sc.c.Close()
	}
	sc.c.SetReadDeadline(time.Now().Add(lingerTimeout))
}

func goAwayPayload(last uint32, code http2.ErrCode) []byte {
	p := make([]byte, 8)
	putUint32(p, last)
	putUint32(p[4:], uint32(code))
	return p
}

func putUint32(p []byte, v uint32) {
	p[0], p[1], p[2], p[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// writerPool holds the write buffers of connections with nothing to send:
// an idle connection holds none (32 KiB each).
var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufSize) }}

// readBufSize is a connection's read buffer.
const readBufSize = 2 << 10

// writeBufSize is a connection's write buffer: what a burst of frames is
// gathered in before one write.
const writeBufSize = 32 << 10

// lockWrite takes the writing side, with a write buffer. waiting counts
// the writers queued, so that the one leaving can leave the flush, and
// the buffer, to the next.
func (sc *Conn) lockWrite() {
	sc.waiting.Add(1)
	sc.wmu.Lock()
	sc.waiting.Add(-1)
	if sc.bw == nil {
		sc.bw = writerPool.Get().(*bufio.Writer)
		sc.bw.Reset(sc.c)
	}
}

// releaseWriter gives the write buffer back when nothing is left in it
// and no writer waits for the writing side. wmu held.
func (sc *Conn) releaseWriter() {
	if sc.bw != nil && sc.bw.Buffered() == 0 && sc.waiting.Load() == 0 {
		sc.bw.Reset(nil)
		writerPool.Put(sc.bw)
		sc.bw = nil
	}
}

// unlockWrite releases the writing side, flushing what was written when
// flush is asked (now or by an earlier writer) and no other writer waits:
// a burst of responses goes out in one write.
func (sc *Conn) unlockWrite(flush bool) error {
	if flush || sc.wantFlush {
		if sc.waiting.Load() == 0 {
			sc.wantFlush = false
			if sc.wfail == nil && sc.bw.Buffered() > 0 {
				sc.extendWriteDeadline()
				if err := sc.bw.Flush(); err != nil {
					sc.writeFailed(err)
				}
			}
		} else {
			sc.wantFlush = true
		}
	}
	err := sc.wfail
	sc.releaseWriter()
	sc.wmu.Unlock()
	return err
}

func (sc *Conn) extendWriteDeadline() {
	if now := time.Now(); sc.wdl.Sub(now) < sc.cfg.WriteTimeout/2 {
		sc.wdl = now.Add(sc.cfg.WriteTimeout)
		sc.c.SetWriteDeadline(sc.wdl)
	}
}

// writeFailed ends the connection after a failed write: the client is
// gone or does not read.
func (sc *Conn) writeFailed(err error) {
	if sc.wfail == nil {
		sc.wfail = err
		sc.c.SetReadDeadline(time.Unix(1, 0)) // the reader stops
	}
}

// frameLocked writes one frame; the caller holds the writing side.
func (sc *Conn) frameLocked(typ http2.FrameType, flags http2.Flags, id uint32, payload []byte) error {
	if sc.wfail != nil {
		return sc.wfail
	}
	n := len(payload)
	h := &sc.hdr
	h[0], h[1], h[2], h[3], h[4] = byte(n>>16), byte(n>>8), byte(n), byte(typ), byte(flags)
	putUint32(h[5:], id&maxWindow)
	if sc.bw.Available() < len(h)+n {
		sc.extendWriteDeadline()
	}
	sc.bw.Write(h[:])
	if _, err := sc.bw.Write(payload); err != nil {
		sc.writeFailed(err)
		return err
	}
	return nil
}

// writeFrame writes one frame.
func (sc *Conn) writeFrame(typ http2.FrameType, flags http2.Flags, id uint32, payload []byte, flush bool) error {
	sc.lockWrite()
	sc.frameLocked(typ, flags, id, payload)
	return sc.unlockWrite(flush)
}

// flush sends what was written.
func (sc *Conn) flush() error {
	sc.lockWrite()
	return sc.unlockWrite(true)
}

// flushSoon asks for what was written to be sent once the goroutines that
// can run now have had their turn, as an event loop writes once a turn:
// the flush runs in a goroutine of its own, which a worker's single
// processor runs when the stream's goroutine waits (or, with processors
// to spare, at once). What streams write meanwhile goes out in the same
// write: a gRPC response's head, message and trailers (three writes when
// each flushed), the responses of streams answered together. The caller
// is a handler, so that Serve waits for the flush too.
func (sc *Conn) flushSoon() {
	if sc.flushQueued.Swap(true) {
		return // one is queued: it will send this too
	}
	sc.handlers.Add(1)
	sc.spawn(sc.flushFn)
}

// flushQueuedNow is flushSoon's goroutine. The runtime runs a goroutine
// just readied before the others that can run (runnext): it yields
// once, to the back of the queue, so that the streams readied with it
// (by one read of the backend's connection) write first.
func (sc *Conn) flushQueuedNow() {
	defer sc.handlers.Done()
	runtime.Gosched()
	// Cleared first: a frame written after this point either is in this
	// flush or queues one of its own.
	sc.flushQueued.Store(false)
	sc.flush()
}

// spawn runs fn on a goroutine of Config.Go's, else one of its own.
func (sc *Conn) spawn(fn func()) {
	if sc.cfg.Go != nil {
		sc.cfg.Go(fn)
	} else {
		go fn()
	}
}

// reserve takes up to want bytes of the send windows of the connection and
// of s, waiting (at most WriteTimeout) while either is shut.
func (sc *Conn) reserve(s *Stream, want int) (int, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var stall *time.Timer
	stalled := false
	defer func() {
		if stall != nil {
			stall.Stop()
		}
	}()
	for flushed := false; ; {
		if s.reset || sc.closed {
			return 0, ErrStreamReset
		}
		if n := min(int64(want), sc.sendWindow, s.sendWindow, int64(sc.peerFrame)); n > 0 {
			sc.sendWindow -= n
			s.sendWindow -= n
			return int(n), nil
		}
		if stalled {
			return 0, ErrStalled
		}
		if !flushed {
			// What was written may be what the client waits for before
			// it opens the window.
			sc.mu.Unlock()
			sc.flush()
			sc.mu.Lock()
			flushed = true
			continue
		}
		if stall == nil {
			stall = time.AfterFunc(sc.cfg.WriteTimeout, func() {
				sc.mu.Lock()
				stalled = true
				sc.cond.Broadcast()
				sc.mu.Unlock()
			})
		}
		sc.cond.Wait()
	}
}
