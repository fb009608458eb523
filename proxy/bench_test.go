package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fixedBackend answers every request on a connection with the same small
// response, parsing just enough to find each request's end.
func fixedBackend(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkProxyKeepAlive measures the HTTP/1.1 hot path: parallel
// keep-alive clients, one GET after the other, through the proxy to a
// backend on loopback. allocs/op are the proxy's and the clients'.
func BenchmarkProxyKeepAlive(b *testing.B) {
	be := fixedBackend(b)
	// One connection per client for the whole run: no request limit.
	_, web, _ := startProxy(b, strings.Replace(webConfig(be), "http:\n", "http:\n  maxRequestsPerConnection: 1000000000\n", 1))
	req := []byte("GET /bench HTTP/1.1\r\nHost: bench.example\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", web)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Error(fmt.Errorf("status %d", resp.StatusCode))
				return
			}
		}
	})
}

// BenchmarkIdleConnections measures what an idle keep-alive connection
// costs a worker (issue 23): conns connections each make one request and
// wait (and park); the heap and the goroutine stacks grow by the
// reported bytes per connection (the client's side of the sockets included: a net.Conn and
// its poller entry, a few hundred bytes).
//
//	go test -run '^$' -bench IdleConnections -benchtime 1x ./proxy/
func BenchmarkIdleConnections(b *testing.B) {
	const conns = 2000
	p, web, _ := startProxy(b, webConfig(fixedBackend(b)))
	var before, after runtime.MemStats
	buf := make([]byte, 4096)
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		cs := make([]net.Conn, 0, conns)
		for range conns {
			c, err := net.Dial("tcp", web)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				b.Fatal(err)
			}
			if n, err := c.Read(buf); err != nil || !strings.HasSuffix(string(buf[:n]), "ok\n") {
				b.Fatalf("response: %q %v", buf[:n], err)
			}
			cs = append(cs, c)
		}
		// They park within parkAfter of their request.
		for deadline := time.Now().Add(10 * time.Second); parked(p) < conns && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		b.ReportMetric(float64(parked(p)), "parked")
		runtime.GC()
		runtime.GC() // stacks shrink at a GC: two, as time would
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/conns, "heap-B/conn")
		b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/conns, "stack-B/conn")
		for _, c := range cs {
			c.Close()
		}
	}
}
