package h2

import (
	"strconv"
	"unsafe"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// A HeaderBlock is a response's header block being encoded (RFC 7541),
// without the dynamic table: fields are sent as literals "without
// indexing", naming a static-table entry where there is one, as nginx
// encodes its responses. No state is shared between blocks, so a stream
// encodes its own without the connection's lock, straight from the bytes
// of the upstream's response head, and never advertises a table size.
type HeaderBlock struct {
	buf  []byte
	name []byte // scratch: a field name in lower case
}

// reset starts a block for status.
func (b *HeaderBlock) reset(status int) {
	b.buf = b.buf[:0]
	if i, ok := staticStatus[status]; ok {
		b.buf = append(b.buf, 0x80|i) // indexed field
		return
	}
	b.buf = append(b.buf, 0x08) // literal without indexing, name :status (index 8)
	var d [3]byte
	v := strconv.AppendInt(d[:0], int64(status), 10)
	b.buf = appendString(b.buf, v)
}

// connectionSpecific are the fields HTTP/2 forbids (RFC 9113 §8.2.2):
// never sent, whatever the upstream said.
var connectionSpecific = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true,
}

// Add appends a field; name is lower-cased (HTTP/2 field names are lower
// case, RFC 9113 §8.2). Connection-specific fields are left out. The
// caller has checked name and value (an HTTP/1.1 head parsed by package
// h1 has: a token, and a value without CR, LF or NUL).
func (b *HeaderBlock) Add(name, value []byte) {
	b.name = b.name[:0]
	for _, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.name = append(b.name, c)
	}
	if connectionSpecific[string(b.name)] {
		return
	}
	if i, ok := staticNames[string(b.name)]; ok {
		b.buf = appendInt(b.buf, 4, 0, uint64(i)) // literal without indexing, indexed name
	} else {
		b.buf = append(b.buf, 0) // literal without indexing, new name
		b.buf = appendString(b.buf, b.name)
	}
	b.buf = appendString(b.buf, value)
}

// AddString is Add for a value held as a string.
func (b *HeaderBlock) AddString(name string, value []byte) {
	b.Add(unsafe.Slice(unsafe.StringData(name), len(name)), value)
}

// Bytes returns the encoded block.
func (b *HeaderBlock) Bytes() []byte { return b.buf }

// appendInt appends i with an n-bit prefix whose other bits are first
// (RFC 7541 §5.1).
func appendInt(dst []byte, n uint, first byte, i uint64) []byte {
	limit := uint64(1)<<n - 1
	if i < limit {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(limit))
	i -= limit
	for i >= 128 {
		dst = append(dst, byte(0x80|i&0x7f))
		i >>= 7
	}
	return append(dst, byte(i))
}

// appendString appends s as a string literal, Huffman-coded when that is
// shorter (RFC 7541 §5.2).
func appendString(dst, s []byte) []byte {
	str := unsafe.String(unsafe.SliceData(s), len(s)) // read only, during the call
	if n := hpack.HuffmanEncodeLength(str); n < uint64(len(s)) {
		dst = appendInt(dst, 7, 0x80, n)
		return hpack.AppendHuffmanString(dst, str)
	}
	dst = appendInt(dst, 7, 0, uint64(len(s)))
	return append(dst, s...)
}

// staticStatus are the :status values of the static table (RFC 7541
// Appendix A), by their index.
var staticStatus = map[int]byte{200: 8, 204: 9, 206: 10, 304: 11, 400: 12, 404: 13, 500: 14}

// staticNames are the field names of the static table (RFC 7541 Appendix
// A), each at its first index.
var staticNames = map[string]uint8{}

func init() {
	for i, n := range []string{
		":authority", ":method", ":method", ":path", ":path", ":scheme", ":scheme",
		":status", ":status", ":status", ":status", ":status", ":status", ":status",
		"accept-charset", "accept-encoding", "accept-language", "accept-ranges", "accept",
		"access-control-allow-origin", "age", "allow", "authorization", "cache-control",
		"content-disposition", "content-encoding", "content-language", "content-length",
		"content-location", "content-range", "content-type", "cookie", "date", "etag", "expect",
		"expires", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
		"if-unmodified-since", "last-modified", "link", "location", "max-forwards",
		"proxy-authenticate", "proxy-authorization", "range", "referer", "refresh", "retry-after",
		"server", "set-cookie", "strict-transport-security", "transfer-encoding", "user-agent",
		"vary", "via", "www-authenticate",
	} {
		if _, ok := staticNames[n]; !ok {
			staticNames[n] = uint8(i + 1)
		}
	}
}

// notInTrailers are the fields a trailer section may not carry: those
// that frame, route or authenticate a message, or are connection-specific
// (RFC 9110 §6.5.1, RFC 9113 §8.2.2).
var notInTrailers = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true,
	"transfer-encoding": true, "upgrade": true, "te": true,
	"content-length": true, "content-type": true, "content-encoding": true, "content-range": true,
	"host": true, "authorization": true, "cookie": true, "set-cookie": true,
	"trailer": true, "expect": true, "max-forwards": true,
}

// TrailerAllowed reports whether a field named name (lower case) may be
// passed on in a trailer section: not one that frames, routes or
// authenticates a message, nor a connection-specific one.
func TrailerAllowed(name string) bool { return !notInTrailers[name] }

// keepTrailers returns the trailer fields of fs a proxy may pass on; their
// names and values were checked by the Framer (valid tokens in lower
// case, values without CR, LF or NUL).
func keepTrailers(fs []hpack.HeaderField) []hpack.HeaderField {
	var kept []hpack.HeaderField
	for _, f := range fs {
		if TrailerAllowed(f.Name) && isToken(f.Name) && httpguts.ValidHeaderFieldValue(f.Value) {
			kept = append(kept, f)
		}
	}
	return kept
}

// isToken reports whether s is a field name (RFC 9110 §5.1).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}
