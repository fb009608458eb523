package proxy

import (
	"bufio"
	"io"
	"net"
	"time"
)

// A body copy reads from a reader (buffered bytes first) and writes to a
// buffered writer. It flushes the writer whenever it is about to wait for
// the network, so that streamed bodies flow as they come, and sets the
// read deadline before each such wait.

// bodyCopier copies message bodies of one direction.
type bodyCopier struct {
	src     *reader
	dst     *bufio.Writer
	timeout time.Duration // per wait for input
	written int64         // body bytes written to dst by the last copy
}

// more makes buffered input available, flushing dst first.
func (bc *bodyCopier) more() error {
	if err := bc.dst.Flush(); err != nil {
		return &writeError{err}
	}
	bc.src.extendDeadline(time.Now(), bc.timeout)
	if err := bc.src.fill(); err != nil {
		return &readError{err}
	}
	return nil
}

// readError and writeError tell which side of a copy failed.
type (
	readError  struct{ err error }
	writeError struct{ err error }
)

func (e *readError) Error() string  { return "read: " + e.err.Error() }
func (e *readError) Unwrap() error  { return e.err }
func (e *writeError) Error() string { return "write: " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

func (bc *bodyCopier) write(p []byte) error {
	_, err := bc.dst.Write(p)
	bc.written += int64(len(p))
	if err != nil {
		return &writeError{err}
	}
	return nil
}

// copyN copies exactly n bytes.
func (bc *bodyCopier) copyN(n int64) error {
	bc.written = 0
	for n > 0 {
		b := bc.src.buffered()
		if len(b) == 0 {
			if err := bc.more(); err != nil {
				return err
			}
			continue
		}
		if int64(len(b)) > n {
			b = b[:n]
		}
		if err := bc.write(b); err != nil {
			return err
		}
		bc.src.consume(len(b))
		n -= int64(len(b))
	}
	return nil
}

// copyUntilEOF copies until the source closes (a response without length).
func (bc *bodyCopier) copyUntilEOF() error {
	bc.written = 0
	for {
		b := bc.src.buffered()
		if len(b) == 0 {
			err := bc.more()
			if re, ok := err.(*readError); ok && re.err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			continue
		}
		if err := bc.write(b); err != nil {
			return err
		}
		bc.src.consume(len(b))
	}
}

// copyChunked copies a chunked body up to and including its last chunk and
// trailers. With decode it writes only the data (for an HTTP/1.0 client);
// otherwise it writes the chunked encoding as it came.
func (bc *bodyCopier) copyChunked(decode bool) error {
	bc.written = 0
	for {
		line, err := bc.line()
		if err != nil {
			return err
		}
		size, ok := chunkSize(line)
		if !ok {
			return &readError{errMalformed}
		}
		if !decode {
			if err := bc.writeLine(line); err != nil {
				return err
			}
		}
		if size == 0 {
			// Trailers, then the blank line.
			for {
				t, err := bc.line()
				if err != nil {
					return err
				}
				if !decode {
					if err := bc.writeLine(t); err != nil {
						return err
					}
				}
				if len(t) == 0 {
					return nil
				}
			}
		}
		if err := bc.copyN(size); err != nil {
			return err
		}
		end, err := bc.line()
		if err != nil {
			return err
		}
		if len(end) != 0 {
			return &readError{errMalformed}
		}
		if !decode {
			if err := bc.writeLine(nil); err != nil {
				return err
			}
		}
	}
}

func (bc *bodyCopier) line() ([]byte, error) {
	for {
		if len(bc.src.buffered()) == 0 {
			if err := bc.more(); err != nil {
				return nil, err
			}
		}
		b := bc.src.buffered()
		if i := indexLF(b); i >= 0 {
			bc.src.consume(i + 1)
			if i == 0 || b[i-1] != '\r' {
				return nil, &readError{errMalformed}
			}
			return b[:i-1], nil
		}
		if err := bc.more(); err != nil {
			return nil, err
		}
	}
}

func (bc *bodyCopier) writeLine(l []byte) error {
	if err := bc.write(l); err != nil {
		return err
	}
	return bc.write(crlf)
}

func indexLF(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// chunkSize parses a chunk-size line, ignoring chunk extensions.
func chunkSize(line []byte) (int64, bool) {
	var n int64
	digits := 0
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		case c == ';' || c == ' ' || c == '\t':
			return n, digits > 0
		default:
			return 0, false
		}
		if digits++; digits > 15 {
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, digits > 0
}

// tunnel copies both ways between a client and an upstream connection
// after a protocol switch (WebSocket), passing half-closes along, until
// both directions end.
func tunnel(client net.Conn, cr *reader, up net.Conn, ur *reader) {
	cr.setDeadline(time.Time{})
	ur.setDeadline(time.Time{})
	client.SetWriteDeadline(time.Time{})
	up.SetWriteDeadline(time.Time{})
	// The readers hold what came after the heads, then read on.
	join(client, cr, up, ur)
}

// join copies a's input (read from ar) to b and b's (from br) to a,
// passing each half-close along, until both directions have ended.
func join(a net.Conn, ar io.Reader, b net.Conn, br io.Reader) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(b, ar)
		closeWrite(b)
	}()
	io.Copy(a, br)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}
