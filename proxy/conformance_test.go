package proxy

// An end-to-end conformance suite for the HTTP/1.1 front door: raw bytes
// from a client, through the proxy, to a recording origin that parses what
// it receives as a typical origin does (net/http's http.ReadRequest, in a
// loop). A request the proxy let through in a way the origin reads as two
// shows up as two parsed requests; a header the proxy let a client inject
// shows up as a field the origin parsed. The rules come from
// docs/security.md; each case cites where the input comes from.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// conformanceTimeout bounds every wait of the suite: a read, a response,
// the proxy's drain, a backend condition.
const conformanceTimeout = 5 * time.Second

// closeWait bounds the wait for the proxy to close a client connection
// after the last byte of a response (it closes at once).
const closeWait = 2 * time.Second

// Raw responses of the recording backend.
const (
	okResponse       = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	headOKResponse   = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
	followupResponse = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nfollowup"
)

// followupPath ends the path of the request a case sends after its own to
// check that the client connection is still usable and in step. The
// backend answers it with followupResponse, and leaves it out of what a
// case expects the backend to see.
const followupPath = "/conformance-followup"

// smuggledGet is the request that smuggling cases hide in a body: if the
// backend ever parses "GET /smuggled", the proxy and the backend disagreed
// on where a request ended.
const smuggledGet = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

// recordedRequest is one request the recording backend parsed.
type recordedRequest struct {
	Method, RequestURI string
	Host               string // as net/http has it: the absolute-form authority, else the Host field
	Header             http.Header
	Body               []byte
	BodyErr            error // reading the body failed: it was cut short
}

// name is how cases list requests: "METHOD request-target".
func (r *recordedRequest) name() string { return r.Method + " " + r.RequestURI }

// fields returns the request's fields as the backend saw them, with Host
// and Transfer-Encoding put back (http.ReadRequest moves them out of
// Header).
func (r *recordedRequest) fields() http.Header {
	h := r.Header.Clone()
	if r.Host != "" {
		h["Host"] = []string{r.Host}
	}
	return h
}

// recordedConn is what one upstream connection brought to the backend.
type recordedConn struct {
	raw       bytes.Buffer
	requests  []*recordedRequest
	followups [][2]int // the spans of raw that follow-up requests took
	parseErr  error    // a head that a typical origin refuses
	done      bool     // the connection has ended
}

// rawWithoutFollowups returns what the connection brought, but the
// follow-up requests; the lock held.
func (rc *recordedConn) rawWithoutFollowups() string {
	raw, at := rc.raw.Bytes(), 0
	var b strings.Builder
	for _, span := range rc.followups {
		b.Write(raw[at:span[0]])
		at = span[1]
	}
	b.Write(raw[at:])
	return b.String()
}

// backendScript answers request number n (counted over all connections,
// follow-ups aside) by writing raw bytes to w, the upstream connection.
type backendScript func(n int, req *recordedRequest, w io.Writer)

// scriptedResponses answers the n-th request with raw[n], and any later
// one with a 200 "ok" (no body for HEAD).
func scriptedResponses(raw ...string) backendScript {
	return func(n int, req *recordedRequest, w io.Writer) {
		switch {
		case n < len(raw):
			io.WriteString(w, raw[n])
		case req.Method == http.MethodHead:
			io.WriteString(w, headOKResponse)
		default:
			io.WriteString(w, okResponse)
		}
	}
}

// recordingBackend is an origin on 127.0.0.1 that records every byte it
// receives, parses requests from them with http.ReadRequest until the
// connection ends or a head does not parse, and answers each with its
// script.
type recordingBackend struct {
	ln     net.Listener
	script backendScript
	wg     sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change, under mu
	conns   []*recordedConn
	open    []net.Conn
	n       int // requests answered by the script
}

// newRecordingBackend starts a recording backend that answers with script;
// it stops when the test ends.
func newRecordingBackend(t testing.TB, script backendScript) *recordingBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &recordingBackend{ln: ln, script: script, changed: make(chan struct{})}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.open {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *recordingBackend) addr() string { return b.ln.Addr().String() }

// update runs fn under the lock and wakes the waiters.
func (b *recordingBackend) update(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn()
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *recordingBackend) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		rc := &recordedConn{}
		b.update(func() {
			b.conns = append(b.conns, rc)
			b.open = append(b.open, c)
		})
		b.wg.Add(1)
		go b.serve(c, rc)
	}
}

// rawRecorder appends what a connection reads to its record.
type rawRecorder struct {
	b  *recordingBackend
	rc *recordedConn
}

func (w rawRecorder) Write(p []byte) (int, error) {
	w.b.update(func() { w.rc.raw.Write(p) })
	return len(p), nil
}

// serve reads requests from c as an origin does, one after the other.
func (b *recordingBackend) serve(c net.Conn, rc *recordedConn) {
	defer b.wg.Done()
	defer c.Close()
	br := bufio.NewReader(io.TeeReader(c, rawRecorder{b, rc}))
	// consumed is how much of raw the requests parsed so far took.
	consumed := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return rc.raw.Len() - br.Buffered()
	}
	for {
		if _, err := br.Peek(1); err != nil {
			b.update(func() { rc.done = true }) // between requests: a clean end
			return
		}
		start := consumed()
		req, err := http.ReadRequest(br)
		if err == nil && req.ProtoAtLeast(1, 1) && req.Host == "" {
			err = errors.New("missing Host (net/http's server answers 400)")
		}
		if err != nil {
			b.update(func() { rc.parseErr, rc.done = err, true })
			return
		}
		body, berr := io.ReadAll(req.Body)
		r := &recordedRequest{Method: req.Method, RequestURI: req.RequestURI, Host: req.Host, Header: req.Header, Body: body, BodyErr: berr}
		if len(req.TransferEncoding) > 0 {
			r.Header["Transfer-Encoding"] = req.TransferEncoding
		}
		followup := strings.HasSuffix(req.URL.Path, followupPath)
		end, n := consumed(), -1
		b.update(func() {
			rc.requests = append(rc.requests, r)
			rc.done = berr != nil
			if followup {
				rc.followups = append(rc.followups, [2]int{start, end})
			} else {
				n = b.n
				b.n++
			}
		})
		if berr != nil {
			return
		}
		if followup {
			io.WriteString(c, followupResponse)
		} else {
			b.script(n, r, c)
		}
	}
}

// waitFor waits until cond (called with the lock held) holds, and reports
// whether it did before conformanceTimeout.
func (b *recordingBackend) waitFor(cond func() bool) bool {
	deadline := time.NewTimer(conformanceTimeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		ok, ch := cond(), b.changed
		b.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// allDone reports whether every accepted connection has ended; b.mu held.
func (b *recordingBackend) allDone() bool {
	for _, rc := range b.conns {
		if !rc.done {
			return false
		}
	}
	return true
}

// waitRequests waits until the backend has parsed n requests (follow-ups
// included), or some connection was accepted and every one has ended.
func (b *recordingBackend) waitRequests(t testing.TB, n int) {
	t.Helper()
	if !b.waitFor(func() bool {
		seen := 0
		for _, rc := range b.conns {
			seen += len(rc.requests)
		}
		return seen >= n || (len(b.conns) > 0 && b.allDone())
	}) {
		t.Fatalf("backend: %d requests not seen within %v", n, conformanceTimeout)
	}
}

// waitClosed waits until every connection the backend accepted has ended,
// and reports whether that happened in time.
func (b *recordingBackend) waitClosed() bool { return b.waitFor(b.allDone) }

// backendRecord is a copy of what a backend saw, follow-up requests left
// out.
type backendRecord struct {
	requests  []*recordedRequest
	raws      []string // per connection
	parseErrs []error
}

func (b *recordingBackend) record() backendRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	var rec backendRecord
	for _, rc := range b.conns {
		for _, r := range rc.requests {
			if !strings.HasSuffix(r.RequestURI, followupPath) {
				rec.requests = append(rec.requests, r)
			}
		}
		rec.raws = append(rec.raws, rc.rawWithoutFollowups())
		if rc.parseErr != nil {
			rec.parseErrs = append(rec.parseErrs, rc.parseErr)
		}
	}
	return rec
}

func (rec backendRecord) names() []string {
	var ns []string
	for _, r := range rec.requests {
		ns = append(ns, r.name())
	}
	return ns
}

// routingConfig is a config whose listener "web" sends host public.example
// under /public to backend "public" (at public) and, unless internal is
// empty, everything else to backend "internal"; with no internal, anything
// else is a 404.
func routingConfig(public, internal string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
controlSocket: /tmp/unused.sock
http:
  readHeaderTimeout: 200ms
  drainIdleGrace: 300ms
listeners:
  - name: web
    address: @WEB@
backends:
  - name: public
    static: [%q]
    connectTimeout: 1s
`, public)
	if internal != "" {
		fmt.Fprintf(&b, "  - name: internal\n    static: [%q]\n    connectTimeout: 1s\n", internal)
	}
	b.WriteString("routes:\n  - listener: web\n    host: public.example\n    pathPrefix: /public\n    backend: public\n")
	if internal != "" {
		b.WriteString("  - listener: web\n    backend: internal\n")
	}
	return b.String()
}

// routeSet is the configuration a case runs against.
type routeSet int

const (
	// routeAll: webConfig, every request to the case's backend.
	routeAll routeSet = iota
	// routePublic: routingConfig with the case's backend as "public" and
	// a second recording backend as "internal" (the case's other).
	routePublic
	// routePublicOnly: routingConfig with no catch-all route.
	routePublicOnly
)

// connExpect is what must become of the client connection after the
// responses a case reads.
type connExpect int

const (
	// connAny: if the last response announced Connection: close, the
	// proxy must close (with no byte more); otherwise the connection must
	// serve a follow-up request, unless the proxy closes it first.
	connAny connExpect = iota
	// connClosed: the proxy closes the connection, with no byte more.
	connClosed
	// connKept: the connection serves a follow-up request.
	connKept
)

// conformanceCase is one input and what must come of it.
type conformanceCase struct {
	name   string
	source string // a public citation: RFC section, named technique, test suite id, finding, CVE
	class  int    // the issue class (1-7), or 0 for general RFC conformance
	routes routeSet

	req           string   // what the client sends at once
	afterContinue string   // sent once a 100 Continue came, if not empty
	responses     []string // the backend's raw answers to the requests it parses, in order (then 200 "ok")

	status        int      // of the first final response; 0: the connection closes with no response
	next          []int    // of the final responses to requests pipelined in req
	interim       []int    // 1xx responses before the first final one; nil: not checked
	respBody      string   // body of the first final response, if not empty
	notInResponse []string // must not occur in what the client receives
	respTruncated bool     // the first response may instead be cut off: no response, a 502, or status with a truncated body
	conn          connExpect

	backend   []string            // "METHOD request-target" of every request the backend parses, in order
	other     []string            // the same for the "internal" backend of routePublic
	truncated bool                // the backend may instead see nothing, or backend with the last body cut short
	reqBody   string              // body of the first request a backend parses, if not empty
	hdr       map[string][]string // fields of the first request a backend parses; a nil value: absent
	notInRaw  []string            // must not occur in the bytes any backend receives
}

// Request builders for the table. They send Host: x.

// getReq is a GET / with the extra header lines head.
func getReq(head string) string { return "GET / HTTP/1.1\r\nHost: x\r\n" + head + "\r\n" }

// postReq is a POST / with the extra header lines head and body.
func postReq(head, body string) string {
	return "POST / HTTP/1.1\r\nHost: x\r\n" + head + "\r\n" + body
}

// postCL is postReq with a Content-Length that counts body.
func postCL(head, body string) string {
	return postReq(head+"Content-Length: "+strconv.Itoa(len(body))+"\r\n", body)
}

// chunkedReq is a POST / with Transfer-Encoding: chunked, head and body
// (the chunked body as sent).
func chunkedReq(head, body string) string {
	return postReq("Transfer-Encoding: chunked\r\n"+head, body)
}

// teGadget is a POST / whose only framing header is the line gadget, with
// the chunked body of "hello".
func teGadget(gadget string) string {
	return "POST / HTTP/1.1\r\nHost: x\r\n" + gadget + "\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
}

// smugglerGadget renders defparam/smuggler's payload template around a
// Transfer-Encoding gadget line: the gadget first, then Host, and a
// Content-Length that covers a body which, read as chunked, ends at once
// and is followed by smuggledGet.
func smugglerGadget(gadget string) string {
	body := "0\r\n\r\n" + smuggledGet
	return "POST /?cb=1 HTTP/1.1\r\n" + gadget + "\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// fieldLines returns n header lines "X-Field-i: v".
func fieldLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "X-Field-%d: v\r\n", i)
	}
	return b.String()
}

// connectionNames returns a Connection line naming X-Hop-1 to X-Hop-n.
func connectionNames(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = "X-Hop-" + strconv.Itoa(i+1)
	}
	return "Connection: " + strings.Join(names, ", ") + "\r\n"
}

// bigHead is a head of about 60 KB within every limit: 16 names in
// Connection (and those 16 fields), 80 padding fields of 740 bytes.
func bigHead() string {
	var b strings.Builder
	b.WriteString("GET / HTTP/1.1\r\nHost: x\r\n")
	b.WriteString(connectionNames(16))
	for i := 1; i <= 16; i++ {
		fmt.Fprintf(&b, "X-Hop-%d: 1\r\n", i)
	}
	for i := 1; i <= 80; i++ {
		fmt.Fprintf(&b, "X-Pad-%02d: %s\r\n", i, strings.Repeat("a", 740))
	}
	b.WriteString("\r\n")
	return b.String()
}

// resp200 is a raw 200 response with header lines head and body.
func resp200(head, body string) string { return "HTTP/1.1 200 OK\r\n" + head + "\r\n" + body }

// conformanceCases is the table. Class 3 (pooled upstream reuse) is in
// TestConformanceUpstreamReuse.
func conformanceCases() []conformanceCase {
	hello := "5\r\nhello\r\n0\r\n\r\n"
	return []conformanceCase{
		// Class 1: Connection naming a framing header.
		{
			name:    "request Connection: Content-Length keeps the body framed",
			source:  "Hop-by-hop header abuse (Nathan Davison, 2019); RFC 9110 §7.6.1",
			class:   1,
			req:     postCL("Connection: Content-Length\r\n", smuggledGet),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: smuggledGet,
			hdr:     map[string][]string{"Content-Length": {strconv.Itoa(len(smuggledGet))}},
		},
		{
			name:    "request Connection: Transfer-Encoding keeps the chunked framing",
			source:  "Hop-by-hop header abuse (Nathan Davison, 2019); RFC 9110 §7.6.1",
			class:   1,
			req:     chunkedReq("Connection: Transfer-Encoding\r\n", hello),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
		},
		{
			name:    "request Connection: Host keeps Host",
			source:  "Hop-by-hop header abuse (Nathan Davison, 2019); RFC 9112 §3.2",
			class:   1,
			req:     getReq("Connection: Host\r\n"),
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"Host": {"x"}},
		},
		{
			name:    "request Connection: keep-alive, content-length, host in lower case",
			source:  "Hop-by-hop header abuse (Nathan Davison, 2019); RFC 9110 §5.1 (names are case-insensitive)",
			class:   1,
			req:     postCL("Connection: keep-alive, content-length, host\r\n", "hello"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
			hdr:     map[string][]string{"Host": {"x"}, "Content-Length": {"5"}},
		},
		{
			name:    "request Connection naming X-Forwarded-* keeps baton's own",
			source:  "CVE-2022-31813 (Apache mod_proxy); CVE-2024-45410 (Traefik)",
			class:   1,
			req:     getReq("Connection: X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host\r\n"),
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"x"}, "X-Forwarded-For": {"127.0.0.1"}},
		},
		{
			name:          "response Connection: Content-Length keeps the response framed",
			source:        "Hop-by-hop header abuse (Nathan Davison, 2019); RFC 9110 §7.6.1; RFC 9112 §6.3",
			class:         1,
			req:           getReq(""),
			responses:     []string{resp200("Content-Length: 2\r\nConnection: Content-Length\r\n", "ok")},
			status:        200,
			respBody:      "ok",
			conn:          connKept,
			backend:       []string{"GET /"},
			notInResponse: []string{"Connection: Content-Length"},
		},
		{
			name:      "response Connection: Transfer-Encoding keeps the chunked framing",
			source:    "Hop-by-hop header abuse (Nathan Davison, 2019); RFC 9110 §7.6.1; RFC 9112 §6.3",
			class:     1,
			req:       getReq(""),
			responses: []string{resp200("Transfer-Encoding: chunked\r\nConnection: Transfer-Encoding\r\n", hello)},
			status:    200,
			respBody:  "hello",
			conn:      connKept,
			backend:   []string{"GET /"},
		},

		// Class 2: bare LF, bare CR and NUL.
		{
			name:    "bare LF line endings throughout the head are normalised",
			source:  "RFC 9112 §2.2; HTTP Garden transducer bug 16 (OpenLiteSpeed forwards bare LF); Http11Probe RFC9112-2.2-BARE-LF-HEADER",
			class:   2,
			req:     "GET / HTTP/1.1\nHost: x\nX-A: 1\n\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"Host": {"x"}, "X-A": {"1"}},
		},
		{
			name:     "bare LF inside a value makes two fields, both forwarded with CRLF",
			source:   "RFC 9112 §2.2; defparam/smuggler exhaustive x-nout",
			class:    2,
			req:      getReq("X: a\nX-Injected: b\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"GET /"},
			hdr:      map[string][]string{"X": {"a"}, "X-Injected": {"b"}},
			notInRaw: []string{"a\nX-Injected"},
		},
		{
			name:   "bare LF before Transfer-Encoding with Content-Length (smuggler x-nout)",
			source: "defparam/smuggler exhaustive x-nout; RFC 9112 §2.2, §6.1",
			class:  2,
			req:    smugglerGadget("X: X\nTransfer-Encoding: chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare LF splitting a field name from its line (no colon left)",
			source: "HTTP Garden transducer bug 14 (field lines with no colon forwarded); RFC 9112 §5",
			class:  2,
			req:    getReq("Te\nst: test\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare CR in a header value",
			source: "HTTP Garden transducer bug 10 and server bug 13; Http11Probe SMUG-BARE-CR-HEADER-VALUE; RFC 9112 §2.2",
			class:  2,
			req:    getReq("X: a\rX-Injected: b\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare CR ending the request line",
			source: "Http11Probe RFC9112-3-CR-ONLY-LINE-ENDING; RFC 9112 §2.2",
			class:  2,
			req:    "GET / HTTP/1.1\rHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare CR before Transfer-Encoding with Content-Length (smuggler x-rout)",
			source: "defparam/smuggler exhaustive x-rout; RFC 9112 §2.2",
			class:  2,
			req:    smugglerGadget("X: X\rTransfer-Encoding: chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare CR then a byte after the blank line",
			source: "HTTP Garden server bug 30 (head ended on CRLF CR X); RFC 9112 §2.2",
			class:  2,
			req:    "GET / HTTP/1.1\r\nHost: x\r\n\rZGET /evil: HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "NUL in a header value",
			source: "Http11Probe MAL-NUL-IN-HEADER-VALUE; HTTP Garden server bug 35; RFC 9110 §5.5",
			class:  2,
			req:    getReq("Test: test\x00THESE BYTES GET DROPPED\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "NUL in Host",
			source: "HTTP Garden transducer bug 12 (HAProxy forwarded NUL in values); RFC 9110 §5.5",
			class:  2,
			req:    "GET / HTTP/1.1\r\nHost: public.example\x00.evil.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "NUL in a header name",
			source: "HTTP Garden transducer bug 20 (relayd); RFC 9112 §5.1",
			class:  2,
			req:    getReq("a: b\r\nc\x00: d\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "NUL in the request-target",
			source: "Http11Probe MAL-NUL-IN-URL; RFC 9112 §3.2",
			class:  2,
			req:    "GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare CR in the request-target",
			source: "RFC 9112 §3.2; RFC 3986 §2",
			class:  2,
			req:    "GET /a\rb HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare LF as separator in the request line",
			source: "HTTP Garden server bug 9 (LF as request-line whitespace); RFC 9112 §2.3, §3",
			class:  2,
			req:    "GET /\nHTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:      "bare LF ending a chunk-size line",
			source:    "Http11Probe SMUG-CHUNK-EXT-LF; RFC 9112 §7.1",
			class:     2,
			req:       chunkedReq("", "5;\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "bare LF after chunk data",
			source:    "HTTP Garden transducer bug 13 (HAProxy); Http11Probe SMUG-CHUNK-LF-TERM; RFC 9112 §7.1",
			class:     2,
			req:       chunkedReq("", "a\r\n0123456789\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "bare CR in a chunk extension",
			source:    "Http11Probe SMUG-CHUNK-EXT-CR; RFC 9112 §7.1.1",
			class:     2,
			req:       chunkedReq("", "5;a\rb\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "bare CR before the semicolon of a chunk extension",
			source:    "HTTP Garden transducer bug 3 (Akamai, ATS, Google Cloud LB) / server bug 31 (Node.js)",
			class:     2,
			req:       chunkedReq("", "2\r\r;a\r\n02\r\n41\r\n0\r\n\r\n"+smuggledGet),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "NUL in a chunk extension",
			source:    "Http11Probe SMUG-CHUNK-EXT-CTRL; RFC 9112 §7.1.1",
			class:     2,
			req:       chunkedReq("", "5;\x00ext\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "bare LF ending the trailer section",
			source:    "Http11Probe SMUG-CHUNK-LF-TRAILER; RFC 9112 §7.1",
			class:     2,
			req:       chunkedReq("", "5\r\nhello\r\n0\r\n\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "bare LF inside a trailer field",
			source:    "RFC 9112 §7.1.2, §2.2",
			class:     2,
			req:       chunkedReq("", "5\r\nhello\r\n0\r\nX: a\nY: b\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "NUL in a trailer value",
			source:    "RFC 9112 §7.1.2; RFC 9110 §5.5",
			class:     2,
			req:       chunkedReq("", "5\r\nhello\r\n0\r\nX: a\x00b\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},

		// Class 4: routing on the raw path and Host. The case's backend
		// is "public" (public.example, /public); other is "internal".
		{
			name:   "dot segments are resolved before routing: /public/../admin",
			source: "RFC 3986 §5.2.4; path confusion (Orange Tsai, Breaking Parser Logic, Black Hat USA 2018)",
			class:  4,
			routes: routePublic,
			req:    "GET /public/../admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 200,
			conn:   connKept,
			other:  []string{"GET /admin"},
		},
		{
			name:   "dot segments are resolved before routing, no catch-all: 404",
			source: "RFC 3986 §5.2.4; Orange Tsai, Breaking Parser Logic (2018)",
			class:  4,
			routes: routePublicOnly,
			req:    "GET /public/../admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 404,
		},
		{
			name:   "encoded dot segments are resolved: /public/%2e%2e/admin",
			source: "RFC 3986 §6.2.2.2, §5.2.4; Orange Tsai, Breaking Parser Logic (2018)",
			class:  4,
			routes: routePublic,
			req:    "GET /public/%2e%2e/admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 200,
			conn:   connKept,
			other:  []string{"GET /admin"},
		},
		{
			name:   "encoded dot segments, no catch-all: 404",
			source: "RFC 3986 §6.2.2.2, §5.2.4",
			class:  4,
			routes: routePublicOnly,
			req:    "GET /public/%2E%2E/admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 404,
		},
		{
			name:   "dot segment hidden behind encoded slashes: /public%2f..%2fadmin",
			source: "docs/security.md (How routes match paths, 3); Orange Tsai, Breaking Parser Logic (2018)",
			class:  4,
			routes: routePublic,
			req:    "GET /public%2f..%2fadmin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "dot segment before an encoded slash: /public/..%2fadmin",
			source: "docs/security.md (How routes match paths, 3); Orange Tsai, Breaking Parser Logic (2018)",
			class:  4,
			routes: routePublic,
			req:    "GET /public/..%2fadmin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "dot segment behind backslashes: /public\\..\\admin",
			source: "Http11Probe MAL-URL-BACKSLASH; docs/security.md (How routes match paths, 3)",
			class:  4,
			routes: routePublic,
			req:    "GET /public\\..\\admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "dot segment as a path parameter: /public/..;/admin",
			source: "Orange Tsai, Breaking Parser Logic (Black Hat 2018): Tomcat and Jetty strip ';...' and resolve '..;' as '..'",
			class:  4,
			routes: routePublic,
			req:    "GET /public/..;/admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "dot segment before an encoded backslash: /public/..%5Cadmin",
			source: "docs/security.md (How routes match paths, 3)",
			class:  4,
			routes: routePublic,
			req:    "GET /public/..%5Cadmin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:     "absolute-form authority wins over Host for routing and is sent as Host",
			source:   "RFC 9112 §3.2.2; Http11Probe SMUG-ABSOLUTE-URI-HOST-MISMATCH",
			class:    4,
			routes:   routePublic,
			req:      "GET http://admin.internal/public HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status:   200,
			conn:     connKept,
			other:    []string{"GET /public"},
			hdr:      map[string][]string{"Host": {"admin.internal"}},
			notInRaw: []string{"public.example", "http://"},
		},
		{
			name:   "absolute-form to another host, no catch-all: 404",
			source: "RFC 9112 §3.2.2",
			class:  4,
			routes: routePublicOnly,
			req:    "GET http://admin.internal/public HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 404,
		},
		{
			name:     "absolute-form to the public host is forwarded in origin-form",
			source:   "RFC 9112 §3.2.2",
			class:    4,
			routes:   routePublicOnly,
			req:      "GET http://public.example/public/x HTTP/1.1\r\nHost: admin.internal\r\n\r\n",
			status:   200,
			conn:     connKept,
			backend:  []string{"GET /public/x"},
			hdr:      map[string][]string{"Host": {"public.example"}},
			notInRaw: []string{"admin.internal"},
		},
		{
			name:    "single-dot segment is removed: /public/./x",
			source:  "RFC 3986 §5.2.4",
			class:   4,
			routes:  routePublicOnly,
			req:     "GET /public/./x HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /public/x"},
		},
		{
			name:    "encoded unreserved characters are decoded: %7E",
			source:  "RFC 3986 §6.2.2.2",
			class:   4,
			routes:  routePublicOnly,
			req:     "GET /public/%7Euser HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /public/~user"},
		},
		{
			name:    "an encoded slash is kept, in upper case: /public/a%2fb",
			source:  "RFC 3986 §6.2.2.1; docs/security.md (How routes match paths, 3)",
			class:   4,
			routes:  routePublicOnly,
			req:     "GET /public/a%2fb HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /public/a%2Fb"},
		},
		{
			name:    "encoded CRLF in the path stays encoded",
			source:  "CVE-2023-25690 (Apache mod_proxy request splitting); Http11Probe MAL-URL-PERCENT-CRLF",
			class:   4,
			routes:  routePublicOnly,
			req:     "GET /public/%0d%0aX-Injected:%20b HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /public/%0D%0AX-Injected:%20b"},
			hdr:     map[string][]string{"X-Injected": nil},
		},
		{
			name:   "slashes are not merged: //public/x is not under /public",
			source: "RFC 3986 §3.3; docs/security.md (How routes match paths, 4)",
			class:  4,
			routes: routePublic,
			req:    "GET //public/x HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 200,
			conn:   connKept,
			other:  []string{"GET //public/x"},
		},
		{
			name:    "the query is not part of matching and is forwarded as sent",
			source:  "RFC 3986 §3.4; docs/security.md (How routes match paths)",
			class:   4,
			routes:  routePublicOnly,
			req:     "GET /public?x=/../admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /public?x=/../admin"},
		},
		{
			name:    "hosts match without case, port and trailing dot",
			source:  "RFC 3986 §3.2.2, §6.2.2.1; docs/security.md (How routes match paths, 5)",
			class:   4,
			routes:  routePublicOnly,
			req:     "GET /public/x HTTP/1.1\r\nHost: Public.Example.:8080\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /public/x"},
		},
		{
			name:   "a path that climbs above the root: /../admin",
			source: "RFC 3986 §5.2.4; docs/security.md (nginx answers 400)",
			class:  4,
			routes: routePublic,
			req:    "GET /../admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "an encoded path that climbs above the root: /public/%2e%2e/%2e%2e/admin",
			source: "RFC 3986 §6.2.2.2, §5.2.4",
			class:  4,
			routes: routePublic,
			req:    "GET /public/%2e%2e/%2e%2e/admin HTTP/1.1\r\nHost: public.example\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},

		// Class 5: bounded header processing.
		{
			name:   "17 names in Connection",
			source: "docs/security.md (more than 16 names in Connection: 400)",
			class:  5,
			req:    getReq(connectionNames(17)),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "17 names in two Connection fields",
			source: "docs/security.md (more than 16 names in Connection: 400); RFC 9110 §5.3",
			class:  5,
			req:    getReq("Connection: X-A, X-B, X-C, X-D, X-E, X-F, X-G, X-H\r\nConnection: X-I, X-J, X-K, X-L, X-M, X-N, X-O, X-P, X-Q\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "16 names in Connection are served and dropped",
			source:  "docs/security.md; RFC 9110 §7.6.1",
			class:   5,
			req:     getReq(connectionNames(16) + "X-Hop-1: 1\r\nX-Hop-16: 1\r\n"),
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"X-Hop-1": nil, "X-Hop-16": nil},
		},
		{
			name:   "101 header fields",
			source: "RFC 6585 §5; docs/security.md (more than 100 fields: 431)",
			class:  5,
			req:    getReq(fieldLines(100)),
			status: 431,
			conn:   connClosed,
		},
		{
			name:    "100 header fields are served",
			source:  "RFC 6585 §5; docs/security.md",
			class:   5,
			req:     getReq(fieldLines(99)),
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"X-Field-98": {"v"}},
		},
		{
			name:    "a 60 KB head within the limits is answered",
			source:  "docs/security.md (Resource limits: linear in the head)",
			class:   5,
			req:     bigHead(),
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"X-Hop-1": nil, "X-Pad-80": {strings.Repeat("a", 740)}},
		},
		{
			name:   "a 60 KB Connection field of 30000 names",
			source: "docs/security.md (more than 16 names in Connection: 400)",
			class:  5,
			req:    getReq("Connection: " + strings.Repeat("a,", 30000) + "a\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "a 60 KB head of 10000 fields",
			source: "Http11Probe MAL-MANY-HEADERS; RFC 6585 §5",
			class:  5,
			req:    getReq(strings.Repeat("x: y\r\n", 10000)),
			status: 431,
			conn:   connClosed,
		},
		{
			name:   "a head larger than maxHeaderBytes (100 KB value)",
			source: "Http11Probe MAL-LONG-HEADER-VALUE; RFC 6585 §5",
			class:  5,
			req:    getReq("X-Long: " + strings.Repeat("a", 100<<10) + "\r\n"),
			status: 431,
			conn:   connClosed,
		},

		// Class 6: responses that cannot be framed exactly.
		{
			name:          "response with both Content-Length and Transfer-Encoding",
			source:        "RFC 9112 §6.3 (3); response smuggling (Kettle 2019)",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n")},
			status:        502,
			backend:       []string{"GET /"},
			notInResponse: []string{"Transfer-Encoding"},
		},
		{
			name:      "response Transfer-Encoding gzip",
			source:    "RFC 9112 §6.3 (4); docs/security.md (Responses)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Transfer-Encoding: gzip\r\n", "ok")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response Transfer-Encoding chunked, gzip",
			source:    "RFC 9112 §6.3 (4); docs/security.md (Responses)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Transfer-Encoding: chunked, gzip\r\n", hello)},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response with two different Content-Lengths",
			source:    "RFC 9110 §8.6; RFC 9112 §6.3 (5)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Content-Length: 2\r\nContent-Length: 3\r\n", "ok!")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response Content-Length with a sign",
			source:    "RFC 9110 §8.6; Http11Probe RFC9112-6.1-CL-PLUS-SIGN (response side)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Content-Length: +2\r\n", "ok")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:          "response with the same Content-Length twice is forwarded with one",
			source:        "RFC 9110 §8.6 (identical values MAY be accepted); docs/security.md (regenerated)",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Content-Length: 2\r\nContent-Length: 2\r\n", "ok")},
			status:        200,
			respBody:      "ok",
			conn:          connKept,
			backend:       []string{"GET /"},
			notInResponse: []string{"Content-Length: 2\r\nContent-Length"},
		},
		{
			name:          "response header value with a bare CR",
			source:        "RFC 9112 §2.2; CWE-113 (HTTP response splitting)",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Content-Length: 2\r\nX: a\rSet-Cookie: evil=1\r\n", "ok")},
			status:        502,
			backend:       []string{"GET /"},
			notInResponse: []string{"evil=1"},
		},
		{
			name:          "response header value with a NUL",
			source:        "RFC 9110 §5.5",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Content-Length: 2\r\nX: a\x00b\r\n", "ok")},
			status:        502,
			backend:       []string{"GET /"},
			notInResponse: []string{"\x00"},
		},
		{
			name:      "response with obsolete line folding",
			source:    "RFC 9112 §5.2 (a proxy MUST reject or replace obs-fold)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Content-Length: 2\r\nX: a\r\n b\r\n", "ok")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response field name with a space before the colon",
			source:    "RFC 9112 §5.1",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Content-Length : 2\r\n", "ok")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:          "response head with bare LF line endings is normalised",
			source:        "RFC 9112 §2.2; docs/security.md (Responses: the request rules apply)",
			class:         6,
			req:           getReq(""),
			responses:     []string{"HTTP/1.1 200 OK\nContent-Length: 2\nX-A: 1\n\nok"},
			status:        200,
			respBody:      "ok",
			conn:          connKept,
			backend:       []string{"GET /"},
			notInResponse: []string{"1\n\n"},
		},
		{
			name:      "response status code of four digits",
			source:    "RFC 9112 §4",
			class:     6,
			req:       getReq(""),
			responses: []string{"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok"},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response status code 099",
			source:    "RFC 9110 §15 (100-599); docs/security.md (Responses)",
			class:     6,
			req:       getReq(""),
			responses: []string{"HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok"},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response status code 600",
			source:    "RFC 9110 §15 (100-599); docs/security.md (Responses)",
			class:     6,
			req:       getReq(""),
			responses: []string{"HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\nok"},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response version HTTP/1.2",
			source:    "RFC 9112 §4; docs/security.md (Responses)",
			class:     6,
			req:       getReq(""),
			responses: []string{"HTTP/1.2 200 OK\r\nContent-Length: 2\r\n\r\nok"},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:          "response reason phrase with a control character",
			source:        "RFC 9112 §4 (reason-phrase: HTAB, SP, VCHAR, obs-text)",
			class:         6,
			req:           getReq(""),
			responses:     []string{"HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nok"},
			status:        502,
			backend:       []string{"GET /"},
			notInResponse: []string{"\x01"},
		},
		{
			name:      "response with 101 fields",
			source:    "docs/security.md (Responses: more than 100 fields: 502)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Content-Length: 2\r\n"+fieldLines(100), "ok")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:      "response with 17 names in Connection",
			source:    "docs/security.md (Responses: more than 16 Connection names: 502)",
			class:     6,
			req:       getReq(""),
			responses: []string{resp200("Content-Length: 2\r\n"+connectionNames(17), "ok")},
			status:    502,
			backend:   []string{"GET /"},
		},
		{
			name:          "response field named in Connection is dropped",
			source:        "RFC 9110 §7.6.1",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Content-Length: 2\r\nConnection: X-Secret\r\nX-Secret: 1\r\n", "ok")},
			status:        200,
			respBody:      "ok",
			conn:          connKept,
			backend:       []string{"GET /"},
			notInResponse: []string{"X-Secret"},
		},
		{
			name:      "interim 100 response before the final one",
			source:    "RFC 9110 §15.2",
			class:     6,
			req:       getReq(""),
			responses: []string{"HTTP/1.1 100 Continue\r\n\r\n" + okResponse},
			status:    200,
			respBody:  "ok",
			conn:      connKept,
			backend:   []string{"GET /"},
		},
		{
			name:          "response chunk extensions and trailers are dropped",
			source:        "RFC 9112 §7.1.1, §7.1.2; docs/security.md (Chunked bodies)",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Transfer-Encoding: chunked\r\n", "5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n")},
			status:        200,
			respBody:      "hello",
			conn:          connKept,
			backend:       []string{"GET /"},
			notInResponse: []string{";ext", "X-Trailer"},
		},
		{
			name:          "response malformed chunk-size",
			source:        "RFC 9112 §7.1; docs/security.md (a malformed chunk after the head went out: close)",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Transfer-Encoding: chunked\r\n", "5\r\nhello\r\nzz\r\n"+okResponse)},
			status:        200,
			respTruncated: true,
			conn:          connClosed,
			backend:       []string{"GET /"},
			notInResponse: []string{"zz"},
		},
		{
			name:          "response chunk data followed by a bare LF",
			source:        "HTTP Garden transducer bug 13 (response side); RFC 9112 §7.1",
			class:         6,
			req:           getReq(""),
			responses:     []string{resp200("Transfer-Encoding: chunked\r\n", "5\r\nhello\n0\r\n\r\n")},
			status:        200,
			respTruncated: true,
			conn:          connClosed,
			backend:       []string{"GET /"},
		},

		// Class 7: request bodies (per-route buffering, maxBodySize: 413).
		// The config keys are being designed; the cases come with them.

		// Class 0: general RFC conformance. Request line.
		{
			name:   "double space in the request line",
			source: "Http11Probe RFC9112-3-MULTI-SP-REQUEST-LINE; RFC 9112 §3",
			req:    "GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "tab as request-line separator",
			source: "Http11Probe COMP-REQUEST-LINE-TAB; RFC 9112 §3",
			req:    "GET\t/ HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "missing request-target",
			source: "Http11Probe RFC9112-3-MISSING-TARGET; RFC 9112 §3",
			req:    "GET HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "HTTP/0.9 request line",
			source: "Http11Probe RFC9112-2.3-HTTP09-REQUEST; RFC 9112 §2.3",
			req:    "GET /\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "version HTTP/1.2 is served as HTTP/1.1",
			source:  "Http11Probe COMP-HTTP12-VERSION; RFC 9110 §6.2 (a higher minor version is handled as the highest supported)",
			req:     "GET / HTTP/1.2\r\nHost: x\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
		},
		{
			name:   "version HTTP/2.0 in an HTTP/1 request line",
			source: "RFC 9110 §15.6.6",
			req:    "GET / HTTP/2.0\r\nHost: x\r\n\r\n",
			status: 505,
			conn:   connClosed,
		},
		{
			name:   "version HTTP/9.9",
			source: "Http11Probe RFC9112-2.3-INVALID-VERSION; RFC 9110 §15.6.6",
			req:    "GET / HTTP/9.9\r\nHost: x\r\n\r\n",
			status: 505,
			conn:   connClosed,
		},
		{
			name:   "version HTTP/1.32",
			source: "HTTP Garden server bug 5 (versions read as their longest valid prefix); RFC 9112 §2.3",
			req:    "GET / HTTP/1.32\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "version with leading zeros HTTP/01.01",
			source: "Http11Probe COMP-VERSION-LEADING-ZEROS; RFC 9112 §2.3",
			req:    "GET / HTTP/01.01\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "version without minor HTTP/1",
			source: "Http11Probe COMP-VERSION-MISSING-MINOR; RFC 9112 §2.3",
			req:    "GET / HTTP/1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "version in lower case http/1.1",
			source: "Http11Probe COMP-VERSION-CASE; RFC 9112 §2.3 (HTTP-name is case-sensitive)",
			req:    "GET / http/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "garbage version FOO/1.1",
			source: "RFC 9112 §2.3",
			req:    "GET / FOO/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "method not a token",
			source: "HTTP Garden server bug 6 (methods read as their longest valid prefix); RFC 9110 §9.1",
			req:    "G=\":<>(e),[T];?\" /get HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "lower-case method is a token and forwarded as is",
			source:  "Http11Probe COMP-METHOD-CASE; RFC 9110 §9.1 (methods are case-sensitive)",
			req:     "get / HTTP/1.1\r\nHost: x\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"get /"},
		},
		{
			name:   "CONNECT",
			source: "Http11Probe COMP-METHOD-CONNECT; docs/security.md (not a forward proxy)",
			req:    "CONNECT admin.internal:443 HTTP/1.1\r\nHost: admin.internal:443\r\n\r\n",
			status: 405,
		},
		{
			name:   "TRACE",
			source: "Http11Probe COMP-METHOD-TRACE; cross-site tracing (Grossman, 2003)",
			req:    "TRACE / HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 405,
		},
		{
			name:   "asterisk-form with GET",
			source: "Http11Probe COMP-ASTERISK-WITH-GET; RFC 9112 §3.2.4",
			req:    "GET * HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "OPTIONS *",
			source:  "Http11Probe COMP-OPTIONS-STAR; RFC 9112 §3.2.4",
			req:     "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"OPTIONS *"},
		},
		{
			name:   "fragment in the request-target",
			source: "Http11Probe RFC9112-3.2-FRAGMENT-IN-TARGET; RFC 3986 §3.5",
			req:    "GET /path#frag HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "space in the request-target",
			source: "Http11Probe COMP-SPACE-IN-TARGET; RFC 9112 §3.2",
			req:    "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "DEL in the request-target",
			source: "RFC 9112 §3.2; RFC 3986 §2",
			req:    "GET /a\x7fb HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:     "raw non-ASCII bytes in the request-target are forwarded percent-encoded",
			source:   "Http11Probe MAL-NON-ASCII-URL; RFC 3986 §2.1 (accepted as nginx and net/http do)",
			req:      "GET /caf\xc3\xa9?q=\xff HTTP/1.1\r\nHost: x\r\n\r\n",
			status:   200,
			conn:     connKept,
			backend:  []string{"GET /caf%C3%A9?q=%FF"},
			notInRaw: []string{"\xc3", "\xff"},
		},
		{
			name:   "request-target neither origin-form nor absolute-form",
			source: "HTTP Garden server bug 7 (URIs not validated); RFC 9112 §3.2",
			req:    "GET admin HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "absolute-form with userinfo",
			source: "RFC 9110 §4.2.4",
			req:    "GET http://user@x/ HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "absolute-form with another scheme",
			source: "RFC 9112 §3.2.2; docs/security.md",
			req:    "GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "invalid percent-encoding %zz",
			source: "RFC 3986 §2.1",
			req:    "GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "truncated percent-encoding at the end",
			source: "RFC 3986 §2.1",
			req:    "GET /a%4 HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "%00 in the path",
			source: "Http11Probe MAL-URL-PERCENT-NULL; docs/security.md (nginx refuses %00)",
			req:    "GET /a%00b HTTP/1.1\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "empty lines before the request line are skipped",
			source:  "Http11Probe COMP-LEADING-CRLF; RFC 9112 §2.2",
			req:     "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
		},

		// Class 0: header fields.
		{
			name:   "space before the first header line",
			source: "Http11Probe COMP-WHITESPACE-BEFORE-HEADERS; RFC 9112 §2.2",
			req:    "GET / HTTP/1.1\r\n Host: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "tab before the first header name",
			source: "HTTP Garden server bug 4; RFC 9112 §2.2",
			req:    "GET / HTTP/1.1\r\n\tContent-Length: 1\r\nHost: x\r\n\r\nX",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "space before the colon",
			source: "HTTP Garden server bug 3; Http11Probe RFC9110-5.6.2-SP-BEFORE-COLON; RFC 9112 §5.1",
			req:    postReq("Content-Length : "+strconv.Itoa(len(smuggledGet))+"\r\n", smuggledGet),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "empty header name",
			source: "HTTP Garden server bug 18 (Go net/http, fixed in go#65244); Http11Probe RFC9112-5-EMPTY-HEADER-NAME",
			req:    "GET / HTTP/1.1\r\n: ignored\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "header line with no colon",
			source: "HTTP Garden server bug 28; Http11Probe RFC9112-5-HEADER-NO-COLON",
			req:    postReq("Content-Length 10\r\n", "0123456789"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "header name continued on the next line",
			source: "HTTP Garden server bug 37 (Passenger)",
			req:    postReq("Transfer-\r\nEncoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "header name not a token",
			source: "Http11Probe RFC9112-5-INVALID-HEADER-NAME; RFC 9110 §5.1",
			req:    getReq("Bad[Name]: x\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "non-ASCII byte in a header name",
			source: "HTTP Garden server bug 8 and transducer bug 6; Http11Probe MAL-NON-ASCII-HEADER-NAME",
			req:    getReq("\xefoo: bar\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "obsolete line folding",
			source: "Http11Probe RFC9112-5.1-OBS-FOLD; RFC 9112 §5.2",
			req:    getReq("X-Folded: a\r\n b\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "control character in a header value",
			source: "Http11Probe MAL-CONTROL-CHARS-HEADER; RFC 9110 §5.5",
			req:    getReq("X: a\x01b\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "DEL in a header value",
			source: "RFC 9110 §5.5",
			req:    getReq("X: a\x7fb\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "obs-text in a header value is forwarded",
			source:  "RFC 9110 §5.5 (obs-text)",
			req:     getReq("X: caf\xc3\xa9\r\n"),
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"X": {"caf\xc3\xa9"}},
		},
		{
			name:   "HTTP/1.1 without Host",
			source: "Http11Probe RFC9112-7.1-MISSING-HOST; RFC 9112 §3.2",
			req:    "GET / HTTP/1.1\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "HTTP/1.0 without Host is served (and the backend gets one)",
			source:  "Http11Probe COMP-HTTP10-NO-HOST; RFC 9112 §3.2",
			req:     "GET / HTTP/1.0\r\n\r\n",
			status:  200,
			conn:    connClosed,
			backend: []string{"GET /"},
		},
		{
			name:   "empty Host",
			source: "Http11Probe (empty Host); RFC 9110 §4.2.1: an http URI has an authority; nginx answers 400",
			req:    "GET / HTTP/1.1\r\nHost:\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "two different Host fields",
			source: "Http11Probe RFC9110-5.4-DUPLICATE-HOST; RFC 9112 §3.2",
			req:    "GET / HTTP/1.1\r\nHost: public.example\r\nHost: admin.internal\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "the same Host twice",
			source: "Http11Probe COMP-DUPLICATE-HOST-SAME; RFC 9112 §3.2",
			req:    "GET / HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Host with two comma-separated names",
			source: "Http11Probe SMUG-MULTIPLE-HOST-COMMA; RFC 9112 §3.2",
			req:    "GET / HTTP/1.1\r\nHost: public.example, admin.internal\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Host with a path",
			source: "Http11Probe COMP-HOST-WITH-PATH; RFC 9110 §7.2",
			req:    "GET / HTTP/1.1\r\nHost: x/admin\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Host with userinfo",
			source: "Http11Probe COMP-HOST-WITH-USERINFO; RFC 9110 §7.2",
			req:    "GET / HTTP/1.1\r\nHost: user@x\r\n\r\n",
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "Host with a port is forwarded as sent",
			source:  "RFC 9110 §7.2",
			req:     "GET / HTTP/1.1\r\nHost: x:8080\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"Host": {"x:8080"}},
		},

		// Class 0: Content-Length.
		{
			name:   "CL.TE: Content-Length and Transfer-Encoding",
			source: "PortSwigger CL.TE (Kettle, HTTP Desync Attacks, 2019); Http11Probe SMUG-CLTE-SMUGGLED-GET; RFC 9112 §6.1",
			req:    postReq("Content-Length: "+strconv.Itoa(len("0\r\n\r\n"+smuggledGet))+"\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"+smuggledGet),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "TE.CL: Transfer-Encoding and Content-Length",
			source: "PortSwigger TE.CL (Kettle, HTTP Desync Attacks, 2019); Http11Probe SMUG-TECL-SMUGGLED-GET; RFC 9112 §6.1",
			req:    postReq("Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", "8\r\nSMUGGLED\r\n0\r\n\r\n"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "two different Content-Lengths",
			source: "HTTP Garden transducer bug 22 (relayd); Http11Probe SMUG-DUPLICATE-CL; RFC 9110 §8.6",
			req:    postReq("Content-Length: 0\r\nContent-Length: "+strconv.Itoa(len(smuggledGet))+"\r\n", smuggledGet),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "the same Content-Length twice",
			source: "docs/security.md (nginx refuses duplicates); RFC 9110 §8.6",
			req:    postReq("Content-Length: 5\r\nContent-Length: 5\r\n", "hello"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Content-Length list 5, 5",
			source: "Http11Probe SMUG-CL-COMMA-SAME; RFC 9110 §8.6",
			req:    postReq("Content-Length: 5, 5\r\n", "hello"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Content-Length with a plus sign",
			source: "Http11Probe RFC9112-6.1-CL-PLUS-SIGN; HTTP Garden server bug 10",
			req:    postReq("Content-Length: +5\r\n", "hello"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "negative Content-Length",
			source: "Http11Probe SMUG-CL-NEGATIVE; HTTP Garden server bug 26 (CVE-2023-34188)",
			req:    postReq("Content-Length: -1\r\n", "hello"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "hexadecimal Content-Length",
			source: "Http11Probe SMUG-CL-HEX-PREFIX; HTTP Garden transducer bug 1 (Akamai)",
			req:    postReq("Content-Length: 0x5\r\n", "hello"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "space inside the Content-Length",
			source: "Http11Probe SMUG-CL-INTERNAL-SPACE; RFC 9110 §8.6",
			req:    postReq("Content-Length: 1 0\r\n", "0123456789"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "empty Content-Length",
			source: "Http11Probe MAL-CL-EMPTY; CVE-2023-40225 (HAProxy, HTTP Garden transducer bug 11)",
			req:    getReq("Content-Length: \r\n") + smuggledGet,
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Content-Length with an underscore",
			source: "Http11Probe SMUG-CL-UNDERSCORE; HTTP Garden server bug 10",
			req:    postReq("Content-Length: 1_0\r\n", "0123456789"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "Content-Length with leading zeros is regenerated",
			source:  "Http11Probe SMUG-CL-LEADING-ZEROS; HTTP Garden server bug 32 (strtoll base 0: 010 is 8)",
			req:     postReq("Content-Length: 010\r\n", "0123456789"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "0123456789",
			hdr:     map[string][]string{"Content-Length": {"10"}},
		},
		{
			name:    "tab before the Content-Length value is whitespace",
			source:  "Http11Probe MAL-CL-TAB-BEFORE-VALUE; RFC 9110 §5.6.3 (OWS)",
			req:     postReq("Content-Length:\t5\r\n", "hello"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
			hdr:     map[string][]string{"Content-Length": {"5"}},
		},
		{
			name:    "trailing space after the Content-Length value",
			source:  "Http11Probe SMUG-CL-TRAILING-SPACE; RFC 9110 §5.6.3 (OWS)",
			req:     postReq("Content-Length: 5 \r\n", "hello"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
			hdr:     map[string][]string{"Content-Length": {"5"}},
		},
		{
			name:    "GET with a body is forwarded with exactly that length",
			source:  "Http11Probe COMP-GET-WITH-CL-BODY; HTTP Garden transducer bug 21 (relayd stripped GET bodies)",
			req:     getReq("Content-Length: 5\r\n") + "hello",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
			reqBody: "hello",
			hdr:     map[string][]string{"Content-Length": {"5"}},
		},
		{
			name:    "HEAD with a body is forwarded with exactly that length",
			source:  "Http11Probe SMUG-HEAD-CL-BODY; RFC 9110 §9.3.2",
			req:     "HEAD / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
			status:  200,
			conn:    connKept,
			backend: []string{"HEAD /"},
			reqBody: "hello",
		},
		{
			name:    "POST with Content-Length 0 and a pipelined GET",
			source:  "Http11Probe SMUG-PIPELINE-SAFE; HTTP Garden server bug 48",
			req:     postReq("Content-Length: 0\r\n", "") + "GET /second HTTP/1.1\r\nHost: x\r\n\r\n",
			status:  200,
			next:    []int{200},
			conn:    connKept,
			backend: []string{"POST /", "GET /second"},
		},

		// Class 0: Transfer-Encoding (defparam/smuggler gadgets carry a
		// Content-Length, and a smuggled GET behind a chunked end).
		{
			name:   "Transfer-Encoding: xchunked",
			source: "PortSwigger Web Security Academy, TE.TE obfuscation; Http11Probe SMUG-TE-XCHUNKED; RFC 9112 §6.3 (4)",
			req:    teGadget("Transfer-Encoding: xchunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding: chunked, identity",
			source: "RFC 9112 §6.3 (4); SMUGGLEtest TE obfuscations",
			req:    teGadget("Transfer-Encoding: chunked, identity"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding: identity",
			source: "Http11Probe SMUG-TE-IDENTITY; RFC 9112 §6.3 (4)",
			req:    teGadget("Transfer-Encoding: identity"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "unknown transfer coding alone",
			source: "HTTP Garden server bug 44 (FastHTTP); Http11Probe COMP-UNKNOWN-TE-501",
			req:    teGadget("Transfer-Encoding: blegh"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding: gzip, chunked",
			source: "RFC 9112 §6.1 (SHOULD 501); docs/security.md (nginx answers 501)",
			req:    teGadget("Transfer-Encoding: gzip, chunked"),
			status: 501,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding: cow, chunked (smuggler cowComma)",
			source: "defparam/smuggler exhaustive cowComma; RFC 9112 §6.1",
			req:    teGadget("Transfer-Encoding: cow, chunked"),
			status: 501,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding: chunked, cow (smuggler commaCow)",
			source: "defparam/smuggler exhaustive commaCow; RFC 9112 §6.3 (4)",
			req:    teGadget("Transfer-Encoding: chunked, cow"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding twice",
			source: "HTTP Garden transducer bug 25 (Pound) and server bug 11 (Tornado); RFC 9112 §6.1",
			req:    teGadget("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding: cow then chunked (smuggler revdualchunk)",
			source: "defparam/smuggler exhaustive revdualchunk; Http11Probe SMUG-TE-DUPLICATE-HEADERS",
			req:    smugglerGadget("Transfer-Encoding: cow\r\nTransfer-Encoding: chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "Transfer-Encoding in HTTP/1.0",
			source: "Http11Probe SMUG-TE-HTTP10; RFC 9112 §6.1",
			req:    "POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + hello,
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "leading space before the name (smuggler nameprefix1)",
			source: "defparam/smuggler default nameprefix1; CVE-2020-7238 (Netty)",
			req:    smugglerGadget(" Transfer-Encoding: chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "tab before the value with Content-Length (smuggler tabprefix1)",
			source: "defparam/smuggler default tabprefix1; RFC 9112 §6.1",
			req:    smugglerGadget("Transfer-Encoding:\tchunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "tab before the value alone is whitespace",
			source:  "Http11Probe SMUG-TE-TAB-BEFORE-VALUE; RFC 9110 §5.6.3 (OWS)",
			req:     teGadget("Transfer-Encoding:\tchunked"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
		},
		{
			name:   "tab before the colon (smuggler tabprefix2)",
			source: "defparam/smuggler default tabprefix2; RFC 9112 §5.1",
			req:    smugglerGadget("Transfer-Encoding\t:\tchunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "space before the colon (smuggler space1)",
			source: "defparam/smuggler default space1; Http11Probe SMUG-TE-SP-BEFORE-COLON; RFC 9112 §5.1",
			req:    smugglerGadget("Transfer-Encoding : chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "vertical tab before the value (smuggler vertprefix1)",
			source: "defparam/smuggler exhaustive vertprefix1; CVE-2019-18277 (HAProxy); Http11Probe SMUG-TE-VTAB",
			req:    teGadget("Transfer-Encoding:\x0bchunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "form feed before the value (smuggler midspace-0c)",
			source: "defparam/smuggler default midspace-0c; Http11Probe SMUG-TE-FORMFEED",
			req:    teGadget("Transfer-Encoding:\x0cchunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "0xFF before the value (smuggler spaceFF)",
			source: "defparam/smuggler exhaustive spaceFF",
			req:    teGadget("Transfer-Encoding:\xffchunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "NBSP around the value",
			source: "HTTP Garden server bug 12 (Tornado strips \\xa0)",
			req:    teGadget("Transfer-Encoding: \xa0chunked\xa0"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "folded value after a bare LF (smuggler linewrapped1)",
			source: "defparam/smuggler exhaustive linewrapped1; RFC 9112 §5.2",
			req:    smugglerGadget("Transfer-Encoding:\n chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "folded Transfer-Encoding",
			source: "CVE-2022-32215 (Node.js llhttp, multi-line Transfer-Encoding); Http11Probe SMUG-TE-OBS-FOLD",
			req:    teGadget("Transfer-Encoding:\r\n chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "quoted value (smuggler quoted)",
			source: "defparam/smuggler exhaustive quoted; RFC 9112 §7",
			req:    teGadget("Transfer-Encoding: \"chunked\""),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "bare CR after the value (smuggler 0dsuffix)",
			source: "defparam/smuggler exhaustive 0dsuffix; RFC 9112 §2.2",
			req:    smugglerGadget("Transfer-Encoding: chunked\r"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "NUL after the value",
			source: "Http11Probe SMUG-TE-NULL; RFC 9110 §5.5",
			req:    teGadget("Transfer-Encoding: chunked\x00"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:   "mixed case with Content-Length (smuggler sarcasm)",
			source: "defparam/smuggler exhaustive sarcasm; RFC 9112 §6.1",
			req:    smugglerGadget("TrAnSFer-EnCODinG: cHuNkeD"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:    "mixed case alone is chunked",
			source:  "Http11Probe SMUG-TE-CASE-MISMATCH; RFC 9110 §5.1; RFC 9112 §7 (coding names are case-insensitive)",
			req:     teGadget("TrAnSFer-EnCODinG: cHuNkeD"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
		},
		{
			name:   "leading comma ,chunked is refused as nginx and net/http do",
			source: "HTTP Garden transducer bugs 9 and 18 (Azure CDN, nghttpx, relayd read it as chunked, others not); FuzzRequest finding",
			req:    teGadget("Transfer-Encoding: ,chunked"),
			status: 501,
			conn:   connClosed,
		},
		{
			name:   "leading comma ,chunked with Content-Length",
			source: "HTTP Garden transducer bug 15 (OpenLiteSpeed, Pound); RFC 9112 §6.1",
			req:    smugglerGadget("Transfer-Encoding: ,chunked"),
			status: 400,
			conn:   connClosed,
		},
		{
			name:     "Transfer_Encoding with an underscore is another field, and dropped",
			source:   "defparam/smuggler exhaustive underjoin1; Http11Probe SMUG-TRANSFER_ENCODING; nginx underscores_in_headers off",
			req:      smugglerGadget("Transfer_Encoding: chunked"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /?cb=1"},
			reqBody:  "0\r\n\r\n" + smuggledGet,
			notInRaw: []string{"Transfer_Encoding"},
		},
		{
			name:     "X_Forwarded_For with an underscore is dropped",
			source:   "CGI/WSGI map X_Forwarded_For and X-Forwarded-For to one variable (HTTP_X_FORWARDED_FOR); nginx underscores_in_headers off",
			class:    1,
			req:      getReq("X_Forwarded_For: 6.6.6.6\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"GET /"},
			notInRaw: []string{"6.6.6.6", "X_Forwarded_For"},
		},
		{
			name:   "Transfer-Encoding chunked, chunked",
			source: "RFC 9112 §7.1 (chunked MUST NOT be applied more than once)",
			req:    teGadget("Transfer-Encoding: chunked, chunked"),
			status: 400,
			conn:   connClosed,
		},

		// Class 0: chunked request bodies.
		{
			name:    "two chunks",
			source:  "Http11Probe COMP-CHUNKED-MULTI; RFC 9112 §7.1",
			req:     chunkedReq("", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello world",
		},
		{
			name:    "upper-case hex chunk size",
			source:  "Http11Probe COMP-CHUNKED-HEX-UPPERCASE; RFC 9112 §7.1",
			req:     chunkedReq("", "A\r\n0123456789\r\n0\r\n\r\n"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "0123456789",
		},
		{
			name:     "chunk sizes are rewritten: leading zeros",
			source:   "docs/security.md (baton writes its own chunk-size lines); HTTP Garden transducer bug 7 (sizes re-emitted)",
			req:      chunkedReq("", "005\r\nhello\r\n0\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			reqBody:  "hello",
			notInRaw: []string{"005\r\n"},
		},
		{
			name:     "chunk extension is dropped",
			source:   "Http11Probe COMP-CHUNKED-EXTENSION; RFC 9112 §7.1.1",
			req:      chunkedReq("", "5;ext=value\r\nhello\r\n0\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			reqBody:  "hello",
			notInRaw: []string{";ext"},
		},
		{
			name:     "chunk extension with BWS and a quoted value",
			source:   "RFC 9112 §7.1.1 (BWS around ; and =)",
			req:      chunkedReq("", "5 ; ext = \"v\"\r\nhello\r\n0\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			reqBody:  "hello",
			notInRaw: []string{"ext"},
		},
		{
			name:      "bare semicolon as chunk extension",
			source:    "Http11Probe SMUG-CHUNK-BARE-SEMICOLON; RFC 9112 §7.1.1",
			req:       chunkedReq("", "5;\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk extension name not a token",
			source:    "Http11Probe SMUG-CHUNK-EXT-INVALID-TOKEN; RFC 9112 §7.1.1",
			req:       chunkedReq("", "5;bad[=x\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size with 0x",
			source:    "Http11Probe SMUG-CHUNK-HEX-PREFIX; HTTP Garden server bug 25 (strtoll)",
			req:       chunkedReq("", "0x5\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "negative chunk size",
			source:    "Http11Probe SMUG-CHUNK-NEGATIVE; RFC 9112 §7.1",
			req:       chunkedReq("", "-1\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size -0x0",
			source:    "HTTP Garden transducer bug 19 (relayd, Pound)",
			req:       chunkedReq("", "-0x0\r\n\r\n"+smuggledGet),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size with a plus sign",
			source:    "Http11Probe SMUG-CHUNK-SIZE-PLUS; RFC 9112 §7.1",
			req:       chunkedReq("", "+5\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size with an underscore",
			source:    "Http11Probe SMUG-CHUNK-UNDERSCORE; HTTP Garden server bug 1 (Python int())",
			req:       chunkedReq("", "0_5\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size of 16 hex digits",
			source:    "docs/security.md (1 to 15 hex digits); Http11Probe MAL-CHUNK-SIZE-OVERFLOW",
			req:       chunkedReq("", "0000000000000005\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size with leading whitespace",
			source:    "Http11Probe SMUG-CHUNK-LEADING-SP; HTTP Garden transducer bug 24 (relayd, Pound)",
			req:       chunkedReq("", " 5\r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size with whitespace before the CRLF",
			source:    "Http11Probe SMUG-CHUNK-SIZE-TRAILING-OWS; RFC 9112 §7.1.1 (BWS only before ;)",
			req:       chunkedReq("", "5 \r\nhello\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size followed by garbage",
			source:    "HTTP Garden transducer bug 7 (ATS: longest valid prefix, re-emitted)",
			req:       chunkedReq("", "1these-bytes-never-get-validated\r\nZ\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk size not hex",
			source:    "HTTP Garden transducer bug 2 (Akamai)",
			req:       chunkedReq("", "Z\r\nZZ\r\nZZZ\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk data longer than its size",
			source:    "Http11Probe SMUG-CHUNK-SPILL; RFC 9112 §7.1",
			req:       chunkedReq("", "5\r\nhello!!\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "chunk data not followed by CRLF",
			source:    "Http11Probe SMUG-CHUNK-MISSING-TRAILING-CRLF; RFC 9112 §7.1",
			req:       chunkedReq("", "5\r\nhello0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "extra CRLF before the last chunk",
			source:    "HTTP Garden transducer bug 17 (OpenLiteSpeed) and server bug 17 (empty chunk size)",
			req:       chunkedReq("", "17\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n\r\n\r\n0\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:      "invalid chunk followed by a pipelined GET",
			source:    "HTTP Garden server bug 47 (Cheroot: response queue poisoning)",
			req:       chunkedReq("", "INVALID!!!\r\n"+smuggledGet),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},
		{
			name:     "trailer fields are dropped",
			source:   "Http11Probe COMP-CHUNKED-TRAILER-VALID; RFC 9110 §6.5.1",
			req:      chunkedReq("", "5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			reqBody:  "hello",
			notInRaw: []string{"X-Checksum"},
		},
		{
			name:     "Content-Length in the trailer is dropped",
			source:   "Http11Probe SMUG-TRAILER-CL; RFC 9110 §6.5.1",
			req:      chunkedReq("", "5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			reqBody:  "hello",
			notInRaw: []string{"Content-Length: 50"},
		},
		{
			name:     "Host in the trailer is dropped",
			source:   "Http11Probe SMUG-TRAILER-HOST; RFC 9110 §6.5.1",
			req:      chunkedReq("", "5\r\nhello\r\n0\r\nHost: evil.example\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			hdr:      map[string][]string{"Host": {"x"}},
			notInRaw: []string{"evil.example"},
		},
		{
			name:     "trailer that looks like a request line is dropped",
			source:   "HTTP Garden server bug 39 (CVE-2023-40175, Puma)",
			req:      chunkedReq("", "0\r\nX:POST / HTTP/1.1\r\n\r\n"),
			status:   200,
			conn:     connKept,
			backend:  []string{"POST /"},
			notInRaw: []string{"X:POST"},
		},
		{
			name:      "trailer field name not a token",
			source:    "RFC 9112 §7.1.2; RFC 9110 §5.1",
			req:       chunkedReq("", "5\r\nhello\r\n0\r\nBad Name: v\r\n\r\n"),
			status:    400,
			conn:      connClosed,
			backend:   []string{"POST /"},
			truncated: true,
		},

		// Class 0: Expect, connection management, pipelining.
		{
			name:          "Expect: 100-continue: the client waits for it",
			source:        "RFC 9110 §10.1.1; docs/security.md (Expect is answered by baton)",
			req:           postReq("Content-Length: 4\r\nExpect: 100-continue\r\n", ""),
			afterContinue: "ping",
			status:        200,
			interim:       []int{100},
			conn:          connKept,
			backend:       []string{"POST /"},
			reqBody:       "ping",
			hdr:           map[string][]string{"Expect": nil},
		},
		{
			name:    "Expect: 100-continue with the body sent at once",
			source:  "Http11Probe SMUG-EXPECT-100-CL; RFC 9110 §10.1.1",
			req:     postCL("Expect: 100-continue\r\n", "hello"),
			status:  200,
			conn:    connKept,
			backend: []string{"POST /"},
			reqBody: "hello",
			hdr:     map[string][]string{"Expect": nil},
		},
		{
			name:    "Expect: 100-continue from an HTTP/1.0 client gets no 100",
			source:  "Http11Probe COMP-NO-1XX-HTTP10; RFC 9110 §10.1.1, §15.2",
			req:     "POST / HTTP/1.0\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello",
			status:  200,
			interim: []int{},
			conn:    connClosed,
			backend: []string{"POST /"},
			reqBody: "hello",
		},
		{
			name:    "Connection: close is honoured",
			source:  "Http11Probe COMP-CONNECTION-CLOSE; RFC 9112 §9.6",
			req:     getReq("Connection: close\r\n"),
			status:  200,
			conn:    connClosed,
			backend: []string{"GET /"},
		},
		{
			name:    "HTTP/1.0 closes by default",
			source:  "Http11Probe COMP-HTTP10-DEFAULT-CLOSE; RFC 9112 §9.3",
			req:     "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
			status:  200,
			conn:    connClosed,
			backend: []string{"GET /"},
		},
		{
			name:    "HTTP/1.0 with keep-alive stays open",
			source:  "RFC 9112 §C.2.2",
			req:     "GET / HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n",
			status:  200,
			conn:    connKept,
			backend: []string{"GET /"},
		},
		{
			name:    "two pipelined GETs",
			source:  "Http11Probe SMUG-PIPELINE-SAFE; RFC 9112 §9.3.2",
			req:     getReq("") + "GET /second HTTP/1.1\r\nHost: x\r\n\r\n",
			status:  200,
			next:    []int{200},
			conn:    connKept,
			backend: []string{"GET /", "GET /second"},
		},
		{
			name:    "garbage pipelined after Connection: close is never read",
			source:  "HTTP Garden server bug 45 (Mongoose, Uvicorn)",
			req:     getReq("Connection: close\r\n") + "Invalid\r\n\r\n",
			status:  200,
			conn:    connClosed,
			backend: []string{"GET /"},
		},
		{
			name:    "an empty bare-LF line ends the head early",
			source:  "HTTP Garden server bug 19 (Gunicorn); RFC 9112 §2.2",
			req:     "GET / HTTP/1.1\r\nHost: x\r\nUseless:\n\nGET / HTTP/1.1\r\n\r\n",
			status:  200,
			next:    []int{400},
			conn:    connClosed,
			backend: []string{"GET /"},
			hdr:     map[string][]string{"Useless": {""}},
		},
	}
}

// TestConformance runs every case of conformanceCases against its own
// proxy and recording backend(s).
func TestConformance(t *testing.T) {
	cases := conformanceCases()
	seen := make(map[string]bool)
	for _, tc := range cases {
		if seen[tc.name] || tc.source == "" || tc.class < 0 || tc.class > 7 {
			t.Fatalf("case %q: duplicate name, no source or bad class", tc.name)
		}
		seen[tc.name] = true
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runConformanceCase(t, &tc)
		})
	}
}

// runConformanceCase sends tc.req, checks what the client reads, lets the
// proxy finish, and checks what the backends saw.
func runConformanceCase(t *testing.T, tc *conformanceCase) {
	be := newRecordingBackend(t, scriptedResponses(tc.responses...))
	var other *recordingBackend
	cfg, followup := webConfig(be.addr()), "GET "+followupPath+" HTTP/1.1\r\nHost: x\r\n\r\n"
	switch tc.routes {
	case routePublic:
		other = newRecordingBackend(t, scriptedResponses())
		cfg = routingConfig(be.addr(), other.addr())
	case routePublicOnly:
		cfg = routingConfig(be.addr(), "")
	}
	if tc.routes != routeAll {
		followup = "GET /public" + followupPath + " HTTP/1.1\r\nHost: public.example\r\n\r\n"
	}
	p, web, _ := startProxy(t, cfg)

	res := clientExchange(web, tc, followup)
	checkClient(t, tc, &res)

	// Drain returns once the client connections have ended, and closes
	// the pooled upstream connections: each backend then sees every
	// connection end and has parsed all it ever will.
	ctx, cancel := context.WithTimeout(context.Background(), conformanceTimeout)
	p.Drain(ctx, false)
	drained := ctx.Err() == nil
	cancel()
	backends := []*recordingBackend{be}
	if other != nil {
		backends = append(backends, other)
	}
	for _, b := range backends {
		switch {
		case !drained:
			t.Errorf("the proxy still had the exchange in hand %v after the client left", conformanceTimeout)
		case !b.waitClosed():
			t.Errorf("an upstream connection was still open %v after the drain", conformanceTimeout)
		default:
			continue
		}
		break
	}
	rec := be.record()
	summary := fmt.Sprintf("observed: %s; backend saw %q", res.summary(), rec.names())
	recs := []backendRecord{rec}
	if other != nil {
		orec := other.record()
		summary += fmt.Sprintf(", other saw %q", orec.names())
		recs = append(recs, orec)
	}
	t.Log(summary)
	checkBackend(t, "backend", tc, tc.backend, rec, tc.truncated)
	if other != nil {
		checkBackend(t, "other backend", tc, tc.other, recs[1], false)
	}
	checkForwarded(t, tc, recs)
}

// clientResult is what the client read.
type clientResult struct {
	interim  []int
	statuses []int    // final responses in order; 0: the connection closed instead
	bodies   []string // their bodies
	bodyErr  error    // reading the last body failed
	lastOpen bool     // the last response did not announce Connection: close
	conn     string   // what became of the connection
	extra    []byte   // bytes after the last response
	err      error    // the exchange broke off
	raw      bytes.Buffer
}

func (r *clientResult) summary() string {
	s := fmt.Sprintf("statuses %v, interim %v, connection %s", r.statuses, r.interim, r.conn)
	if r.err != nil {
		s += fmt.Sprintf(", error %v", r.err)
	}
	return s
}

// isConnEnd reports whether err means the peer closed the connection.
func isConnEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// requestMethod returns the method of a raw request, for reading the
// response (HEAD has no body).
func requestMethod(req string) string {
	req = strings.TrimLeft(req, "\r\n")
	m, _, _ := strings.Cut(req, " ")
	return m
}

// clientExchange sends tc's request on a new connection to web and reads
// the responses the case expects, then what becomes of the connection
// (sending followup when it should still serve one).
func clientExchange(web string, tc *conformanceCase, followup string) (res clientResult) {
	c, err := net.Dial("tcp", web)
	if err != nil {
		res.err = err
		return res
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(conformanceTimeout))
	br := bufio.NewReader(io.TeeReader(c, &res.raw))
	// Write errors are ignored: the proxy may refuse a request before
	// reading all of it, and its answer is what counts.
	io.WriteString(c, tc.req)
	if tc.afterContinue != "" {
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusContinue {
			res.err = fmt.Errorf("waiting for 100 Continue: %v", err)
			if resp != nil {
				res.err = fmt.Errorf("waiting for 100 Continue: got %d", resp.StatusCode)
			}
			return res
		}
		res.interim = append(res.interim, http.StatusContinue)
		io.WriteString(c, tc.afterContinue)
	}
	method := requestMethod(tc.req)
	for range 1 + len(tc.next) {
		if !readFinalResponse(br, method, &res) {
			return res
		}
		method = http.MethodGet // requests pipelined in the table are GETs
	}
	last := res.statuses[len(res.statuses)-1]
	switch {
	case last == 0 || tc.conn == connClosed || (tc.conn == connAny && !res.lastOpen):
		c.SetReadDeadline(time.Now().Add(closeWait))
		res.extra, err = io.ReadAll(br)
		switch {
		case err == nil || isConnEnd(err):
			res.conn = "closed"
		default:
			res.conn = fmt.Sprintf("open (%v)", err)
		}
	default:
		io.WriteString(c, followup)
		var f clientResult
		ok := readFinalResponse(br, http.MethodGet, &f)
		switch {
		case ok && f.statuses[0] == 0:
			res.conn = "closed before the follow-up"
		case ok && f.bodies[0] == "followup":
			res.conn = "kept"
		default:
			res.conn = fmt.Sprintf("out of step: the follow-up got %v %q (%v, %v)", f.statuses, f.bodies, f.err, f.bodyErr)
		}
	}
	return res
}

// readFinalResponse reads a final response (after any 1xx) into res, and
// reports whether the exchange can go on. A connection closed before the
// response is status 0.
func readFinalResponse(br *bufio.Reader, method string, res *clientResult) bool {
	for {
		// http.ReadResponse reports an EOF before the first byte as
		// io.ErrUnexpectedEOF: look first.
		if _, err := br.Peek(1); err != nil {
			if isConnEnd(err) {
				res.statuses, res.bodies = append(res.statuses, 0), append(res.bodies, "")
				res.conn = "closed"
				return true
			}
			res.err = fmt.Errorf("waiting for a response: %w", err)
			return false
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			res.err = fmt.Errorf("reading a response: %w", err)
			return false
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			res.interim = append(res.interim, resp.StatusCode)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		res.statuses, res.bodies = append(res.statuses, resp.StatusCode), append(res.bodies, string(body))
		res.lastOpen = !resp.Close
		if err != nil {
			res.bodyErr = err
			return false
		}
		return true
	}
}

// checkClient checks what the client read against tc.
func checkClient(t *testing.T, tc *conformanceCase, res *clientResult) {
	t.Helper()
	first := -1
	if len(res.statuses) > 0 {
		first = res.statuses[0]
	}
	switch {
	case tc.respTruncated:
		// Cut off: no response, a 502, or the status with a body that
		// ends with the connection.
		switch {
		case res.err != nil:
			t.Errorf("client: %v; want the response cut off", res.err)
		case first == tc.status && res.bodyErr != nil:
			if !isConnEnd(res.bodyErr) && !errors.Is(res.bodyErr, io.ErrUnexpectedEOF) {
				t.Errorf("response body: %v; want it to end with the connection", res.bodyErr)
			}
		case first == 0 || first == http.StatusBadGateway:
			if res.conn != "closed" || len(res.extra) > 0 {
				t.Errorf("connection: %s, %q after the response; want closed", res.conn, res.extra)
			}
		default:
			t.Errorf("response: %v, body %q; want it cut off: no response, a 502, or %d with a truncated body", res.statuses, res.bodies, tc.status)
		}
	case res.err != nil:
		t.Errorf("client: %v (statuses so far %v); want %d", res.err, res.statuses, tc.status)
		return
	case res.bodyErr != nil:
		t.Errorf("response %v: reading the body: %v", res.statuses, res.bodyErr)
		return
	default:
		if want := append([]int{tc.status}, tc.next...); !slices.Equal(res.statuses, want) {
			t.Errorf("statuses %v; want %v", res.statuses, want)
		}
		if tc.respBody != "" && len(res.bodies) > 0 && res.bodies[0] != tc.respBody {
			t.Errorf("response body %q; want %q", res.bodies[0], tc.respBody)
		}
		switch {
		case len(res.extra) > 0:
			t.Errorf("bytes after the last response: %q", res.extra)
		case tc.conn == connClosed && res.conn != "closed":
			t.Errorf("connection: %s; want closed", res.conn)
		case tc.conn == connKept && res.conn != "kept":
			t.Errorf("connection: %s; want it to serve a follow-up", res.conn)
		case tc.conn == connAny && strings.HasPrefix(res.conn, "open"):
			t.Errorf("connection: %s; the response announced Connection: close", res.conn)
		case tc.conn == connAny && strings.HasPrefix(res.conn, "out of step"):
			t.Errorf("connection: %s", res.conn)
		}
	}
	if tc.interim != nil && !slices.Equal(res.interim, tc.interim) {
		t.Errorf("interim responses %v; want %v", res.interim, tc.interim)
	}
	for _, s := range tc.notInResponse {
		if bytes.Contains(res.raw.Bytes(), []byte(s)) {
			t.Errorf("the client received %q: %q", s, res.raw.Bytes())
		}
	}
}

// checkBackend checks what one backend saw against want, the request
// names; truncated allows a cut-off body instead (see conformanceCase).
func checkBackend(t *testing.T, which string, tc *conformanceCase, want []string, rec backendRecord, truncated bool) {
	t.Helper()
	for _, err := range rec.parseErrs {
		t.Errorf("%s could not parse what it received: %v", which, err)
	}
	got := rec.names()
	truncatedOK := truncated && (len(got) == 0 ||
		(slices.Equal(got, want) && rec.requests[len(rec.requests)-1].BodyErr != nil))
	switch {
	case truncatedOK:
	case truncated:
		t.Errorf("%s saw %q (last body error: %v); want nothing, or %q with the last body cut short", which, got, lastBodyErr(rec), want)
	case !slices.Equal(got, want):
		t.Errorf("%s saw %q; want %q", which, got, want)
	default:
		for _, r := range rec.requests {
			if r.BodyErr != nil {
				t.Errorf("%s: %s body cut short: %v", which, r.name(), r.BodyErr)
			}
		}
	}
	for i, raw := range rec.raws {
		if err := cleanLines(raw); err != nil {
			t.Errorf("%s connection %d: %v in %q", which, i, err, raw)
		}
	}
}

// checkForwarded checks tc's expectations on the bytes the backends
// received and on the first request one of them parsed (the case's own
// backend first).
func checkForwarded(t *testing.T, tc *conformanceCase, recs []backendRecord) {
	t.Helper()
	var first *recordedRequest
	for _, rec := range recs {
		for _, raw := range rec.raws {
			for _, s := range tc.notInRaw {
				if strings.Contains(raw, s) {
					t.Errorf("a backend received %q: %q", s, raw)
				}
			}
		}
		if first == nil && len(rec.requests) > 0 {
			first = rec.requests[0]
		}
	}
	if first == nil {
		return
	}
	if tc.reqBody != "" && string(first.Body) != tc.reqBody {
		t.Errorf("backend: %s body %q; want %q", first.name(), first.Body, tc.reqBody)
	}
	fields := first.fields()
	for name, want := range tc.hdr {
		if got := fields.Values(name); !slices.Equal(got, want) {
			if want == nil {
				t.Errorf("backend: %s has %s %q; want none", first.name(), name, got)
			} else {
				t.Errorf("backend: %s has %s %q; want %q", first.name(), name, got, want)
			}
		}
	}
}

func lastBodyErr(rec backendRecord) error {
	if len(rec.requests) == 0 {
		return nil
	}
	return rec.requests[len(rec.requests)-1].BodyErr
}

// cleanLines checks what the proxy sent upstream for bytes it must never
// forward: a NUL, a CR not followed by LF, an LF not preceded by CR. (The
// cases send no such byte in bodies, so any is the proxy's.)
func cleanLines(raw string) error {
	for i := 0; i < len(raw); i++ {
		switch {
		case raw[i] == 0:
			return fmt.Errorf("NUL at %d", i)
		case raw[i] == '\r' && (i+1 == len(raw) || raw[i+1] != '\n'):
			return fmt.Errorf("bare CR at %d", i)
		case raw[i] == '\n' && (i == 0 || raw[i-1] != '\r'):
			return fmt.Errorf("bare LF at %d", i)
		}
	}
	return nil
}

// TestConformanceUpstreamReuse checks class 3: bytes a backend sends after
// the end of a response never reach another client. Client A's request
// gets a response with stray bytes after it (at once, or 50 ms later);
// then client B, on another connection, must get its own response.
func TestConformanceUpstreamReuse(t *testing.T) {
	const (
		stray  = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil"
		second = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"
	)
	for _, tc := range []struct {
		name, source string
		method       string // client A's
		answer       string // the backend's answer to client A, stray bytes included
		late         string // written 50 ms after answer
		status       int    // client A's
		body         string
	}{
		{
			name:   "second response appended to a Content-Length response",
			source: "Response queue poisoning (Kettle, HTTP/2: The Sequel is Always Worse, 2021); RFC 9112 §6.3",
			method: "GET", answer: okResponse + stray, status: 200, body: "ok",
		},
		{
			name:   "body on a 204",
			source: "RFC 9112 §6.3 (1); RFC 9110 §15.3.5",
			method: "GET", answer: "HTTP/1.1 204 No Content\r\n\r\n" + stray, status: 204,
		},
		{
			name:   "body on a 304",
			source: "RFC 9112 §6.3 (1); RFC 9110 §15.4.5",
			method: "GET", answer: "HTTP/1.1 304 Not Modified\r\n\r\n" + stray, status: 304,
		},
		{
			name:   "body on a HEAD response",
			source: "HEAD desync (Kettle, HTTP/2: The Sequel is Always Worse, 2021); RFC 9112 §6.3 (1)",
			method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(stray)) + "\r\n\r\n" + stray, status: 200,
		},
		{
			name:   "bytes after the last chunk",
			source: "RFC 9112 §7.1; response queue poisoning (Kettle, 2021)",
			method: "GET", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + stray, status: 200, body: "ok",
		},
		{
			name:   "response 50 ms after a Content-Length response",
			source: "docs/security.md (Upstream connection reuse: peek before reuse; nginx closes readable idle upstreams)",
			method: "GET", answer: okResponse, late: stray, status: 200, body: "ok",
		},
		{
			name:   "response 50 ms after a 204",
			source: "docs/security.md (Upstream connection reuse); RFC 9112 §6.3 (1)",
			method: "GET", answer: "HTTP/1.1 204 No Content\r\n\r\n", late: stray, status: 204,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			answered := make(chan struct{})
			be := newRecordingBackend(t, func(n int, req *recordedRequest, w io.Writer) {
				if req.RequestURI != "/first" {
					io.WriteString(w, second)
					return
				}
				io.WriteString(w, tc.answer)
				if tc.late != "" {
					time.Sleep(50 * time.Millisecond) // the scenario: bytes after the response was read
					io.WriteString(w, tc.late)
				}
				close(answered)
			})
			_, web, _ := startProxy(t, webConfig(be.addr()))

			status, body := roundTrip(t, web, tc.method, tc.method+" /first HTTP/1.1\r\nHost: x\r\n\r\n")
			if status != tc.status || body != tc.body {
				t.Errorf("client A: %d %q; want %d %q", status, body, tc.status, tc.body)
			}
			select {
			case <-answered:
			case <-time.After(conformanceTimeout):
				t.Fatal("the backend did not finish its answer to client A")
			}
			resp, body := rawRoundTrip(t, web, "GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
			if resp.StatusCode != 200 || body != "second" {
				t.Errorf("client B on another connection: %d %q; want 200 \"second\" (source: %s)", resp.StatusCode, body, tc.source)
			}
			be.waitRequests(t, 2)
		})
	}
}

// roundTrip sends req (whose method is method) on a new connection to addr
// and returns the status and body of the response.
func roundTrip(t *testing.T, addr, method, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(conformanceTimeout))
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
