package h1

import (
	"bufio"
	"io"
	"strings"
	"testing"
)

// A browser's request head, and the worst head the limits allow: 60 KB in
// 100 fields, with a Connection field naming 16 of them (issue 7 class 5:
// such a head cost 0.9 s of CPU before the limits).
var (
	browserHead = "GET /static/app.js?v=3 HTTP/1.1\r\nHost: shop.example.com\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36\r\n" +
		"Accept: */*\r\nAccept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate, br\r\n" +
		"Referer: https://shop.example.com/cart\r\nCookie: session=0123456789abcdef; theme=dark\r\n" +
		"Connection: keep-alive\r\n\r\n"
	worstHead = func() string {
		var b strings.Builder
		b.WriteString("GET / HTTP/1.1\r\nHost: a\r\nConnection: ")
		for i := range MaxConnectionNames {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("x-" + strings.Repeat("n", 20) + string(rune('a'+i)))
		}
		b.WriteString("\r\n")
		for i := 0; i < MaxFields-2; i++ {
			b.WriteString("x-" + strings.Repeat("n", 20) + string(rune('a'+i%26)) + ": " + strings.Repeat("v", 580) + "\r\n")
		}
		b.WriteString("\r\n")
		return b.String()
	}()
)

func benchmarkParse(b *testing.B, head string) {
	var r Request
	h := []byte(head)
	b.SetBytes(int64(len(h)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Parse(h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseBrowserHead(b *testing.B) { benchmarkParse(b, browserHead) }
func BenchmarkParseWorstHead(b *testing.B)   { benchmarkParse(b, worstHead) }

func BenchmarkWriteHead(b *testing.B) {
	var r Request
	if err := r.Parse([]byte(browserHead)); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(io.Discard, 4096)
	fwd := &Forwarded{For: []byte("192.0.2.1"), Proto: "http"}
	b.ReportAllocs()
	for b.Loop() {
		r.WriteHead(w, Framing{Length: -1}, fwd)
		w.Flush()
	}
}

func BenchmarkParseResponse(b *testing.B) {
	h := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/javascript\r\nContent-Length: 1234\r\nCache-Control: max-age=3600\r\nDate: Tue, 01 Dec 2026 03:00:00 GMT\r\nServer: app\r\n\r\n")
	var r Response
	b.SetBytes(int64(len(h)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Parse(h); err != nil {
			b.Fatal(err)
		}
	}
}
