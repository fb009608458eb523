package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// captureConn is a client's side of a connection that keeps what the
// client writes and answers its reads with EOF: a TLS client's handshake
// writes its ClientHello, then fails.
type captureConn struct {
	net.Conn // nil: only what tls.Client uses is implemented
	out      bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *captureConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (c *captureConn) Close() error                     { return nil }
func (c *captureConn) SetDeadline(time.Time) error      { return nil }
func (c *captureConn) SetReadDeadline(time.Time) error  { return nil }
func (c *captureConn) SetWriteDeadline(time.Time) error { return nil }
func (c *captureConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *captureConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// clientHello returns the records of the ClientHello crypto/tls's client
// sends with cfg.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c := &captureConn{}
	tls.Client(c, cfg).Handshake()
	if c.out.Len() == 0 {
		t.Fatal("the client wrote no ClientHello")
	}
	return c.out.Bytes()
}

// reframe splits the handshake message carried by hello's records into
// records of at most size bytes each.
func reframe(hello []byte, size int) []byte {
	var msg []byte
	for rest := hello; len(rest) >= 5; {
		n := int(rest[3])<<8 | int(rest[4])
		msg = append(msg, rest[5:5+n]...)
		rest = rest[5+n:]
	}
	var out []byte
	for len(msg) > 0 {
		k := min(size, len(msg))
		out = append(out, 22, 3, 1, byte(k>>8), byte(k))
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

// stdServerName is what crypto/tls's server reads of a client's first
// flight in: the server name its ClientHelloInfo gives, and whether it got
// that far (it parsed a ClientHello).
func stdServerName(in []byte) (string, bool) {
	name, called := "", false
	c := &replayConn{in: bytes.NewReader(in)}
	tls.Server(c, &tls.Config{GetConfigForClient: func(chi *tls.ClientHelloInfo) (*tls.Config, error) {
		name, called = chi.ServerName, true
		return nil, errors.New("stop here")
	}}).Handshake()
	return name, called
}

// replayConn is a server's side of a connection whose client sent in and
// then nothing more; what the server writes is dropped.
type replayConn struct {
	captureConn
	in *bytes.Reader
}

func (c *replayConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *replayConn) Write(p []byte) (int, error) { return len(p), nil }

// readClientHello reads the server name from real ClientHellos (crypto/
// tls's, with and without SNI, with its post-quantum key share, which
// makes the hello longer than 1,200 bytes), however their handshake
// message is split into records (RFC 8446 §5.1: down to one byte a
// record); it takes the hello's records and no byte more (the backend
// gets the rest as it comes); it refuses what is not a TLS handshake, and
// a hello larger than its bound.
func TestReadClientHello(t *testing.T) {
	for _, tc := range []struct {
		what, sni string
		cfg       *tls.Config
	}{
		{"a name", "shop.example", &tls.Config{ServerName: "shop.example"}},
		{"no SNI (an address)", "", &tls.Config{ServerName: "192.0.2.1", InsecureSkipVerify: true}},
		{"TLS 1.2 only", "old.example", &tls.Config{ServerName: "old.example", MaxVersion: tls.VersionTLS12}},
		{"post-quantum key share", "pq.example", &tls.Config{ServerName: "pq.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}}},
	} {
		hello := clientHello(t, tc.cfg)
		for _, size := range []int{1 << 14, 512, 100, 7, 1} {
			in := reframe(hello, size)
			if name, ok := stdServerName(in); !ok || name != tc.sni {
				t.Fatalf("%s, records of %d: crypto/tls reads %q (%v): the test's hello is wrong", tc.what, size, name, ok)
			}
			after := []byte("the rest of the stream")
			r := bytes.NewReader(append(append([]byte(nil), in...), after...))
			raw, name, err := readClientHello(r, maxClientHello)
			if err != nil || name != tc.sni {
				t.Fatalf("%s, records of %d bytes: %q %v, want %q", tc.what, size, name, err, tc.sni)
			}
			if !bytes.Equal(raw, in) {
				t.Fatalf("%s, records of %d bytes: took %d bytes, want the hello's %d", tc.what, size, len(raw), len(in))
			}
			if rest, _ := io.ReadAll(r); !bytes.Equal(rest, after) {
				t.Fatalf("%s: read beyond the hello: %q left", tc.what, rest)
			}
		}
	}
	hello := clientHello(t, &tls.Config{ServerName: "big.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}})
	for _, tc := range []struct {
		what string
		in   []byte
		max  int
		want error
	}{
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), maxClientHello, errNotTLS},
		{"an alert record", []byte{21, 3, 1, 0, 2, 2, 40}, maxClientHello, errNotTLS},
		{"an empty handshake record", []byte{22, 3, 1, 0, 0}, maxClientHello, errBadClientHello},
		{"a ServerHello", []byte{22, 3, 3, 0, 4, 2, 0, 0, 0}, maxClientHello, errNotTLS},
		{"larger than the bound", hello, len(hello) - 1, errHelloTooLarge},
		{"a hello cut short", hello[:len(hello)-10], maxClientHello, io.ErrUnexpectedEOF},
	} {
		if _, _, err := readClientHello(bytes.NewReader(tc.in), tc.max); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}
}

// FuzzClientHello holds readClientHello to crypto/tls's server: whatever
// first flight crypto/tls parses a ClientHello from (its
// GetConfigForClient is called), readClientHello takes too, with the same
// server name; and readClientHello never reads past the records it
// returns, whatever the input.
func FuzzClientHello(f *testing.F) {
	for _, cfg := range []*tls.Config{
		{ServerName: "shop.example"},
		{ServerName: "192.0.2.1", InsecureSkipVerify: true},
		{ServerName: "old.example", MaxVersion: tls.VersionTLS12},
		{ServerName: "pq.example", CurvePreferences: []tls.CurveID{tls.X25519MLKEM768}},
	} {
		hello := clientHello(f, cfg)
		f.Add(hello)
		f.Add(reframe(hello, 50))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		raw, name, err := readClientHello(r, maxClientHello)
		if read := len(in) - r.Len(); read != len(raw) || !bytes.Equal(raw, in[:read]) {
			t.Fatalf("read %d bytes, returned %d", read, len(raw))
		}
		if err == nil && strings.HasSuffix(name, ".") {
			t.Fatalf("a name with a trailing dot: %q", name)
		}
		if stdName, ok := stdServerName(in); ok && (err != nil || name != stdName) {
			t.Fatalf("crypto/tls reads server name %q; readClientHello %q, %v", stdName, name, err)
		}
	})
}
