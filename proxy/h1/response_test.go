package h1

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
)

func parseResponseHead(t testing.TB, in string) (*Response, error) {
	t.Helper()
	rd := NewReader(nopDeadline{strings.NewReader(in)}, 64<<10)
	head, err := rd.ReadResponseHead()
	if err != nil {
		return nil, err
	}
	var r Response
	return &r, r.Parse(head)
}

// TestResponseRules: a response that breaks a rule is never relayed (the
// client gets a 502); the accepted ones mean what they say.
func TestResponseRules(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		in           string
		ok           bool
	}{
		{"plain", "RFC 9112 §4", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", true},
		{"no reason", "RFC 9112 §4", "HTTP/1.1 204 \r\n\r\n", true},
		{"no SP after the code", "RFC 9112 §4 (tolerated: nothing to misread)", "HTTP/1.1 204\r\n\r\n", true},
		{"HTTP/1.0", "RFC 9112 §2.3", "HTTP/1.0 200 OK\r\n\r\n", true},
		{"HTTP/2.0", "RFC 9112 §2.3", "HTTP/2.0 200 OK\r\n\r\n", false},
		{"status 600", "RFC 9110 §15", "HTTP/1.1 600 X\r\n\r\n", false},
		{"status 99", "RFC 9110 §15", "HTTP/1.1 099 X\r\n\r\n", false},
		{"CTL in reason", "RFC 9112 §4", "HTTP/1.1 200 O\x00K\r\n\r\n", false},
		{"CL and TE", "RFC 9112 §6.3 (3); issue 7 class 6", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"TE gzip", "RFC 9112 §6.3 (4)", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false},
		{"two different CLs", "RFC 9110 §8.6", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", false},
		{"two equal CLs", "RFC 9110 §8.6 (one length)", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n", true},
		{"bare CR in value", "RFC 9112 §2.2; response splitting", "HTTP/1.1 200 OK\r\nX: a\rSet-Cookie: x\r\n\r\n", false},
		{"NUL in value", "RFC 9110 §5.5", "HTTP/1.1 200 OK\r\nX: a\x00\r\n\r\n", false},
		{"obs-fold", "RFC 9112 §5.2", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", false},
		{"17 Connection names", "issue 7 class 5", "HTTP/1.1 200 OK\r\nConnection: " + names(17) + "\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseResponseHead(t, tc.in)
			var e *Error
			if tc.ok && err != nil {
				t.Fatalf("%v, want accepted (%s)", err, tc.source)
			}
			if !tc.ok && !errors.As(err, &e) {
				t.Fatalf("%v, want refused (%s)", err, tc.source)
			}
		})
	}
}

func TestResponseWriteHead(t *testing.T) {
	r, err := parseResponseHead(t, "HTTP/1.0 200 Fine\r\nContent-Length: 5\r\nConnection: Content-Length, X-Gone\r\nX-Gone: 1\r\nX-Kept: 2\r\nKeep-Alive: timeout=5\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.ContentLength != 5 || !r.Close {
		t.Fatalf("length %d close %t", r.ContentLength, r.Close)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	r.WriteHead(w, &ResponseOut{Body: Framing{Length: 5}, Connection: "close", Extra: []byte("Set-Cookie: a=b\r\n")})
	w.Flush()
	want := "HTTP/1.1 200 Fine\r\nX-Kept: 2\r\nContent-Length: 5\r\nSet-Cookie: a=b\r\nConnection: close\r\n\r\n"
	if buf.String() != want {
		t.Fatalf("got\n%q\nwant\n%q (a backend's Connection: Content-Length must not strip the framing: issue 7 class 1)", buf.String(), want)
	}
}
