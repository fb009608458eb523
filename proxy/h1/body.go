package h1

import (
	"bytes"
	"io"
	"strconv"
	"time"
)

// Writer is where a body copy writes: a bufio.Writer on a connection, or
// memory. Flush is called before every wait for input, so that a streamed
// body flows as it comes.
type Writer interface {
	io.Writer
	Flush() error
}

// Body copies one message body from a Reader to a Writer, checking its
// framing and framing it anew: a chunked body is written with baton's own
// chunk-size lines (extensions and trailers dropped), or decoded. Before
// each wait for input it flushes Dst and extends Src's read deadline by
// Timeout. A zero Body is ready for a new message once Src, Dst and
// Timeout are set.
type Body struct {
	Src     *Reader
	Dst     Writer
	Timeout time.Duration
	// Limit is the most body bytes (chunk data, for a chunked body) to
	// copy; beyond it the copy stops with ErrBodyTooLarge. 0: no limit.
	Limit int64
	// Written counts the body bytes copied (without chunk framing).
	Written int64

	// The state of a chunked copy, so that one stopped by Limit can go on
	// later (with a larger Limit, or another Dst).
	chunkLeft int64 // data bytes left in the current chunk
	dataEnd   bool  // the current chunk's data is done: its CRLF is next
}

// more makes more input available, flushing Dst first.
func (b *Body) more() error {
	if err := b.Dst.Flush(); err != nil {
		return &WriteError{err}
	}
	b.Src.ExtendDeadlineNear(time.Now(), b.Timeout)
	if err := b.Src.Fill(); err != nil {
		if err == ErrHeadTooLarge {
			return errChunkLine // a chunk line as long as the whole buffer
		}
		return &ReadError{err}
	}
	return nil
}

func (b *Body) write(p []byte) error {
	if _, err := b.Dst.Write(p); err != nil {
		return &WriteError{err}
	}
	return nil
}

// CopyN copies exactly n bytes: a body with a Content-Length.
func (b *Body) CopyN(n int64) error {
	if b.Limit > 0 && b.Written+n > b.Limit {
		return ErrBodyTooLarge
	}
	return b.copyN(n)
}

func (b *Body) copyN(n int64) error {
	for n > 0 {
		p := b.Src.Buffered()
		if len(p) == 0 {
			if err := b.more(); err != nil {
				return err
			}
			continue
		}
		if int64(len(p)) > n {
			p = p[:n]
		}
		if err := b.write(p); err != nil {
			return err
		}
		b.Src.Consume(len(p))
		b.Written += int64(len(p))
		n -= int64(len(p))
	}
	return nil
}

// CopyUntilEOF copies until the source closes: a response delimited by
// the end of its connection.
func (b *Body) CopyUntilEOF() error {
	for {
		p := b.Src.Buffered()
		if len(p) == 0 {
			err := b.more()
			if re, ok := err.(*ReadError); ok && re.Err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			continue
		}
		if b.Limit > 0 && b.Written+int64(len(p)) > b.Limit {
			return ErrBodyTooLarge
		}
		if err := b.write(p); err != nil {
			return err
		}
		b.Src.Consume(len(p))
		b.Written += int64(len(p))
	}
}

// CopyChunked copies a chunked body (RFC 9112 §7.1) up to and including
// its last chunk and trailer section. With decode it writes only the data;
// otherwise it writes the data in chunks of its own, and "0 CRLF CRLF" at
// the end. Every line of the framing must end in CRLF; chunk extensions
// must be well-formed and trailer fields valid, and both are dropped.
//
// When Limit stops it (ErrBodyTooLarge), what was written is complete
// chunks (or data), and a later call goes on from there.
func (b *Body) CopyChunked(decode bool) error {
	for {
		if b.dataEnd {
			line, err := b.line()
			if err != nil {
				return err
			}
			if len(line) != 0 {
				return errChunkEnd
			}
			b.dataEnd = false
		}
		if b.chunkLeft == 0 {
			line, err := b.line()
			if err != nil {
				return err
			}
			size, err := parseChunkSize(line)
			if err != nil {
				return err
			}
			if size == 0 {
				return b.trailers(decode)
			}
			b.chunkLeft = size
		}
		n := b.chunkLeft
		if b.Limit > 0 && b.Written+n > b.Limit {
			if n = b.Limit - b.Written; n == 0 {
				return ErrBodyTooLarge
			}
		}
		if !decode {
			var hex [16]byte
			if err := b.write(append(strconv.AppendInt(hex[:0], n, 16), '\r', '\n')); err != nil {
				return err
			}
		}
		if err := b.copyN(n); err != nil {
			return err
		}
		if !decode {
			if err := b.write(crlf); err != nil {
				return err
			}
		}
		b.chunkLeft -= n
		b.dataEnd = b.chunkLeft == 0
	}
}

var (
	crlf      = []byte("\r\n")
	lastChunk = []byte("0\r\n\r\n")
)

// trailers reads the trailer section after the last chunk, up to its
// empty line, checking each field.
func (b *Body) trailers(decode bool) error {
	for n := 0; ; n++ {
		line, err := b.line()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			if decode {
				return nil
			}
			return b.write(lastChunk)
		}
		if n == MaxFields {
			return errTooManyTrailer
		}
		if _, err := parseField(line); err != nil {
			return errTrailer
		}
	}
}

// line returns the next line of chunked framing without its CRLF,
// consuming it. A line that ends in a bare LF is refused.
func (b *Body) line() ([]byte, error) {
	from := 0
	for {
		p := b.Src.Buffered()
		if i := bytes.IndexByte(p[from:], '\n'); i >= 0 {
			i += from
			b.Src.Consume(i + 1)
			if i == 0 || p[i-1] != '\r' {
				return nil, errChunkLine
			}
			return p[:i-1], nil
		}
		from = len(p)
		if err := b.more(); err != nil {
			return nil, err
		}
	}
}

// parseChunkSize parses a chunk-size line without its CRLF:
//
//	chunk-size [ chunk-ext ]
//	chunk-size = 1*HEXDIG (at most 15 digits here)
//	chunk-ext  = *( BWS ";" BWS ext-name [ BWS "=" BWS ext-val ] )
//	ext-val    = token / quoted-string
func parseChunkSize(line []byte) (int64, error) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		d := unhex(line[i])
		if d < 0 {
			break
		}
		if i == 15 {
			return 0, errChunkSize
		}
		n = n<<4 | int64(d)
	}
	if i == 0 {
		return 0, errChunkSize
	}
	rest := line[i:]
	for len(rest) > 0 {
		rest = trimLeftOWS(rest)
		if len(rest) == 0 || rest[0] != ';' {
			return 0, errChunkExtension
		}
		rest = trimLeftOWS(rest[1:])
		name := tokenPrefix(rest)
		if len(name) == 0 {
			return 0, errChunkExtension
		}
		rest = rest[len(name):]
		if r := trimLeftOWS(rest); len(r) > 0 && r[0] == '=' {
			r = trimLeftOWS(r[1:])
			var val int
			if len(r) > 0 && r[0] == '"' {
				val = quotedStringLen(r)
			} else {
				val = len(tokenPrefix(r))
			}
			if val == 0 {
				return 0, errChunkExtension
			}
			rest = r[val:]
		}
	}
	return n, nil
}

func trimLeftOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// tokenPrefix returns the longest prefix of b that is made of token
// characters.
func tokenPrefix(b []byte) []byte {
	for i, c := range b {
		if !tokenChars[c] {
			return b[:i]
		}
	}
	return b
}

// quotedStringLen returns the length of the quoted-string at the start of
// b (RFC 9110 §5.6.4), or 0 when there is none.
func quotedStringLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 == len(b) || !valueChars[b[i+1]] {
				return 0
			}
			i++
		case !valueChars[c]:
			return 0
		}
	}
	return 0
}
