package proxy

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Client speaks HTTP/2 in the clear (prior knowledge) frame by frame,
// to send what a real client's library would refuse to.
type h2Client struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialH2(t *testing.T, addr string) *h2Client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	hc := &h2Client{t: t, c: c, fr: http2.NewFramer(c, c)}
	hc.enc = hpack.NewEncoder(&hc.buf)
	hc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(c, http2.ClientPreface)
	hc.fr.WriteSettings()
	return hc
}

// send opens stream id with fields (name, value pairs) and body (none
// when nil: the HEADERS end the stream).
func (hc *h2Client) send(id uint32, body []byte, fields ...string) {
	hc.t.Helper()
	hc.buf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		hc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hc.buf.Bytes(), EndStream: body == nil, EndHeaders: true}); err != nil {
		hc.t.Fatal(err)
	}
	if body != nil {
		hc.fr.WriteData(id, true, body)
	}
}

// h2Response is what came back on a stream.
type h2Response struct {
	status string
	fields []hpack.HeaderField
	body   []byte
	reset  http2.ErrCode // the stream was reset with it
	ended  bool
}

func (r *h2Response) field(name string) string {
	for _, f := range r.fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// response reads until stream id ends or is reset.
func (hc *h2Client) response(id uint32) *h2Response {
	hc.t.Helper()
	r := &h2Response{}
	hc.c.SetReadDeadline(time.Now().Add(conformanceTimeout))
	for !r.ended && r.reset == 0 {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			hc.t.Fatalf("stream %d: %v (so far %+v)", id, err, r)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				r.status, r.fields = f.PseudoValue("status"), f.RegularFields()
				r.ended = f.StreamEnded()
			}
		case *http2.DataFrame:
			if f.StreamID == id {
				r.body = append(r.body, f.Data()...)
				r.ended = f.StreamEnded()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				r.reset = f.ErrCode
			}
		case *http2.GoAwayFrame:
			hc.t.Fatalf("GOAWAY %v", f.ErrCode)
		}
	}
	return r
}

// manyFields returns n fields, as name, value pairs.
func manyFields(n int) []string {
	var fs []string
	for i := range n {
		fs = append(fs, "x-f"+strconv.Itoa(i), "v")
	}
	return fs
}

func h2Get(authority, path string, more ...string) []string {
	return append([]string{":method", "GET", ":scheme", "http", ":authority", authority, ":path", path}, more...)
}

// TestH2Conformance: requests over HTTP/2 meet the HTTP/1.1 path's rules
// on their way to an HTTP/1.1 origin (their head is written as an HTTP/1.1
// head and parsed by package h1), and what HTTP/2 adds is checked first.
func TestH2Conformance(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		fields       []string
		body         []byte
		status       string   // the client's answer
		backend      []string // what the origin parsed, "METHOD target"
		check        func(t *testing.T, rec backendRecord)
	}{
		{name: "a GET is forwarded as HTTP/1.1 with Host from :authority", source: "RFC 9113 §8.3.1",
			fields: h2Get("public.example", "/public/a?x=1"), status: "200", backend: []string{"GET /public/a?x=1"},
			check: func(t *testing.T, rec backendRecord) {
				if h := rec.requests[0].Host; h != "public.example" {
					t.Errorf("Host %q", h)
				}
			}},
		{name: "cookie fields are joined into one", source: "RFC 9113 §8.2.3",
			fields: h2Get("public.example", "/public/", "cookie", "a=1", "cookie", "b=2"), status: "200", backend: []string{"GET /public/"},
			check: func(t *testing.T, rec backendRecord) {
				if c := rec.requests[0].Header["Cookie"]; len(c) != 1 || c[0] != "a=1; b=2" {
					t.Errorf("Cookie %q", c)
				}
			}},
		{name: "routes match the normalised path", source: "RFC 3986 §5.2.4; issue 7 class 4",
			fields: h2Get("public.example", "/public/../admin"), status: "404"},
		{name: "an encoded dot segment is a dot segment", source: "issue 7 class 4",
			fields: h2Get("public.example", "/public/%2e%2e/admin"), status: "404"},
		{name: ":path in absolute-form naming another authority", source: "RFC 9113 §8.3.1",
			fields: h2Get("public.example", "http://internal.example/admin"), status: "400"},
		{name: "Host naming another authority than :authority", source: "RFC 9113 §8.3.1",
			fields: h2Get("public.example", "/public/", "host", "internal.example"), status: "400"},
		{name: "Host without :authority is the authority", source: "RFC 9113 §8.3.1",
			fields: []string{":method", "GET", ":scheme", "http", ":path", "/public/", "host", "public.example"}, status: "200", backend: []string{"GET /public/"}},
		{name: "a space in :path is no request line of HTTP/1.1", source: "RFC 9112 §3",
			fields: h2Get("public.example", "/public/a b"), status: "400"},
		{name: "a body with content-length goes with it", source: "RFC 9113 §8.1.1",
			fields: []string{":method", "POST", ":scheme", "http", ":authority", "public.example", ":path", "/public/p", "content-length", "5"},
			body:   []byte("hello"), status: "200", backend: []string{"POST /public/p"},
			check: func(t *testing.T, rec backendRecord) {
				r := rec.requests[0]
				if string(r.Body) != "hello" || r.Header.Get("Content-Length") != "5" {
					t.Errorf("body %q, Content-Length %q", r.Body, r.Header.Get("Content-Length"))
				}
			}},
		{name: "a body without content-length is sent chunked", source: "RFC 9112 §7.1",
			fields: []string{":method", "POST", ":scheme", "http", ":authority", "public.example", ":path", "/public/p"},
			body:   []byte("hello"), status: "200", backend: []string{"POST /public/p"},
			check: func(t *testing.T, rec backendRecord) {
				if !strings.Contains(rec.raws[0], "Transfer-Encoding: chunked\r\n") || string(rec.requests[0].Body) != "hello" {
					t.Errorf("upstream bytes %q", rec.raws[0])
				}
			}},
		{name: "more fields than the HTTP/1.1 path allows", source: "issue 7 class 5 (h1.MaxFields)",
			fields: h2Get("public.example", "/public/", manyFields(101)...), status: "431"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newRecordingBackend(t, scriptedResponses())
			_, web, _ := startProxy(t, routingConfig(be.addr(), ""))
			hc := dialH2(t, web)
			hc.send(1, tc.body, tc.fields...)
			r := hc.response(1)
			if r.status != tc.status {
				t.Fatalf("%s: status %q, want %s (reset %v)", tc.source, r.status, tc.status, r.reset)
			}
			if len(tc.backend) > 0 {
				be.waitRequests(t, len(tc.backend))
			}
			rec := be.record()
			if got := strings.Join(rec.names(), ", "); got != strings.Join(tc.backend, ", ") {
				t.Fatalf("%s: origin saw [%s], want [%s]", tc.source, got, strings.Join(tc.backend, ", "))
			}
			if tc.check != nil {
				tc.check(t, rec)
			}
		})
	}
}

// TestH2Responses: what an HTTP/1.1 response becomes on HTTP/2. Fields
// HTTP/2 forbids never go out (RFC 9113 §8.2.2), a chunked body is decoded,
// a response with ambiguous framing is a 502 (issue 7 class 6), and one
// cut off upstream resets the stream rather than end it short.
func TestH2Responses(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		status    string
		body      string
		reset     http2.ErrCode
		absent    []string
	}{
		{name: "hop-by-hop fields stay behind", raw: "HTTP/1.1 200 OK\r\nConnection: x-private, keep-alive\r\nKeep-Alive: timeout=5\r\nX-Private: 1\r\nX-Kept: yes\r\nContent-Length: 2\r\n\r\nok",
			status: "200", body: "ok", absent: []string{"connection", "keep-alive", "x-private"}},
		{name: "a chunked body is decoded", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3\r\n!!!\r\n0\r\n\r\n",
			status: "200", body: "ok!!!", absent: []string{"transfer-encoding"}},
		{name: "Content-Length with Transfer-Encoding", raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
			status: "502"},
		{name: "a body cut off upstream", raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
			status: "200", reset: http2.ErrCodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
				io.WriteString(w, tc.raw)
				if c, ok := w.(net.Conn); ok && tc.reset != 0 {
					c.Close()
				}
			})
			_, web, _ := startProxy(t, webConfig(be.addr()))
			hc := dialH2(t, web)
			hc.send(1, nil, h2Get("x", "/")...)
			r := hc.response(1)
			if r.status != tc.status || r.reset != tc.reset {
				t.Fatalf("status %q, reset %v; want %s, %v", r.status, r.reset, tc.status, tc.reset)
			}
			if tc.reset == 0 && tc.body != "" && string(r.body) != tc.body {
				t.Errorf("body %q, want %q", r.body, tc.body)
			}
			if tc.status == "200" && tc.reset == 0 && r.field("x-kept") == "" && strings.Contains(tc.raw, "X-Kept") {
				t.Error("an end-to-end field was lost")
			}
			for _, name := range tc.absent {
				if v := r.field(name); v != "" {
					t.Errorf("%s: %q sent over HTTP/2", name, v)
				}
			}
		})
	}
}

// TestH2BodyLimitsAndBuffering: the routes' body limits and request
// buffering hold over HTTP/2 as over HTTP/1.1 (issue 7 class 7: nginx's
// proxy_request_buffering; maxBodySize with 413).
func TestH2BodyLimitsAndBuffering(t *testing.T) {
	cb := newCountingBackend(t)
	_, web, _ := startProxy(t, bodyConfig(cb.addr))
	post := func(path string, length int) []string {
		f := []string{":method", "POST", ":scheme", "http", ":authority", "x", ":path", path}
		if length >= 0 {
			f = append(f, "content-length", strconv.Itoa(length))
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		fields []string
		body   string
		status string
		got    string // what the backend says it got
	}{
		{"length over the limit: 413 before the backend", post("/limited", 9), "123456789", "413", ""},
		{"length at the limit", post("/limited", 8), "12345678", "200", "length 8 te [] body 12345678"},
		{"no length, over the limit", post("/limited", -1), "1234567890", "413", ""},
		{"no length, within the buffer: sent with a length", post("/buffered", -1), "12345", "200", "length 5 te [] body 12345"},
		{"no length, beyond the buffer: streamed chunked", post("/buffered", -1), "0123456789abcdefghij", "200", "length -1 te [chunked] body 0123456789abcdefghij"},
		{"length beyond the buffer: streamed", post("/buffered", 20), "0123456789abcdefghij", "200", "length 20 te [] body 0123456789abcdefghij"},
		{"beyond buffer and limit", post("/buffered", -1), strings.Repeat("x", 65), "413", ""},
		{"buffer = limit refuses what it cannot buffer", post("/refusing", -1), "123456789", "413", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := cb.requests.Load()
			hc := dialH2(t, web)
			hc.send(1, []byte(tc.body), tc.fields...)
			r := hc.response(1)
			if r.status != tc.status {
				t.Fatalf("status %q (%q), want %s", r.status, r.body, tc.status)
			}
			if tc.got != "" && string(r.body) != tc.got {
				t.Errorf("backend got %q, want %q", r.body, tc.got)
			}
			if tc.status == "413" && cb.requests.Load() != before && strings.HasPrefix(tc.name, "length") {
				t.Errorf("the backend saw a request whose length was over the limit")
			}
		})
	}
}

// TestH2StickyCookie: the cookie balancer's Set-Cookie reaches an HTTP/2
// client, and the cookie sent back (as HTTP/2 cookie crumbs) sticks.
func TestH2StickyCookie(t *testing.T) {
	var addrs []string
	for i := range 3 {
		be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"+strconv.Itoa(i))
		})
		addrs = append(addrs, be.addr())
	}
	cfg := strings.Replace(webConfig(addrs...), "    connectTimeout: 1s\n", "    connectTimeout: 1s\n    balancer: cookie\n", 1)
	_, web, _ := startProxy(t, cfg)
	hc := dialH2(t, web)
	hc.send(1, nil, h2Get("x", "/")...)
	first := hc.response(1)
	set := first.field("set-cookie")
	if !strings.HasPrefix(set, "baton-app=") {
		t.Fatalf("first response sets %q", set)
	}
	cookie := strings.SplitN(set, ";", 2)[0]
	for id := uint32(3); id < 23; id += 2 {
		hc.send(id, nil, h2Get("x", "/", "cookie", "other=1", "cookie", cookie)...)
		if r := hc.response(id); string(r.body) != string(first.body) || r.field("set-cookie") != "" {
			t.Fatalf("sticky request reached %q (first %q), set-cookie %q", r.body, first.body, r.field("set-cookie"))
		}
	}
}

// TestH2ExpectContinue: a client that waits for 100 Continue before its
// body gets it (an interim HEADERS), from baton itself, and its body then
// reaches the backend (RFC 9110 §10.1.1; RFC 9113 §8.1).
func TestH2ExpectContinue(t *testing.T) {
	cb := newCountingBackend(t)
	_, web, _ := startProxy(t, bodyConfig(cb.addr))
	hc := dialH2(t, web)
	hc.buf.Reset()
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/p"}, {"content-length", "5"}, {"expect", "100-continue"}} {
		hc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hc.buf.Bytes(), EndHeaders: true})
	hc.c.SetReadDeadline(time.Now().Add(conformanceTimeout))
	for {
		f, err := hc.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for 100 Continue: %v", err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 1 {
			if s := h.PseudoValue("status"); s != "100" || h.StreamEnded() {
				t.Fatalf("first answer %s (ended %v), want an interim 100", s, h.StreamEnded())
			}
			break
		}
	}
	hc.fr.WriteData(1, true, []byte("hello"))
	if r := hc.response(1); r.status != "200" || string(r.body) != "length 5 te [] body hello" {
		t.Fatalf("status %s, body %q", r.status, r.body)
	}
}

// TestH2ResetAbortsUpstream: a client that resets its stream while the
// backend works on it frees the upstream connection at once: baton closes
// it (its answer could only be stray bytes now) and never reuses it.
func TestH2ResetAbortsUpstream(t *testing.T) {
	be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
		if n > 0 {
			io.WriteString(w, okResponse)
		}
		// The first request gets no answer: the backend "works".
	})
	_, web, _ := startProxy(t, webConfig(be.addr()))
	hc := dialH2(t, web)
	hc.send(1, nil, h2Get("x", "/slow")...)
	be.waitRequests(t, 1)
	hc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	if !be.waitClosed() {
		t.Fatal("the upstream connection of a reset stream is still open")
	}
	hc.send(3, nil, h2Get("x", "/next")...)
	if r := hc.response(3); r.status != "200" || string(r.body) != "ok" {
		t.Fatalf("the next stream: %s %q", r.status, r.body)
	}
	if rec := be.record(); len(rec.raws) != 2 {
		t.Fatalf("%d upstream connections, want 2 (the reset one not reused)", len(rec.raws))
	}
}

// TestH2MalformedBodyNeverCompletesUpstream: a request whose head is valid
// goes upstream when its header block ends (as an HTTP/1.1 request does
// when its head is read), before its body; when a later DATA frame shows
// the message malformed (more or less body than its content-length, RFC
// 9113 §8.1.1), the stream is reset and the upstream connection closed:
// the backend sees an incomplete request, never a complete one or a
// second one, and the connection is never reused.
func TestH2MalformedBodyNeverCompletesUpstream(t *testing.T) {
	be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) { io.WriteString(w, okResponse) })
	_, web, _ := startProxy(t, webConfig(be.addr()))
	for i, tc := range []struct {
		body string
		end  bool
	}{
		{"toolong", true}, // past the length
		{"ab", true},      // short of it, and ended
		{"abcdGET /x HTTP/1.1\r\nHost: x\r\n\r\n", true}, // a request hidden past the length
	} {
		hc := dialH2(t, web)
		id := uint32(1)
		hc.buf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/p"}, {"content-length", "4"}} {
			hc.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		hc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hc.buf.Bytes(), EndHeaders: true})
		hc.fr.WriteData(id, tc.end, []byte(tc.body))
		if r := hc.response(id); r.reset != http2.ErrCodeProtocol {
			t.Fatalf("case %d: stream %+v, want RST_STREAM PROTOCOL_ERROR", i, r)
		}
	}
	if !be.waitClosed() {
		t.Fatal("an upstream connection of a malformed request is still open")
	}
	for _, r := range be.record().requests {
		if r.BodyErr == nil {
			t.Errorf("the backend got a complete request %s with body %q", r.name(), r.Body)
		}
	}
}
