package h1

import (
	"net"
	"testing"
	"time"
)

// A Reader holds no buffer before its first read and after Release with
// nothing buffered (issue 23: an idle keep-alive connection costs no read
// buffer); with bytes buffered, Release keeps them; the next read takes a
// buffer again and reads on.
func TestReaderRelease(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	rd := NewReader(server, 64<<10)
	if rd.buf != nil {
		t.Fatal("a buffer before the first read")
	}
	write := func(s string) {
		go func() { client.Write([]byte(s)) }()
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	write("GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2")
	for !rd.HasHead() {
		if err := rd.Fill(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rd.ReadRequestHead(); err != nil {
		t.Fatal(err)
	}
	for len(rd.Buffered()) < len("GET /2") {
		if err := rd.Fill(); err != nil {
			t.Fatal(err)
		}
	}
	rd.Release()
	if string(rd.Buffered()) != "GET /2" {
		t.Fatalf("Release dropped buffered bytes: %q", rd.Buffered())
	}
	rd.Consume(len(rd.Buffered()))
	rd.Release()
	if rd.buf != nil || !rd.Small() {
		t.Fatalf("Release with nothing buffered kept %d bytes", len(rd.buf))
	}
	write(" HTTP/1.1\r\nHost: b\r\n\r\n")
	if err := rd.Fill(); err != nil || len(rd.Buffered()) == 0 || len(rd.buf) != ReadBufferSize {
		t.Fatalf("a read after Release: %v, %q, buffer %d", err, rd.Buffered(), len(rd.buf))
	}
}
