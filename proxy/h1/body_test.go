package h1

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// copyChunked copies the chunked body in to a buffer, re-framed or
// decoded, and returns it with what is left of in after the body.
func copyChunked(in string, decode bool, limit int64) (out, rest string, err error) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	rd := NewReader(nopDeadline{strings.NewReader(in)}, 1<<10)
	b := Body{Src: rd, Dst: w, Timeout: time.Second, Limit: limit}
	err = b.CopyChunked(decode)
	w.Flush()
	return buf.String(), string(rd.Buffered()), err
}

func TestChunkedRules(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		in           string
		out, rest    string // re-framed body, what is left after it
		status       int    // 0: accepted
	}{
		{"two chunks", "RFC 9112 §7.1", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nNEXT", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "NEXT", 0},
		{"upper-case hex, leading zeros", "RFC 9112 §7.1", "00A\r\n0123456789\r\n0\r\n\r\n", "a\r\n0123456789\r\n0\r\n\r\n", "", 0},
		{"extensions dropped", "RFC 9112 §7.1.1", "5;a=b ; c=\"d\\\"e\";f\r\nhello\r\n0;x\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "", 0},
		{"trailers dropped", "RFC 9110 §6.5.1; nginx drops them", "1\r\na\r\n0\r\nX-T: 1\r\nY: 2\r\n\r\nNEXT", "1\r\na\r\n0\r\n\r\n", "NEXT", 0},
		{"bare LF after size", "chunk line terminators (HTTP Garden; Kettle 2025 'chunked TERM.EXT')", "5\nhello\r\n0\r\n\r\n", "", "", 400},
		{"bare LF after data", "RFC 9112 §7.1", "5\r\nhello\n0\r\n\r\n", "5\r\nhello\r\n", "", 400},
		{"data longer than its size", "TE.0 / chunk size smuggling (Kettle 2019)", "3\r\nhello\r\n0\r\n\r\n", "3\r\nhel\r\n", "", 400},
		{"bare CR in extension", "issue 7 class 2", "5;a\rb\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"NUL in extension", "issue 7 class 2", "5;a=\x00\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"LF in quoted extension", "HTTP Garden (quoted-string chunk-ext)", "5;a=\"x\ny\"\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"0x prefix", "defparam/smuggler", "0x5\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"negative", "RFC 9112 §7.1", "-5\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"space before size", "RFC 9112 §7.1", " 5\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"space after size", "RFC 9112 §7.1 (BWS only before ';')", "5 \r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"16 hex digits", "integer overflow (CVE-2015-3183 class)", "0000000000000005\r\nhello\r\n0\r\n\r\n", "", "", 400},
		{"bare CR in trailer", "issue 7 class 2", "0\r\nX: a\rb\r\n\r\n", "", "", 400},
		{"trailer without colon", "RFC 9112 §7.1.2", "0\r\nX\r\n\r\n", "", "", 400},
		{"bare LF ending the trailers", "RFC 9112 §7.1", "0\r\n\n", "", "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, rest, err := copyChunked(tc.in, false, 0)
			var e *Error
			switch {
			case tc.status == 0 && err != nil:
				t.Fatalf("%v (%s)", err, tc.source)
			case tc.status != 0 && (!errors.As(err, &e) || e.Status != tc.status):
				t.Fatalf("%v, want %d (%s)", err, tc.status, tc.source)
			}
			if out != tc.out || (tc.status == 0 && rest != tc.rest) {
				t.Errorf("out %q rest %q, want %q %q", out, rest, tc.out, tc.rest)
			}
		})
	}
}

func TestChunkedDecode(t *testing.T) {
	out, rest, err := copyChunked("5\r\nhello\r\n6\r\n world\r\n0\r\nT: 1\r\n\r\nNEXT", true, 0)
	if err != nil || out != "hello world" || rest != "NEXT" {
		t.Fatalf("%q %q %v", out, rest, err)
	}
}

// TestChunkedLimitResumes stops a copy at its limit and goes on with a
// larger one: the output is complete chunks, then the rest.
func TestChunkedLimitResumes(t *testing.T) {
	in := "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	b := Body{Src: NewReader(nopDeadline{strings.NewReader(in)}, 1<<10), Dst: w, Timeout: time.Second, Limit: 7}
	if err := b.CopyChunked(true); err != ErrBodyTooLarge {
		t.Fatalf("first copy: %v, want ErrBodyTooLarge", err)
	}
	w.Flush()
	if buf.String() != "hello w" || b.Written != 7 {
		t.Fatalf("decoded up to the limit: %q (%d)", buf.String(), b.Written)
	}
	buf.Reset()
	b.Limit = 0
	if err := b.CopyChunked(false); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if buf.String() != "4\r\norld\r\n0\r\n\r\n" || b.Written != 11 {
		t.Fatalf("the rest: %q (%d)", buf.String(), b.Written)
	}
}

func TestCopyNLimit(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	b := Body{Src: NewReader(nopDeadline{strings.NewReader("hello")}, 1<<10), Dst: w, Timeout: time.Second, Limit: 4}
	if err := b.CopyN(5); err != ErrBodyTooLarge || buf.Len() != 0 {
		t.Fatalf("%v, %q: want ErrBodyTooLarge before any byte", err, buf.String())
	}
}
