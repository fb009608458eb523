// Command grpcload makes unary gRPC calls as a gRPC client sends them
// over HTTP/2 in the clear (POST, content-type application/grpc, TE:
// trailers, one length-prefixed 5-byte message) to a proxy in front of
// the test backend's gRPC echo, from -streams goroutines over -conns
// connections, for -d; a call counts when the echo and grpc-status 0
// came back. It prints calls/s, p50, p99 and the failed calls (the first
// three errors too). With -stream, each goroutine holds one call open for
// all of -d instead (a long-lived bidirectional stream: a message sent,
// its echo awaited, again), and the call counts when every echo and then
// grpc-status 0 came back: it prints messages/s, their p50 and p99, and
// the failed streams. scripts/grpcbench.sh runs it against baton, nginx's
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
	stream := flag.Bool("stream", false, "one long-lived bidirectional call per goroutine")
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
			if *stream {
				n, err := holdStream(c, *addr, msg, end, &mine)
				if err != nil {
					if fail.Add(1) <= 3 {
						fmt.Println("stream:", err)
					}
				}
				ok.Add(int64(n))
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
				return
			}
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
	if *stream {
		fmt.Printf("messages/s %.0f p50 %v p99 %v streams %d failed %d\n", float64(ok.Load())/dur.Seconds(), p(0.5), p(0.99), *streams, fail.Load())
		return
	}
	fmt.Printf("calls/s %.0f p50 %v p99 %v failed %d\n", float64(ok.Load())/dur.Seconds(), p(0.5), p(0.99), fail.Load())
}

// holdStream makes one call that lasts until end: msg sent, its echo read
// back, again; then the request's end, and grpc-status 0 awaited. It
// returns how many messages came back, each one's round trip appended to
// lat, and why the call failed, if it did.
func holdStream(c *http.Client, addr string, msg []byte, end time.Time, lat *[]time.Duration) (int, error) {
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", "http://"+addr+"/echo.Echo/Chat", pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	cl := *c
	cl.Timeout = 0 // the call lasts as long as it is held
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := cl.Do(req)
		got <- result{resp, err}
	}()
	// The request's head goes out with the first message; the response's
	// head comes once the backend answers it.
	start := time.Now()
	if _, err := pw.Write(msg); err != nil {
		pw.CloseWithError(err)
		if r := <-got; r.resp != nil { // the call ends with the pipe: wait for it
			r.resp.Body.Close()
		}
		return 0, err
	}
	r := <-got
	if r.err != nil {
		return 0, r.err
	}
	defer r.resp.Body.Close()
	echo := make([]byte, len(msg))
	n := 0
	for {
		if _, err := io.ReadFull(r.resp.Body, echo); err != nil {
			return n, fmt.Errorf("message %d: %w", n+1, err)
		}
		*lat = append(*lat, time.Since(start))
		n++
		if !time.Now().Before(end) {
			break
		}
		start = time.Now()
		if _, err := pw.Write(msg); err != nil {
			return n, fmt.Errorf("message %d: %w", n+1, err)
		}
	}
	pw.Close()
	if rest, err := io.ReadAll(r.resp.Body); err != nil || len(rest) != 0 {
		return n, fmt.Errorf("the call's end: %d bytes more, %v", len(rest), err)
	}
	if st := r.resp.Trailer.Get("Grpc-Status"); st != "0" {
		return n, fmt.Errorf("grpc-status %q after %d messages", st, n)
	}
	return n, nil
}
