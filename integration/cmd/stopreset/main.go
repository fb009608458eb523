// Command stopreset counts what new connections see while baton stops:
// it starts baton, dials its listener from a few goroutines in a loop,
// stops baton with SIGTERM, and repeats; a connection accepted and then
// reset is what a stop must not do (docs/design.md, Stop).
//
//	stopreset -bin bin/baton -config baton.yaml -addr 127.0.0.1:8080 -stops 20
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	bin := flag.String("bin", "bin/baton", "baton binary")
	config := flag.String("config", "", "config file; its listener at -addr must route to a backend answering 200")
	addr := flag.String("addr", "", "a listener's address")
	stops := flag.Int("stops", 20, "how many times to start and stop baton")
	dialers := flag.Int("dialers", 4, "goroutines dialing")
	flag.Parse()
	var served, refused, reset, other atomic.Int64
	for range *stops {
		cmd := exec.Command(*bin, "run", "-config", *config)
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		if err := waitListening(*addr, 10*time.Second); err != nil {
			cmd.Process.Kill()
			log.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range *dialers {
			wg.Go(func() {
				for !stop.Load() {
					switch dial(*addr) {
					case "served":
						served.Add(1)
					case "refused":
						refused.Add(1)
						time.Sleep(time.Millisecond)
					case "reset":
						reset.Add(1)
					default:
						other.Add(1)
					}
				}
			})
		}
		time.Sleep(200 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		time.Sleep(100 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
	}
	fmt.Printf("stops %d served %d refused %d reset-after-connect %d other %d\n", *stops, served.Load(), refused.Load(), reset.Load(), other.Load())
}

func waitListening(addr string, within time.Duration) error {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("%s not listening within %s", addr, within)
}

// dial makes one request on a new connection and says how it went.
func dial(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return "refused"
		}
		return "other"
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	b, err := io.ReadAll(c)
	switch {
	case err == nil && strings.HasPrefix(string(b), "HTTP/1.1 200"):
		return "served"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	}
	return "other"
}
