package h1

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// ReadBufferSize is a Reader's initial buffer. A head that does not fit
// grows it, up to the Reader's limit.
const ReadBufferSize = 4 << 10

// Conn is what a Reader reads: a net.Conn, or anything with a read
// deadline.
type Conn interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// Reader buffers one connection's input. Heads are parsed in place in its
// buffer; body copies drain the buffer before reading the connection.
type Reader struct {
	c    Conn
	buf  []byte // nil until a read needs it, and after Release
	r, w int
	max  int       // the buffer may grow to this size to hold a head
	dl   time.Time // the read deadline last set on c
	// pooled holds buf while it is one of bufPool's (its initial size),
	// so that Release and the next read move it without allocating.
	pooled *[]byte
}

// bufPool holds the initial buffers of Readers that wait with nothing
// buffered (Release): an idle keep-alive connection holds none.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, ReadBufferSize)
	return &b
}}

// NewReader returns a Reader of c whose heads may be up to max bytes. Its
// buffer comes with the first read.
func NewReader(c Conn, max int) *Reader {
	return &Reader{c: c, max: max}
}

// Release gives the buffer back to the pool when nothing is buffered
// (and it never grew): a Reader about to wait a long time for input holds
// no memory of its own; the next read takes a buffer again.
func (rd *Reader) Release() {
	if rd.r != rd.w || rd.pooled == nil {
		return
	}
	bufPool.Put(rd.pooled)
	rd.buf, rd.pooled, rd.r, rd.w = nil, nil, 0, 0
}

// acquire takes a buffer from the pool.
func (rd *Reader) acquire() {
	rd.pooled = bufPool.Get().(*[]byte)
	rd.buf, rd.r, rd.w = *rd.pooled, 0, 0
}

// Reset makes rd read c, with nothing buffered.
func (rd *Reader) Reset(c Conn) {
	rd.c = c
	rd.r, rd.w = 0, 0
	rd.dl = time.Time{}
}

// Small reports whether the buffer has its initial size (it never grew
// for a large head) or is released, which makes the Reader worth keeping
// for reuse.
func (rd *Reader) Small() bool { return len(rd.buf) <= ReadBufferSize }

// ExtendDeadline pushes the read deadline to now+timeout, lazily: moving a
// deadline resets a runtime timer, so it moves only once less than half the
// timeout is left. A wait thus times out after timeout/2 to timeout.
func (rd *Reader) ExtendDeadline(now time.Time, timeout time.Duration) {
	if rd.dl.Sub(now) < timeout/2 {
		rd.SetDeadline(now.Add(timeout))
	}
}

// ExtendDeadlineNear is ExtendDeadline for a timeout an operator chose:
// the deadline moves whenever it is more than a tenth of the timeout (at
// most a second) short of now+timeout, so a wait times out after 90% to
// 100% of it (within a second), while a busy connection still resets its
// timer rarely.
func (rd *Reader) ExtendDeadlineNear(now time.Time, timeout time.Duration) {
	slack := min(timeout/10, time.Second)
	if rd.dl.Sub(now) < timeout-slack {
		rd.SetDeadline(now.Add(timeout))
	}
}

// Deadline returns the read deadline last set.
func (rd *Reader) Deadline() time.Time { return rd.dl }

// SetDeadline sets the read deadline to t.
func (rd *Reader) SetDeadline(t time.Time) {
	rd.dl = t
	rd.c.SetReadDeadline(t)
}

// Buffered returns the bytes read and not yet consumed.
func (rd *Reader) Buffered() []byte { return rd.buf[rd.r:rd.w] }

// Consume drops the first n buffered bytes.
func (rd *Reader) Consume(n int) { rd.r += n }

// Fill reads once from the connection, making room first: it moves unread
// bytes to the front, or grows the buffer (up to the limit) when it is
// full, or fails with ErrHeadTooLarge.
func (rd *Reader) Fill() error {
	if err := rd.makeRoom(); err != nil {
		return err
	}
	n, err := rd.c.Read(rd.buf[rd.w:])
	return rd.advance(n, err)
}

// FillFrom is Fill with read in place of the connection's Read, for a
// caller that reads the connection its own way. It also reports whether
// the read returned less than it had room for: a socket's read that does
// so left nothing behind.
func (rd *Reader) FillFrom(read func([]byte) (int, error)) (short bool, err error) {
	if err := rd.makeRoom(); err != nil {
		return false, err
	}
	room := len(rd.buf) - rd.w
	n, err := read(rd.buf[rd.w:])
	return n < room, rd.advance(n, err)
}

// makeRoom makes room at the end of the buffer for a read.
func (rd *Reader) makeRoom() error {
	if rd.buf == nil {
		rd.acquire()
		return nil
	}
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
			return ErrHeadTooLarge
		}
		nb := make([]byte, min(2*len(rd.buf), rd.max))
		rd.w = copy(nb, rd.buf[rd.r:rd.w])
		rd.r = 0
		if rd.pooled != nil { // the initial buffer goes back
			bufPool.Put(rd.pooled)
			rd.pooled = nil
		}
		rd.buf = nb
	}
	return nil
}

// advance takes in the n bytes a read returned, with its error.
func (rd *Reader) advance(n int, err error) error {
	rd.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// HasHead reports whether a whole request head is buffered.
func (rd *Reader) HasHead() bool {
	b, _ := rd.skipEmptyLines(false)
	end, _ := headEnd(b, 0)
	return end > 0
}

// ReadRequestHead returns the next request head (request line and field
// lines, up to and including the empty line), consuming it. The slice is
// valid until the next Fill. Empty lines before it are skipped (RFC 9112
// §2.2). The head is not checked here: Request.Parse does that.
func (rd *Reader) ReadRequestHead() ([]byte, error) { return rd.readHead(true) }

// ReadResponseHead is ReadRequestHead for a response head; nothing may
// come before it.
func (rd *Reader) ReadResponseHead() ([]byte, error) { return rd.readHead(false) }

func (rd *Reader) readHead(skipEmpty bool) ([]byte, error) {
	from := 0
	for {
		b := rd.Buffered()
		if skipEmpty {
			var skipped bool
			if b, skipped = rd.skipEmptyLines(true); skipped {
				from = 0
			}
		}
		end, next := headEnd(b, from)
		if end > 0 {
			rd.Consume(end)
			return b[:end], nil
		}
		from = next
		if err := rd.Fill(); err != nil {
			return nil, err
		}
	}
}

// skipEmptyLines returns the buffered bytes after any empty lines (CRLF or
// LF) at their start, consuming those when consume is set, and whether
// there were any.
func (rd *Reader) skipEmptyLines(consume bool) ([]byte, bool) {
	b := rd.Buffered()
	n := 0
	for {
		switch {
		case len(b) > n && b[n] == '\n':
			n++
			continue
		case len(b) > n+1 && b[n] == '\r' && b[n+1] == '\n':
			n += 2
			continue
		}
		break
	}
	if consume {
		rd.Consume(n)
	}
	return b[n:], n > 0
}

// headEnd looks in b, from index from on, for the empty line that ends a
// head: a line end (LF, or CRLF) followed by CRLF or LF. It returns the
// head's length, or 0 and the index to resume from once more is buffered.
func headEnd(b []byte, from int) (end, next int) {
	for {
		i := bytes.IndexByte(b[from:], '\n')
		if i < 0 {
			return 0, len(b)
		}
		i += from
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2, 0
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3, 0
		case i+1 == len(b), i+2 == len(b) && b[i+1] == '\r':
			return 0, i // undecided until more arrives
		}
		from = i + 1
	}
}

// Read reads body bytes: buffered ones first, then from the connection.
func (rd *Reader) Read(p []byte) (int, error) {
	if rd.r < rd.w {
		n := copy(p, rd.buf[rd.r:rd.w])
		rd.r += n
		return n, nil
	}
	if len(p) >= max(len(rd.buf), ReadBufferSize) {
		return rd.c.Read(p)
	}
	if err := rd.Fill(); err != nil {
		return 0, err
	}
	n := copy(p, rd.buf[rd.r:rd.w])
	rd.r += n
	return n, nil
}
