package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"

	"github.com/baton-proxy/baton/proxy/h1"
	"github.com/baton-proxy/baton/proxy/h2"
	"golang.org/x/net/http2/hpack"
)

// h2Fields decodes a fuzzer's input as header fields: a length byte and
// the name, a length byte and the value, again and again.
func h2Fields(in []byte) []hpack.HeaderField {
	var fs []hpack.HeaderField
	next := func() (string, bool) {
		if len(in) == 0 {
			return "", false
		}
		n := min(int(in[0]), len(in)-1)
		s := string(in[1 : 1+n])
		in = in[1+n:]
		return s, true
	}
	for {
		name, ok := next()
		if !ok {
			return fs
		}
		value, _ := next()
		fs = append(fs, hpack.HeaderField{Name: name, Value: value})
	}
}

// encodeH2Fields is h2Fields' inverse, for the seeds.
func encodeH2Fields(pairs ...string) []byte {
	var b []byte
	for _, s := range pairs {
		b = append(append(b, byte(len(s))), s...)
	}
	return b
}

// h2dropped are the fields that do not reach the upstream as they came:
// written by baton (Host, Cookie joined, framing, X-Forwarded-* from an
// untrusted client) or hop-by-hop.
var h2dropped = []string{"host", "cookie", "content-length", "te", "trailer", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"}

// FuzzH2Request runs HTTP/2 request heads through what baton does with
// them: h2.ParseRequest, the HTTP/1.1 head (appendH1Head), package h1's
// parser and the head it forwards. Differentially against net/http: what
// baton forwards, http.ReadRequest reads as one request with the same
// method, target and authority, every field the client sent that baton
// passes on, framing for the body there is, and nothing else but baton's
// X-Forwarded-* (no field or request injected).
func FuzzH2Request(f *testing.F) {
	get := []string{":method", "GET", ":scheme", "https", ":authority", "a.example", ":path", "/p?q=1"}
	for _, seed := range [][]string{
		get,
		append(slices.Clone(get), "cookie", "a=1", "cookie", "b=2", "user-agent", "x"),
		append(slices.Clone(get), "x-a", "1\r\nx-injected: 2"),
		append(slices.Clone(get), "host", "a.example", "content-length", "3"),
		{":method", "POST", ":scheme", "http", ":path", "/../a/%2e%2e/b", "host", "b.example:8080"},
		{":method", "OPTIONS", ":scheme", "http", ":authority", "a", ":path", "*"},
		append(slices.Clone(get), "x-forwarded-for", "203.0.113.1", "te", "trailers", "trailer", "x"),
	} {
		f.Add(encodeH2Fields(seed...), true)
		f.Add(encodeH2Fields(seed...), false)
	}
	f.Fuzz(func(t *testing.T, in []byte, endStream bool) {
		r, err := h2.ParseRequest(h2Fields(in), endStream)
		if err != nil || r.Path == "" {
			return
		}
		head, err := appendH1Head(nil, &r, !endStream)
		if err != nil {
			return
		}
		var req h1.Request
		if req.Parse(head) != nil {
			return
		}
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		req.WriteHead(bw, h1.Framing{Length: req.ContentLength, Chunked: req.Chunked}, &h1.Forwarded{For: []byte("192.0.2.1"), Proto: "https", Host: "10.0.0.1:80"})
		bw.Flush()
		out := buf.String()
		br := bufio.NewReader(&buf)
		got, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("forwarded %q, which net/http refuses: %v", out, err)
		}
		if br.Buffered() > 0 {
			t.Fatalf("forwarded %q: net/http finds more after the head", out)
		}
		authority := r.Authority
		for _, fl := range r.Fields {
			if fl.Name == "host" && authority == "" {
				authority = fl.Value
			}
		}
		if got.Method != r.Method || got.RequestURI != string(req.Path)+string(req.Query) || got.Host != authority {
			t.Fatalf("forwarded %q: net/http reads %s %s, Host %q", out, got.Method, got.RequestURI, got.Host)
		}
		// Every field passed on is there as it came; nothing else is.
		want := map[string][]string{}
		for _, fl := range r.Fields {
			// Package h1's own rules drop a name with '_' (as nginx)
			// and Expect (baton answers 100-continue itself).
			if !slices.Contains(h2dropped, fl.Name) && !strings.Contains(fl.Name, "_") && fl.Name != "expect" {
				k := textproto.CanonicalMIMEHeaderKey(fl.Name)
				want[k] = append(want[k], fl.Value)
			}
		}
		for k, vs := range got.Header {
			switch k {
			case "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Cookie", "Content-Length":
				continue
			}
			if !slices.Equal(vs, want[k]) {
				t.Fatalf("forwarded %q: net/http reads %s: %q, the client sent %q", out, k, vs, want[k])
			}
			delete(want, k)
		}
		if len(want) > 0 {
			t.Fatalf("forwarded %q: fields lost on the way: %v", out, want)
		}
		if xff := got.Header.Values("X-Forwarded-For"); len(xff) != 1 || xff[0] != "192.0.2.1" {
			t.Fatalf("forwarded %q: X-Forwarded-For %q, the client's chain was not replaced", out, xff)
		}
		var cookies []string
		for _, fl := range r.Fields {
			if fl.Name == "cookie" && fl.Value != "" {
				cookies = append(cookies, fl.Value)
			}
		}
		if c := got.Header.Values("Cookie"); len(cookies) > 0 && (len(c) != 1 || c[0] != strings.Join(cookies, "; ")) {
			t.Fatalf("forwarded %q: Cookie %q from %q", out, c, cookies)
		}
		// The body's framing is baton's, from what the client said.
		switch {
		case endStream:
			if got.ContentLength > 0 || len(got.TransferEncoding) > 0 {
				t.Fatalf("forwarded %q: a body framed for a request without one", out)
			}
		case r.ContentLength >= 0:
			if got.ContentLength != r.ContentLength {
				t.Fatalf("forwarded %q: length %d, the client's %d", out, got.ContentLength, r.ContentLength)
			}
		default:
			if !slices.Equal(got.TransferEncoding, []string{"chunked"}) {
				t.Fatalf("forwarded %q: a body of unknown length not chunked", out)
			}
		}
	})
}
