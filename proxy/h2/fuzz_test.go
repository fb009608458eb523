package h2

import (
	"bytes"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// frames builds client frames for the seeds.
func frames(fn func(fr *http2.Framer, block func(...string) []byte)) []byte {
	var buf, hb bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&hb)
	block := func(fields ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(fields); i += 2 {
			enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	fn(fr, block)
	return buf.Bytes()
}

// FuzzConn feeds a connection arbitrary frames after the preface and a
// SETTINGS frame: whatever comes, the server neither panics nor hangs (it
// ends once the client has gone, its handlers done), a handler only ever
// sees a request that h2.ParseRequest accepts, and however streams are
// reset no more handlers run at once than MaxStreams, nor more in all than
// MaxRequests.
func FuzzConn(f *testing.F) {
	get := []string{":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/"}
	post := []string{":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/p", "content-length", "3"}
	for _, seed := range [][]byte{
		frames(func(fr *http2.Framer, b func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b(get...), EndStream: true, EndHeaders: true})
		}),
		frames(func(fr *http2.Framer, b func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b(post...), EndHeaders: true})
			fr.WriteData(1, false, []byte("ab"))
			fr.WriteWindowUpdate(0, 100)
			fr.WriteData(1, true, []byte("c"))
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b(get...), EndStream: true, EndHeaders: true})
			fr.WriteRSTStream(3, http2.ErrCodeCancel)
		}),
		frames(func(fr *http2.Framer, b func(...string) []byte) {
			blk := b(append(get, "x-a", "1", "cookie", "c=1")...)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:4], EndStream: true})
			fr.WriteContinuation(1, true, blk[4:])
			fr.WritePing(false, [8]byte{1})
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
			fr.WritePriority(1, http2.PriorityParam{StreamDep: 3, Weight: 1})
			fr.WriteGoAway(1, http2.ErrCodeNo, nil)
		}),
		frames(func(fr *http2.Framer, b func(...string) []byte) {
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b(post...), EndHeaders: true, PadLength: 5})
			fr.WriteDataPadded(1, false, []byte("abc"), []byte{0, 0})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b("x-trailer", "1"), EndStream: true, EndHeaders: true})
		}),
		// Streams the server resets, each in a way MadeYouReset
		// (CVE-2025-8671) uses: WINDOW_UPDATE 0, DATA after END_STREAM,
		// a body past its length, a stream depending on itself, a window
		// overflow; and the client's own resets (CVE-2023-44487).
		frames(func(fr *http2.Framer, b func(...string) []byte) {
			for id := uint32(1); id < 64; id += 2 {
				switch id % 12 {
				case 1:
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b(post...), EndHeaders: true})
					fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id, []byte{0, 0, 0, 0})
				case 3:
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b(get...), EndStream: true, EndHeaders: true})
					fr.WriteData(id, false, []byte("x"))
				case 5:
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b(post...), EndHeaders: true})
					fr.WriteData(id, true, []byte("abcd"))
				case 7:
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b(post...), EndHeaders: true})
					fr.WritePriority(id, http2.PriorityParam{StreamDep: id})
				case 9:
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b(post...), EndHeaders: true})
					fr.WriteWindowUpdate(id, 1<<31-1)
				case 11:
					fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b(get...), EndStream: true, EndHeaders: true})
					fr.WriteRSTStream(id, http2.ErrCodeCancel)
				}
			}
		}),
	} {
		f.Add(seed)
	}
	const maxStreams, maxRequests = 8, 24
	f.Fuzz(func(t *testing.T, in []byte) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan struct{})
		var running, started atomic.Int32
		go func() {
			defer close(done)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			NewConn(c, Config{MaxStreams: maxStreams, MaxRequests: maxRequests, MaxHeaderListSize: 4096, PrefaceTimeout: 2 * time.Second, HeaderTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second}, func(s *Stream) {
				// However streams are reset, and by whom, no more
				// requests are under way at once than the client was
				// allowed, nor more in all than the connection serves.
				if n := running.Add(1); n > maxStreams {
					t.Errorf("%d handlers at once, past SETTINGS_MAX_CONCURRENT_STREAMS %d", n, maxStreams)
				}
				defer running.Add(-1)
				if n := started.Add(1); n > maxRequests {
					t.Errorf("%d requests on one connection, past MaxRequests %d", n, maxRequests)
				}
				if !s.TooLarge {
					fs := []hpack.HeaderField{{Name: ":method", Value: s.Method}}
					for _, p := range [][2]string{{":scheme", s.Scheme}, {":authority", s.Authority}, {":path", s.Path}} {
						if p[1] != "" {
							fs = append(fs, hpack.HeaderField{Name: p[0], Value: p[1]})
						}
					}
					if _, err := ParseRequest(append(fs, s.Fields...), false); err != nil {
						t.Errorf("a handler got a request ParseRequest refuses (%v): %+v", err, s.Request)
					}
				}
				io.Copy(io.Discard, s)
				s.StartResponse(200)
				s.SendHeaders(false)
				s.Write([]byte("ok"))
				s.End()
			}).Serve()
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, c)
		io.WriteString(c, http2.ClientPreface)
		c.Write(frames(func(fr *http2.Framer, _ func(...string) []byte) { fr.WriteSettings() }))
		c.Write(in)
		c.(*net.TCPConn).CloseWrite() // the server reads all of it, then the end
		defer c.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server did not end after the client went away, with %q", in)
		}
	})
}
