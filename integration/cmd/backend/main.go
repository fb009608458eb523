// Command backend runs the HTTP and TCP echo backend that baton's
// integration tests, benchmarks and `make run` proxy to.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
)

func main() {
	httpAddr := flag.String("http", "127.0.0.1:9000", "HTTP address (empty: none)")
	tcpAddr := flag.String("tcp", "", "TCP echo address (empty: none)")
	httpsAddr := flag.String("https", "", "HTTPS address, with a self-signed certificate (empty: none)")
	name := flag.String("name", "backend", "name returned in X-Backend")
	flag.Parse()
	s, err := backend.Start(*name, *httpAddr, *tcpAddr)
	if err == nil && *httpsAddr != "" {
		err = s.ServeTLS(*httpsAddr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("backend %s: http %s tcp %s\n", *name, s.HTTPAddr, s.TCPAddr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	// Like an application given SIGTERM: finish what is in flight.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Shutdown(ctx)
}
