// Package idleconns opens connections that each make one request and then
// wait, as many clients' keep-alive connections do: what make bench
// measures a proxy's idle connections with (issue 23).
package idleconns

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Open opens n connections to addr, each with one GET of / answered 200,
// within timeout each: HTTP/1.1 in the clear, or HTTP/2 over TLS (ALPN h2,
// the server's certificate not verified) with h2; from the address from
// when it is set (a loopback address of its own: one source address has
// only some 28,000 ports for one destination). On an error it closes what
// it opened.
func Open(addr, from string, n int, h2 bool, timeout time.Duration) ([]net.Conn, error) {
	return openN(from, n, timeout, func(d *net.Dialer) (net.Conn, error) { return open(d, addr, h2, timeout) })
}

// OpenEcho opens n TCP streams to addr, a proxy of an echo server, each
// of which sends two bytes and reads them back within timeout, then
// waits: idle TCP streams (a database's or a message broker's client
// connections).
func OpenEcho(addr, from string, n int, timeout time.Duration) ([]net.Conn, error) {
	return openN(from, n, timeout, func(d *net.Dialer) (net.Conn, error) {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(timeout))
		b := []byte("hi")
		if _, err = c.Write(b); err == nil {
			_, err = io.ReadFull(c, b)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("echo: %w", err)
		}
		c.SetDeadline(time.Time{})
		return c, nil
	})
}

// openN opens n connections with open, from the address from when set.
func openN(from string, n int, timeout time.Duration, open func(*net.Dialer) (net.Conn, error)) ([]net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if from != "" {
		ip := net.ParseIP(from)
		if ip == nil {
			return nil, fmt.Errorf("source address %q", from)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := open(d)
		if err != nil {
			Close(conns)
			return nil, fmt.Errorf("connection %d of %d: %w", len(conns)+1, n, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// Close closes conns.
func Close(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

func open(d *net.Dialer, addr string, h2 bool, timeout time.Duration) (net.Conn, error) {
	if !h2 {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		if err := get1(c, timeout); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: "bench.example", InsecureSkipVerify: true, NextProtos: []string{"h2"},
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}})
	if err != nil {
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN chose %q, not h2", p)
	}
	if err := get2(c, timeout); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Get sends one HTTP/1.1 GET of / on c, an HTTP/1.1 connection Open
// made, and reads its answer (200), within timeout.
func Get(c net.Conn, timeout time.Duration) error { return get1(c, timeout) }

// get1 sends one HTTP/1.1 GET on c and reads its answer.
func get1(c net.Conn, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// get2 opens c as an HTTP/2 client, sends one GET as stream 1 and reads
// until its end, answering the server's SETTINGS and PINGs meanwhile.
func get2(c net.Conn, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "bench.example"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		return err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return err
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if err := fr.WritePing(true, f.Data); err != nil {
					return err
				}
			}
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			return fmt.Errorf("stream reset: %v", f.ErrCode)
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				return nil
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				return nil
			}
		}
	}
}
