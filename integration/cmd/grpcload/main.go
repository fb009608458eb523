// Command grpcload makes unary gRPC calls as a gRPC client sends them
// over HTTP/2 in the clear (POST, content-type application/grpc, TE:
// trailers, one length-prefixed 5-byte message) to a proxy in front of
// the test backend's gRPC echo, from -streams goroutines over -conns
// connections, for -d; a call counts when the echo and grpc-status 0
// came back. It prints calls/s, p50, p99 and the failed calls (the first
// three errors too). scripts/grpcbench.sh runs it against baton, nginx's
// grpc_pass and HAProxy.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

func main() {
	addr := flag.String("addr", "", "h2c address")
	streams := flag.Int("streams", 32, "concurrent calls")
	conns := flag.Int("conns", 1, "connections")
	dur := flag.Duration("d", 10*time.Second, "duration")
	plain := flag.Bool("plain", false, "plain POST, not gRPC")
	flag.Parse()
	var clients []*http.Client
	for range *conns {
		tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, n, a string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, n, a)
		}}
		clients = append(clients, &http.Client{Transport: tr, Timeout: 5 * time.Second})
	}
	msg := []byte{0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'} // uncompressed, 5 bytes
	var ok, fail atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	end := time.Now().Add(*dur)
	var wg sync.WaitGroup
	for i := range *streams {
		c := clients[i%len(clients)]
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				start := time.Now()
				req, _ := http.NewRequest("POST", "http://"+*addr+"/echo.Echo/Call", bytes.NewReader(msg))
				if !*plain {
					req.Header.Set("Content-Type", "application/grpc")
				}
				req.Header.Set("TE", "trailers")
				resp, err := c.Do(req)
				if err != nil {
					if fail.Add(1) <= 3 {
						fmt.Println("error:", err)
					}
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				st := resp.Trailer.Get("Grpc-Status")
				if st == "" {
					st = resp.Header.Get("Grpc-Status")
				}
				if *plain {
					st = "0"
				}
				if st != "0" || len(body) != len(msg) {
					if fail.Add(1) <= 3 {
						fmt.Println("bad:", resp.StatusCode, st, len(body), resp.Header)
					}
					continue
				}
				ok.Add(1)
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(q*float64(len(lat)-1))]
	}
	fmt.Printf("calls/s %.0f p50 %v p99 %v failed %d\n", float64(ok.Load())/dur.Seconds(), p(0.5), p(0.99), fail.Load())
}
