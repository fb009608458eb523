// Package load generates bounded HTTP and TCP load against a proxy and
// counts every failure as a client that never retries sees it.
//
// Its HTTP clients speak HTTP/1.1 on raw connections instead of through
// net/http's Transport, which retries some failed requests on its own and
// would hide exactly the failures a handoff can cause.
package load

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config describes one load run. Each client kind runs its own goroutines;
// zero of a kind runs none.
type Config struct {
	// HTTPAddr is the proxy's HTTP address; TCPAddr its TCP address.
	HTTPAddr string
	TCPAddr  string
	// Host is sent as the Host header. Default: HTTPAddr.
	Host string
	// Path is requested by GET clients. Default: "/".
	Path string
	// Duration bounds the run.
	Duration time.Duration
	// KeepAlive clients send GETs back to back on one connection.
	KeepAlive int
	// NewConn clients open a connection per GET.
	NewConn int
	// Post clients send POSTs with a body on one keep-alive connection: a
	// request a client cannot safely retry.
	Post int
	// PostSize is the POST body size. Default 1024.
	PostSize int
	// TCPStreams clients hold TCP streams through the proxy, echoing a
	// message every StreamInterval (default 10ms; negative: back to back),
	// each stream for StreamLife.
	TCPStreams     int
	StreamLife     time.Duration
	StreamInterval time.Duration
	// Upgrades clients hold the same streams over HTTP: a request to
	// HTTPAddr with "Upgrade: echo" (the backend's WebSocket stand-in),
	// then echoes through the switched connection.
	Upgrades int
	// Timeout bounds one request or one echo. Default 10s.
	Timeout time.Duration
	// RetryIdempotent makes GET clients retry, once, on a new connection, a
	// request that failed on a reused connection before any response byte,
	// as browsers and most HTTP libraries do. Raw failures are counted
	// either way; Recovered counts the retries that then succeeded.
	RetryIdempotent bool
	// Progress, when set, counts successful requests and echoes as they
	// happen, so a test can wait for traffic to flow.
	Progress *atomic.Uint64
	// TLS, when set, makes the HTTP clients speak HTTPS (HTTP/1.1) with
	// it: a new connection is a TLS handshake (resumed when TLS has a
	// session cache).
	TLS *tls.Config
	// H2 clients send GETs over HTTP/2 (over TLS, which must be set),
	// as streams of one shared connection.
	H2 int
}

// Failure classes.
const (
	ClassRefused   = "refused"    // connect refused
	ClassReset     = "reset"      // connection reset
	ClassEOFReused = "eof-reused" // EOF before any response byte on a reused connection
	ClassEOF       = "eof"        // EOF before a whole response otherwise
	ClassTimeout   = "timeout"
	Class5xx       = "5xx"
	ClassBadReply  = "bad-reply" // wrong status, wrong echo
	ClassOther     = "other"
)

// Result summarises a run.
type Result struct {
	Duration float64 `json:"durationSeconds"`
	// Requests counts HTTP requests answered correctly.
	Requests uint64 `json:"requests"`
	// Connections counts HTTP connections opened.
	Connections uint64 `json:"connections"`
	// Streams counts TCP streams completed; Echoes the echoes in them.
	Streams uint64 `json:"streams"`
	Echoes  uint64 `json:"echoes"`
	// Failures counts failed requests, streams and connects by class.
	Failures map[string]uint64 `json:"failures"`
	// FailuresByKind counts failures by client kind.
	FailuresByKind map[string]uint64 `json:"failuresByKind"`
	// Recovered counts failed idempotent requests that a retry answered.
	Recovered uint64 `json:"recovered"`
	// TLSHandshakes counts the TLS handshakes of new connections;
	// TLSResumed those that resumed a session.
	TLSHandshakes uint64 `json:"tlsHandshakes,omitempty"`
	TLSResumed    uint64 `json:"tlsResumed,omitempty"`
	// Latency of successful HTTP requests, in milliseconds.
	Latency LatencySummary `json:"latencyMs"`
	// Histogram is Latency's source, for Merge.
	Histogram *Histogram `json:"histogram,omitempty"`
	// Examples holds the first few failures, for the test log.
	Examples []string `json:"examples,omitempty"`
}

// TotalFailures is the number of raw failures of every class.
func (r *Result) TotalFailures() uint64 {
	var n uint64
	for _, v := range r.Failures {
		n += v
	}
	return n
}

// RPS is successful requests per second.
func (r *Result) RPS() float64 {
	if r.Duration == 0 {
		return 0
	}
	return float64(r.Requests) / r.Duration
}

// recorder collects one client's counts; they are merged at the end, so the
// clients share no lock.
type recorder struct {
	progress    *atomic.Uint64
	kind        string
	requests    uint64
	connections uint64
	streams     uint64
	echoes      uint64
	recovered   uint64
	handshakes  uint64
	resumed     uint64
	failures    map[string]uint64
	examples    []string
	hist        Histogram
}

func (r *recorder) fail(class string, err error) {
	if r.failures == nil {
		r.failures = make(map[string]uint64)
	}
	r.failures[class]++
	if len(r.examples) < 5 {
		r.examples = append(r.examples, fmt.Sprintf("%s %s: %v", r.kind, class, err))
	}
}

func (r *recorder) ok(d time.Duration) {
	r.requests++
	r.hist.Record(d)
	if r.progress != nil {
		r.progress.Add(1)
	}
}

// Run runs the load described by cfg until its Duration has passed or ctx
// ends.
func Run(ctx context.Context, cfg Config) *Result {
	if cfg.Host == "" {
		cfg.Host = cfg.HTTPAddr
	}
	if cfg.Path == "" {
		cfg.Path = "/"
	}
	if cfg.PostSize == 0 {
		cfg.PostSize = 1024
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.StreamLife == 0 {
		cfg.StreamLife = time.Second
	}
	if cfg.StreamInterval == 0 {
		cfg.StreamInterval = 10 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		recs []*recorder
	)
	spawn := func(n int, kind string, fn func(context.Context, *recorder)) {
		for range n {
			rec := &recorder{kind: kind, progress: cfg.Progress}
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
			wg.Go(func() { fn(ctx, rec) })
		}
	}
	get := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: baton-load\r\n\r\n", cfg.Path, cfg.Host))
	getClose := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: baton-load\r\nConnection: close\r\n\r\n", cfg.Path, cfg.Host))
	body := bytes.Repeat([]byte("p"), cfg.PostSize)
	post := append([]byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: baton-load\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", cfg.Path, cfg.Host, len(body))), body...)

	spawn(cfg.KeepAlive, "keepalive", func(ctx context.Context, r *recorder) {
		keepAliveClient(ctx, cfg, r, get, 3, cfg.RetryIdempotent, getClose)
	})
	spawn(cfg.Post, "post", func(ctx context.Context, r *recorder) {
		keepAliveClient(ctx, cfg, r, post, int64(len(body)), false, nil)
	})
	spawn(cfg.NewConn, "newconn", func(ctx context.Context, r *recorder) {
		newConnClient(ctx, cfg, r, getClose)
	})
	spawn(cfg.TCPStreams, "tcp", func(ctx context.Context, r *recorder) {
		streamClient(ctx, cfg, r, func() (net.Conn, error) { return dial(ctx, cfg.TCPAddr, cfg.Timeout) })
	})
	upgradeReq := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: baton-load\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", cfg.Path, cfg.Host))
	spawn(cfg.Upgrades, "upgrade", func(ctx context.Context, r *recorder) {
		streamClient(ctx, cfg, r, func() (net.Conn, error) { return openUpgraded(ctx, cfg, r, upgradeReq) })
	})
	if cfg.H2 > 0 {
		h2 := newH2Client(cfg)
		defer h2.CloseIdleConnections()
		spawn(cfg.H2, "h2", func(ctx context.Context, r *recorder) {
			h2Client(ctx, cfg, r, h2)
		})
	}
	wg.Wait()

	res := &Result{
		Duration:       time.Since(start).Seconds(),
		Failures:       make(map[string]uint64),
		FailuresByKind: make(map[string]uint64),
	}
	var hist Histogram
	for _, r := range recs {
		res.Requests += r.requests
		res.Connections += r.connections
		res.Streams += r.streams
		res.Echoes += r.echoes
		res.Recovered += r.recovered
		res.TLSHandshakes += r.handshakes
		res.TLSResumed += r.resumed
		for c, n := range r.failures {
			res.Failures[c] += n
			res.FailuresByKind[r.kind] += n
		}
		for _, e := range r.examples {
			if len(res.Examples) < 20 {
				res.Examples = append(res.Examples, e)
			}
		}
		hist.Merge(&r.hist)
	}
	res.Latency = hist.Summary()
	res.Histogram = &hist
	return res
}

// Merge adds o, a run of the same load at another time, to r: counts and
// durations add up, and the latency is that of both runs' requests
// (Latency is left as it was when either lacks its Histogram).
func (r *Result) Merge(o *Result) {
	r.Duration += o.Duration
	r.Requests += o.Requests
	r.Connections += o.Connections
	r.Streams += o.Streams
	r.Echoes += o.Echoes
	r.Recovered += o.Recovered
	r.TLSHandshakes += o.TLSHandshakes
	r.TLSResumed += o.TLSResumed
	for _, m := range []struct{ dst, src *map[string]uint64 }{{&r.Failures, &o.Failures}, {&r.FailuresByKind, &o.FailuresByKind}} {
		for k, v := range *m.src {
			if *m.dst == nil {
				*m.dst = make(map[string]uint64)
			}
			(*m.dst)[k] += v
		}
	}
	for _, e := range o.Examples {
		if len(r.Examples) < 20 {
			r.Examples = append(r.Examples, e)
		}
	}
	if r.Histogram == nil || o.Histogram == nil {
		return
	}
	r.Histogram.Merge(o.Histogram)
	r.Latency = r.Histogram.Summary()
}

// over reports whether the run has ended. It looks at the clock as well as
// ctx: a dial whose deadline came from ctx fails a moment before ctx
// reports its own end, and that failure is the run's end, not the proxy's.
func over(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// countingConn counts the bytes read since the last reset, to tell a
// connection that failed before any response byte.
type countingConn struct {
	net.Conn
	read int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	return n, err
}

func dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return d.DialContext(ctx, "tcp", addr)
}

// dialHTTP connects to the HTTP address, with TLS when cfg has it, and
// counts the handshake in r.
func dialHTTP(ctx context.Context, cfg Config, r *recorder) (net.Conn, error) {
	if cfg.TLS == nil {
		return dial(ctx, cfg.HTTPAddr, cfg.Timeout)
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: cfg.Timeout}, Config: cfg.TLS}
	c, err := d.DialContext(ctx, "tcp", cfg.HTTPAddr)
	if err == nil {
		r.handshakes++
		if c.(*tls.Conn).ConnectionState().DidResume {
			r.resumed++
		}
	}
	return c, err
}

// keepAliveClient sends req back to back on one connection, reconnecting
// when the server closes it, and checks each response's body length.
func keepAliveClient(ctx context.Context, cfg Config, r *recorder, req []byte, wantLen int64, retry bool, retryReq []byte) {
	var (
		cc       *countingConn
		br       *bufio.Reader
		served   int           // responses read on cc: more than 0, it is reused
		answered time.Time     // when the last of them was read
		took     time.Duration // and how long its round trip took
	)
	closeConn := func() {
		if cc != nil {
			cc.Close()
			cc = nil
		}
	}
	defer closeConn()
	for !over(ctx) {
		if cc == nil {
			c, err := dialHTTP(ctx, cfg, r)
			if err != nil {
				if !over(ctx) {
					r.fail(classify(err, false), err)
				}
				continue
			}
			r.connections++
			cc = &countingConn{Conn: c}
			br = bufio.NewReader(cc)
			served = 0
		}
		t0 := time.Now()
		cc.SetDeadline(t0.Add(cfg.Timeout))
		cc.read = int64(br.Buffered())
		resp, err := roundTrip(cc, br, req, wantLen)
		if err != nil {
			silent := over(ctx) && errors.Is(err, os.ErrDeadlineExceeded)
			raced := served > 0 && cc.read == 0
			class := classify(err, raced)
			if raced {
				// How long the client left the connection idle says
				// which race it lost (docs/design.md, "Draining
				// without losing a request").
				err = fmt.Errorf("%s %s->%s, request %d, reused after %v idle, the answer before took %v: %w",
					t0.UTC().Format("15:04:05.000"), cc.LocalAddr(), cc.RemoteAddr(), served+1,
					t0.Sub(answered).Round(time.Millisecond), took.Round(time.Millisecond), err)
			}
			closeConn()
			if silent {
				return
			}
			r.fail(class, err)
			if retry && raced && (class == ClassEOFReused || class == ClassReset) {
				if retryOnce(ctx, cfg, retryReq) == nil {
					r.recovered++
				}
			}
			continue
		}
		r.ok(time.Since(t0))
		if resp.StatusCode >= 500 {
			r.fail(Class5xx, fmt.Errorf("status %d", resp.StatusCode))
		}
		if resp.Close {
			closeConn()
			continue
		}
		served, answered = served+1, time.Now()
		took = answered.Sub(t0)
	}
}

// roundTrip writes req on c and reads one response, whose body must be
// wantLen bytes long.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte, wantLen int64) (*http.Response, error) {
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	if resp.StatusCode < 500 && (resp.StatusCode != http.StatusOK || n != wantLen) {
		return nil, &badReply{fmt.Sprintf("status %d, body %d bytes, want 200 and %d", resp.StatusCode, n, wantLen)}
	}
	return resp, nil
}

func retryOnce(ctx context.Context, cfg Config, req []byte) error {
	c, err := dialHTTP(ctx, cfg, &recorder{})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(cfg.Timeout))
	_, err = roundTrip(c, bufio.NewReader(c), req, 3)
	return err
}

// newConnClient opens a connection for every request.
func newConnClient(ctx context.Context, cfg Config, r *recorder, req []byte) {
	for !over(ctx) {
		t0 := time.Now()
		c, err := dialHTTP(ctx, cfg, r)
		if err != nil {
			if !over(ctx) {
				r.fail(classify(err, false), err)
			}
			continue
		}
		r.connections++
		c.SetDeadline(t0.Add(cfg.Timeout))
		resp, err := roundTrip(c, bufio.NewReader(c), req, 3)
		c.Close()
		if err != nil {
			if over(ctx) && errors.Is(err, os.ErrDeadlineExceeded) {
				return
			}
			r.fail(classify(err, false), err)
			continue
		}
		r.ok(time.Since(t0))
		if resp.StatusCode >= 500 {
			r.fail(Class5xx, fmt.Errorf("status %d", resp.StatusCode))
		}
	}
}

// newH2Client is an HTTP/2 client over TLS with cfg's settings: its GETs
// are streams of one connection (more when the server limits streams).
func newH2Client(cfg Config) *http.Client {
	tr := &http.Transport{TLSClientConfig: cfg.TLS.Clone(), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}
	tr.TLSClientConfig.NextProtos = []string{"h2"}
	return &http.Client{Transport: tr, Timeout: cfg.Timeout}
}

// h2Client sends GETs back to back over c, which must speak HTTP/2.
func h2Client(ctx context.Context, cfg Config, r *recorder, c *http.Client) {
	url := "https://" + cfg.HTTPAddr + cfg.Path
	for !over(ctx) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Host = cfg.Host
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			if !over(ctx) {
				r.fail(classify(err, false), err)
			}
			continue
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			if !over(ctx) {
				r.fail(classify(err, false), err)
			}
		case resp.ProtoMajor != 2:
			r.fail(ClassBadReply, fmt.Errorf("%s, want HTTP/2", resp.Proto))
		case resp.StatusCode >= 500:
			r.fail(Class5xx, fmt.Errorf("status %d", resp.StatusCode))
		case resp.StatusCode != http.StatusOK || n != 3:
			r.fail(ClassBadReply, fmt.Errorf("status %d, body %d bytes", resp.StatusCode, n))
		default:
			r.ok(time.Since(t0))
		}
	}
}

// streamClient holds streams of StreamLife each, on connections open
// makes (a TCP connection, or an HTTP one switched to the backend's echo),
// echoing a numbered message every StreamInterval and checking every
// echo, then half-closes and expects the proxy to pass the close along.
func streamClient(ctx context.Context, cfg Config, r *recorder, open func() (net.Conn, error)) {
	buf := make([]byte, 64)
	for !over(ctx) {
		c, err := open()
		if err != nil {
			if !over(ctx) {
				r.fail(classify(err, false), err)
			}
			continue
		}
		if err := stream(ctx, cfg, c, buf, r); err != nil {
			r.fail(classify(err, false), err)
		} else {
			r.streams++
		}
		c.Close()
	}
}

// openUpgraded connects to the HTTP address and switches the connection
// by req (101) to the backend's echo.
func openUpgraded(ctx context.Context, cfg Config, r *recorder, req []byte) (net.Conn, error) {
	c, err := dialHTTP(ctx, cfg, r)
	if err != nil {
		return nil, err
	}
	r.connections++
	if err := switchProtocols(c, cfg, req); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// switchProtocols sends req on c and reads a 101 response head, byte by
// byte so that nothing of the stream after it is read ahead.
func switchProtocols(c net.Conn, cfg Config, req []byte) error {
	c.SetDeadline(time.Now().Add(cfg.Timeout))
	if _, err := c.Write(req); err != nil {
		return err
	}
	var head []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if len(head) > 4096 {
			return &badReply{"a response head over 4 KiB"}
		}
		if _, err := io.ReadFull(c, one); err != nil {
			return err
		}
		head = append(head, one[0])
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 101 ")) {
		line, _, _ := bytes.Cut(head, []byte("\r\n"))
		return &badReply{fmt.Sprintf("upgrade answered %q, want 101", line)}
	}
	return nil
}

func stream(ctx context.Context, cfg Config, c net.Conn, buf []byte, r *recorder) error {
	end := time.Now().Add(cfg.StreamLife)
	var tick <-chan time.Time
	if cfg.StreamInterval > 0 {
		t := time.NewTicker(cfg.StreamInterval)
		defer t.Stop()
		tick = t.C
	}
	want := make([]byte, len(buf))
	for seq := 0; ; seq++ {
		msg := fmt.Appendf(want[:0], "%063d\n", seq)
		t0 := time.Now()
		c.SetDeadline(t0.Add(cfg.Timeout))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if !bytes.Equal(buf, msg) {
			return &badReply{fmt.Sprintf("echo %q, want %q", buf, msg)}
		}
		r.echoes++
		r.hist.Record(time.Since(t0))
		if r.progress != nil {
			r.progress.Add(1)
		}
		if time.Now().After(end) || over(ctx) {
			break
		}
		if tick != nil {
			<-tick
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			return err
		}
	}
	c.SetDeadline(time.Now().Add(cfg.Timeout))
	if n, err := c.Read(buf); err != io.EOF {
		return fmt.Errorf("after half-close: read %d bytes, %v; want EOF", n, err)
	}
	return nil
}

type badReply struct{ s string }

func (e *badReply) Error() string { return e.s }

// classify names the failure class of err. reusedNoBytes says the request
// went out on a reused connection and no response byte came back: an EOF
// then is the keep-alive close race.
func classify(err error, reusedNoBytes bool) string {
	var br *badReply
	switch {
	case errors.As(err, &br):
		return ClassBadReply
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return ClassReset
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ClassTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if reusedNoBytes {
			return ClassEOFReused
		}
		return ClassEOF
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	return ClassOther
}

// String is a one-line summary for test logs.
func (r *Result) String() string {
	return "requests " + strconv.FormatUint(r.Requests, 10) +
		", connections " + strconv.FormatUint(r.Connections, 10) +
		", tcp streams " + strconv.FormatUint(r.Streams, 10) +
		", echoes " + strconv.FormatUint(r.Echoes, 10) +
		", failures " + fmt.Sprint(r.Failures) +
		fmt.Sprintf(", %.0f req/s, p50 %.2fms p99 %.2fms", r.RPS(), r.Latency.P50, r.Latency.P99)
}
