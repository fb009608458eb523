package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// server serves HTTP/2 with h on a loopback listener until the test ends.
func server(t *testing.T, cfg Config, h Handler) string {
	t.Helper()
	addr, _ := serverServed(t, cfg, h)
	return addr
}

// serverServed is server, and a channel that receives once for each
// connection whose Serve has returned (its handlers all done).
func serverServed(t *testing.T, cfg Config, h Handler) (string, <-chan struct{}) {
	t.Helper()
	served := make(chan struct{}, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PrefaceTimeout == 0 {
		cfg.PrefaceTimeout = 5 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			wg.Go(func() {
				NewConn(c, cfg, h).Serve()
				c.Close()
				select {
				case served <- struct{}{}:
				default:
				}
			})
		}
	})
	return ln.Addr().String(), served
}

// echo answers with the request's method, path and body, and a header
// naming the body's length.
func echo(s *Stream) {
	body, err := io.ReadAll(s)
	if err != nil {
		s.Reset(http2.ErrCodeInternal)
		return
	}
	hb := s.StartResponse(200)
	hb.AddString("x-method", []byte(s.Method))
	hb.AddString("x-path", []byte(s.Path))
	hb.AddString("x-body-length", []byte(fmt.Sprint(len(body))))
	for _, f := range s.Fields {
		if strings.HasPrefix(f.Name, "x-") {
			hb.AddString("echo-"+f.Name, []byte(f.Value))
		}
	}
	s.SendHeaders(false)
	s.Write(body)
	s.End()
}

// client is a real HTTP/2 client (x/net/http2's) over cleartext TCP.
func client() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}, Timeout: 20 * time.Second}
}

// Requests with bodies larger than every flow-control window go both
// ways, many streams at once on one connection (RFC 9113 §5.2, §6.9).
func TestServeRequests(t *testing.T) {
	addr := server(t, Config{}, echo)
	c := client()
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB: past the stream and connection windows
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			body := big[:i*len(big)/40]
			req, _ := http.NewRequest("POST", fmt.Sprintf("http://%s/p/%d?q=1", addr, i), bytes.NewReader(body))
			req.Header.Set("X-Test", fmt.Sprint(i))
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs <- err
			case resp.ProtoMajor != 2 || resp.StatusCode != 200:
				errs <- fmt.Errorf("request %d: %s %d", i, resp.Proto, resp.StatusCode)
			case !bytes.Equal(got, body):
				errs <- fmt.Errorf("request %d: %d bytes back, sent %d", i, len(got), len(body))
			case resp.Header.Get("X-Path") != fmt.Sprintf("/p/%d?q=1", i) || resp.Header.Get("Echo-X-Test") != fmt.Sprint(i):
				errs <- fmt.Errorf("request %d: headers %v", i, resp.Header)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// rawClient speaks HTTP/2 frame by frame, to send what a real client
// would not.
type rawClient struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.enc = hpack.NewEncoder(&rc.buf)
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(c, http2.ClientPreface)
	rc.fr.WriteSettings(settings...)
	// The server's SETTINGS come first.
	if f := rc.next(); f == nil {
		t.Fatal("connection closed before the server's SETTINGS")
	} else if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	return rc
}

// block encodes header fields given as name, value pairs.
func (rc *rawClient) block(fields ...string) []byte {
	rc.buf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return append([]byte(nil), rc.buf.Bytes()...)
}

func (rc *rawClient) headers(id uint32, end bool, fields ...string) {
	rc.t.Helper()
	if err := rc.writeHeaders(id, end, fields...); err != nil {
		rc.t.Fatal(err)
	}
}

// writeHeaders is headers for a goroutine of the test's own, which may
// not fail the test: the server may close the connection under it.
func (rc *rawClient) writeHeaders(id uint32, end bool, fields ...string) error {
	return rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block(fields...), EndStream: end, EndHeaders: true})
}

func get(path string) []string {
	return []string{":method", "GET", ":scheme", "http", ":authority", "example.test", ":path", path}
}

// next returns the next frame, or nil once the connection is closed.
func (rc *rawClient) next() http2.Frame {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := rc.fr.ReadFrame()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			rc.t.Fatal("no frame within 10s")
		}
		rc.t.Logf("the connection ended: %v", err)
		return nil
	}
	return f
}

// until reads frames until one satisfies ok, and returns it; it fails the
// test if the connection closes first.
func (rc *rawClient) until(what string, ok func(http2.Frame) bool) http2.Frame {
	rc.t.Helper()
	for {
		f := rc.next()
		if f == nil {
			rc.t.Fatalf("connection closed before %s", what)
		}
		if ok(f) {
			return f
		}
	}
}

func rstOf(id uint32, code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id && r.ErrCode == code
	}
}

func goAway(code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		return ok && g.ErrCode == code
	}
}

func responseOn(id uint32) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == id
	}
}

// closed reads until the server closes the connection.
func (rc *rawClient) closed() {
	rc.t.Helper()
	for rc.next() != nil {
	}
}

// Malformed requests are reset with PROTOCOL_ERROR and never reach the
// handler: RFC 9113 §8.1.1 (malformed), §8.2 (field names in lower case,
// values without surrounding whitespace or CR/LF/NUL), §8.2.2
// (connection-specific fields, TE), §8.3.1 (pseudo-header fields).
func TestMalformedRequests(t *testing.T) {
	var served atomic.Int32
	addr := server(t, Config{}, func(s *Stream) { served.Add(1); echo(s) })
	for _, tc := range []struct {
		name   string
		fields []string
	}{
		{"§8.2 upper-case name", append(get("/"), "X-Upper", "1")},
		{"§8.2.1 leading space", append(get("/"), "x-a", " v")},
		{"§8.2.1 trailing tab", append(get("/"), "x-a", "v\t")},
		{"§8.2.1 CR LF in a value (a header injected in HTTP/1.1)", append(get("/"), "x-a", "v\r\nx-injected: 1")},
		{"§8.2.1 NUL in a value", append(get("/"), "x-a", "v\x00w")},
		{"§8.2.1 LF in :path", get("/a\nb")},
		{"§8.2.2 connection", append(get("/"), "connection", "close")},
		{"§8.2.2 transfer-encoding", append(get("/"), "transfer-encoding", "chunked")},
		{"§8.2.2 upgrade", append(get("/"), "upgrade", "websocket")},
		{"§8.2.2 keep-alive", append(get("/"), "keep-alive", "1")},
		{"§8.2.2 te other than trailers", append(get("/"), "te", "gzip")},
		{"§8.3.1 no :path", []string{":method", "GET", ":scheme", "http", ":authority", "a"}},
		{"§8.3.1 no :method", []string{":scheme", "http", ":path", "/", ":authority", "a"}},
		{"§8.3.1 no :scheme", []string{":method", "GET", ":path", "/", ":authority", "a"}},
		{"§8.3.1 empty :path", []string{":method", "GET", ":scheme", "http", ":path", "", ":authority", "a"}},
		{"§8.3 :status in a request", append(get("/"), ":status", "200")},
		{"§8.3 unknown pseudo-header", append(get("/"), ":foo", "bar")},
		{"§8.3 pseudo-header after a regular one", []string{":method", "GET", "x-a", "1", ":scheme", "http", ":path", "/"}},
		{"§8.3 :method twice", append(get("/"), ":method", "POST")},
		{"§8.1.1 two content-lengths that differ", append(get("/"), "content-length", "1", "content-length", "2")},
		{"§8.1.1 content-length and no body", append(get("/"), "content-length", "5")},
		{"§8.3.1 CONNECT with :path", []string{":method", "CONNECT", ":authority", "a:443", ":path", "/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, addr)
			rc.headers(1, true, tc.fields...)
			rc.until("RST_STREAM PROTOCOL_ERROR", func(f http2.Frame) bool {
				if r, ok := f.(*http2.RSTStreamFrame); ok && r.StreamID == 1 {
					if r.ErrCode != http2.ErrCodeProtocol {
						t.Fatalf("reset with %v, want PROTOCOL_ERROR", r.ErrCode)
					}
					return true
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("GOAWAY %v for a stream error", g.ErrCode)
				}
				if _, ok := f.(*http2.MetaHeadersFrame); ok {
					t.Fatal("a malformed request got a response")
				}
				return false
			})
			// The connection goes on.
			rc.headers(3, true, get("/ok")...)
			rc.until("the next stream's response", responseOn(3))
		})
	}
	if n := served.Load(); n != 22 {
		t.Errorf("handler ran %d times, want 22 (only the well-formed requests)", n)
	}
}

// A body longer or shorter than its content-length is malformed (RFC 9113
// §8.1.1): the stream is reset, and the handler's read fails.
func TestContentLengthMismatch(t *testing.T) {
	readErr := make(chan error, 2)
	addr := server(t, Config{}, func(s *Stream) {
		_, err := io.ReadAll(s)
		readErr <- err
		s.Reset(http2.ErrCodeCancel)
	})
	for i, body := range []string{"toolong", "ab"} {
		rc := dialRaw(t, addr)
		rc.headers(1, false, append([]string{":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/"}, "content-length", "4")...)
		rc.fr.WriteData(1, true, []byte(body))
		rc.until("RST_STREAM PROTOCOL_ERROR", rstOf(1, http2.ErrCodeProtocol))
		if err := <-readErr; !errors.Is(err, ErrStreamReset) {
			t.Errorf("body %d: handler read %v, want ErrStreamReset", i, err)
		}
	}
}

// More streams than SETTINGS_MAX_CONCURRENT_STREAMS are refused (RFC 9113
// §5.1.2), counting streams whose handler still runs although the client
// reset them (HTTP/2 Rapid Reset, CVE-2023-44487).
func TestMaxStreams(t *testing.T) {
	release := make(chan struct{})
	addr := server(t, Config{MaxStreams: 4}, func(s *Stream) {
		<-release
		echo(s)
	})
	defer close(release)
	rc := dialRaw(t, addr)
	for id := uint32(1); id <= 7; id += 2 {
		rc.headers(id, true, get("/")...)
	}
	rc.fr.WriteRSTStream(1, http2.ErrCodeCancel) // its handler still runs
	rc.headers(9, true, get("/")...)
	rc.until("RST_STREAM REFUSED_STREAM on the fifth stream", rstOf(9, http2.ErrCodeRefusedStream))
}

// A client that opens and resets streams faster than it lets them finish
// (HTTP/2 Rapid Reset, CVE-2023-44487) is told to calm down and
// disconnected; each reset reaches the handler, which stops its work.
func TestRapidReset(t *testing.T) {
	var started, stopped atomic.Int32
	addr, served := serverServed(t, Config{MaxStreams: 1000}, func(s *Stream) {
		started.Add(1)
		done := make(chan struct{})
		s.OnReset(func() { close(done) })
		select {
		case <-done:
			stopped.Add(1)
		case <-time.After(10 * time.Second):
		}
		s.Reset(http2.ErrCodeCancel)
	})
	rc := dialRaw(t, addr)
	go func() {
		for id := uint32(1); id < 2*2*minResets; id += 2 {
			if rc.writeHeaders(id, true, get("/")...) != nil || rc.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	rc.until("GOAWAY ENHANCE_YOUR_CALM", goAway(http2.ErrCodeEnhanceYourCalm))
	rc.closed()
	// Every handler sees its stream reset: by the client, or as the
	// connection ends. Serve returns once every handler has.
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running 10s after the connection closed")
	}
	if n, m := stopped.Load(), started.Load(); n != m || m < minResets/2 {
		t.Errorf("%d of %d handlers saw their stream reset (want all, and at least %d)", n, m, minResets/2)
	}
}

// Header blocks past SETTINGS_MAX_HEADER_LIST_SIZE are not kept: a block
// that stays within twice the limit gets the stream marked TooLarge (the
// proxy answers 431); an endless run of CONTINUATION frames
// (CVE-2024-27316) ends the connection.
func TestHeaderListLimits(t *testing.T) {
	var tooLarge atomic.Bool
	addr := server(t, Config{MaxHeaderListSize: 1024}, func(s *Stream) {
		tooLarge.Store(s.TooLarge)
		s.StartResponse(431)
		s.SendHeaders(true)
	})
	rc := dialRaw(t, addr)
	rc.headers(1, true, append(get("/"), "x-a", strings.Repeat("v", 400), "x-b", strings.Repeat("v", 400), "x-c", strings.Repeat("v", 400))...)
	rc.until("the 431", responseOn(1))
	if !tooLarge.Load() {
		t.Fatal("a header list over the limit was not marked TooLarge")
	}

	rc = dialRaw(t, addr)
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(get("/")...), EndStream: true})
	go func() {
		frag := rc.block("x-a", strings.Repeat("b", 1000))
		for range 10000 {
			if rc.fr.WriteContinuation(1, false, frag) != nil {
				return
			}
		}
	}()
	rc.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	rc.closed()
}

// DATA frames that carry nothing and end nothing, in numbers no client
// needs, end the connection (CVE-2019-9518).
func TestEmptyFrameFlood(t *testing.T) {
	addr := server(t, Config{}, func(s *Stream) { io.Copy(io.Discard, s); s.StartResponse(200); s.SendHeaders(true) })
	rc := dialRaw(t, addr)
	rc.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/")
	go func() {
		for range 2 * maxEmptyFrame {
			if rc.fr.WriteData(1, false, nil) != nil {
				return
			}
		}
	}()
	rc.until("GOAWAY ENHANCE_YOUR_CALM", goAway(http2.ErrCodeEnhanceYourCalm))
}

// Flow control is kept both ways (RFC 9113 §6.9): a response waits for the
// client's window, which its SETTINGS made small, and goes on as the
// window opens; a client that sends past the window it was given breaks
// the connection.
func TestFlowControl(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 100)
	addr := server(t, Config{}, func(s *Stream) {
		s.StartResponse(200)
		s.SendHeaders(false)
		s.Write(body)
		s.End()
	})
	rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
	rc.headers(1, true, get("/")...)
	var got int
	for got < len(body) {
		f := rc.until("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
		d := f.(*http2.DataFrame)
		if len(d.Data()) > 10 {
			t.Fatalf("DATA of %d bytes past a 10-byte window", len(d.Data()))
		}
		got += len(d.Data())
		if got < len(body) {
			if d.StreamEnded() {
				t.Fatalf("stream ended after %d bytes", got)
			}
			rc.fr.WriteWindowUpdate(1, 10)
		}
	}

	// A handler that reads nothing: the client may send a window's worth
	// on each stream, and no more on the connection.
	release := make(chan struct{})
	defer close(release)
	addr = server(t, Config{}, func(s *Stream) { <-release; s.Reset(http2.ErrCodeCancel) })
	post := []string{":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/"}
	chunk := make([]byte, 16384)
	rc = dialRaw(t, addr)
	rc.headers(1, false, post...)
	go func() {
		for range streamWindow/len(chunk) + 1 {
			if rc.fr.WriteData(1, false, chunk) != nil {
				return
			}
		}
	}()
	rc.until("RST_STREAM FLOW_CONTROL_ERROR past the stream's window", rstOf(1, http2.ErrCodeFlowControl))

	rc = dialRaw(t, addr)
	go func() {
		for id := uint32(1); id <= 9; id += 2 { // 5 streams' windows: past the connection's
			if rc.writeHeaders(id, false, post...) != nil {
				return
			}
			for range streamWindow / len(chunk) {
				if rc.fr.WriteData(id, false, chunk) != nil {
					return
				}
			}
		}
	}()
	rc.until("GOAWAY FLOW_CONTROL_ERROR past the connection's window", goAway(http2.ErrCodeFlowControl))
}

// A graceful end (RFC 9113 §6.8): a first GOAWAY that admits every stream
// and a PING; on the PING's answer, the GOAWAY naming the last stream; the
// stream in flight is served to its end, and the connection closes.
func TestShutdown(t *testing.T) {
	started := make(chan *Conn, 1)
	release := make(chan struct{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		sc := NewConn(c, Config{PrefaceTimeout: 5 * time.Second, IdleTimeout: time.Minute, WriteTimeout: 5 * time.Second}, func(s *Stream) {
			<-release
			echo(s)
		})
		started <- sc
		sc.Serve()
	}()
	rc := dialRaw(t, ln.Addr().String())
	rc.headers(1, true, get("/slow")...)
	sc := <-started
	// Let the stream reach its handler before the drain.
	rc.fr.WritePing(false, [8]byte{1})
	rc.until("PING ack", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && p.IsAck() })
	go sc.Shutdown()
	first := rc.until("first GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if first.LastStreamID != 1<<31-1 || first.ErrCode != http2.ErrCodeNo {
		t.Fatalf("first GOAWAY: last stream %d, %v; want 2^31-1, NO_ERROR", first.LastStreamID, first.ErrCode)
	}
	ping := rc.until("the shutdown's PING", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }).(*http2.PingFrame)
	rc.fr.WritePing(true, ping.Data)
	final := rc.until("final GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if final.LastStreamID != 1 {
		t.Fatalf("final GOAWAY names stream %d, want 1", final.LastStreamID)
	}
	rc.headers(3, true, get("/late")...) // after the final GOAWAY: not processed
	close(release)
	resp := rc.until("the response of stream 1", func(f http2.Frame) bool {
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			if h.StreamID != 1 {
				t.Fatalf("a response on stream %d, opened after the final GOAWAY", h.StreamID)
			}
			return true
		}
		return false
	}).(*http2.MetaHeadersFrame)
	if resp.PseudoValue("status") != "200" {
		t.Fatalf("status %q", resp.PseudoValue("status"))
	}
	rc.closed()
}

// A connection without streams for IdleTimeout is closed with GOAWAY
// NO_ERROR; one whose stream is being served is not idle.
func TestIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	addr := server(t, Config{IdleTimeout: 200 * time.Millisecond}, func(s *Stream) {
		<-release
		echo(s)
	})
	rc := dialRaw(t, addr)
	rc.headers(1, true, get("/")...)
	time.Sleep(600 * time.Millisecond) // three idle timeouts with a stream in flight
	close(release)
	rc.until("the response", responseOn(1))
	rc.until("GOAWAY NO_ERROR once idle", goAway(http2.ErrCodeNo))
	rc.closed()
}

// TestTrailers: a request's trailers are kept for the handler, but for
// the fields a trailer section may not carry (RFC 9110 §6.5.1); a
// response's trailers end its stream (RFC 9113 §8.1) after its body.
func TestTrailers(t *testing.T) {
	addr := server(t, Config{}, func(s *Stream) {
		body, _ := io.ReadAll(s)
		hb := s.StartResponse(200)
		hb.AddString("trailer", []byte("x-got, x-length"))
		s.SendHeaders(false)
		s.Write(body)
		tb := s.StartTrailers()
		var got []string
		for _, f := range s.Trailers() {
			got = append(got, f.Name+"="+f.Value)
		}
		tb.AddString("x-got", []byte(strings.Join(got, ";")))
		tb.AddString("x-length", []byte(fmt.Sprint(len(body))))
		s.SendTrailers()
	})
	rc := dialRaw(t, addr)
	rc.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", "example.test", ":path", "/", "trailer", "x-sum")
	rc.fr.WriteData(1, false, []byte("body"))
	rc.headers(1, true, "x-sum", "7", "content-length", "9", "host", "evil.example", "authorization", "x", "cookie", "a=b")
	rc.until("the response head", responseOn(1))
	var data []byte
	for {
		switch f := rc.next().(type) {
		case *http2.DataFrame:
			data = append(data, f.Data()...)
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 || !f.StreamEnded() || len(f.PseudoFields()) > 0 {
				t.Fatalf("trailers: %+v", f)
			}
			got := map[string]string{}
			for _, hf := range f.RegularFields() {
				got[hf.Name] = hf.Value
			}
			if string(data) != "body" || got["x-got"] != "x-sum=7" || got["x-length"] != "4" {
				t.Fatalf("body %q, trailers %v (want x-got x-sum=7 alone, x-length 4)", data, got)
			}
			return
		case nil:
			t.Fatal("connection closed before the trailers")
		}
	}
}

// A SETTINGS frame that opens the windows is acknowledged before any DATA
// the new windows let out (RFC 9113 §6.5.3: the ACK is sent once the
// values are applied): a client that waits for its ACK, as h2spec 6.9.2/1
// does, must not find DATA first. The stream waits on a shut window
// (SETTINGS_INITIAL_WINDOW_SIZE 0) when the window opens by one byte; it
// writes at once, from its own goroutine, racing the reader's ACK.
func TestSettingsAckBeforeTheDataItAllows(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	addr := server(t, Config{}, func(s *Stream) {
		s.StartResponse(200)
		s.SendHeaders(false)
		s.Write([]byte("abc"))
		s.End()
	})
	for i := range 50 {
		rc := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		rc.until("the ACK of the first SETTINGS", func(f http2.Frame) bool { sf, ok := f.(*http2.SettingsFrame); return ok && sf.IsAck() })
		rc.headers(1, true, get("/")...)
		rc.until("the response head", responseOn(1)) // the stream now waits for its window
		rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		f := rc.until("the ACK or DATA", func(f http2.Frame) bool {
			sf, ok := f.(*http2.SettingsFrame)
			_, data := f.(*http2.DataFrame)
			return data || ok && sf.IsAck()
		})
		if d, ok := f.(*http2.DataFrame); ok {
			t.Fatalf("connection %d: DATA (%d bytes) before the SETTINGS ACK", i, len(d.Data()))
		}
		if d := rc.until("DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame); len(d.Data()) != 1 {
			t.Fatalf("connection %d: DATA of %d bytes, want the 1 the window allows", i, len(d.Data()))
		}
		rc.c.Close()
	}
}

// writeCounter is a connection that counts the writes carrying a frame
// of stream id.
type writeCounter struct {
	net.Conn
	id     uint32
	writes atomic.Int32
}

func (c *writeCounter) Write(p []byte) (int, error) {
	for b := p; len(b) >= 9; {
		n := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		if binary.BigEndian.Uint32(b[5:9])&maxWindow == c.id {
			c.writes.Add(1)
			break
		}
		b = b[min(len(b), 9+n):]
	}
	return c.Conn.Write(p)
}

// A stream's flushes wait for its goroutine's turn to end (flushSoon): a
// gRPC-shaped response, its head flushed, then a message flushed, then
// trailers, leaves in one write where it took three, as nginx's event
// loop writes once a turn. One processor, as a worker of several has.
func TestStreamFlushesJoinInOneWrite(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wc := make(chan *writeCounter, 1)
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		cc := &writeCounter{Conn: c, id: 1}
		wc <- cc
		NewConn(cc, Config{PrefaceTimeout: 5 * time.Second, IdleTimeout: time.Minute, WriteTimeout: 5 * time.Second}, func(s *Stream) {
			s.StartResponse(200).AddString("content-type", []byte("application/grpc"))
			s.SendHeaders(false)
			s.Flush()
			s.Write([]byte{0, 0, 0, 0, 2, 'h', 'i'})
			s.Flush()
			s.StartTrailers().AddString("grpc-status", []byte("0"))
			s.SendTrailers()
		}).Serve()
	}()
	rc := dialRaw(t, ln.Addr().String())
	rc.headers(1, true, get("/")...)
	rc.until("the trailers", func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == 1 && h.StreamEnded()
	})
	if n := (<-wc).writes.Load(); n != 1 {
		t.Errorf("the response took %d writes, want 1", n)
	}
	rc.c.Close()
	<-served
}
