package h1

import "bytes"

// Limits on a head's fields, so that processing a head stays linear in its
// size (issue 7, class 5).
const (
	// MaxFields bounds the header fields of a head, and the trailer
	// fields of a chunked body. HAProxy's default is 101, Apache's 100.
	MaxFields = 100
	// MaxConnectionNames bounds the field names a Connection header may
	// list: filtering them costs at most MaxFields × MaxConnectionNames
	// comparisons.
	MaxConnectionNames = 16
)

// Field is one header field of a head; its slices point into the head.
type Field struct {
	Name  []byte
	Value []byte // without surrounding whitespace
	// drop marks a field baton does not forward as it came: hop-by-hop,
	// framing, or one it writes itself.
	drop bool
}

// Dropped reports whether baton does not forward the field as it came:
// it is hop-by-hop or framing, or one baton writes itself.
func (f *Field) Dropped() bool { return f.drop }

// nextLine returns b's first line, without its line end (LF, or CRLF),
// and the rest. ok is false when b has no LF. A CR elsewhere in the line
// stays in it, for the character checks to refuse.
func nextLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, nil, false
	}
	line, rest = b[:i], b[i+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest, true
}

// parseFields appends the field lines of b, up to the empty line that ends
// a head, to fs. Field names must be tokens, directly followed by the
// colon (RFC 9112 §5.1); values may hold VCHAR, obs-text, SP and HTAB only
// (RFC 9110 §5.5), which refuses CR, LF and NUL; a line that starts with
// whitespace is obsolete folding (RFC 9112 §5.2), refused.
func parseFields(fs []Field, b []byte) ([]Field, error) {
	for {
		line, rest, ok := nextLine(b)
		if !ok {
			return fs, errFieldName
		}
		if len(line) == 0 {
			return fs, nil
		}
		f, err := parseField(line)
		if err != nil {
			return fs, err
		}
		if len(fs) == MaxFields {
			return fs, ErrTooManyFields
		}
		fs = append(fs, f)
		b = rest
	}
}

// parseField parses one field line.
func parseField(line []byte) (Field, error) {
	if line[0] == ' ' || line[0] == '\t' {
		return Field{}, errObsFold
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return Field{}, errFieldName
	}
	v := line[colon+1:]
	for _, c := range v {
		if !valueChars[c] {
			if c == '\r' {
				return Field{}, errBareCR
			}
			return Field{}, errFieldValue
		}
	}
	return Field{Name: line[:colon], Value: trimOWS(v)}, nil
}

// forList calls fn for each element of a comma-separated list value (RFC
// 9110 §5.6.1), without surrounding whitespace; empty elements are
// skipped.
func forList(v []byte, fn func([]byte)) {
	for len(v) > 0 {
		var el []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			el, v = v[:i], v[i+1:]
		} else {
			el, v = v, nil
		}
		if el = trimOWS(el); len(el) > 0 {
			fn(el)
		}
	}
}

// connection is what a head's Connection fields say.
type connection struct {
	close, keepAlive, upgrade bool
	names                     [][]byte // other options: fields to drop
	tooMany                   bool
}

func (c *connection) reset() {
	*c = connection{names: c.names[:0]}
}

// add reads one Connection field value.
func (c *connection) add(v []byte) {
	forList(v, func(tok []byte) {
		switch {
		case EqualFold(tok, "close"):
			c.close = true
		case EqualFold(tok, "keep-alive"):
			c.keepAlive = true
		case EqualFold(tok, "upgrade"):
			c.upgrade = true
		case len(c.names) == MaxConnectionNames:
			c.tooMany = true
		default:
			c.names = append(c.names, tok)
		}
	})
}

// dropNamed marks the fields that the Connection options name.
func (c *connection) dropNamed(fs []Field) {
	for _, name := range c.names {
		for i := range fs {
			if !fs[i].drop && equalFoldBytes(fs[i].Name, name) {
				fs[i].drop = true
			}
		}
	}
}

// isHopByHop reports whether a field is connection-specific whatever
// Connection says (RFC 9110 §7.6.1), or frames the message.
func isHopByHop(name []byte) bool {
	switch len(name) {
	case 2:
		return EqualFold(name, "te")
	case 7:
		return EqualFold(name, "upgrade") || EqualFold(name, "trailer")
	case 10:
		return EqualFold(name, "connection") || EqualFold(name, "keep-alive")
	case 14:
		return EqualFold(name, "content-length")
	case 16:
		return EqualFold(name, "proxy-connection")
	case 17:
		return EqualFold(name, "transfer-encoding")
	}
	return false
}

// parseLength parses a Content-Length value: 1 to 18 digits, nothing else
// (no sign, no list, no whitespace inside).
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseTransferEncoding checks a Transfer-Encoding value: exactly the
// coding "chunked" is the one baton relays. A list whose last coding is
// chunked asks for codings baton does not implement (501, RFC 9112 §6.1;
// nginx and net/http answer the same, empty elements included: ", chunked"
// too); chunked applied twice, or any other list, leaves the length
// unknowable (400, RFC 9112 §6.3, §7.1).
func parseTransferEncoding(v []byte) error {
	if EqualFold(v, "chunked") {
		return nil
	}
	chunked := 0
	var last []byte
	for el := range bytes.SplitSeq(v, []byte(",")) {
		last = trimOWS(el)
		if EqualFold(last, "chunked") {
			chunked++
		}
	}
	if !EqualFold(last, "chunked") || chunked > 1 {
		return errTENotChunked
	}
	return errTEUnsupported
}
