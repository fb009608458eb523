// Package backend is the upstream that baton's integration tests and
// benchmarks proxy to: a small HTTP server and a TCP echo server. Every
// proxy under test reaches the same backend.
package backend

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a running backend. Close stops it.
type Server struct {
	// Name is returned in the X-Backend header of every response.
	Name     string
	HTTPAddr string
	TCPAddr  string
	// Requests counts the HTTP requests served.
	Requests atomic.Uint64
	// InFlight counts the HTTP requests being served (a /sleep/ one ends
	// early when its client, the proxy, closes the connection), and
	// MaxInFlight the most there were at once.
	InFlight, MaxInFlight atomic.Int64
	// Fail, when set, makes every HTTP request answered 500.
	Fail atomic.Bool

	// HTTPSAddr is where ServeTLS serves the same over TLS.
	HTTPSAddr string

	http  *http.Server
	https *http.Server
	hln   *pausable
	tln   net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex // protects conns
	conns map[net.Conn]struct{}
}

// Start listens on httpAddr and tcpAddr ("" for none; port 0 picks one).
//
// HTTP (HTTP/1.1, and HTTP/2 in the clear): GET answers "ok"; /size/N answers N bytes; /sleep/D sleeps for the
// Go duration D first; /headers answers the request's header fields; POST
// (any path) echoes the body; a request with "Upgrade: echo" (any path)
// switches protocols (101) and echoes, as a WebSocket would, until the
// client half-closes; a gRPC call (content-type application/grpc) over
// HTTP/2 has its messages echoed as they come, then grpc-status 0 in the
// trailers (X-Request-Proto says the protocol it came over). TCP echoes.
func Start(name, httpAddr, tcpAddr string) (*Server, error) {
	s := &Server{Name: name, conns: make(map[net.Conn]struct{})}
	if httpAddr != "" {
		ln, err := net.Listen("tcp", httpAddr)
		if err != nil {
			return nil, fmt.Errorf("backend http: %w", err)
		}
		s.hln, s.HTTPAddr = newPausable(ln), ln.Addr().String()
		// HTTP/1.1 and HTTP/2 in the clear (prior knowledge), for a
		// proxy whose backend protocol is h2c.
		var protos http.Protocols
		protos.SetHTTP1(true)
		protos.SetUnencryptedHTTP2(true)
		s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute, Protocols: &protos}
		s.wg.Go(func() { s.http.Serve(s.hln) })
	}
	if tcpAddr != "" {
		ln, err := net.Listen("tcp", tcpAddr)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("backend tcp: %w", err)
		}
		s.tln, s.TCPAddr = ln, ln.Addr().String()
		s.wg.Go(func() { s.acceptTCP(ln) })
	}
	return s, nil
}

// ServeTLS serves the HTTP answers over TLS on addr too, with a
// self-signed certificate (a pod that speaks HTTPS, for a proxy that does
// not verify it). A response over it says X-Request-Scheme: https.
func (s *Server) ServeTLS(addr string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: s.Name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("backend https: %w", err)
	}
	s.HTTPSAddr = ln.Addr().String()
	s.https = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		ErrorLog:  log.New(io.Discard, "", 0)} // a load's clients leave mid-handshake at its end
	s.wg.Go(func() { s.https.ServeTLS(ln, "", "") })
	return nil
}

// PauseAccept stops (true) or resumes (false) taking HTTP connections: a
// backend slow to accept, whose connects wait in the kernel's queue and,
// once it is full, in SYN_SENT.
func (s *Server) PauseAccept(pause bool) {
	if s.hln != nil {
		s.hln.pause(pause)
	}
}

// pausable is a listener whose Accept can be held.
type pausable struct {
	net.Listener
	mu     sync.Mutex
	cond   sync.Cond
	paused bool
	closed bool
}

func newPausable(ln net.Listener) *pausable {
	p := &pausable{Listener: ln}
	p.cond.L = &p.mu
	return p
}

func (p *pausable) pause(on bool) {
	p.mu.Lock()
	p.paused = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *pausable) Accept() (net.Conn, error) {
	p.mu.Lock()
	for p.paused && !p.closed {
		p.cond.Wait()
	}
	p.mu.Unlock()
	return p.Listener.Accept()
}

func (p *pausable) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	return p.Listener.Close()
}

var okBody = []byte("ok\n")

// ServeHTTP answers the requests described at Start.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	n := s.InFlight.Add(1)
	defer s.InFlight.Add(-1)
	for m := s.MaxInFlight.Load(); n > m && !s.MaxInFlight.CompareAndSwap(m, n); m = s.MaxInFlight.Load() {
	}
	w.Header().Set("X-Backend", s.Name)
	// What arrived, for tests of what a proxy changes on the way: the
	// request target, the Host, a forwarded prefix.
	w.Header().Set("X-Request-Target", r.URL.RequestURI())
	w.Header().Set("X-Request-Host", r.Host)
	if r.TLS != nil {
		w.Header().Set("X-Request-Scheme", "https")
	}
	if v := r.Header.Get("X-Forwarded-Prefix"); v != "" {
		w.Header().Set("X-Request-Forwarded-Prefix", v)
	}
	if s.Fail.Load() {
		http.Error(w, "failing on purpose", http.StatusInternalServerError)
		return
	}
	if r.Header.Get("Upgrade") == "echo" {
		s.upgrade(w)
		return
	}
	if r.Header.Get("Content-Type") == "application/grpc" {
		s.grpcEcho(w, r)
		return
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
		return
	}
	path := r.URL.Path
	switch {
	case path == "/headers":
		r.Header.Write(w)
		return
	case len(path) > 7 && path[:7] == "/sleep/":
		d, err := time.ParseDuration(path[7:])
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	case len(path) > 6 && path[:6] == "/size/":
		n, err := strconv.Atoi(path[6:])
		if err != nil || n < 0 || n > 64<<20 {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		buf := make([]byte, min(n, 32<<10))
		for n > 0 {
			k := min(n, len(buf))
			w.Write(buf[:k])
			n -= k
		}
		return
	}
	w.Header().Set("Content-Length", "3")
	w.Write(okBody)
}

// grpcEcho answers a gRPC call: each piece of the request body is echoed
// as it comes (a bidirectional stream's messages, in order), then the
// status in the trailers.
func (s *Server) grpcEcho(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("X-Request-Proto", r.Proto)
	w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
	w.WriteHeader(200)
	f := w.(http.Flusher)
	f.Flush()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			f.Flush()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			w.Header().Set("Grpc-Status", "13")
			w.Header().Set("Grpc-Message", err.Error())
			return
		}
	}
	w.Header().Set("Grpc-Status", "0")
}

// upgrade answers 101 and echoes what the client sends until it
// half-closes, then closes.
func (s *Server) upgrade(w http.ResponseWriter) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	// A stream of the server's, as a TCP one: Close ends it.
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	if brw.Flush() != nil {
		return
	}
	io.Copy(c, brw.Reader) // the client's bytes the server read ahead, then the rest
}

// echoBufs holds the TCP echo's buffers.
var echoBufs = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

func (s *Server) acceptTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			// Read and write, not splice: io.Copy between TCP
			// connections splices through a pipe pair of its own (three
			// descriptors a stream, and the pipes linger in a pool), which
			// ran the backend out of descriptors at 6,666 streams. The
			// buffer is pooled: io.Copy's own, 32 KiB a stream, made the
			// bench's process collect every 7 ms at 10,000 short streams
			// a second (a tenth of its CPU, pauses of up to 0.8 ms), a
			// cost every target's short TCP row carried.
			buf := echoBufs.Get().(*[]byte)
			io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, *buf)
			echoBufs.Put(buf)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		})
	}
}

// Shutdown stops the servers as a well-behaved application does on
// SIGTERM: it stops accepting, closes idle keep-alive connections, lets
// requests in flight finish (until ctx ends), and ends TCP streams.
func (s *Server) Shutdown(ctx context.Context) error {
	for _, hs := range []*http.Server{s.http, s.https} {
		if hs != nil {
			if err := hs.Shutdown(ctx); err != nil {
				hs.Close()
			}
		}
	}
	return s.Close()
}

// Close stops the servers and waits for their goroutines.
func (s *Server) Close() error {
	if s.http != nil {
		s.http.Close()
	}
	if s.https != nil {
		s.https.Close()
	}
	if s.tln != nil {
		s.tln.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
