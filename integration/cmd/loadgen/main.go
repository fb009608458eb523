// Command loadgen runs bounded HTTP and TCP load against a proxy and prints
// a one-line JSON summary: requests, failures by class (as a client that
// never retries sees them), recovered retries, and latency quantiles.
//
//	loadgen -http 127.0.0.1:8080 -keepalive 32 -duration 10s
//
// With -idle N it holds N idle connections instead (one request each,
// HTTP/2 over TLS with -idle-h2; with -tcp instead of -http, TCP streams
// that echo once), prints "ready" once they are open, and
// closes them when its standard input ends: a process holds as many as its
// descriptor limit allows, so make bench spreads 30,000 over several.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/integration/internal/idleconns"
	"github.com/baton-proxy/baton/integration/internal/load"
)

func main() {
	var cfg load.Config
	flag.StringVar(&cfg.HTTPAddr, "http", "", "HTTP address of the proxy")
	flag.StringVar(&cfg.TCPAddr, "tcp", "", "TCP (echo) address of the proxy")
	flag.StringVar(&cfg.Path, "path", "/", "path GET clients request")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to run")
	flag.IntVar(&cfg.KeepAlive, "keepalive", 0, "keep-alive GET clients")
	flag.IntVar(&cfg.NewConn, "newconn", 0, "connection-per-request GET clients")
	flag.IntVar(&cfg.Post, "post", 0, "keep-alive POST clients")
	flag.IntVar(&cfg.PostSize, "post-size", 1024, "POST body bytes")
	flag.IntVar(&cfg.TCPStreams, "tcp-streams", 0, "TCP echo stream clients")
	flag.DurationVar(&cfg.StreamLife, "stream-life", 2*time.Second, "life of one TCP stream")
	flag.DurationVar(&cfg.StreamInterval, "stream-interval", 10*time.Millisecond, "pause between echoes in a stream (negative: none)")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "bound of one request or echo")
	flag.BoolVar(&cfg.RetryIdempotent, "retry", false, "retry a GET that failed on a reused connection before any response byte, once")
	useTLS := flag.Bool("tls", false, "HTTPS to -http (certificates not verified: the load measures the server)")
	resume := flag.Bool("tls-resume", false, "with -tls: keep sessions, so that new connections resume")
	sni := flag.String("sni", "bench.example", "with -tls: the server name sent")
	flag.IntVar(&cfg.H2, "h2", 0, "HTTP/2 GET clients, over -tls, as streams of one connection")
	idle := flag.Int("idle", 0, "hold this many idle connections to -http (one GET each), or to -tcp (one echo each), until standard input ends")
	idleH2 := flag.Bool("idle-h2", false, "with -idle: HTTP/2 over TLS connections")
	idleFrom := flag.String("idle-from", "", "with -idle: the source address (another loopback address: one has some 28,000 ports for one destination)")
	flag.Parse()
	if *idle > 0 {
		var conns []net.Conn
		var err error
		if cfg.HTTPAddr == "" && cfg.TCPAddr != "" {
			conns, err = idleconns.OpenEcho(cfg.TCPAddr, *idleFrom, *idle, cfg.Timeout)
		} else {
			conns, err = idleconns.Open(cfg.HTTPAddr, *idleFrom, *idle, *idleH2, cfg.Timeout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		idleconns.Close(conns)
		return
	}
	if *useTLS {
		// X25519 for every target: nginx's and HAProxy's OpenSSL 3.0
		// has no ML-KEM, which Go would otherwise choose with baton.
		cfg.TLS = &tls.Config{ServerName: *sni, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"},
			CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256}}
		if *resume {
			cfg.TLS.ClientSessionCache = tls.NewLRUClientSessionCache(1024)
		}
	}
	if cfg.H2 > 0 && cfg.TLS == nil {
		fmt.Fprintln(os.Stderr, "loadgen: -h2 needs -tls")
		os.Exit(2)
	}
	if cfg.HTTPAddr == "" && cfg.TCPAddr == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -http or -tcp is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res := load.Run(ctx, cfg)
	json.NewEncoder(os.Stdout).Encode(res)
}
