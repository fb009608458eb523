package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"time"
)

// Read buffer sizes. A connection starts with a small buffer; a request or
// response head that does not fit grows it up to the head limit.
const (
	readBufSize  = 4 << 10
	writeBufSize = 4 << 10
)

var (
	errHeadTooLarge = errors.New("head too large")
	errMalformed    = errors.New("malformed message")
)

// reader buffers one connection's input. Heads are parsed in place in its
// buffer; body copies drain the buffer before reading the connection.
type reader struct {
	c    net.Conn
	buf  []byte
	r, w int
	max  int       // the buffer may grow to this size to hold a head
	dl   time.Time // the read deadline last set on c
}

// extendDeadline pushes the read deadline to now+timeout, lazily: moving a
// deadline resets a runtime timer, so it moves only once less than half the
// timeout is left. A wait thus times out after timeout/2 to timeout.
func (rd *reader) extendDeadline(now time.Time, timeout time.Duration) {
	if rd.dl.Sub(now) < timeout/2 {
		rd.setDeadline(now.Add(timeout))
	}
}

// setDeadline sets the read deadline to t.
func (rd *reader) setDeadline(t time.Time) {
	rd.dl = t
	rd.c.SetReadDeadline(t)
}

// hasHead reports whether a whole head is buffered.
func (rd *reader) hasHead() bool { return bytes.Contains(rd.buffered(), crlfcrlf) }

func newReader(c net.Conn, max int) *reader {
	return &reader{c: c, buf: make([]byte, readBufSize), max: max}
}

func (rd *reader) reset(c net.Conn) {
	rd.c = c
	rd.r, rd.w = 0, 0
	rd.dl = time.Time{}
}

// buffered returns the bytes read and not yet consumed.
func (rd *reader) buffered() []byte { return rd.buf[rd.r:rd.w] }

func (rd *reader) consume(n int) { rd.r += n }

// fill reads once from the connection, making room first: it moves unread
// bytes to the front, or grows the buffer (up to max) when it is full.
func (rd *reader) fill() error {
	if rd.r > 0 {
		if rd.r == rd.w {
			rd.r, rd.w = 0, 0
		} else if rd.w == len(rd.buf) {
			n := copy(rd.buf, rd.buf[rd.r:rd.w])
			rd.r, rd.w = 0, n
		}
	}
	if rd.w == len(rd.buf) {
		if len(rd.buf) >= rd.max {
			return errHeadTooLarge
		}
		nb := make([]byte, min(2*len(rd.buf), rd.max))
		rd.w = copy(nb, rd.buf[rd.r:rd.w])
		rd.r = 0
		rd.buf = nb
	}
	n, err := rd.c.Read(rd.buf[rd.w:])
	rd.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// readHead returns the next head (request or response line and headers,
// up to and including the blank line), consuming it. The slice is valid
// until the next fill. Empty lines before a head are skipped.
func (rd *reader) readHead() ([]byte, error) {
	scanned := 0
	for {
		b := rd.buffered()
		for len(b) >= 2 && b[0] == '\r' && b[1] == '\n' {
			rd.consume(2)
			b = rd.buffered()
			scanned = 0
		}
		if i := bytes.Index(b[max(scanned-3, 0):], crlfcrlf); i >= 0 {
			end := max(scanned-3, 0) + i + 4
			head := b[:end]
			rd.consume(end)
			return head, nil
		}
		scanned = len(b)
		if err := rd.fill(); err != nil {
			return nil, err
		}
	}
}

// Read reads body bytes: buffered ones first, then from the connection.
func (rd *reader) Read(p []byte) (int, error) {
	if rd.r < rd.w {
		n := copy(p, rd.buf[rd.r:rd.w])
		rd.r += n
		return n, nil
	}
	if len(p) >= len(rd.buf) {
		return rd.c.Read(p)
	}
	if err := rd.fill(); err != nil {
		return 0, err
	}
	n := copy(p, rd.buf[rd.r:rd.w])
	rd.r += n
	return n, nil
}

var crlfcrlf = []byte("\r\n\r\n")
