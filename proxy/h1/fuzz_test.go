package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The differential fuzzers. For any input, baton either refuses it or
// forwards a message it framed itself; they check that
//
//   - what baton forwards parses in net/http to the same method, target,
//     fields and body, with nothing left over (no second message);
//   - where net/http reads the same input too, it reads the same framing:
//     the same body, ending at the same byte;
//   - where net/http refuses an input that baton accepts, the difference
//     is one of the documented ones (docs/security.md).
//
// Seeds are in testdata/fuzz; `make fuzz` runs them long.

// bytesConn is a Conn over a byte slice, without deadlines.
type bytesConn struct{ *bytes.Reader }

func (bytesConn) SetReadDeadline(time.Time) error { return nil }

// forwarded is what baton makes of an input.
type forwarded struct {
	out      []byte // what it sends on
	body     []byte // the body, decoded
	consumed int    // input bytes the message took
	untilEOF bool   // a response delimited by the end of the input
}

// forwardRequest does with in what the proxy does with a client's bytes.
// A nil result means refused, or incomplete.
func forwardRequest(t *testing.T, in []byte) (*Request, *forwarded) {
	src := bytes.NewReader(in)
	rd := NewReader(bytesConn{src}, 8<<10)
	head, err := rd.ReadRequestHead()
	if err != nil {
		return nil, nil
	}
	// Reading the body reuses the reader's buffer: the request is parsed
	// from a copy, as the proxy does (TestRequestBodyCannotRewriteItsHead).
	head = append([]byte(nil), head...)
	var r Request
	if err := r.Parse(head); err != nil {
		checkRefusal(t, err)
		return nil, nil
	}
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	r.WriteHead(w, Framing{Length: r.ContentLength, Chunked: r.Chunked}, &Forwarded{For: []byte("192.0.2.1"), Proto: "http", Host: "10.0.0.1:80"})
	body, err := copyBody(rd, w, r.ContentLength, r.Chunked, false)
	if err != nil {
		return nil, nil
	}
	w.Flush()
	return &r, &forwarded{out: out.Bytes(), body: body, consumed: len(in) - len(rd.Buffered()) - src.Len()}
}

// copyBody copies a body from rd to w, framed anew, and returns it
// decoded. A body neither chunked nor with a length is read until EOF
// when untilEOF is set, else it is empty.
func copyBody(rd *Reader, w *bufio.Writer, length int64, chunked, untilEOF bool) ([]byte, error) {
	var dec bytes.Buffer
	if chunked {
		// Decode a copy of what is left first, then re-frame the real one.
		left := append(append([]byte(nil), rd.Buffered()...), restOf(rd)...)
		d := Body{Src: NewReader(bytesConn{bytes.NewReader(left)}, 8<<10), Dst: bufWriter{&dec}, Timeout: time.Second}
		derr := d.CopyChunked(true)
		b := Body{Src: rd, Dst: w, Timeout: time.Second}
		if err := b.CopyChunked(false); err != nil || derr != nil {
			if (err == nil) != (derr == nil) {
				return nil, fmt.Errorf("decoding says %v, re-framing %v", derr, err)
			}
			return nil, err
		}
		return dec.Bytes(), nil
	}
	b := Body{Src: rd, Dst: teeWriter{w, &dec}, Timeout: time.Second}
	var err error
	switch {
	case length > 0:
		err = b.CopyN(length)
	case untilEOF:
		err = b.CopyUntilEOF()
	}
	return dec.Bytes(), err
}

// restOf returns what a fuzz reader's source still holds, unread.
func restOf(rd *Reader) []byte {
	bc := rd.c.(bytesConn)
	p := make([]byte, bc.Len())
	bc.ReadAt(p, bc.Size()-int64(bc.Len()))
	return p
}

// teeWriter writes to w and a copy to dec.
type teeWriter struct {
	w   *bufio.Writer
	dec *bytes.Buffer
}

func (t teeWriter) Write(p []byte) (int, error) {
	t.dec.Write(p)
	return t.w.Write(p)
}

func (t teeWriter) Flush() error { return t.w.Flush() }

type bufWriter struct{ *bytes.Buffer }

func (bufWriter) Flush() error { return nil }

// checkRefusal fails unless err is a refusal with a status the proxy
// answers.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("refused with %v, not an *Error", err)
	}
	switch e.Status {
	case 400, 405, 413, 431, 501, 502, 505:
	default:
		t.Fatalf("refused with status %d (%v)", e.Status, err)
	}
}

func FuzzRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, fw := forwardRequest(t, in)
		if fw == nil {
			return
		}
		// What baton forwards, net/http reads as baton meant it.
		br := bufio.NewReader(bytes.NewReader(fw.out))
		got, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("forwarded %q, which net/http refuses: %v", fw.out, err)
		}
		body, err := io.ReadAll(got.Body)
		if err != nil {
			t.Fatalf("forwarded %q: net/http reads the body: %v", fw.out, err)
		}
		if !bytes.Equal(body, fw.body) {
			t.Fatalf("forwarded %q: net/http reads body %q, baton sent %q", fw.out, body, fw.body)
		}
		if br.Buffered() > 0 {
			t.Fatalf("forwarded %q: net/http finds %d more bytes after the request", fw.out, br.Buffered())
		}
		host := string(r.Authority)
		if host == "" {
			host = "10.0.0.1:80"
		}
		if got.Method != string(r.Method) || got.RequestURI != string(r.Path)+string(r.Query) || got.Host != host {
			t.Fatalf("forwarded %q: net/http reads %s %s host %q", fw.out, got.Method, got.RequestURI, got.Host)
		}
		n := 0
		for i := range r.Fields {
			f := &r.Fields[i]
			if f.drop || EqualFold(f.Name, "x-forwarded-for") {
				continue
			}
			n++
			if !contains(got.Header.Values(string(f.Name)), string(f.Value)) {
				t.Fatalf("forwarded %q: net/http lost %s: %s", fw.out, f.Name, f.Value)
			}
		}
		if _, ok := got.Header["Cache-Control"]; ok && r.Field("cache-control") == nil {
			n++ // net/http adds it for a Pragma: no-cache
		}
		if m := countValues(got.Header); m != n {
			t.Fatalf("forwarded %q: net/http reads %d fields, baton sent %d", fw.out, m, n)
		}

		// Where net/http reads the input too, it reads the same framing.
		src := bytes.NewReader(in)
		br = bufio.NewReader(src)
		theirs, err := http.ReadRequest(br)
		if err == nil {
			body, err = io.ReadAll(theirs.Body)
		}
		if err != nil {
			if why := knownRequestDifference(in, err); why == "" {
				t.Fatalf("baton accepts %q, net/http refuses it: %v", in, err)
			}
			return
		}
		consumed := len(in) - br.Buffered() - src.Len()
		if !bytes.Equal(body, fw.body) || consumed != fw.consumed || theirs.Method != string(r.Method) {
			t.Fatalf("%q: net/http reads %s, body %q ending at %d; baton %s, body %q ending at %d",
				in, theirs.Method, body, consumed, r.Method, fw.body, fw.consumed)
		}
		if host := strings.ToLower(theirs.Host); host != strings.ToLower(string(r.Authority)) {
			t.Fatalf("%q: net/http reads host %q, baton %q", in, theirs.Host, r.Authority)
		}
	})
}

// knownRequestDifference says why net/http may refuse an input that baton
// accepts, or "" when that is not a documented difference.
func knownRequestDifference(in []byte, err error) string {
	switch {
	case len(in) > 0 && (in[0] == '\r' || in[0] == '\n'):
		// RFC 9112 §2.2: a server SHOULD ignore at least one empty line
		// before a request-line; net/http does only after a POST.
		return "empty lines before the request line"
	}
	return ""
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// countValues counts the field values of h but the ones baton writes
// itself.
func countValues(h http.Header) int {
	n := 0
	for k, vs := range h {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host":
		default:
			n += len(vs)
		}
	}
	return n
}

// forwardResponse does with in what the proxy does with a backend's bytes
// in answer to a request with the given method: interim responses are
// skipped, the final one is relayed to an HTTP/1.1 client.
func forwardResponse(t *testing.T, method string, in []byte) (*Response, *forwarded) {
	src := bytes.NewReader(in)
	rd := NewReader(bytesConn{src}, 8<<10)
	var r Response
	for {
		head, err := rd.ReadResponseHead()
		if err != nil {
			return nil, nil
		}
		head = append([]byte(nil), head...) // the body's reads reuse the buffer
		if err := r.Parse(head); err != nil {
			checkRefusal(t, err)
			return nil, nil
		}
		if r.Status >= 200 || r.Status == 101 {
			break
		}
	}
	if r.Status == 101 {
		return nil, nil // a tunnel follows
	}
	noBody := r.NoBody([]byte(method))
	out := ResponseOut{Body: Framing{Length: r.ContentLength, Chunked: r.Chunked}}
	untilEOF := !noBody && !r.Chunked && r.ContentLength < 0
	switch {
	case noBody && (method == "HEAD" || r.Status == 304):
		out.Body.Chunked = false
	case noBody:
		out.Body = Framing{Length: -1}
	case untilEOF:
		out.Connection = "close"
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	r.WriteHead(w, &out)
	var body []byte
	if !noBody {
		var err error
		if body, err = copyBody(rd, w, r.ContentLength, r.Chunked, untilEOF); err != nil {
			return nil, nil
		}
	}
	w.Flush()
	return &r, &forwarded{out: buf.Bytes(), body: body, consumed: len(in) - len(rd.Buffered()) - src.Len(), untilEOF: untilEOF}
}

func FuzzResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(false, []byte(s))
		f.Add(true, []byte(s))
	}
	f.Fuzz(func(t *testing.T, head bool, in []byte) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		r, fw := forwardResponse(t, method, in)
		if fw == nil {
			return
		}
		req := &http.Request{Method: method}
		br := bufio.NewReader(bytes.NewReader(fw.out))
		got, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("relayed %q, which net/http refuses: %v", fw.out, err)
		}
		body, err := io.ReadAll(got.Body)
		if err != nil || !bytes.Equal(body, fw.body) {
			t.Fatalf("relayed %q: net/http reads body %q (%v), baton sent %q", fw.out, body, err, fw.body)
		}
		if br.Buffered() > 0 {
			t.Fatalf("relayed %q: net/http finds %d more bytes after the response", fw.out, br.Buffered())
		}
		if got.StatusCode != r.Status {
			t.Fatalf("relayed %q: net/http reads status %d, baton %d", fw.out, got.StatusCode, r.Status)
		}

		src := bytes.NewReader(in)
		br = bufio.NewReader(src)
		var theirs *http.Response
		for {
			theirs, err = http.ReadResponse(br, req)
			if err != nil || theirs.StatusCode >= 200 || theirs.StatusCode == 101 {
				break
			}
		}
		if err == nil {
			body, err = io.ReadAll(theirs.Body)
		}
		if err != nil {
			if why := knownResponseDifference(in, err); why == "" {
				t.Fatalf("baton relays %q, net/http refuses it: %v", in, err)
			}
			return
		}
		consumed := len(in) - br.Buffered() - src.Len()
		if theirs.StatusCode != r.Status || !bytes.Equal(body, fw.body) || (!fw.untilEOF && consumed != fw.consumed) {
			t.Fatalf("%q: net/http reads %d, body %q ending at %d; baton %d, body %q ending at %d",
				in, theirs.StatusCode, body, consumed, r.Status, fw.body, fw.consumed)
		}
	})
}

// knownResponseDifference is knownRequestDifference for responses.
func knownResponseDifference(in []byte, err error) string {
	return ""
}
