package proxy

import (
	"errors"
	"fmt"
	"io"
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
	var hs []byte // the handshake message, joined from the fragments
	for {
		var hdr [5]byte
		k, err := io.ReadFull(r, hdr[:])
		raw = append(raw, hdr[:k]...)
		if err != nil {
			if len(raw) == 0 && err == io.EOF {
				return raw, "", err
			}
			return raw, "", fmt.Errorf("tls passthrough: reading a record: %w", err)
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		switch {
		case hdr[0] != 22 || hdr[1] >= 0x10: // a handshake record, of a version crypto/tls would read
			return raw, "", errNotTLS
		case n == 0 || n > maxRecord: // no empty handshake fragment (RFC 8446 §5.1)
			return raw, "", errBadClientHello
		case len(raw)+n > max:
			return raw, "", errHelloTooLarge
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if k, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start+k], "", fmt.Errorf("tls passthrough: reading a record: %w", err)
		}
		hs = append(hs, raw[start:]...)
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 { // client_hello
			return raw, "", errNotTLS
		}
		body := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		switch {
		case body > maxHandshake:
			return raw, "", errHelloTooLarge
		case len(hs) < 4+body:
			continue
		}
		// What follows the ClientHello in its record (a client must not
		// send more before the server's answer) goes on with it.
		name, err := helloServerName(hs[4 : 4+body])
		return raw, name, err
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
	seen := make(map[uint16]bool)
	name := ""
	for len(exts) > 0 {
		var typ uint16
		var data parser
		if !exts.uint16(&typ) || !exts.vector16(&data) {
			return "", errBadClientHello
		}
		if seen[typ] {
			return "", errBadClientHello // crypto/tls refuses a repeated extension
		}
		seen[typ] = true
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
