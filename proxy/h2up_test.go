package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cBackend is a backend that speaks HTTP/1.1 and HTTP/2 in the clear
// (prior knowledge), net/http's server.
func h2cBackend(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	be := httptest.NewUnstartedServer(h)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	be.Config.Protocols = &protos
	be.Start()
	t.Cleanup(be.Close)
	return be
}

// h2cClient is an HTTP/2 client in the clear (prior knowledge).
func h2cClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &protos}, Timeout: 10 * time.Second}
}

func h2Config(protocol string, backends ...string) string {
	return strings.Replace(webConfig(backends...), "    connectTimeout: 1s\n", "    connectTimeout: 1s\n    responseTimeout: 2s\n    protocol: "+protocol+"\n", 1)
}

// TestH2Backend: a backend with protocol h2c gets HTTP/2 from HTTP/1.1 and
// HTTP/2 clients alike, with the head every request goes out with
// (X-Forwarded-*, no hop-by-hop field); its response's trailers reach an
// HTTP/2 client (RFC 9113 §8.1), and the HTTP/2 client's request trailers
// reach it; an HTTP/1.1 client gets the body chunked.
func TestH2Backend(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Length, X-Client-Trailer")
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("X-Saw", r.Header.Get("X-Forwarded-For")+"|"+r.Header.Get("X-Forwarded-Proto")+"|"+r.Header.Get("Connection")+"|"+r.Header.Get("Keep-Alive")+"|"+r.Host)
		w.Header().Set("X-UA", fmt.Sprint(r.Header["User-Agent"]))
		w.Write(body)
		w.Header().Set("X-Length", strconv.Itoa(len(body)))
		w.Header().Set("X-Client-Trailer", r.Trailer.Get("X-Checksum"))
	})
	_, web, _ := startProxy(t, h2Config("h2c", hostOf(be)))

	// An HTTP/1.1 client, with hop-by-hop fields that must not go on.
	c, br := dialWeb(t, web)
	fmt.Fprintf(c, "POST /echo HTTP/1.1\r\nHost: app.example\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 5\r\n\r\nhello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" || resp.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Fatalf("HTTP/1.1 client: %d %q, backend spoke %q", resp.StatusCode, body, resp.Header.Get("X-Proto"))
	}
	if got := resp.Header.Get("X-Saw"); got != "127.0.0.1|http|||app.example" {
		t.Fatalf("the backend saw XFF|XFP|Connection|Keep-Alive|Host = %q", got)
	}
	if got := resp.Header.Get("X-UA"); got != "[]" {
		t.Fatalf("the backend saw User-Agent %s: baton added one", got)
	}
	// The connection goes on.
	fmt.Fprintf(c, "GET /again HTTP/1.1\r\nHost: app.example\r\n\r\n")
	if resp, err = http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second request on the connection: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)

	// An HTTP/2 client, with a request trailer.
	pr, pw := io.Pipe()
	defer pr.Close() // a failed request leaves the writer below no reader: this ends it
	req, _ := http.NewRequest("POST", "http://"+web+"/echo", pr)
	req.Trailer = http.Header{"X-Checksum": nil}
	go func() {
		io.WriteString(pw, "streamed body")
		req.Trailer.Set("X-Checksum", "abc")
		pw.Close()
	}()
	resp, err = h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(body) != "streamed body" {
		t.Fatalf("HTTP/2 client: %s %q", resp.Proto, body)
	}
	if resp.Trailer.Get("X-Length") != "13" || resp.Trailer.Get("X-Client-Trailer") != "abc" {
		t.Fatalf("trailers: %v (want X-Length 13 from the backend, X-Client-Trailer abc from the client)", resp.Trailer)
	}
}

// TestH2BackendFullDuplex: a stream goes both ways at once (gRPC's
// bidirectional streaming): the backend answers each line of the request
// body as it comes, and the client sends the next line only once it has
// the answer to the last.
func TestH2BackendFullDuplex(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintf(w, "echo %s\n", sc.Text())
			w.(http.Flusher).Flush()
		}
	})
	_, web, _ := startProxy(t, h2Config("h2c", hostOf(be)))
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+web+"/chat", pr)
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := range 5 {
		fmt.Fprintf(pw, "line %d\n", i)
		line, err := rd.ReadString('\n')
		if want := fmt.Sprintf("echo line %d\n", i); err != nil || line != want {
			t.Fatalf("answer %d: %q, %v (want %q)", i, line, err, want)
		}
	}
	pw.Close()
	if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
		t.Fatalf("after the request's end: %q, %v", rest, err)
	}
}

// TestH2BackendOverTLS: protocol h2 speaks HTTP/2 over TLS, agreed by
// ALPN; a backend whose TLS does not offer h2 is a failed connect (502),
// never HTTP/1.1 spoken instead.
func TestH2BackendOverTLS(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }
	be := httptest.NewUnstartedServer(http.HandlerFunc(h))
	be.EnableHTTP2 = true
	be.StartTLS()
	defer be.Close()
	h1only := httptest.NewUnstartedServer(http.HandlerFunc(h))
	h1only.TLS = &tls.Config{NextProtos: []string{"http/1.1"}}
	h1only.StartTLS()
	defer h1only.Close()

	for _, tt := range []struct {
		be   *httptest.Server
		want string
	}{{be, "200 HTTP/2.0"}, {h1only, "502"}} {
		cfg := strings.Replace(h2Config("h2", strings.TrimPrefix(tt.be.URL, "https://")), "protocol: h2\n", "protocol: h2\n    tls: {insecureSkipVerify: true}\n", 1)
		_, web, _ := startProxy(t, cfg)
		resp, err := http.Get("http://" + web + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := strconv.Itoa(resp.StatusCode)
		if resp.StatusCode == 200 {
			got += " " + string(body)
		}
		if got != tt.want {
			t.Fatalf("got %s, want %s", got, tt.want)
		}
	}
}

// TestH2BackendGoAway: a backend that shuts down gracefully (GOAWAY)
// between requests fails none: the next request opens a new connection.
func TestH2BackendGoAway(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	// A second server on the same address would race; instead, the
	// backend closes idle connections (GOAWAY) while baton pools them.
	_, web, _ := startProxy(t, h2Config("h2c", hostOf(be)))
	client := h2cClient()
	for i := range 20 {
		resp, err := client.Get("http://" + web + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d after GOAWAY: %d %q", i, resp.StatusCode, body)
		}
		if i%5 == 0 {
			be.Config.SetKeepAlivesEnabled(false) // closes idle connections: GOAWAY on HTTP/2
			be.Config.SetKeepAlivesEnabled(true)
		}
	}
}

// grpcCall makes a unary gRPC call's HTTP request (an empty message) for
// host with the grpc-timeout given ("" for none), without TE: trailers
// (baton sends it upstream itself).
func grpcCall(t *testing.T, url, timeout, host string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Host = host
	req.Header.Set("Content-Type", "application/grpc")
	if timeout != "" {
		req.Header.Set("Grpc-Timeout", timeout)
	}
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// grpcStatusOf is a response's grpc-status: from its trailers, or from
// its head in a Trailers-Only response.
func grpcStatusOf(resp *http.Response) string {
	if s := resp.Trailer.Get("Grpc-Status"); s != "" {
		return s
	}
	return resp.Header.Get("Grpc-Status")
}

// TestGRPC: a gRPC call goes through with its trailers; grpc-timeout
// reaches the backend no longer than the client's; baton's own failures
// are answered as gRPC reads them (PROTOCOL-HTTP2.md: Trailers-Only,
// :status 200): UNIMPLEMENTED (12) without a route, UNAVAILABLE (14)
// when no endpoint answers, DEADLINE_EXCEEDED (4) past the client's
// deadline or the backend's responseTimeout.
func TestGRPC(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/grpc" || r.Header.Get("TE") != "trailers" {
			w.WriteHeader(400)
			return
		}
		if r.URL.Path == "/svc/Slow" {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, X-Timeout")
		w.Write([]byte("\x00\x00\x00\x00\x00"))
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("X-Timeout", r.Header.Get("Grpc-Timeout"))
	})
	_, web, _ := startProxy(t, fmt.Sprintf(`
controlSocket: /tmp/unused.sock
listeners:
  - name: web
    address: @WEB@
backends:
  - name: app
    static: [%q]
    protocol: h2c
    responseTimeout: 2s
  - name: down
    static: ["127.0.0.1:1"]
    protocol: h2c
routes:
  - listener: web
    host: app.example
    backend: app
  - listener: web
    host: down.example
    backend: down
`, hostOf(be)))
	base := "http://" + web

	resp := grpcCall(t, base+"/svc/Echo", "", "app.example")
	if resp.StatusCode != 200 || grpcStatusOf(resp) != "0" {
		t.Fatalf("call: %d grpc-status %q", resp.StatusCode, grpcStatusOf(resp))
	}
	resp = grpcCall(t, base+"/svc/Echo", "3S", "app.example")
	if grpcStatusOf(resp) != "0" {
		t.Fatalf("call with a deadline: grpc-status %q", grpcStatusOf(resp))
	}
	if got, ok := parseGRPCTimeout([]byte(resp.Trailer.Get("X-Timeout"))); !ok || got > 3*time.Second || got < 2*time.Second {
		t.Fatalf("the backend saw grpc-timeout %q for the client's 3S", resp.Trailer.Get("X-Timeout"))
	}
	for _, tt := range []struct {
		host, path, timeout, want string
	}{
		{"nowhere.example", "/svc/Echo", "", "12"},
		{"down.example", "/svc/Echo", "", "14"},
		{"app.example", "/svc/Slow", "300m", "4"},
		{"app.example", "/svc/Slow", "", "4"}, // responseTimeout 2s
	} {
		start := time.Now()
		resp := grpcCall(t, base+tt.path, tt.timeout, tt.host)
		if resp.StatusCode != 200 || grpcStatusOf(resp) != tt.want || resp.Header.Get("Content-Type") != "application/grpc" {
			t.Fatalf("%s%s (timeout %q): %d grpc-status %q content-type %q, want 200 grpc-status %s", tt.host, tt.path, tt.timeout, resp.StatusCode, grpcStatusOf(resp), resp.Header.Get("Content-Type"), tt.want)
		}
		if tt.timeout == "300m" && time.Since(start) > 2*time.Second {
			t.Fatalf("DEADLINE_EXCEEDED after %v for a 300 ms deadline", time.Since(start))
		}
	}
}

// TestGRPCTimeoutValues: grpc-timeout's syntax (PROTOCOL-HTTP2.md:
// TimeoutValue is at most 8 digits), and what baton sends is never longer
// than what it was given.
func TestGRPCTimeoutValues(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1S", time.Second, true}, {"100m", 100 * time.Millisecond, true}, {"99999999H", maxDuration, true}, {"99999999S", 99999999 * time.Second, true},
		{"5u", 5 * time.Microsecond, true}, {"7n", 7, true}, {"2M", 2 * time.Minute, true},
		{"123456789S", 0, false}, {"S", 0, false}, {"1s", 0, false}, {"-1S", 0, false}, {"1.5S", 0, false}, {"", 0, false},
	} {
		got, ok := parseGRPCTimeout([]byte(tt.in))
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	for _, d := range []time.Duration{0, 1, 99999999, 100000001, 1500 * time.Millisecond, 3 * time.Hour, 1<<63 - 1} {
		s := appendGRPCTimeout(nil, d)
		got, ok := parseGRPCTimeout([]byte(s))
		if !ok || got > d {
			t.Errorf("appendGRPCTimeout(%v) = %q: parses to %v, %v", d, s, got, ok)
		}
	}
}

// TestH2BackendClientGone: an HTTP/2 client that resets its stream
// cancels the backend's (RST_STREAM upstream): the backend's request
// context ends.
func TestH2BackendClientGone(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		cancelled <- struct{}{}
	})
	_, web, _ := startProxy(t, h2Config("h2c", hostOf(be)))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+web+"/stream", nil)
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's stream lives on after the client reset its own")
	}
}

// rawH2Backend is an HTTP/2 backend written frame by frame, to send what a
// real server would not: respond answers each request (its path).
func rawH2Backend(t *testing.T, respond func(fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32, path string)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveConns(t, ln, func(c net.Conn) {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings()
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.MetaHeadersFrame:
				respond(fr, enc, &buf, f.StreamID, f.PseudoValue("path"))
			}
		}
	})
}

// TestH2BackendMalformedResponse: a backend that breaks HTTP/2 in its
// response (RFC 9113 §8.1.1: a response without :status, a field value
// with CR LF, §6.9.1: a window past 2^31-1) has that stream failed (502,
// counted in the backend's errors), never a crash, a forged header or a
// stuck pool: the next request on the same backend is answered.
func TestH2BackendMalformedResponse(t *testing.T) {
	headers := func(fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32, end bool, fields ...string) {
		buf.Reset()
		for i := 0; i < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: end})
	}
	be := rawH2Backend(t, func(fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32, path string) {
		switch path {
		case "/no-status":
			headers(fr, enc, buf, id, true, "content-type", "text/plain")
		case "/crlf":
			headers(fr, enc, buf, id, true, ":status", "200", "x-a", "1\r\nx-injected: 1")
		case "/request-status":
			headers(fr, enc, buf, id, true, ":method", "GET", ":status", "200")
		case "/window":
			headers(fr, enc, buf, id, false, ":status", "200")
			fr.WriteWindowUpdate(id, 0x7fffffff)
			fr.WriteData(id, true, []byte("late"))
		default:
			headers(fr, enc, buf, id, false, ":status", "200")
			fr.WriteData(id, true, []byte("ok"))
		}
	})
	p, web, _ := startProxy(t, h2Config("h2c", be))
	get := func(path string) (int, string, http.Header) {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body), resp.Header
	}
	for _, path := range []string{"/no-status", "/crlf", "/request-status", "/window"} {
		start := time.Now()
		status, _, h := get(path)
		t.Logf("%s: %d in %v", path, status, time.Since(start))
		if h.Get("X-Injected") != "" {
			t.Fatalf("%s: a header forged by the backend's CR LF reached the client", path)
		}
		if path == "/window" {
			if status != 200 && status != 502 {
				t.Fatalf("%s: %d", path, status)
			}
		} else if status != 502 {
			t.Fatalf("%s: %d, want 502", path, status)
		}
		if status, body, _ := get("/ok"); status != 200 || body != "ok" {
			t.Fatalf("after %s: %d %q", path, status, body)
		}
	}
	if errs := p.backends["app"].errors.Load(); errs < 3 {
		t.Fatalf("backend errors counted: %d, want at least 3", errs)
	}
}

// TestH2MaxRequestsWithBodies: a cleartext HTTP/2 connection that reaches
// http.maxRequestsPerConnection ends with GOAWAY and a lingering close,
// however busy: a client posting on it loses no request. (A connection
// taken by its preface closed in full instead, and the reset under the
// client's last frames destroyed responses it had not read yet.)
func TestH2MaxRequestsWithBodies(t *testing.T) {
	be := h2cBackend(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
	cfg := strings.Replace(webConfig(hostOf(be)), "http:\n", "http:\n  maxRequestsPerConnection: 20\n", 1)
	_, web, _ := startProxy(t, cfg)
	client := h2cClient()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for g := range 16 {
		wg.Go(func() {
			for i := range 150 {
				msg := fmt.Sprintf("post %d.%d", g, i)
				resp, err := client.Post("http://"+web+"/", "text/plain", strings.NewReader(msg))
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				if err != nil || string(body) != msg {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %q, %v", msg, body, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of 2400 requests failed, the first: %s", len(failures), failures[0])
	}
}
