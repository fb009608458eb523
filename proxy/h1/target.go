package h1

import (
	"bytes"
	"net/netip"
)

// Request-targets (RFC 9112 §3.2) and the normalised path that routes match
// and backends receive (RFC 3986 §5.2.4, §6.2.2).

// parseTarget checks the request-target t of a request with the given
// method and sets r.Path, r.Query and, for absolute-form, r.Authority.
func (r *Request) parseTarget(t, method []byte) error {
	if len(t) == 0 {
		return errTarget
	}
	// One pass checks the characters and notes whether the path may need
	// normalising (a '%', a '\', or a '.' after a '/').
	q := -1
	special, nonASCII := false, false
	for i, c := range t {
		if !targetChars[c] {
			return errTarget
		}
		switch c {
		case '?':
			if q < 0 {
				q = i
			}
		case '%', '\\', ';':
			special = special || q < 0
		case '.':
			special = special || (q < 0 && i > 0 && t[i-1] == '/')
		default:
			nonASCII = nonASCII || c >= 0x80
		}
	}
	special = special || nonASCII
	if q >= 0 {
		r.Query = t[q:]
		t = t[:q]
		if nonASCII {
			// Raw bytes above 0x7F are accepted, as nginx and net/http
			// do, but forwarded percent-encoded: what the backend gets is
			// a valid URI (RFC 3986 §2.1).
			r.queryBuf = appendEscaped(r.queryBuf[:0], r.Query)
			r.Query = r.queryBuf
		}
	}
	switch {
	case len(t) > 0 && t[0] == '/':
	case len(t) == 1 && t[0] == '*' && q < 0:
		if string(method) != "OPTIONS" {
			return errTargetForm
		}
		r.Path, r.asterisk = t, true
		return nil
	default:
		var err error
		if t, err = r.parseAbsolute(t); err != nil {
			return err
		}
	}
	if !special {
		r.Path = t
		return nil
	}
	p, err := NormalizePath(r.pathBuf[:0], t)
	if err != nil {
		return err
	}
	r.pathBuf = p
	r.Path = p
	return nil
}

// parseAbsolute parses an absolute-form target without its query
// ("http://authority/path"), sets r.Authority and returns the path.
func (r *Request) parseAbsolute(t []byte) ([]byte, error) {
	i := bytes.Index(t, []byte("://"))
	if i < 0 {
		return nil, errTargetForm // authority-form, or no form at all
	}
	if !EqualFold(t[:i], "http") && !EqualFold(t[:i], "https") {
		return nil, errTargetScheme
	}
	rest := t[i+3:]
	end := bytes.IndexByte(rest, '/')
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	if bytes.IndexByte(auth, '@') >= 0 {
		return nil, errTargetUserinfo
	}
	if len(auth) == 0 || !validHost(auth) {
		return nil, errHost
	}
	r.Authority, r.absolute = auth, true
	if end == len(rest) {
		return slash, nil
	}
	return rest[end:], nil
}

var slash = []byte("/")

// validHost reports whether h is a valid uri-host [ ":" port ] (RFC 3986
// §3.2.2): an IPv6 literal in brackets, or a reg-name or IPv4 address
// without percent-encoding (real clients send IDNs in punycode), with an
// optional port of up to 5 digits. An empty host is not valid: every
// http URI has an authority (RFC 9110 §4.2.1), and nginx refuses it too.
func validHost(h []byte) bool {
	if len(h) == 0 {
		return false
	}
	var port []byte
	if h[0] == '[' {
		end := bytes.IndexByte(h, ']')
		if end < 0 {
			return false
		}
		if a, err := netip.ParseAddr(string(h[1:end])); err != nil || !a.Is6() || a.Zone() != "" {
			return false
		}
		switch rest := h[end+1:]; {
		case len(rest) == 0:
		case rest[0] == ':':
			port = rest[1:]
			if len(port) == 0 {
				return false
			}
		default:
			return false
		}
	} else {
		if i := bytes.IndexByte(h, ':'); i >= 0 {
			h, port = h[:i], h[i+1:]
			if len(port) == 0 {
				return false
			}
		}
		if len(h) == 0 {
			return false
		}
		for _, c := range h {
			if !hostChars[c] {
				return false
			}
		}
	}
	if len(port) > 5 {
		return false
	}
	for _, c := range port {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// NormalizePath appends to dst the normalised form of the path p (which
// starts with '/', and whose characters are already checked): percent-
// encoded unreserved characters decoded, other escapes in upper case
// (RFC 3986 §6.2.2), bytes above 0x7F percent-encoded, dot-segments removed
// (§5.2.4). It refuses an invalid or NUL escape, a path that climbs above
// the root, and a "." or ".." hidden behind an encoded slash, a backslash
// or a path parameter ("/a%2F..%2Fb", "/a\..\b", "/a/..;/b"), which a
// backend that decodes them (or Tomcat, which strips ";...") would resolve
// outside the route that matched. Empty segments are kept.
func NormalizePath(dst, p []byte) ([]byte, error) {
	start := len(dst)
	// Decode.
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c >= 0x80 {
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
			continue
		}
		if c != '%' {
			dst = append(dst, c)
			continue
		}
		if i+2 >= len(p) {
			return dst, errEscape
		}
		hi, lo := unhex(p[i+1]), unhex(p[i+2])
		if hi < 0 || lo < 0 {
			return dst, errEscape
		}
		v := byte(hi<<4 | lo)
		switch {
		case v == 0:
			return dst, errEscapeNUL
		case unreservedChars[v]:
			dst = append(dst, v)
		default:
			dst = append(dst, '%', upperHex[hi], upperHex[lo])
		}
		i += 2
	}
	// Remove dot-segments, in place: the output never outgrows the input.
	// Segment by segment, w is the end of the output.
	b := dst[start:]
	w := 0
	for r := 0; r < len(b); {
		// b[r] is '/': the segment runs to the next '/'.
		end := r + 1
		for end < len(b) && b[end] != '/' {
			end++
		}
		seg := b[r+1 : end]
		last := end == len(b)
		switch {
		case len(seg) == 1 && seg[0] == '.':
			if last {
				b[w] = '/'
				w++
			}
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			if w == 0 {
				return dst, errPathAboveRoot
			}
			w = bytes.LastIndexByte(b[:w], '/')
			if last {
				b[w] = '/'
				w++
			}
		default:
			if hiddenDots(seg) {
				return dst, errPathHiddenDots
			}
			w += copy(b[w:], b[r:end])
		}
		r = end
	}
	if w == 0 {
		b[0] = '/'
		w = 1
	}
	return dst[:start+w], nil
}

const upperHex = "0123456789ABCDEF"

// hiddenDots reports whether a segment holds "." or ".." as a piece
// between separators that some backends honour and RFC 3986 does not: a
// backslash, an encoded slash or backslash (%2F, %5C; upper case by now),
// or the ';' that starts a path parameter (Tomcat, Jetty: "..;").
func hiddenDots(seg []byte) bool {
	if bytes.IndexByte(seg, '\\') < 0 && bytes.IndexByte(seg, '%') < 0 && bytes.IndexByte(seg, ';') < 0 {
		return false
	}
	found, separated := false, false
	piece := 0 // start of the current piece
	check := func(end int) {
		p := seg[piece:end]
		if (len(p) == 1 && p[0] == '.') || (len(p) == 2 && p[0] == '.' && p[1] == '.') {
			found = true
		}
	}
	for i := 0; i < len(seg); i++ {
		n := 0
		switch {
		case seg[i] == '\\' || seg[i] == ';':
			n = 1
		case seg[i] == '%' && i+2 < len(seg) && (seg[i+1] == '2' && seg[i+2] == 'F' || seg[i+1] == '5' && seg[i+2] == 'C'):
			n = 3
		default:
			continue
		}
		separated = true
		check(i)
		i += n - 1
		piece = i + 1
	}
	check(len(seg))
	return separated && found
}

// appendEscaped appends b to dst with every byte above 0x7F
// percent-encoded.
func appendEscaped(dst, b []byte) []byte {
	for _, c := range b {
		if c >= 0x80 {
			dst = append(dst, '%', upperHex[c>>4], upperHex[c&15])
		} else {
			dst = append(dst, c)
		}
	}
	return dst
}
