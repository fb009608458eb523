package integration

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// h2cClient is an HTTP/2 client in the clear (prior knowledge), as gRPC's
// clients speak to a plaintext port.
func h2cClient() *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &protos}, Timeout: 60 * time.Second}
}

// grpcStream is a gRPC call in progress: what the client sends goes on w,
// the backend's echo comes on rd.
type grpcStream struct {
	w    *io.PipeWriter
	rd   *bufio.Reader
	resp *http.Response
}

func startGRPCStream(t *testing.T, url string) *grpcStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", url, pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := h2cClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return &grpcStream{w: pw, rd: bufio.NewReader(resp.Body), resp: resp}
}

// roundTrip sends one message and reads its echo.
func (s *grpcStream) roundTrip(t *testing.T, msg string) {
	t.Helper()
	if _, err := fmt.Fprintf(s.w, "%s\n", msg); err != nil {
		t.Fatalf("send %q: %v", msg, err)
	}
	got, err := s.rd.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// finish ends the client's side and returns the call's grpc-status.
func (s *grpcStream) finish(t *testing.T) string {
	t.Helper()
	s.w.Close()
	if rest, err := io.ReadAll(s.rd); err != nil || len(rest) > 0 {
		t.Fatalf("the end of the call: %q, %v", rest, err)
	}
	s.resp.Body.Close()
	return s.resp.Trailer.Get("Grpc-Status")
}

// TestGRPCThroughReloads: with the real binary and a backend whose
// protocol is h2c, gRPC calls go through over HTTP/2 end to end, a
// bidirectional stream both ways at once; a stream opened before a reload
// goes on in the draining generation and ends with grpc-status 0, while
// new calls go to the new one; a backend that is down is UNAVAILABLE
// (grpc-status 14) to a gRPC client, not an HTTP 502 page.
func TestGRPCThroughReloads(t *testing.T) {
	be := startBackend(t)
	cfg := options{workers: 1, extra: `  - name: down
    static: ["127.0.0.1:1"]
    protocol: h2c
`}.configYAML(be)
	cfg = strings.Replace(cfg, "    static: [\""+be.HTTPAddr+"\"]\n", "    static: [\""+be.HTTPAddr+"\"]\n    protocol: h2c\n", 1)
	cfg = strings.Replace(cfg, "routes:\n", "routes:\n  - listener: web\n    pathPrefix: /down.Service/\n    backend: down\n", 1)
	// The extra backend landed after routes: move it up.
	cfg = strings.Replace(cfg, "  - name: down\n    static: [\"127.0.0.1:1\"]\n    protocol: h2c\n", "", 1)
	cfg = strings.Replace(cfg, "routes:\n", "  - name: down\n    static: [\"127.0.0.1:1\"]\n    protocol: h2c\nroutes:\n", 1)
	b := startBaton(t, cfg)
	url := "http://" + b.Address("web")

	s := startGRPCStream(t, url+"/echo.Echo/Chat")
	if p := s.resp.Header.Get("X-Request-Proto"); p != "HTTP/2.0" {
		t.Fatalf("the backend got the call over %q, want HTTP/2.0", p)
	}
	for i := range 3 {
		s.roundTrip(t, fmt.Sprintf("before %d", i))
	}
	if h := b.SIGHUP(); h.Outcome != "ok" {
		t.Fatalf("reload: %+v", h)
	}
	// New calls go to the new generation while the old stream goes on.
	for i := range 5 {
		n := startGRPCStream(t, url+"/echo.Echo/Chat")
		n.roundTrip(t, fmt.Sprintf("new %d", i))
		if st := n.finish(t); st != "0" {
			t.Fatalf("a new call after the reload: grpc-status %q", st)
		}
	}
	for i := range 3 {
		s.roundTrip(t, fmt.Sprintf("after %d", i))
	}
	if st := s.finish(t); st != "0" {
		t.Fatalf("the stream across the reload: grpc-status %q, want 0", st)
	}

	d := startGRPCStream(t, url+"/down.Service/Call")
	d.w.Close()
	io.ReadAll(d.rd)
	d.resp.Body.Close()
	if d.resp.StatusCode != 200 || d.resp.Header.Get("Grpc-Status") != "14" || d.resp.Header.Get("Content-Type") != "application/grpc" {
		t.Fatalf("a call to a backend that is down: %d grpc-status %q content-type %q; want 200, 14 (UNAVAILABLE) in a Trailers-Only response",
			d.resp.StatusCode, d.resp.Header.Get("Grpc-Status"), d.resp.Header.Get("Content-Type"))
	}
}
