package proxyproto

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"testing"

	ref "github.com/pires/go-proxyproto"
)

// FuzzParse checks Parse on any input: it never panics, a header it takes
// is as long as it says and its every prefix is incomplete, and it agrees
// with go-proxyproto (the Go library most servers use, Traefik's among
// them) on what is a header and what it says. Where they differ by
// design, the case is named below.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"PROXY TCP4 192.0.2.1 198.51.100.2 51000 443\r\nGET / HTTP/1.1\r\n",
		"PROXY TCP6 2001:db8::1 2001:db8::2 51000 443\r\n",
		"PROXY UNKNOWN\r\n",
		"PROXY TCP4 010.0.0.1 198.51.100.2 51000 443\r\n",
		"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 0 65535\r\n",
		"GET / HTTP/1.1\r\n",
	} {
		f.Add([]byte(s))
	}
	for _, b := range [][]byte{
		v2(cmdProxy, tcpOver4, inet4),
		v2(cmdProxy, tcpOver6, cat(inet6, tlv(0x02, []byte("shop.example")))),
		v2(cmdLocal, 0x00, nil),
		v2(cmdProxy, 0x00, nil),
		v2(cmdProxy, 0x31, make([]byte, 216)),
		withCRC(true),
		withCRC(false),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := Parse(b)
		if err == nil {
			if n <= 0 || n > len(b) {
				t.Fatalf("length %d of %d bytes", n, len(b))
			}
			if h2, n2, err := Parse(b[:n]); err != nil || n2 != n || h2 != h {
				t.Fatalf("the header alone: %+v %d %v, want %+v %d", h2, n2, err, h, n)
			}
			if _, _, err := Parse(b[:n-1]); err != ErrIncomplete {
				t.Fatalf("all but its last byte: %v, want ErrIncomplete", err)
			}
			if !h.Local && (!h.Source.IsValid() || !h.Dest.IsValid()) {
				t.Fatalf("a header with addresses but not valid ones: %+v", h)
			}
		}

		rd := bytes.NewReader(b)
		br := bufio.NewReaderSize(rd, 16+MaxV2Payload)
		rh, rerr := ref.Read(br)
		switch {
		case err == nil && rerr == nil:
			if used := len(b) - br.Buffered() - rd.Len(); used != n {
				t.Fatalf("header of %d bytes; go-proxyproto read %d", n, used)
			}
			rs, rd, tcp := rh.TCPAddrs()
			switch {
			case h.Local && tcp && !rh.Command.IsLocal():
				t.Fatalf("no address taken from a header go-proxyproto reads as %s to %s", rs, rd)
			case !h.Local && (!tcp || rh.Command.IsLocal()):
				t.Fatalf("addresses %s to %s from a header go-proxyproto reads as %+v", h.Source, h.Dest, rh)
			case !h.Local && (rs.AddrPort() != h.Source || rd.AddrPort() != h.Dest):
				t.Fatalf("addresses %s to %s; go-proxyproto %s to %s", h.Source, h.Dest, rs, rd)
			}
		case err == nil:
			// The spec leaves PROXY over UNSPEC to the receiver: we use the
			// real addresses, as nginx and HAProxy do; go-proxyproto refuses.
			if !(h.Version == 2 && h.Local && b[12] == 0x21 && b[13] == 0x00) {
				t.Fatalf("we take %+v, go-proxyproto refuses it: %v", h, rerr)
			}
		case rerr == nil:
			switch {
			case err == ErrIncomplete:
				// go-proxyproto refuses what it cannot read in one go;
				// given all there is, it cannot have read a header.
				t.Fatalf("incomplete, but go-proxyproto reads %+v", rh)
			case errors.Is(err, ErrInvalid) && h.Version == 0 && isTLVError(b):
				// go-proxyproto does not look into TLVs: we check that they
				// tile the header and that a CRC32C matches (spec §2.2).
			default:
				t.Fatalf("we refuse (%v) what go-proxyproto reads as %+v", err, rh)
			}
		}
	})
}

// isTLVError reports whether b is a version 2 PROXY header whose fixed
// part and addresses are well formed, so that only its TLVs can be wrong.
func isTLVError(b []byte) bool {
	if len(b) < 16 || !bytes.HasPrefix(b, []byte(v2Sig)) || b[12] != 0x21 {
		return false
	}
	need, ok := addrLen[b[13]]
	n := int(b[14])<<8 | int(b[15])
	return ok && n > need && n <= MaxV2Payload && len(b) >= 16+n && checkTLVs(b[:16+n], 16+need) != nil
}

var _ net.Conn = (*Conn)(nil)
