package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/baton-proxy/baton/integration/internal/load"
)

// The throughput rows are measured in turns: every target of a phase runs
// at once (an idle proxy costs the machine nothing), and each row is taken
// round after round, every target one short turn per round, in an order
// that rotates. A target's figure is the sum of its turns (requests over
// time, latency over every request), so each target meets the machine's
// good and bad moments alike: on this shared machine the rate of every
// target drifts by a quarter within minutes, which runs of 10 s one target
// after another turned into ratios that moved by as much from one run to
// the next. Each round's ratio is kept as well (Results.Rounds), to show
// the spread that is left.

// row is one load that every target takes turns at.
type row struct {
	key string // its name in Results.Rounds
	// run measures t for d: nil when the row does not apply to t.
	run func(t target, d time.Duration) (*turn, error)
}

// turn is one target's measurement of one row for one turn.
type turn struct {
	res *load.Result
	wrk *wrkResult
	// ticks is the CPU time of the target's workers during the turn
	// (clock ticks), where the row measures it.
	ticks int64
}

// tally is what a target's turns at one row add up to.
type tally struct {
	res    *load.Result
	wrk    *wrkTally
	ticks  int64
	perSec []float64 // each turn's rate, round by round
	p99    []float64 // and its p99 latency (ms)
}

// wrkTally adds up wrk's turns: requests over time, and the median of the
// turns' p50 (wrk reports quantiles, not its histogram).
type wrkTally struct {
	requests, seconds float64
	p50               []float64
	errors            int
}

// result is wrk's figure over the turns, whose p99s are p99.
func (w *wrkTally) result(p99 []float64) *wrkResult {
	if w == nil || w.seconds == 0 {
		return nil
	}
	return &wrkResult{RPS: w.requests / w.seconds, P50: percentile(w.p50, 0.5), P99: percentile(slices.Clone(p99), 0.5), Errors: w.errors}
}

// startAll starts the targets named, for a phase that measures them in
// turns; a target that does not start is left out, with an error in the
// report.
func (b *bench) startAll(names []string) []target {
	var ts []target
	for _, name := range names {
		t := b.newTarget(name, 2)
		fmt.Fprintf(os.Stderr, "bench: %s: start\n", name)
		if err := start(t); err != nil {
			b.errorf("%s: start: %v", name, err)
			t.Stop()
			continue
		}
		// A short warm-up fills connection pools.
		b.loadgen("-http", t.HTTPAddr(), "-keepalive", strconv.Itoa(b.s.Concurrency), "-duration", "1s")
		ts = append(ts, t)
	}
	return ts
}

func stopAll(ts []target) {
	for _, t := range ts {
		t.Stop()
	}
}

// interleave measures each row on the targets ts in turns of b.s.Turn,
// b.s.Rounds rounds per row, and returns the tallies by row and target.
func (b *bench) interleave(ts []target, rows []row) map[string]map[string]*tally {
	out := map[string]map[string]*tally{}
	for _, r := range rows {
		out[r.key] = map[string]*tally{}
		for round := range b.s.Rounds {
			fmt.Fprintf(os.Stderr, "bench: %s, round %d of %d\n", r.key, round+1, b.s.Rounds)
			for _, t := range rotate(ts, round) {
				tu, err := r.run(t, b.s.Turn)
				if err != nil {
					b.errorf("%s: %s, round %d: %v", t.Name(), r.key, round+1, err)
					continue
				}
				if tu == nil {
					continue
				}
				tl := out[r.key][t.Name()]
				if tl == nil {
					tl = &tally{}
					out[r.key][t.Name()] = tl
				}
				tl.add(tu)
			}
		}
	}
	return out
}

func (tl *tally) add(tu *turn) {
	tl.ticks += tu.ticks
	if tu.res != nil {
		tl.perSec = append(tl.perSec, perSecond(tu.res))
		tl.p99 = append(tl.p99, tu.res.Latency.P99)
		if tl.res == nil {
			tl.res = tu.res
		} else {
			tl.res.Merge(tu.res)
		}
	}
	if tu.wrk != nil {
		tl.perSec = append(tl.perSec, tu.wrk.RPS)
		tl.p99 = append(tl.p99, tu.wrk.P99)
		if tl.wrk == nil {
			tl.wrk = &wrkTally{}
		}
		tl.wrk.requests += tu.wrk.RPS * tu.wrk.seconds
		tl.wrk.seconds += tu.wrk.seconds
		tl.wrk.p50 = append(tl.wrk.p50, tu.wrk.P50)
		tl.wrk.errors += tu.wrk.Errors
	}
}

// perSecond is a run's rate: requests, or echoes for TCP streams.
func perSecond(r *load.Result) float64 {
	if r.Requests == 0 && r.Duration > 0 {
		return float64(r.Echoes) / r.Duration
	}
	return r.RPS()
}

// rotate returns s started at round's place, so that each target takes
// each place in the order in turn.
func rotate[T any](s []T, round int) []T {
	if len(s) == 0 {
		return nil
	}
	k := round % len(s)
	return append(slices.Clone(s[k:]), s[:k]...)
}

// loadRow is a row of loadgen with args against the address addr picks
// (none: the row does not apply to the target).
func (b *bench) loadRow(key string, addr func(target) string, args ...string) row {
	return row{key: key, run: func(t target, d time.Duration) (*turn, error) {
		a := addr(t)
		if a == "" {
			return nil, nil
		}
		res, err := b.loadgen(append([]string{"-http", a, "-duration", d.String()}, args...)...)
		if err != nil {
			return nil, err
		}
		return &turn{res: res}, nil
	}}
}

func httpAddr(t target) string  { return t.HTTPAddr() }
func httpsAddr(t target) string { return t.HTTPSAddr() }

// passthroughAddr is where t routes TLS by SNI without terminating it
// ("": it cannot).
func passthroughAddr(t target) string {
	if p, ok := t.(interface{ passthroughAddr() string }); ok {
		return p.passthroughAddr()
	}
	return ""
}

// speedRows are the throughput rows over plain HTTP and TCP.
func (b *bench) speedRows() []row {
	c := strconv.Itoa(b.s.Concurrency)
	return []row{
		b.loadRow("keepAlive", httpAddr, "-keepalive", c),
		{key: "wrk", run: func(t target, d time.Duration) (*turn, error) {
			w, err := runWrk(t.HTTPAddr(), b.s.Concurrency, d)
			if w == nil || err != nil {
				return nil, err
			}
			return &turn{wrk: w}, nil
		}},
		b.loadRow("newConn", httpAddr, "-newconn", c),
		{key: "tcp", run: func(t target, d time.Duration) (*turn, error) {
			if t.TCPAddr() == "" {
				return nil, nil // no TCP proxying (Caddy)
			}
			res, err := b.loadgen("-tcp", t.TCPAddr(), "-tcp-streams", c, "-stream-life", "1h", "-stream-interval", "-1ns", "-duration", d.String())
			if err != nil {
				return nil, err
			}
			return &turn{res: res}, nil
		}},
		{key: "tcpShort", run: func(t target, d time.Duration) (*turn, error) {
			if t.TCPAddr() == "" {
				return nil, nil
			}
			// One echo a connection: its rate is connections per second.
			res, err := b.loadgen("-tcp", t.TCPAddr(), "-tcp-streams", c, "-stream-life", "1ns", "-stream-interval", "-1ns", "-duration", d.String())
			if err != nil {
				return nil, err
			}
			return &turn{res: res}, nil
		}},
	}
}

// tlsRows are the TLS rows with the targets' current certificate (ECDSA).
func (b *bench) tlsRows() []row {
	c := strconv.Itoa(b.s.Concurrency)
	return []row{
		b.loadRow("tls.fullEcdsa", httpsAddr, "-tls", "-newconn", c),
		b.loadRow("tls.resumed", httpsAddr, "-tls", "-newconn", c, "-tls-resume"),
		b.loadRow("tls.keepAlive", httpsAddr, "-tls", "-keepalive", c),
		b.loadRow("tls.h2", httpsAddr, "-tls", "-h2", c),
		b.loadRow("tls.passthrough", passthroughAddr, "-tls", "-newconn", c),
	}
}

// rsaRow is full handshakes with the RSA certificate.
func (b *bench) rsaRow() row {
	return b.loadRow("tls.fullRsa", httpsAddr, "-tls", "-newconn", strconv.Itoa(b.s.Concurrency))
}

// accessLogRow is keep-alive load with the workers' CPU time measured.
func (b *bench) accessLogRow() row {
	return row{key: "accessLog", run: func(t target, d time.Duration) (*turn, error) {
		workers := t.PIDs()["worker"]
		cpu0 := cpuTicks(workers)
		res, err := b.loadgen("-http", t.HTTPAddr(), "-keepalive", strconv.Itoa(b.s.Concurrency), "-duration", d.String())
		if err != nil {
			return nil, err
		}
		return &turn{res: res, ticks: cpuTicks(workers) - cpu0}, nil
	}}
}

// keep puts the tallies into the results, and each round's rate and p99
// into Results.Rounds and RoundsP99.
func (b *bench) keep(tallies map[string]map[string]*tally) {
	for key, byTarget := range tallies {
		for name, tl := range byTarget {
			for _, m := range []map[string]map[string][]float64{b.res.Rounds, b.res.RoundsP99} {
				if m[key] == nil {
					m[key] = map[string][]float64{}
				}
			}
			b.res.Rounds[key][name], b.res.RoundsP99[key][name] = tl.perSec, tl.p99
			res := tl.res
			switch key {
			case "keepAlive":
				b.speed(name, func(s *speedResult) { s.KeepAlive = res })
			case "wrk":
				b.speed(name, func(s *speedResult) { s.Wrk = tl.wrk.result(tl.p99) })
			case "newConn":
				b.speed(name, func(s *speedResult) { s.NewConn = res })
			case "tcp":
				b.speed(name, func(s *speedResult) { s.TCP = res })
			case "tcpShort":
				b.speed(name, func(s *speedResult) { s.TCPShort = res })
			case "tls.fullEcdsa":
				b.tls(name, func(t *tlsResult) { t.FullECDSA = res })
			case "tls.fullRsa":
				b.tls(name, func(t *tlsResult) { t.FullRSA = res })
			case "tls.resumed":
				b.tls(name, func(t *tlsResult) { t.Resumed = res })
			case "tls.keepAlive":
				b.tls(name, func(t *tlsResult) { t.KeepAlive = res })
			case "tls.h2":
				b.tls(name, func(t *tlsResult) { t.H2 = res })
			case "tls.passthrough":
				b.tls(name, func(t *tlsResult) { t.Passthrough = res })
			case "accessLog":
				if b.res.AccessLog == nil {
					b.res.AccessLog = &accessLogResult{}
				}
				var perReq float64
				if res != nil && res.Requests > 0 {
					perReq = float64(tl.ticks) * 1e6 / clockTicks / float64(res.Requests)
				}
				if name == "baton" {
					b.res.AccessLog.Off, b.res.AccessLog.OffCPU = res, perReq
				} else {
					b.res.AccessLog.On, b.res.AccessLog.OnCPU = res, perReq
				}
			}
		}
	}
}

// speed changes target name's throughput results with set.
func (b *bench) speed(name string, set func(*speedResult)) {
	s := b.res.Speed[name]
	set(&s)
	b.res.Speed[name] = s
}

// tls changes target name's TLS results with set.
func (b *bench) tls(name string, set func(*tlsResult)) {
	t := b.res.TLS[name]
	set(&t)
	b.res.TLS[name] = t
}
