package proxy

import (
	"bytes"
)

// header is one header line of a head, split; both slices point into the
// reader's buffer.
type header struct {
	name, value []byte
	line        []byte // the whole line, without CRLF
}

// reqHead is a parsed request head. Its slices are valid until the client
// reader is filled again: everything that needs them happens before the
// body is read.
type reqHead struct {
	method, target []byte
	minor          int // HTTP/1.minor
	host           []byte
	contentLength  int64 // -1: none
	chunked        bool
	close          bool // the client asked to close, or speaks HTTP/1.0 without keep-alive
	upgrade        []byte
	expectContinue bool
	hopByHop       [][]byte // further header names listed in Connection
	headers        []header
}

// respHead is a parsed response head.
type respHead struct {
	minor         int
	status        int
	statusLine    []byte // "200 OK"
	contentLength int64
	chunked       bool
	close         bool
	hopByHop      [][]byte
	headers       []header
}

// parseRequest parses a request head. It rejects what could smuggle a
// second request past the proxy: both Content-Length and
// Transfer-Encoding, conflicting lengths, obsolete line folding, and
// whitespace before a header's colon.
func parseRequest(h *reqHead, head []byte) error {
	*h = reqHead{headers: h.headers[:0], hopByHop: h.hopByHop[:0], contentLength: -1}
	line, rest, ok := cutLine(head)
	if !ok {
		return errMalformed
	}
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1+1 {
		return errMalformed
	}
	h.method, h.target = line[:sp1], line[sp1+1:sp2]
	if !isToken(h.method) || bytes.IndexByte(h.target, ' ') >= 0 {
		return errMalformed
	}
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
		h.minor = 1
	case "HTTP/1.0":
		h.minor = 0
	default:
		return errVersion
	}
	var err error
	h.headers, err = parseHeaders(h.headers, rest)
	if err != nil {
		return err
	}
	keepAlive, upgrade := false, false
	var te []byte
	for i := range h.headers {
		hd := &h.headers[i]
		switch {
		case eqFold(hd.name, "host"):
			if h.host != nil {
				return errMalformed
			}
			h.host = hd.value
		case eqFold(hd.name, "content-length"):
			n, ok := parseLength(hd.value)
			if !ok || (h.contentLength >= 0 && h.contentLength != n) {
				return errMalformed
			}
			h.contentLength = n
		case eqFold(hd.name, "transfer-encoding"):
			if te != nil {
				return errMalformed
			}
			te = hd.value
		case eqFold(hd.name, "connection"):
			h.hopByHop = connectionTokens(hd.value, &h.close, &keepAlive, &upgrade, h.hopByHop)
		case eqFold(hd.name, "expect"):
			h.expectContinue = eqFold(bytes.TrimSpace(hd.value), "100-continue")
		}
	}
	if upgrade {
		for _, hd := range h.headers {
			if eqFold(hd.name, "upgrade") {
				h.upgrade = hd.value
			}
		}
	}
	if te != nil {
		if !eqFold(bytes.TrimSpace(te), "chunked") || h.contentLength >= 0 || h.minor == 0 {
			return errMalformed
		}
		h.chunked = true
	}
	if h.minor == 0 && !keepAlive {
		h.close = true
	}
	if h.minor == 1 && h.host == nil {
		return errMalformed
	}
	return nil
}

var errVersion = &protoError{"unsupported HTTP version"}

type protoError struct{ s string }

func (e *protoError) Error() string { return e.s }

// parseResponse parses a response head.
func parseResponse(h *respHead, head []byte) error {
	*h = respHead{headers: h.headers[:0], hopByHop: h.hopByHop[:0], contentLength: -1}
	line, rest, ok := cutLine(head)
	if !ok || len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return errMalformed
	}
	switch line[7] {
	case '1':
		h.minor = 1
	case '0':
		h.minor = 0
	default:
		return errMalformed
	}
	h.statusLine = line[9:]
	s := h.statusLine
	if len(s) < 3 || !isDigit(s[0]) || !isDigit(s[1]) || !isDigit(s[2]) || (len(s) > 3 && s[3] != ' ') {
		return errMalformed
	}
	h.status = int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0')
	var err error
	h.headers, err = parseHeaders(h.headers, rest)
	if err != nil {
		return err
	}
	keepAlive := false
	for i := range h.headers {
		hd := &h.headers[i]
		switch {
		case eqFold(hd.name, "content-length"):
			n, ok := parseLength(hd.value)
			if !ok || (h.contentLength >= 0 && h.contentLength != n) {
				return errMalformed
			}
			h.contentLength = n
		case eqFold(hd.name, "transfer-encoding"):
			if !eqFold(bytes.TrimSpace(hd.value), "chunked") {
				return errMalformed
			}
			h.chunked = true
		case eqFold(hd.name, "connection"):
			var upgrade bool
			h.hopByHop = connectionTokens(hd.value, &h.close, &keepAlive, &upgrade, h.hopByHop)
		}
	}
	if h.chunked {
		h.contentLength = -1
	}
	if h.minor == 0 && !keepAlive {
		h.close = true
	}
	return nil
}

// connectionTokens reads a Connection header: close, keep-alive and upgrade
// set their flags; other names are headers to drop, appended to named.
func connectionTokens(v []byte, close, keepAlive, upgrade *bool, named [][]byte) [][]byte {
	forTokens(v, func(tok []byte) {
		switch {
		case eqFold(tok, "close"):
			*close = true
		case eqFold(tok, "keep-alive"):
			*keepAlive = true
		case eqFold(tok, "upgrade"):
			*upgrade = true
		default:
			named = append(named, tok)
		}
	})
	return named
}

// parseHeaders splits header lines into hs.
func parseHeaders(hs []header, b []byte) ([]header, error) {
	for {
		line, rest, ok := cutLine(b)
		if !ok {
			return hs, errMalformed
		}
		if len(line) == 0 {
			return hs, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return hs, errMalformed // obsolete line folding
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return hs, errMalformed
		}
		hs = append(hs, header{name: line[:colon], value: trimOWS(line[colon+1:]), line: line})
		b = rest
	}
}

// cutLine splits b at its first CRLF.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.Index(b, crlf)
	if i < 0 {
		return nil, nil, false
	}
	return b[:i], b[i+2:], true
}

var crlf = []byte("\r\n")

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// eqFold reports whether b equals the lower-case ASCII string s, ignoring
// case.
func eqFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func eqFoldBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// forTokens calls fn for each comma-separated token of a header value.
func forTokens(v []byte, fn func([]byte)) {
	for len(v) > 0 {
		i := bytes.IndexByte(v, ',')
		var tok []byte
		if i < 0 {
			tok, v = v, nil
		} else {
			tok, v = v[:i], v[i+1:]
		}
		if tok = trimOWS(tok); len(tok) > 0 {
			fn(tok)
		}
	}
}

// parseLength parses a Content-Length value: digits only, no sign, at most
// 18 of them.
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

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isToken reports whether b is an RFC 9110 token.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c >= 0x80 || !tokenChars[c] {
			return false
		}
	}
	return true
}

var tokenChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// isHopByHop reports whether a header must not be forwarded: the RFC 9110
// connection-specific fields, and those a Connection header named.
func isHopByHop(name []byte, named [][]byte) bool {
	switch len(name) {
	case 2:
		if eqFold(name, "te") {
			return true
		}
	case 7:
		if eqFold(name, "upgrade") || eqFold(name, "trailer") {
			return true
		}
	case 10:
		if eqFold(name, "connection") || eqFold(name, "keep-alive") {
			return true
		}
	case 16:
		if eqFold(name, "proxy-connection") {
			return true
		}
	case 17:
		if eqFold(name, "transfer-encoding") {
			return true
		}
	}
	for _, n := range named {
		if eqFoldBytes(name, n) {
			return true
		}
	}
	return false
}

// requestPath returns the path of a request target for routing: the
// origin-form path without its query, or the path of an absolute-form URI.
func requestPath(target []byte) []byte {
	if len(target) > 0 && target[0] != '/' {
		if i := bytes.Index(target, []byte("://")); i >= 0 {
			rest := target[i+3:]
			if j := bytes.IndexByte(rest, '/'); j >= 0 {
				target = rest[j:]
			} else {
				return []byte("/")
			}
		}
	}
	if i := bytes.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	return target
}

// header returns the value of the request's header named name (any case),
// or nil.
func (h *reqHead) header(name string) []byte {
	for _, hd := range h.headers {
		if len(hd.name) == len(name) && eqFoldBytes(hd.name, []byte(name)) {
			return hd.value
		}
	}
	return nil
}

// cookie returns the value of the request's cookie named name, or nil.
func (h *reqHead) cookie(name string) []byte {
	for _, hd := range h.headers {
		if !eqFold(hd.name, "cookie") {
			continue
		}
		v := hd.value
		for len(v) > 0 {
			var pair []byte
			if i := bytes.IndexByte(v, ';'); i >= 0 {
				pair, v = v[:i], v[i+1:]
			} else {
				pair, v = v, nil
			}
			pair = trimOWS(pair)
			if len(pair) > len(name) && pair[len(name)] == '=' && string(pair[:len(name)]) == name {
				return pair[len(name)+1:]
			}
		}
	}
	return nil
}
