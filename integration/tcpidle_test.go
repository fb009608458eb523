package integration

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// A TCP stream silent both ways for its listener's idleTimeout is closed
// by the real binary, as nginx's proxy_timeout closes one
// (https://nginx.org/en/docs/stream/ngx_stream_proxy_module.html#proxy_timeout);
// one that keeps talking past the timeout in all lives on.
func TestTCPStreamIdleTimeout(t *testing.T) {
	be := startBackend(t)
	cfg := strings.Replace(options{tcp: true}.configYAML(be), "protocol: tcp\n", "protocol: tcp\n    idleTimeout: 500ms\n", 1)
	b := startBaton(t, cfg)
	c, err := net.Dial("tcp", b.Address("echo"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; time.Sleep(150 * time.Millisecond) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatalf("write on a live stream: %v", err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("echo on a live stream, %v in: %v", time.Since(start), err)
		}
	}
	silent := time.Now()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(buf)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatal("a stream silent for 10 s is open past its 500ms idleTimeout")
	case err == nil:
		t.Fatalf("a silent stream read %d bytes", n)
	}
	t.Logf("closed %v after the stream fell silent (%v)", time.Since(silent).Round(time.Millisecond), err)
}
