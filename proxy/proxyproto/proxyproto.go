// Package proxyproto reads the PROXY protocol header, versions 1 and 2,
// that a load balancer sends first on a connection to say whose it is
// (HAProxy's doc/proxy-protocol.txt, "the spec" below). The header is
// read exactly: no byte after it is consumed, so the connection goes on
// to TLS, HTTP or a splice as it came.
//
// Parsing is strict, as the spec asks of a receiver: anything that does
// not match the protocol exactly is an error and the connection is to be
// closed.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	v1Prefix = "PROXY "
	v2Sig    = "\r\n\r\n\x00\r\nQUIT\n"
	// v1Max is the longest version 1 line, CRLF included (spec §2.1).
	v1Max = 107
	// MaxV2Payload bounds what follows a version 2 header's 16 fixed
	// bytes (addresses and TLVs). The spec sets no bound; balancers send
	// well under a kilobyte (AWS's and GCP's TLVs included).
	MaxV2Payload = 4096
)

// Errors of Parse and Read. Any other error from Read is the
// connection's.
var (
	// ErrNotProxy means the connection does not start with a PROXY
	// header.
	ErrNotProxy = errors.New("no PROXY protocol header")
	// ErrIncomplete means the bytes are the start of a header, not all
	// of it.
	ErrIncomplete = errors.New("incomplete PROXY protocol header")
	// ErrInvalid is wrapped by every error about a malformed header.
	ErrInvalid = errors.New("invalid PROXY protocol header")
)

// Header is what a PROXY header says about its connection.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Local is set when the header carries no client address to use: a
	// version 2 LOCAL (the balancer's own connection, a health check),
	// version 1 UNKNOWN, or a family other than TCP over IPv4 or IPv6
	// (UNIX, UDP, UNSPEC). The connection's own addresses then stand, as
	// the spec says for LOCAL and as nginx and HAProxy do for the rest.
	Local bool
	// Source and Dest are the client's address and the one it connected
	// to, when not Local.
	Source, Dest netip.AddrPort
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Parse parses the header at the start of b and returns it with its
// length. It returns ErrIncomplete when b is a header's beginning,
// ErrNotProxy when b cannot begin one, and an error wrapping ErrInvalid
// when the header is malformed.
func Parse(b []byte) (Header, int, error) {
	if len(b) == 0 {
		return Header{}, 0, ErrIncomplete
	}
	switch {
	case isPrefix(b, v1Prefix):
		if len(b) < len(v1Prefix) {
			return Header{}, 0, ErrIncomplete
		}
		return parseV1(b)
	case isPrefix(b, v2Sig):
		if len(b) < len(v2Sig) {
			return Header{}, 0, ErrIncomplete
		}
		return parseV2(b)
	}
	return Header{}, 0, ErrNotProxy
}

// isPrefix reports whether b and s agree on their common length.
func isPrefix(b []byte, s string) bool {
	n := min(len(b), len(s))
	return string(b[:n]) == s[:n]
}

// parseV1 parses "PROXY TCP4|TCP6 src dst sport dport\r\n" or
// "PROXY UNKNOWN...\r\n" (spec §2.1).
func parseV1(b []byte) (Header, int, error) {
	line := b[:min(len(b), v1Max)]
	end := bytes.IndexByte(line, '\n')
	if end < 0 {
		if cr := bytes.IndexByte(line, '\r'); cr >= 0 && cr+1 < len(line) {
			return Header{}, 0, invalid("version 1: CR not followed by LF")
		}
		if len(line) == v1Max {
			return Header{}, 0, invalid("version 1: no CRLF within %d bytes", v1Max)
		}
		return Header{}, 0, ErrIncomplete
	}
	if b[end-1] != '\r' {
		return Header{}, 0, invalid("version 1: line ends in a bare LF")
	}
	fields := line[len(v1Prefix) : end-1]
	if bytes.IndexByte(fields, '\r') >= 0 {
		return Header{}, 0, invalid("version 1: CR within the line")
	}
	proto, rest, _ := bytes.Cut(fields, []byte(" "))
	h := Header{Version: 1}
	switch string(proto) {
	case "UNKNOWN":
		// "the receiver must ignore anything presented before the CRLF"
		h.Local = true
		return h, end + 1, nil
	case "TCP4", "TCP6":
	default:
		return Header{}, 0, invalid("version 1: protocol %q", proto)
	}
	parts := bytes.Split(rest, []byte(" "))
	if len(parts) != 4 {
		return Header{}, 0, invalid("version 1: %d fields after %s, want 4 separated by single spaces", len(parts), proto)
	}
	src, err1 := v1Addr(string(proto), parts[0])
	dst, err2 := v1Addr(string(proto), parts[1])
	sport, err3 := v1Port(parts[2])
	dport, err4 := v1Port(parts[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Header{}, 0, err
	}
	h.Source, h.Dest = netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	return h, end + 1, nil
}

// v1Addr parses an address of the family proto names: dotted quad for
// TCP4, IPv6 text (no zone) for TCP6.
func v1Addr(proto string, b []byte) (netip.Addr, error) {
	a, err := netip.ParseAddr(string(b))
	switch {
	case err != nil:
		return netip.Addr{}, invalid("version 1: address %q", b)
	case a.Zone() != "":
		return netip.Addr{}, invalid("version 1: address %q has a zone", b)
	case proto == "TCP4" && !a.Is4(), proto == "TCP6" && !a.Is6():
		return netip.Addr{}, invalid("version 1: address %q is not %s", b, proto)
	}
	return a, nil
}

// v1Port parses a port: 1 to 5 digits, at most 65535, no leading zero
// (the spec's "decimal integer in the range 0..65535").
func v1Port(b []byte) (uint16, error) {
	if len(b) == 0 || len(b) > 5 || (len(b) > 1 && b[0] == '0') {
		return 0, invalid("version 1: port %q", b)
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, invalid("version 1: port %q", b)
		}
		n = n*10 + int(c-'0')
	}
	if n > 65535 {
		return 0, invalid("version 1: port %q", b)
	}
	return uint16(n), nil
}

// Version 2 commands, families and TLV types (spec §2.2).
const (
	cmdLocal  = 0x0
	cmdProxy  = 0x1
	tcpOver4  = 0x11
	tcpOver6  = 0x21
	tlvCRC32C = 0x03
)

// addrLen is the size of each defined family and transport's address
// block; the spec says receivers must reject every other value.
var addrLen = map[byte]int{
	0x00: 0,   // UNSPEC
	0x11: 12,  // TCP over IPv4
	0x12: 12,  // UDP over IPv4
	0x21: 36,  // TCP over IPv6
	0x22: 36,  // UDP over IPv6
	0x31: 216, // UNIX stream
	0x32: 216, // UNIX datagram
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parseV2 parses the binary header: the signature, version and command,
// family and transport, the length, then addresses and TLVs.
func parseV2(b []byte) (Header, int, error) {
	if len(b) < 16 {
		return Header{}, 0, ErrIncomplete
	}
	if v := b[12] >> 4; v != 2 {
		return Header{}, 0, invalid("version 2: version nibble %d", v)
	}
	cmd := b[12] & 0xf
	if cmd != cmdLocal && cmd != cmdProxy {
		return Header{}, 0, invalid("version 2: command %d", cmd)
	}
	fam := b[13]
	need, ok := addrLen[fam]
	if !ok {
		return Header{}, 0, invalid("version 2: family and transport %#02x", fam)
	}
	n := int(binary.BigEndian.Uint16(b[14:16]))
	if n > MaxV2Payload {
		return Header{}, 0, invalid("version 2: %d bytes of addresses and TLVs, over %d", n, MaxV2Payload)
	}
	if len(b) < 16+n {
		return Header{}, 0, ErrIncomplete
	}
	h := Header{Version: 2, Local: true}
	if cmd == cmdLocal {
		// "the receiver must accept this connection as valid and must
		// use the real connection endpoints and discard the protocol
		// block including the family"
		return h, 16 + n, nil
	}
	if n < need {
		return Header{}, 0, invalid("version 2: %d bytes for a %d-byte address block", n, need)
	}
	if err := checkTLVs(b[:16+n], 16+need); err != nil {
		return Header{}, 0, err
	}
	a := b[16:]
	switch fam {
	case tcpOver4:
		h.Local = false
		h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[0:4])), binary.BigEndian.Uint16(a[8:10]))
		h.Dest = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[4:8])), binary.BigEndian.Uint16(a[10:12]))
	case tcpOver6:
		h.Local = false
		h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[0:16])), binary.BigEndian.Uint16(a[32:34]))
		h.Dest = netip.AddrPortFrom(netip.AddrFrom16([16]byte(a[16:32])), binary.BigEndian.Uint16(a[34:36]))
	}
	return h, 16 + n, nil
}

// checkTLVs checks that the TLVs from off to the end of hdr tile it
// exactly, and that a CRC32C TLV, when there is one, matches the header
// (spec §2.2: "the receiver MUST ... drop the connection" on a mismatch).
func checkTLVs(hdr []byte, off int) error {
	for t := hdr[off:]; len(t) > 0; {
		if len(t) < 3 {
			return invalid("version 2: %d bytes left for a TLV", len(t))
		}
		n := int(binary.BigEndian.Uint16(t[1:3]))
		if 3+n > len(t) {
			return invalid("version 2: TLV %#02x of %d bytes overruns the header", t[0], n)
		}
		if t[0] == tlvCRC32C {
			if n != 4 {
				return invalid("version 2: CRC32C TLV of %d bytes", n)
			}
			at := len(hdr) - len(t) + 3 // the checksum's offset
			sum := crc32.Update(0, castagnoli, hdr[:at])
			sum = crc32.Update(sum, castagnoli, []byte{0, 0, 0, 0})
			sum = crc32.Update(sum, castagnoli, hdr[at+4:])
			if want := binary.BigEndian.Uint32(t[3:7]); sum != want {
				return invalid("version 2: CRC32C %#08x, header sums to %#08x", want, sum)
			}
		}
		t = t[3+n:]
	}
	return nil
}

// Read reads the PROXY header c starts with, consuming its bytes and no
// more. It waits for a header sent in pieces, within c's read deadline,
// which the caller sets.
func Read(c net.Conn) (Header, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return readBytes(c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return readBytes(c)
	}
	buf := make([]byte, 256) // any version 1 line; version 2 with IPv6 and small TLVs
	seen := 0
	for {
		n, closed, err := peek(rc, buf, seen)
		if err != nil {
			return Header{}, err
		}
		if n == 0 || closed {
			return Header{}, fmt.Errorf("%w: the connection closed first", ErrIncomplete)
		}
		h, hn, err := Parse(buf[:n])
		if err == nil {
			if _, err := io.ReadFull(c, buf[:hn]); err != nil {
				return Header{}, err
			}
			return h, nil
		}
		if err != ErrIncomplete {
			return Header{}, err
		}
		if n == len(buf) {
			buf = make([]byte, 16+MaxV2Payload)
		}
		seen = n
	}
}

// peek copies what c has received into buf without consuming it. When
// that is no more than seen bytes (what the caller already has), it
// waits for more, or reports that the peer closed its side (with data
// pending, a FIN shows only as POLLRDHUP). It returns 0 at end of stream.
func peek(rc syscall.RawConn, buf []byte, seen int) (n int, closed bool, err error) {
	var serr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, serr = unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case serr == unix.EAGAIN || serr == unix.EINTR:
			return false
		case serr != nil || n == 0 || n > seen:
			return true
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if k, _ := unix.Poll(pfd, 0); k > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0 {
			closed = true
			return true
		}
		return false
	})
	if err == nil {
		err = serr
	}
	return n, closed, err
}

// readBytes reads a header a byte at a time, for connections that cannot
// be peeked at (net.Pipe in tests).
func readBytes(c net.Conn) (Header, error) {
	var buf []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return Header{}, err
		}
		buf = append(buf, b[0])
		h, _, err := Parse(buf)
		if err != ErrIncomplete {
			return h, err
		}
	}
}

// Conn is a connection whose addresses are the ones its PROXY header
// gave: RemoteAddr is the client's, LocalAddr the one it connected to.
type Conn struct {
	net.Conn
	remote, local net.Addr
}

// NewConn returns c with h's addresses, or c itself when h is Local.
func NewConn(c net.Conn, h Header) net.Conn {
	if h.Local {
		return c
	}
	return &Conn{Conn: c, remote: net.TCPAddrFromAddrPort(h.Source), local: net.TCPAddrFromAddrPort(h.Dest)}
}

// RemoteAddr returns the client's address, from the header.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr returns the address the client connected to, from the header.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// NetConn returns the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// CloseWrite shuts down the writing side, when the underlying connection
// can; else it closes it.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// SyscallConn returns the underlying connection's, so that callers may
// look at its socket.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// ReadFrom lets io.Copy into c use the underlying connection's ReadFrom
// (splice between sockets).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
