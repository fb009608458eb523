package proxy

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// maxClientHello bounds the bytes readClientHello takes, record headers
// included: a ClientHello may span several records (post-quantum key
// shares make them larger than one TCP segment, and RFC 8446 §5.1 lets a
// handshake message span records); crypto/tls accepts handshake messages
// of up to 64 KiB (maxHandshake), and Envoy's tls_inspector peeks as far.
const (
	maxClientHello = 80 << 10
	maxHandshake   = 64 << 10
	// maxRecord is the largest record crypto/tls reads before a version
	// is agreed (maxCiphertext: 2^14 and 2,048).
	maxRecord = 1<<14 + 2048
)

// Errors of readClientHello.
var (
	errNotTLS         = errors.New("tls passthrough: not a TLS handshake")
	errBadClientHello = errors.New("tls passthrough: malformed ClientHello")
	errHelloTooLarge  = errors.New("tls passthrough: ClientHello too large")
)

// readClientHello reads from r the TLS records that carry a client's
// ClientHello, and no byte more, and returns them (to be sent on to the
// backend as they came; on an error, every byte it read) with the server name the hello asks for ("" when
// it has no server_name extension). It reads record by record (RFC 8446
// §5.1): handshake records whose fragments join into one handshake
// message, a ClientHello (§4.1.2), which may span several records and
// ends on a record boundary. It parses what it needs as crypto/tls does,
// and refuses what crypto/tls refuses there: an SNI with a trailing dot,
// two host names, an empty name, a malformed extension block, the same
// extension twice; whatever hello crypto/tls would take, it takes too, with
// the same name (FuzzClientHello holds it to that).
func readClientHello(r io.Reader, max int) (raw []byte, serverName string, err error) {
	in := helloInput{r: r}
	name, err := in.hello(max)
	return in.raw, name, err
}

// clientHelloName returns the server name of the ClientHello whose
// records b holds, as readClientHello reads them, without copying what
// one record holds: for a stream loop, which has read them already
// (helloScan said they are whole, or that they are not a hello).
func clientHelloName(b []byte, max int) (string, error) {
	in := helloInput{raw: b}
	return in.hello(max)
}

// helloInput is where a ClientHello's records come from: r, keeping what
// was read in raw; or, with no r, raw, taken from off on.
type helloInput struct {
	r   io.Reader
	raw []byte
	off int
}

// next returns the next n bytes, as io.ReadFull would read them (io.EOF
// when none came, io.ErrUnexpectedEOF when some did).
func (in *helloInput) next(n int) ([]byte, error) {
	if in.r == nil {
		p := in.raw[in.off:min(in.off+n, len(in.raw))]
		in.off += len(p)
		switch {
		case len(p) == n:
			return p, nil
		case len(p) == 0:
			return p, io.EOF
		}
		return p, io.ErrUnexpectedEOF
	}
	start := len(in.raw)
	in.raw = append(in.raw, make([]byte, n)...)
	k, err := io.ReadFull(in.r, in.raw[start:])
	in.raw = in.raw[:start+k]
	return in.raw[start:], err
}

// read returns how many bytes were taken so far.
func (in *helloInput) read() int {
	if in.r == nil {
		return in.off
	}
	return len(in.raw)
}

// hello takes the ClientHello's records and parses the hello.
func (in *helloInput) hello(max int) (string, error) {
	var hs []byte // the handshake message, joined from the fragments
	for {
		hdr, err := in.next(5)
		if err != nil {
			if in.read() == 0 && err == io.EOF {
				return "", err
			}
			return "", fmt.Errorf("tls passthrough: reading a record: %w", err)
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		switch {
		case hdr[0] != 22 || hdr[1] >= 0x10: // a handshake record, of a version crypto/tls would read
			return "", errNotTLS
		case n == 0 || n > maxRecord: // no empty handshake fragment (RFC 8446 §5.1)
			return "", errBadClientHello
		case in.read()+n > max:
			return "", errHelloTooLarge
		}
		frag, err := in.next(n)
		if err != nil {
			return "", fmt.Errorf("tls passthrough: reading a record: %w", err)
		}
		if hs == nil {
			hs = frag[:n:n] // a second fragment's append copies
		} else {
			hs = append(hs, frag...)
		}
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 { // client_hello
			return "", errNotTLS
		}
		body := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		switch {
		case body > maxHandshake:
			return "", errHelloTooLarge
		case len(hs) < 4+body:
			continue
		}
		// What follows the ClientHello in its record (a client must not
		// send more before the server's answer) goes on with it.
		return helloServerName(hs[4 : 4+body])
	}
}

// helloServerName parses a ClientHello's body (RFC 8446 §4.1.2) and
// returns its server_name (RFC 6066 §3), "" when it has none.
func helloServerName(b []byte) (string, error) {
	p := parser(b)
	var sessionID, suites, compression, exts parser
	if !p.skip(2+32) || // legacy_version, random
		!p.vector8(&sessionID) ||
		!p.vector16(&suites) || len(suites)%2 != 0 ||
		!p.vector8(&compression) {
		return "", errBadClientHello
	}
	if len(p) == 0 {
		return "", nil // no extensions (a TLS 1.2 hello may have none)
	}
	if !p.vector16(&exts) || len(p) != 0 {
		return "", errBadClientHello
	}
	// The extensions' types, to refuse one that comes twice as
	// crypto/tls does; sorted once all are read (a hello may have
	// thousands), and on the stack for a usual hello's twenty or so.
	var typesBuf [48]uint16
	types := typesBuf[:0]
	name := ""
	for len(exts) > 0 {
		var typ uint16
		var data parser
		if !exts.uint16(&typ) || !exts.vector16(&data) {
			return "", errBadClientHello
		}
		types = append(types, typ)
		if typ != 0 { // not server_name
			continue
		}
		var list parser
		if !data.vector16(&list) || len(list) == 0 || len(data) != 0 {
			return "", errBadClientHello
		}
		for len(list) > 0 {
			var nameType uint8
			var host parser
			if !list.uint8(&nameType) || !list.vector16(&host) || len(host) == 0 {
				return "", errBadClientHello
			}
			if nameType != 0 { // only host_name is defined
				continue
			}
			if name != "" {
				return "", errBadClientHello // one name of a type (RFC 6066 §3)
			}
			name = string(host)
			if strings.HasSuffix(name, ".") {
				return "", errBadClientHello // "The hostname is represented ... without a trailing dot"
			}
		}
	}
	slices.Sort(types)
	for i := 1; i < len(types); i++ {
		if types[i] == types[i-1] {
			return "", errBadClientHello // crypto/tls refuses a repeated extension
		}
	}
	return name, nil
}

// parser reads the vectors of TLS's presentation language (RFC 8446 §3).
type parser []byte

func (p *parser) skip(n int) bool {
	if len(*p) < n {
		return false
	}
	*p = (*p)[n:]
	return true
}

func (p *parser) uint8(v *uint8) bool {
	if len(*p) < 1 {
		return false
	}
	*v = (*p)[0]
	*p = (*p)[1:]
	return true
}

func (p *parser) uint16(v *uint16) bool {
	if len(*p) < 2 {
		return false
	}
	*v = uint16((*p)[0])<<8 | uint16((*p)[1])
	*p = (*p)[2:]
	return true
}

// vector8 and vector16 read a vector with a 1- or 2-byte length.
func (p *parser) vector8(v *parser) bool {
	var n uint8
	return p.uint8(&n) && p.take(int(n), v)
}

func (p *parser) vector16(v *parser) bool {
	var n uint16
	return p.uint16(&n) && p.take(int(n), v)
}

func (p *parser) take(n int, v *parser) bool {
	if len(*p) < n {
		return false
	}
	*v, *p = (*p)[:n], (*p)[n:]
	return true
}
