package proxyproto

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// v2 builds a version 2 header: signature, version 2 and cmd, fam, the
// length, then payload.
func v2(cmd, fam byte, payload []byte) []byte {
	b := append([]byte(v2Sig), 0x20|cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(b[14:], uint16(len(payload)))
	return append(b, payload...)
}

// inet4 is an IPv4 address block: 192.0.2.1:51000 to 198.51.100.2:443.
var inet4 = []byte{192, 0, 2, 1, 198, 51, 100, 2, 0xc7, 0x38, 0x01, 0xbb}

// inet6 is an IPv6 address block: [2001:db8::1]:51000 to [2001:db8::2]:443.
var inet6 = func() []byte {
	src, dst := netip.MustParseAddr("2001:db8::1").As16(), netip.MustParseAddr("2001:db8::2").As16()
	b := append(src[:], dst[:]...)
	return append(b, 0xc7, 0x38, 0x01, 0xbb)
}()

// tlv is one TLV.
func tlv(typ byte, v []byte) []byte {
	return append([]byte{typ, byte(len(v) >> 8), byte(len(v))}, v...)
}

// withCRC returns a TCP over IPv4 header with a CRC32C TLV, correct or
// off by one.
func withCRC(correct bool) []byte {
	b := v2(cmdProxy, tcpOver4, append(append([]byte{}, inet4...), tlv(tlvCRC32C, make([]byte, 4))...))
	sum := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
	if !correct {
		sum++
	}
	binary.BigEndian.PutUint32(b[len(b)-4:], sum)
	return b
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

var (
	src4 = netip.MustParseAddrPort("192.0.2.1:51000")
	dst4 = netip.MustParseAddrPort("198.51.100.2:443")
	src6 = netip.MustParseAddrPort("[2001:db8::1]:51000")
	dst6 = netip.MustParseAddrPort("[2001:db8::2]:443")
)

// TestParse checks each rule against the spec (HAProxy's
// doc/proxy-protocol.txt), and where the spec leaves a choice, what nginx
// and HAProxy do.
func TestParse(t *testing.T) {
	const data = "GET / HTTP/1.1\r\n"
	for _, tc := range []struct {
		name, source string
		in           []byte
		want         Header
		n            int   // header length, when it parses
		err          error // ErrIncomplete, ErrNotProxy or ErrInvalid
	}{
		// Version 1.
		{name: "v1 TCP4", source: "§2.1",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51000 443\r\n" + data), n: 45,
			want: Header{Version: 1, Source: src4, Dest: dst4}},
		{name: "v1 TCP6", source: "§2.1",
			in: []byte("PROXY TCP6 2001:db8::1 2001:db8::2 51000 443\r\n"), n: 46,
			want: Header{Version: 1, Source: src6, Dest: dst6}},
		{name: "v1 longest TCP6 line", source: "§2.1: 104 chars",
			in: []byte("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"), n: 104,
			want: Header{Version: 1, Source: netip.MustParseAddrPort("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"), Dest: netip.MustParseAddrPort("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")}},
		{name: "v1 UNKNOWN, short form", source: "§2.1",
			in: []byte("PROXY UNKNOWN\r\n" + data), n: 15, want: Header{Version: 1, Local: true}},
		{name: "v1 UNKNOWN, the rest ignored", source: "§2.1: the receiver must ignore anything presented before the CRLF",
			in: []byte("PROXY UNKNOWN ffff:f::f ffff:f::f 65535 65535\r\n"), n: 47, want: Header{Version: 1, Local: true}},
		{name: "v1 worst case, 107 bytes", source: "§2.1: 107 chars",
			in: []byte("PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"), n: 107, want: Header{Version: 1, Local: true}},
		{name: "v1 over 107 bytes", source: "§2.1: the receiver must wait for the CRLF at most 107 bytes",
			in: []byte("PROXY UNKNOWN " + strings.Repeat("f", 100) + "\r\n"), err: ErrInvalid},
		{name: "v1 bare LF", source: "§2.1: the header ends in CRLF",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51000 443\n"), err: ErrInvalid},
		{name: "v1 CR without LF", source: "§2.1",
			in: []byte("PROXY TCP4 192.0.2.1\r198.51.100.2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 two spaces", source: "§2.1: exactly one space",
			in: []byte("PROXY TCP4  192.0.2.1 198.51.100.2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 trailing space", source: "§2.1",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51000 443 \r\n"), err: ErrInvalid},
		{name: "v1 a field missing", source: "§2.1",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 51000\r\n"), err: ErrInvalid},
		{name: "v1 TCP4 with an IPv6 address", source: "§2.1: the address family named",
			in: []byte("PROXY TCP4 2001:db8::1 198.51.100.2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 TCP6 with an IPv4 address", source: "§2.1",
			in: []byte("PROXY TCP6 192.0.2.1 2001:db8::2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 octal-looking octet", source: "CVE-2021-29923 (leading zeros read as octal by some parsers)",
			in: []byte("PROXY TCP4 010.0.0.1 198.51.100.2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 zoned address", source: "§2.1: hex digits and colons only",
			in: []byte("PROXY TCP6 fe80::1%eth0 2001:db8::2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 port with a leading zero", source: "§2.1: a decimal integer",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 051000 443\r\n"), err: ErrInvalid},
		{name: "v1 port over 65535", source: "§2.1: range 0..65535",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n"), err: ErrInvalid},
		{name: "v1 signed port", source: "§2.1",
			in: []byte("PROXY TCP4 192.0.2.1 198.51.100.2 +5100 443\r\n"), err: ErrInvalid},
		{name: "v1 unknown protocol", source: "§2.1: TCP4, TCP6 or UNKNOWN",
			in: []byte("PROXY UDP4 192.0.2.1 198.51.100.2 51000 443\r\n"), err: ErrInvalid},
		{name: "v1 lower case", source: "§2.1: the string \"PROXY\"",
			in: []byte("proxy TCP4 192.0.2.1 198.51.100.2 51000 443\r\n"), err: ErrNotProxy},
		{name: "v1 cut short", source: "§2.1: the receiver may wait for the rest",
			in: []byte("PROXY TCP4 192.0.2.1"), err: ErrIncomplete},
		{name: "v1 signature cut short", source: "§2.1",
			in: []byte("PROX"), err: ErrIncomplete},
		{name: "HTTP instead of a header", source: "§2.1: a receiver configured for the protocol must not accept a connection without it",
			in: []byte(data), err: ErrNotProxy},
		{name: "TLS ClientHello instead of a header", source: "§2.1",
			in: []byte{0x16, 0x03, 0x01, 0x00, 0xa5}, err: ErrNotProxy},

		// Version 2.
		{name: "v2 TCP over IPv4", source: "§2.2",
			in: cat(v2(cmdProxy, tcpOver4, inet4), []byte(data)), n: 28,
			want: Header{Version: 2, Source: src4, Dest: dst4}},
		{name: "v2 TCP over IPv6", source: "§2.2",
			in: v2(cmdProxy, tcpOver6, inet6), n: 52,
			want: Header{Version: 2, Source: src6, Dest: dst6}},
		{name: "v2 LOCAL", source: "§2.2: use the real connection endpoints",
			in: v2(cmdLocal, 0x00, nil), n: 16, want: Header{Version: 2, Local: true}},
		{name: "v2 LOCAL with an address block", source: "§2.2: discard the protocol block including the family",
			in: v2(cmdLocal, tcpOver4, inet4), n: 28, want: Header{Version: 2, Local: true}},
		{name: "v2 UNSPEC under PROXY", source: "§2.2: free to accept and use the real addresses (nginx and HAProxy do)",
			in: v2(cmdProxy, 0x00, nil), n: 16, want: Header{Version: 2, Local: true}},
		{name: "v2 UNIX stream", source: "§2.2; nginx and HAProxy keep the real addresses",
			in: v2(cmdProxy, 0x31, make([]byte, 216)), n: 232, want: Header{Version: 2, Local: true}},
		{name: "v2 UDP over IPv4", source: "§2.2; nginx: only STREAM carries an address",
			in: v2(cmdProxy, 0x12, inet4), n: 28, want: Header{Version: 2, Local: true}},
		{name: "v2 TLVs", source: "§2.2.1 PP2_TYPE_ALPN, §2.2.2 PP2_TYPE_AUTHORITY",
			in: v2(cmdProxy, tcpOver4, cat(inet4, tlv(0x01, []byte("h2")), tlv(0x02, []byte("shop.example")))), n: 28 + 5 + 15,
			want: Header{Version: 2, Source: src4, Dest: dst4}},
		{name: "v2 CRC32C that matches", source: "§2.2 PP2_TYPE_CRC32C",
			in: withCRC(true), n: 35, want: Header{Version: 2, Source: src4, Dest: dst4}},
		{name: "v2 CRC32C that does not", source: "§2.2 PP2_TYPE_CRC32C: the connection must be dropped",
			in: withCRC(false), err: ErrInvalid},
		{name: "v2 TLV overrunning the header", source: "§2.2: TLVs within the length",
			in: v2(cmdProxy, tcpOver4, cat(inet4, []byte{0x02, 0x00, 0x10, 'a'})), err: ErrInvalid},
		{name: "v2 TLV cut to two bytes", source: "§2.2",
			in: v2(cmdProxy, tcpOver4, cat(inet4, []byte{0x04, 0x00})), err: ErrInvalid},
		{name: "v2 version 1 nibble", source: "§2.2: other versions must be dropped",
			in: func() []byte { b := v2(cmdProxy, tcpOver4, inet4); b[12] = 0x11; return b }(), err: ErrInvalid},
		{name: "v2 command 2", source: "§2.2: receivers must drop unexpected commands",
			in: v2(2, tcpOver4, inet4), err: ErrInvalid},
		{name: "v2 undefined transport", source: "§2.2: other values must be rejected",
			in: v2(cmdProxy, 0x13, inet4), err: ErrInvalid},
		{name: "v2 undefined family", source: "§2.2",
			in: v2(cmdProxy, 0x41, inet4), err: ErrInvalid},
		{name: "v2 undefined family under LOCAL", source: "§2.2: rejected as invalid by receivers",
			in: v2(cmdLocal, 0x41, nil), err: ErrInvalid},
		{name: "v2 address block too short", source: "§2.2: 12 bytes for TCP over IPv4",
			in: v2(cmdProxy, tcpOver4, inet4[:11]), err: ErrInvalid},
		{name: "v2 length over the bound", source: "go-proxyproto MaxV2HeaderSize; a header is no place for bulk data",
			in: v2(cmdProxy, tcpOver4, make([]byte, MaxV2Payload+1)), err: ErrInvalid},
		{name: "v2 cut short in the payload", source: "§2.2",
			in: v2(cmdProxy, tcpOver4, inet4)[:20], err: ErrIncomplete},
		{name: "v2 signature only", source: "§2.2",
			in: []byte(v2Sig), err: ErrIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := Parse(tc.in)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("%s: Parse = %+v, %d, %v; want %v", tc.source, h, n, err, tc.err)
				}
				return
			}
			if err != nil || n != tc.n || h != tc.want {
				t.Fatalf("%s: Parse = %+v, %d, %v; want %+v, %d", tc.source, h, n, err, tc.want, tc.n)
			}
			for k := range n { // every prefix is the start of this header
				if _, _, err := Parse(tc.in[:k]); err != ErrIncomplete {
					t.Fatalf("Parse of the first %d bytes: %v, want ErrIncomplete", k, err)
				}
			}
		})
	}
}

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// received is how many bytes wait in c's receive queue.
func received(c net.Conn) int {
	rc, _ := c.(syscall.Conn).SyscallConn()
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n
}

// TestRead: a header that arrives in pieces is waited for, and read
// exactly: what follows it is left on the connection.
func TestRead(t *testing.T) {
	for _, hdr := range [][]byte{
		[]byte("PROXY TCP4 192.0.2.1 198.51.100.2 51000 443\r\n"),
		v2(cmdProxy, tcpOver4, inet4),
	} {
		client, server := pair(t)
		server.SetReadDeadline(time.Now().Add(10 * time.Second))
		type result struct {
			h   Header
			err error
		}
		done := make(chan result, 1)
		go func() {
			h, err := Read(server)
			done <- result{h, err}
		}()
		client.Write(hdr[:5])
		for deadline := time.Now().Add(5 * time.Second); received(server) < 5 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		client.Write(hdr[5:20])
		client.Write(append(hdr[20:], "GET /"...))
		r := <-done
		if r.err != nil || r.h.Source != src4 || r.h.Dest != dst4 {
			t.Fatalf("Read = %+v, %v", r.h, r.err)
		}
		rest := make([]byte, 5)
		if _, err := io.ReadFull(server, rest); err != nil || string(rest) != "GET /" {
			t.Errorf("after the header: %q, %v; want GET /", rest, err)
		}
		c := NewConn(server, r.h)
		if c.RemoteAddr().String() != src4.String() || c.LocalAddr().String() != dst4.String() {
			t.Errorf("NewConn addresses %s, %s", c.RemoteAddr(), c.LocalAddr())
		}
	}
}

// TestReadFailures: no header, a header cut off by the close, and one
// that never ends (the caller's deadline).
func TestReadFailures(t *testing.T) {
	client, server := pair(t)
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	client.Write([]byte("GET / HTTP/1.1\r\n"))
	if _, err := Read(server); err != ErrNotProxy {
		t.Errorf("HTTP first: %v, want ErrNotProxy without waiting for more", err)
	}

	client, server = pair(t)
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	client.Write([]byte("PROXY TCP4 192.0.2.1"))
	client.Close()
	if _, err := Read(server); !errors.Is(err, ErrIncomplete) {
		t.Errorf("closed within the header: %v, want ErrIncomplete", err)
	}

	client, server = pair(t)
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	client.Write([]byte("PROXY TCP4 192.0.2.1"))
	if _, err := Read(server); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a header that stops: %v, want the deadline's error", err)
	}
}

// TestReadPipe: a connection that cannot be peeked at is read a byte at a
// time, still exactly.
func TestReadPipe(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	go client.Write(append(v2(cmdProxy, tcpOver6, inet6), "rest"...))
	h, err := Read(server)
	if err != nil || h.Source != src6 {
		t.Fatalf("Read = %+v, %v", h, err)
	}
	rest := make([]byte, 4)
	if _, err := io.ReadFull(server, rest); err != nil || string(rest) != "rest" {
		t.Errorf("after the header: %q, %v", rest, err)
	}
}
