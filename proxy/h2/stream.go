package h2

import (
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Request is a request's head as HTTP/2 carries it.
type Request struct {
	// The pseudo-header fields, and the other fields as received
	// (lower-case names; values checked, RFC 9113 §8.2.1).
	Method, Scheme, Authority, Path string
	Fields                          []hpack.HeaderField
	// ContentLength is the request's content-length, or -1.
	ContentLength int64
	// TooLarge is set when the request's header fields passed
	// MaxHeaderListSize: they were dropped, and the answer is 431.
	TooLarge bool
}

// Stream is one request and its response.
type Stream struct {
	Request
	sc *Conn
	id uint32

	// Under sc.mu.
	sendWindow  int64
	recvWindow  int64 // what the client may still send on the stream
	recvTotal   int64 // body bytes received
	unacked     int64 // body bytes read, not yet given back
	remoteDone  bool  // the client ended its side (END_STREAM, or reset)
	reset       bool  // reset by either side, or the connection ended
	handlerDone bool
	removed     bool
	body        []byte // received, not yet read (from bodyR on)
	bodyR       int
	bodyWake    chan struct{}
	onReset     func()
	stopRead    bool                // StopReading was called
	trailers    []hpack.HeaderField // the request's trailers, once remoteDone

	// The handler's.
	rdl         time.Time
	out         *outBufs // the response's buffers, from outPool while the handler runs
	headersSent bool
	ended       bool
}

var errMalformed = errors.New("malformed request")

// ID is the stream's identifier.
func (s *Stream) ID() uint32 { return s.id }

// HasBody reports whether a body may follow the request's head.
func (s *Stream) HasBody() bool {
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	return !(s.remoteDone && s.bodyR == len(s.body)) && s.ContentLength != 0
}

// WouldWait reports whether Read would wait: nothing of the body is
// buffered, and the client has not ended it.
func (s *Stream) WouldWait() bool {
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	return s.bodyR == len(s.body) && !s.remoteDone && !s.reset
}

// ParseRequest checks a request's header fields, as a header block
// decoded them, against RFC 9113 §8.2 and §8.3.1 (endStream: the HEADERS
// frame ended the stream): field names are lower-case tokens, values hold
// no control character (CR, LF, NUL...) and no surrounding whitespace,
// pseudo-header fields come first, once each, and are a request's; no
// connection-specific field, TE only "trailers", content-lengths that
// agree, and none announcing a body that cannot come. The Framer checks
// the names, values and pseudo-fields' place too: these checks do not
// depend on it.
func ParseRequest(fields []hpack.HeaderField, endStream bool) (Request, error) {
	r := Request{ContentLength: -1}
	regular := -1
	for i, hf := range fields {
		v := hf.Value
		if !httpguts.ValidHeaderFieldValue(v) || v != "" && (isSpace(v[0]) || isSpace(v[len(v)-1])) {
			return r, errMalformed
		}
		if hf.IsPseudo() {
			if regular >= 0 {
				return r, errMalformed
			}
			var dst *string
			switch hf.Name {
			case ":method":
				dst = &r.Method
			case ":scheme":
				dst = &r.Scheme
			case ":authority":
				dst = &r.Authority
			case ":path":
				dst = &r.Path
			default:
				return r, errMalformed // :status, and :protocol without extended CONNECT
			}
			for _, prev := range fields[:i] {
				if prev.Name == hf.Name {
					return r, errMalformed
				}
			}
			*dst = hf.Value
			continue
		}
		if regular < 0 {
			regular = i
		}
		if !validWireName(hf.Name) {
			return r, errMalformed
		}
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return r, errMalformed
		case "te":
			if v != "trailers" {
				return r, errMalformed
			}
		case "content-length":
			n, err := strconv.ParseUint(v, 10, 63)
			if err != nil || v[0] == '+' || (r.ContentLength >= 0 && r.ContentLength != int64(n)) {
				return r, errMalformed
			}
			r.ContentLength = int64(n)
		}
	}
	if regular >= 0 {
		r.Fields = fields[regular:]
	}
	switch {
	case r.Method == "":
		return r, errMalformed
	case r.Method == "CONNECT":
		if r.Scheme != "" || r.Path != "" || r.Authority == "" {
			return r, errMalformed
		}
	case r.Scheme == "" || r.Path == "":
		return r, errMalformed
	}
	if endStream && r.ContentLength > 0 {
		return r, errMalformed // a length announced, and no body
	}
	return r, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' }

// resetLocked marks the stream reset: waits end, writes fail, and the
// handler's onReset runs (aborting its upstream wait).
func (s *Stream) resetLocked() {
	if s.reset {
		return
	}
	s.reset = true
	s.wake()
	s.sc.cond.Broadcast()
	if s.onReset != nil {
		s.onReset()
	}
}

// abortLocked ends the client's side of the stream with a reset (by the
// client, or by baton for a stream error): nothing more is read from it
// or sent on it, and the stream is forgotten once its handler is done.
func (s *Stream) abortLocked() {
	s.remoteDone = true
	s.resetLocked()
	s.closeIfDoneLocked()
}

// closeIfDoneLocked forgets a stream both sides are done with.
func (s *Stream) closeIfDoneLocked() {
	if s.handlerDone && (s.remoteDone || s.reset) && !s.removed {
		s.removed = true
		delete(s.sc.streams, s.id)
	}
}

func (s *Stream) wake() {
	if s.bodyWake != nil {
		select {
		case s.bodyWake <- struct{}{}:
		default:
		}
	}
}

// OnReset sets fn to run (under the connection's lock: it must not block)
// when the stream is reset, at once if it is already.
func (s *Stream) OnReset(fn func()) {
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	s.onReset = fn
	if s.reset && fn != nil {
		fn()
	}
}

// SetReadDeadline bounds the wait for the body in Read.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.rdl = t
	return nil
}

// Read reads the request body: io.EOF at its end, ErrStreamReset when the
// stream is reset, os.ErrDeadlineExceeded past the read deadline. What is
// read is given back to the client's flow-control windows.
func (s *Stream) Read(p []byte) (int, error) {
	sc := s.sc
	sc.mu.Lock()
	for s.bodyR == len(s.body) {
		switch {
		case s.reset:
			sc.mu.Unlock()
			return 0, ErrStreamReset
		case s.stopRead:
			sc.mu.Unlock()
			return 0, ErrReadStopped
		case s.remoteDone:
			sc.mu.Unlock()
			return 0, io.EOF
		}
		if s.bodyWake == nil {
			s.bodyWake = make(chan struct{}, 1)
		}
		wake := s.bodyWake
		sc.mu.Unlock()
		if s.rdl.IsZero() {
			<-wake
		} else {
			d := time.Until(s.rdl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			select {
			case <-wake:
			case <-t.C:
			}
			t.Stop()
		}
		sc.mu.Lock()
	}
	n := copy(p, s.body[s.bodyR:])
	s.bodyR += n
	if s.bodyR == len(s.body) {
		s.body, s.bodyR = s.body[:0], 0
	}
	s.unacked += int64(n)
	sc.unacked += int64(n)
	sc.mu.Unlock()
	if err := sc.giveBack(s); err != nil {
		return n, err
	}
	return n, nil
}

// ErrReadStopped is what Read returns once StopReading was called.
var ErrReadStopped = errors.New("http2: reading the request body was stopped")

// StopReading ends a Read that waits for the body, and every later one,
// with ErrReadStopped. Unlike the handler's other methods, it may be
// called from any goroutine.
func (s *Stream) StopReading() {
	s.sc.mu.Lock()
	s.stopRead = true
	s.sc.mu.Unlock()
	s.wake()
}

// Trailers are the request's trailer fields (RFC 9113 §8.1), once Read
// has returned io.EOF; nil when the client sent none. Their names and
// values were checked as the head's; connection-specific fields and
// those that frame or route a message are left out (RFC 9110 §6.5.1).
func (s *Stream) Trailers() []hpack.HeaderField {
	s.sc.mu.Lock()
	defer s.sc.mu.Unlock()
	return s.trailers
}

// StartTrailers begins the response's trailer block: fields are added
// to it, without pseudo-header fields, before SendTrailers.
func (s *Stream) StartTrailers() *HeaderBlock {
	if s.out == nil {
		s.out = outPool.Get().(*outBufs)
	}
	s.out.hb.buf = s.out.hb.buf[:0]
	return &s.out.hb
}

// SendTrailers sends what Write holds, then the block StartTrailers
// began, which ends the stream.
func (s *Stream) SendTrailers() error {
	if s.out != nil && len(s.out.pending) > 0 {
		if err := s.sendData(s.out.pending, false); err != nil {
			return err
		}
		s.out.pending = s.out.pending[:0]
	}
	return s.SendHeaders(true)
}

// StartResponse begins the response's header block with status; fields
// are added to it before SendHeaders.
func (s *Stream) StartResponse(status int) *HeaderBlock {
	if s.out == nil {
		s.out = outPool.Get().(*outBufs)
	}
	s.out.hb.reset(status)
	return &s.out.hb
}

// SendHeaders sends the header block StartResponse began, ending the
// stream when end is set (a response without a body).
func (s *Stream) SendHeaders(end bool) error {
	sc := s.sc
	block := s.out.hb.Bytes()
	sc.lockWrite()
	sc.mu.Lock()
	reset, max := s.reset, sc.peerFrame
	sc.mu.Unlock()
	if reset {
		sc.unlockWrite(false)
		return ErrStreamReset
	}
	// HEADERS, then CONTINUATION frames for what does not fit, back to
	// back (RFC 9113 §6.10).
	typ, flags := http2.FrameHeaders, http2.Flags(0)
	if end {
		flags = http2.FlagHeadersEndStream
	}
	for {
		n := min(len(block), max)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		sc.frameLocked(typ, f, s.id, block[:n])
		block = block[n:]
		if len(block) == 0 {
			break
		}
		typ, flags = http2.FrameContinuation, 0
	}
	s.headersSent, s.ended = true, end
	err := sc.unlockWrite(false)
	if end && err == nil {
		sc.flushSoon()
	}
	return err
}

// Write sends body bytes, in DATA frames as full as the peer allows, as
// the flow-control windows open.
func (s *Stream) Write(p []byte) (int, error) {
	if s.out == nil {
		s.out = outPool.Get().(*outBufs)
	}
	o := s.out
	o.pending = append(o.pending, p...)
	if full := len(o.pending) - len(o.pending)%frameSize; full > 0 {
		if err := s.sendData(o.pending[:full], false); err != nil {
			return 0, err
		}
		o.pending = o.pending[:copy(o.pending, o.pending[full:])]
	}
	return len(p), nil
}

// Flush sends what Write holds, and has the connection flushed soon
// (flushSoon): before the stream's goroutine next waits, what it writes
// joins the same write.
func (s *Stream) Flush() error {
	if s.out != nil && len(s.out.pending) > 0 {
		if err := s.sendData(s.out.pending, false); err != nil {
			return err
		}
		s.out.pending = s.out.pending[:0]
	}
	s.sc.flushSoon()
	return nil
}

// End sends what Write holds and ends the stream.
func (s *Stream) End() error {
	var p []byte
	if s.out != nil {
		p = s.out.pending
		s.out.pending = p[:0]
	}
	err := s.sendData(p, true)
	s.ended = true
	return err
}

// outBufs are a response's buffers: its header block and the DATA not
// yet sent. They go back to outPool when the handler is done, so that a
// stream allocates none of them.
type outBufs struct {
	hb      HeaderBlock
	pending []byte
}

var outPool = sync.Pool{New: func() any { return new(outBufs) }}

func (s *Stream) sendData(p []byte, end bool) error {
	sc := s.sc
	for {
		n := 0
		if len(p) > 0 {
			var err error
			if n, err = sc.reserve(s, len(p)); err != nil {
				return err
			}
		}
		last := n == len(p)
		var flags http2.Flags
		if last && end {
			flags = http2.FlagDataEndStream
		}
		if err := sc.writeFrame(http2.FrameData, flags, s.id, p[:n], false); err != nil {
			return err
		}
		if last {
			if end {
				sc.flushSoon()
			}
			return nil
		}
		p = p[n:]
	}
}

// Reset aborts the stream with code (INTERNAL_ERROR for a response cut
// short).
func (s *Stream) Reset(code http2.ErrCode) {
	sc := s.sc
	sc.mu.Lock()
	was := s.reset
	s.resetLocked()
	sc.mu.Unlock()
	s.ended = true
	if !was {
		sc.writeRST(s.id, code)
	}
}

// finish ends the stream once its handler has returned: a response left
// unfinished is reset, a client still sending is asked to stop (RST_STREAM
// NO_ERROR after a complete response, RFC 9113 §8.1), and what the
// handler did not read is given back to the connection's window.
func (s *Stream) finish() {
	sc := s.sc
	if !s.ended {
		s.Reset(http2.ErrCodeInternal)
	}
	if o := s.out; o != nil {
		s.out = nil
		if cap(o.pending) <= 2*frameSize { // keep only small buffers
			o.pending = o.pending[:0]
			outPool.Put(o)
		}
	}
	sc.mu.Lock()
	s.handlerDone = true
	sc.active--
	stop := !s.remoteDone && !s.reset
	if stop {
		s.reset = true
	}
	sc.unacked += int64(len(s.body) - s.bodyR)
	s.body, s.bodyR = nil, 0
	s.onReset = nil
	s.closeIfDoneLocked()
	sc.mu.Unlock()
	if stop {
		sc.writeRST(s.id, http2.ErrCodeNo)
	}
	sc.giveBack(nil)
	sc.maybeFinish()
}
