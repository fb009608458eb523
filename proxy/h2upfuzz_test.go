package proxy

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/baton-proxy/baton/internal/config"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzH2Backend feeds an HTTP/2 backend's side of a connection (what it
// sends after its SETTINGS) to the client baton speaks to backends with,
// and holds what baton relays from it to a client: a response, or an
// error, never a panic or a wait past the request's deadline; every field
// name a token and every value free of CR, LF and NUL, in the head and
// the trailers (h2relay.go writes them to HTTP/1.1 clients as they are).
func FuzzH2Backend(f *testing.F) {
	frames := func(write func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer)) []byte {
		var out, hb bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		write(fr, hpack.NewEncoder(&hb), &hb)
		return out.Bytes()
	}
	block := func(enc *hpack.Encoder, hb *bytes.Buffer, kv ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	f.Add(frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(enc, hb, ":status", "200", "content-type", "text/plain"), EndHeaders: true})
		fr.WriteData(1, false, []byte("hello"))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(enc, hb, "grpc-status", "0"), EndHeaders: true, EndStream: true})
	}))
	f.Add(frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(enc, hb, ":status", "200", "grpc-status", "14"), EndHeaders: true, EndStream: true})
	}))
	f.Add(frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0})
		fr.WriteWindowUpdate(1, 1<<31-1)
		fr.WriteRSTStream(1, http2.ErrCodeRefusedStream)
		fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add(frames(func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		b := block(enc, hb, ":status", "200", "x-long", string(bytes.Repeat([]byte("a"), 100)))
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:10]})
		fr.WriteContinuation(1, true, b[10:])
		fr.WriteData(1, true, nil)
	}))
	// x/net/http2 logs a backend's protocol errors to the standard
	// logger; a fuzz worker's output is not read while it runs.
	log.SetOutput(io.Discard)
	f.Fuzz(runFuzzH2)
}

func runFuzzH2(t *testing.T, in []byte) {
	bc := config.Backend{IdleTimeout: config.Duration(time.Second), SendTimeout: config.Duration(time.Second)}
	client, server := net.Pipe()
	var wg sync.WaitGroup
	defer func() { client.Close(); server.Close(); wg.Wait() }()
	wg.Go(func() { io.Copy(io.Discard, server) }) // the client's preface, SETTINGS, request
	wg.Go(func() {
		var settings bytes.Buffer
		http2.NewFramer(&settings, nil).WriteSettings()
		server.Write(settings.Bytes())
		server.Write(in)
		server.Close() // all said: the client sees EOF, not a wait
	})
	cc, err := newH2Transport(&bc, 64<<10).NewClientConn(client)
	if err != nil {
		return
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://backend/", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	for _, h := range []http.Header{resp.Header, resp.Trailer} {
		for k, vv := range h {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("field name %q relayed", k)
			}
			for _, v := range vv {
				if !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("field %s: value %q relayed", k, v)
				}
			}
		}
	}
	if resp.StatusCode < 100 || resp.StatusCode > 999 {
		t.Fatalf("status %d relayed", resp.StatusCode)
	}
}
