package h1

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// parseHead reads one head from in and parses it as a request.
func parseHead(t testing.TB, in string) (*Request, error) {
	t.Helper()
	rd := NewReader(nopDeadline{strings.NewReader(in)}, 64<<10)
	head, err := rd.ReadRequestHead()
	if err != nil {
		return nil, err
	}
	var r Request
	return &r, r.Parse(head)
}

// nopDeadline is a Conn without deadlines.
type nopDeadline struct{ *strings.Reader }

func (nopDeadline) SetReadDeadline(time.Time) error { return nil }

// TestRequestRules checks each rule of docs/security.md on request heads:
// the status a refused head gets, or what an accepted one means.
func TestRequestRules(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		in           string
		status       int // 0: accepted
	}{
		{"plain GET", "RFC 9112 §3", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0},
		{"two spaces in request line", "RFC 9112 §3", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"tab in request line", "RFC 9112 §3", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"trailing space after version", "RFC 9112 §3", "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400},
		{"method not a token", "RFC 9110 §9.1", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"CONNECT", "RFC 9110 §9.3.6: baton is no forward proxy", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", 405},
		{"TRACE", "cross-site tracing (Grossman 2003); nginx answers 405", "TRACE / HTTP/1.1\r\nHost: a\r\n\r\n", 405},
		{"HTTP/1.0", "RFC 9112 §2.3", "GET / HTTP/1.0\r\n\r\n", 0},
		{"HTTP/1.2", "RFC 9110 §6.2 (served as HTTP/1.1)", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 0},
		{"HTTP/0.9 line", "RFC 9110 §15.6.6", "GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505},
		{"HTTP/2.0", "RFC 9110 §15.6.6", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"lower-case version", "RFC 9112 §2.3: HTTP-name is case-sensitive", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
		{"version with two digits", "RFC 9112 §2.3", "GET / HTTP/1.10\r\nHost: a\r\n\r\n", 400},
		{"no version", "RFC 9112 §3 (HTTP/0.9 is gone)", "GET /\r\nHost: a\r\n\r\n", 400},

		{"NUL in target", "RFC 9112 §3.2", "GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"bare CR in target", "RFC 9112 §2.2", "GET /a\rb HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"DEL in target", "RFC 9112 §3.2", "GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"fragment in target", "RFC 9112 §3.2.1; RFC 3986 §3.5", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"obs-text in target", "RFC 9112 §3.2 (as nginx and net/http)", "GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 0},
		{"asterisk with OPTIONS", "RFC 9112 §3.2.4", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", 0},
		{"asterisk with GET", "RFC 9112 §3.2.4", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"authority-form with GET", "RFC 9112 §3.2.3", "GET a:80 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"absolute-form", "RFC 9112 §3.2.2", "GET http://b/x HTTP/1.1\r\nHost: a\r\n\r\n", 0},
		{"absolute-form, other scheme", "RFC 9112 §3.2.2", "GET ftp://b/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"absolute-form with userinfo", "RFC 9110 §4.2.4", "GET http://u@b/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"absolute-form without host", "RFC 9110 §4.2.1", "GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"bad escape", "RFC 3986 §2.1", "GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"short escape", "RFC 3986 §2.1", "GET /%4 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"escaped NUL", "nginx refuses %00 (ngx_http_parse_complex_uri)", "GET /a%00.php HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"above the root", "RFC 3986 §5.2.4; nginx answers 400", "GET /../etc/passwd HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"encoded dots above the root", "RFC 3986 §6.2.2.2", "GET /%2e%2e/x HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"dots behind %2F", "path confusion (Orange Tsai, Black Hat 2018)", "GET /public%2F..%2Fadmin HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"dots as a path parameter", "Tomcat/Jetty '..;' (Orange Tsai, Black Hat 2018)", "GET /public/..;/admin HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"dots behind backslash", "path confusion (Orange Tsai, Black Hat 2018)", "GET /public\\..\\admin HTTP/1.1\r\nHost: a\r\n\r\n", 400},

		{"bare LF line ends", "RFC 9112 §2.2 (MAY); nginx accepts", "GET / HTTP/1.1\nHost: a\nX: 1\n\n", 0},
		{"bare CR in value", "RFC 9112 §2.2; RFC 9110 §5.5", "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400},
		{"bare CR ending a line", "RFC 9112 §2.2", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\r\n\r\n", 400},
		{"NUL in value", "RFC 9110 §5.5", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", 400},
		{"other CTL in value", "RFC 9110 §5.5", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x0bb\r\n\r\n", 400},
		{"DEL in value", "RFC 9110 §5.5", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n", 400},
		{"obs-text in value", "RFC 9110 §5.5", "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n", 0},
		{"space before colon", "RFC 9112 §5.1", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
		{"field name not a token", "RFC 9110 §5.1", "GET / HTTP/1.1\r\nHost: a\r\nX(y): 1\r\n\r\n", 400},
		{"empty field name", "RFC 9110 §5.1", "GET / HTTP/1.1\r\nHost: a\r\n: 1\r\n\r\n", 400},
		{"no colon", "RFC 9112 §5", "GET / HTTP/1.1\r\nHost: a\r\nX\r\n\r\n", 400},
		{"obs-fold", "RFC 9112 §5.2", "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", 400},
		{"whitespace before first field", "RFC 9112 §2.2", "GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400},

		{"no Host in HTTP/1.1", "RFC 9112 §3.2", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "RFC 9112 §3.2", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"Host with a path", "RFC 9112 §3.2; RFC 3986 §3.2.2", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400},
		{"Host with userinfo", "RFC 3986 §3.2.2", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", 400},
		{"Host with a space", "RFC 3986 §3.2.2", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"Host with a bad port", "RFC 3986 §3.2.3", "GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", 400},
		{"empty Host", "RFC 9110 §4.2.1 (http URIs have an authority); nginx answers 400", "GET / HTTP/1.1\r\nHost:\r\n\r\n", 400},
		{"IPv6 Host", "RFC 3986 §3.2.2", "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", 0},
		{"bad IP literal", "RFC 3986 §3.2.2", "GET / HTTP/1.1\r\nHost: [1]\r\n\r\n", 400},
		{"percent-encoded Host", "RFC 3986 §3.2.2 (refused: routes match names)", "GET / HTTP/1.1\r\nHost: a%41b\r\n\r\n", 400},

		{"CL and TE", "RFC 9112 §6.1; CL.TE (Kettle, PortSwigger 2019)", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"TE and CL", "RFC 9112 §6.1; TE.CL (Kettle, PortSwigger 2019)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400},
		{"two CLs, same value", "RFC 9110 §8.6; nginx refuses duplicates", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", 400},
		{"two CLs", "RFC 9110 §8.6 (CL.CL)", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
		{"CL list", "RFC 9110 §8.6", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\n", 400},
		{"CL with sign", "RFC 9110 §8.6", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\n", 400},
		{"CL in hex", "RFC 9110 §8.6", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\n", 400},
		{"CL with inner space", "RFC 9110 §8.6", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n\r\n", 400},
		{"CL too large", "RFC 9110 §8.6 (overflow)", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n", 400},
		{"TE chunked", "RFC 9112 §7.1", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", 0},
		{"TE Chunked", "RFC 9112 §7: codings are case-insensitive", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n", 0},
		{"TE xchunked", "defparam/smuggler TE mutations", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", 400},
		{"TE chunked, identity", "RFC 9112 §6.3 (4)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400},
		{"TE gzip, chunked", "RFC 9112 §6.1 (501); nginx answers 501", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
		{"TE chunked, chunked", "RFC 9112 §7.1 (chunked MUST NOT be applied twice)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400},
		{"TE twice", "defparam/smuggler; nginx refuses duplicates", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"TE with VT", "defparam/smuggler (vertical tab)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\x0bchunked\r\n\r\n", 400},
		{"TE name with space", "defparam/smuggler", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n", 400},
		{"TE in HTTP/1.0", "RFC 9112 §6.1", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
		{"TE with an empty element", "FuzzRequest finding; nginx and net/http answer 501 too", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked\r\n\r\n", 501},
		{"TE with a trailing empty element", "RFC 9112 §6.3 (4)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked,\r\n\r\n", 400},
		{"TE empty", "RFC 9112 §6.3 (4)", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 400},

		{"16 Connection names", "issue 7 class 5 (linear filtering)", "GET / HTTP/1.1\r\nHost: a\r\nConnection: " + names(16) + "\r\n\r\n", 0},
		{"17 Connection names", "issue 7 class 5 (linear filtering)", "GET / HTTP/1.1\r\nHost: a\r\nConnection: " + names(17) + "\r\n\r\n", 400},
		{"100 fields", "RFC 6585 §5", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: 1\r\n", 99) + "\r\n", 0},
		{"101 fields", "RFC 6585 §5", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X: 1\r\n", 100) + "\r\n", 431},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseHead(t, tc.in)
			var e *Error
			switch {
			case tc.status == 0 && err != nil:
				t.Fatalf("%q: %v, want accepted (%s)", tc.in, err, tc.source)
			case tc.status != 0 && !errors.As(err, &e):
				t.Fatalf("%q: %v, want %d (%s)", tc.in, err, tc.status, tc.source)
			case tc.status != 0 && e.Status != tc.status:
				t.Fatalf("%q: %d (%v), want %d (%s)", tc.in, e.Status, err, tc.status, tc.source)
			}
		})
	}
}

func names(n int) string {
	var s []string
	for i := range n {
		s = append(s, "x-"+string(rune('a'+i)))
	}
	return strings.Join(s, ", ")
}

// TestRequestMeaning checks what accepted heads mean: the framing, the
// authority and path routes see, and what is forwarded.
func TestRequestMeaning(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		in           string
		authority    string
		path         string
		length       int64
		chunked      bool
		close        bool
		trusted      bool   // the client is a trusted proxy
		forward      string // the head as forwarded, from its request line
	}{
		{
			name: "fields forwarded, hop-by-hop dropped", source: "RFC 9110 §7.6.1",
			in:        "GET /a?b=1 HTTP/1.1\r\nHost: Example.COM:80\r\nX-A: 1\r\nConnection: keep-alive, X-B\r\nX-B: 2\r\nKeep-Alive: 5\r\nTE: trailers\r\nProxy-Connection: x\r\n\r\n",
			authority: "Example.COM:80", path: "/a", length: -1,
			forward: "GET /a?b=1 HTTP/1.1\r\nHost: Example.COM:80\r\nX-A: 1\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: Example.COM:80\r\n\r\n",
		},
		{
			name: "Connection cannot remove framing or Host", source: "issue 7 class 1; hop-by-hop abuse (Davison 2019)",
			in:        "POST / HTTP/1.1\r\nHost: a\r\nConnection: Content-Length, Host, Transfer-Encoding\r\nContent-Length: 5\r\n\r\n",
			authority: "a", path: "/", length: 5,
			forward: "POST / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\nContent-Length: 5\r\n\r\n",
		},
		{
			name: "bare LF normalised to CRLF", source: "RFC 9112 §2.2; issue 7 class 2",
			in:        "GET / HTTP/1.1\nHost: a\nX: a\nX-Injected: b\n\n",
			authority: "a", path: "/", length: -1,
			forward: "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\nX-Injected: b\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\n\r\n",
		},
		{
			name: "absolute-form: the target's authority wins", source: "RFC 9112 §3.2.2; issue 7 class 4",
			in:        "GET http://admin.internal/public/x?q HTTP/1.1\r\nHost: public.example\r\n\r\n",
			authority: "admin.internal", path: "/public/x", length: -1,
			forward: "GET /public/x?q HTTP/1.1\r\nHost: admin.internal\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: admin.internal\r\n\r\n",
		},
		{
			name: "dot-segments removed", source: "RFC 3986 §5.2.4; issue 7 class 4",
			in:        "GET /public/../admin HTTP/1.1\r\nHost: a\r\n\r\n",
			authority: "a", path: "/admin", length: -1,
			forward: "GET /admin HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\n\r\n",
		},
		{
			name: "an untrusted client's X-Forwarded-* replaced", source: "X-Forwarded-For spoofing; Envoy use_remote_address",
			in:        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 10.0.0.2\r\n\r\n",
			authority: "a", path: "/", length: -1,
			forward: "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\n\r\n",
		},
		{
			name: "a trusted proxy's X-Forwarded-* kept, the client appended", source: "nginx $proxy_add_x_forwarded_for; trustedProxies",
			in:        "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Host: shop.example\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 10.0.0.2\r\n\r\n",
			authority: "a", path: "/", length: -1, trusted: true,
			forward: "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2, 192.0.2.1\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: shop.example\r\n\r\n",
		},
		{
			name: "chunked", source: "RFC 9112 §7.1",
			in:        "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
			authority: "a", path: "/", length: -1, chunked: true,
			forward: "POST / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\nTransfer-Encoding: chunked\r\n\r\n",
		},
		{
			name: "raw non-ASCII forwarded percent-encoded", source: "RFC 3986 §2.1; Http11Probe MAL-NON-ASCII-URL",
			in:        "GET /caf\xc3\xa9?q=\xff HTTP/1.1\r\nHost: a\r\n\r\n",
			authority: "a", path: "/caf%C3%A9", length: -1,
			forward: "GET /caf%C3%A9?q=%FF HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\n\r\n",
		},
		{
			name: "names with underscores dropped", source: "nginx underscores_in_headers off; CGI maps X_Forwarded_For to X-Forwarded-For",
			in:        "GET / HTTP/1.1\r\nHost: a\r\nX_Forwarded_For: 6.6.6.6\r\nTransfer_Encoding: chunked\r\nX-Ok: 1\r\n\r\n",
			authority: "a", path: "/", length: -1,
			forward: "GET / HTTP/1.1\r\nHost: a\r\nX-Ok: 1\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\n\r\n",
		},
		{
			name: "HTTP/1.0 closes; no Host", source: "RFC 9112 §9.3",
			in:   "GET / HTTP/1.0\r\n\r\n",
			path: "/", length: -1, close: true,
			forward: "GET / HTTP/1.1\r\nHost: 10.0.0.1:80\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\n\r\n",
		},
		{
			name: "Expect answered here, not forwarded", source: "RFC 9110 §10.1.1",
			in:        "PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n",
			authority: "a", path: "/", length: 0,
			forward: "PUT / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 192.0.2.1\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: a\r\nContent-Length: 0\r\n\r\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := parseHead(t, tc.in)
			if err != nil {
				t.Fatalf("%v (%s)", err, tc.source)
			}
			if string(r.Authority) != tc.authority || string(r.Path) != tc.path || r.ContentLength != tc.length || r.Chunked != tc.chunked || r.Close != tc.close {
				t.Errorf("authority %q path %q length %d chunked %t close %t, want %q %q %d %t %t (%s)",
					r.Authority, r.Path, r.ContentLength, r.Chunked, r.Close, tc.authority, tc.path, tc.length, tc.chunked, tc.close, tc.source)
			}
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			r.WriteHead(w, Framing{Length: r.ContentLength, Chunked: r.Chunked}, &Forwarded{For: []byte("192.0.2.1"), Proto: "http", Host: "10.0.0.1:80", Trusted: tc.trusted})
			w.Flush()
			if buf.String() != tc.forward {
				t.Errorf("forwarded\n%q\nwant\n%q", buf.String(), tc.forward)
			}
		})
	}
}

func TestNormalizePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"/a/b", "/a/b"},
		{"/a/./b", "/a/b"},
		{"/a/../b", "/b"},
		{"/a/b/..", "/a/"},
		{"/a/b/.", "/a/b/"},
		{"/a/b/../../c", "/c"},
		{"/a//../b", "/a/b"},
		{"/a//b", "/a//b"},
		{"/.", "/"},
		{"/a/..", "/"},
		{"/%7Euser/%2e%2E/x", "/x"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%2Fb/c", "/a%2Fb/c"},
		{"/%41%62", "/Ab"},
		{"/a%20b", "/a%20b"},
		{"/.hidden/..x/x..", "/.hidden/..x/x.."},
		{"/a\\b", "/a\\b"},
		{"/..", "error"},
		{"/a/../..", "error"},
		{"/a/%2e%2e/%2E%2E/b", "error"},
		{"/a%2F..%2Fb", "error"},
		{"/a/..%2Fb", "error"},
		{"/a/%2F..", "error"},
		{"/a%5C..%5Cb", "error"},
		{"/a\\..\\b", "error"},
		{"/a\\.\\b", "error"},
		{"/a/..;/b", "error"},
		{"/a/.;x/b", "error"},
		{"/a;v=1/b", "/a;v=1/b"},
		{"/caf\xc3\xa9", "/caf%C3%A9"},
		{"/a%00", "error"},
		{"/a%g0", "error"},
		{"/a%", "error"},
	} {
		got, err := NormalizePath(nil, []byte(tc.in))
		s := string(got)
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("NormalizePath(%q) = %q (%v), want %q", tc.in, s, err, tc.want)
		}
	}
}

func TestHeadEnd(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"GET / HTTP/1.1\r\n\r\n", 18},
		{"GET / HTTP/1.1\n\n", 16},
		{"GET / HTTP/1.1\n\r\n", 17},
		{"GET / HTTP/1.1\r\nA: b\r\n\r\nrest", 24},
		{"GET / HTTP/1.1\r\nA: b\r\n", 0},
		{"GET / HTTP/1.1\r\nA: b\r\n\r", 0},
		{"GET / HTTP/1.1\r\n\rX\r\n\r\n", 22},
	} {
		if got, _ := headEnd([]byte(tc.in), 0); got != tc.want {
			t.Errorf("headEnd(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
