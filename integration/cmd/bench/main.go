// Command bench measures baton beside nginx and HAProxy, and the backend
// reached directly, in one run on one machine: failures during reloads under
// load, throughput and latency, the handoff timeline, and memory. It writes
// the raw results as JSON and the tables as Markdown.
//
// It is run by `make bench` (scripts/bench.sh), which installs the peers.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/baton-proxy/baton/integration/internal/backend"
	"github.com/baton-proxy/baton/integration/internal/load"
)

// settings are the sizes of one run; quick mode shrinks them.
type settings struct {
	HandoffRun    time.Duration `json:"handoffRunNs"`
	TLSHandoffRun time.Duration `json:"tlsHandoffRunNs"`
	ReloadEvery   time.Duration `json:"reloadEveryNs"`
	// Turn and Rounds: every throughput row is measured in Rounds
	// rounds, each target one Turn per round (interleave.go).
	Turn             time.Duration `json:"turnNs"`
	Rounds           int           `json:"rounds"`
	Concurrency      int           `json:"concurrency"`
	TimelineHandoffs int           `json:"timelineHandoffs"`
	TimelineWorkers  []int         `json:"timelineWorkers"`
	// IdleConns idle keep-alive connections are measured, and the
	// memory again IdleGiveBack after they closed; IdleManyConns more, from
	// several processes, with keep-alive load beside them.
	IdleConns     int           `json:"idleConns"`
	IdleGiveBack  time.Duration `json:"idleGiveBackNs"`
	IdleManyConns int           `json:"idleManyConns,omitempty"`
	// BackendGOGC is the GOGC of this process, the backend's (0: Go's
	// default, a run from before it was set).
	BackendGOGC int `json:"backendGOGC,omitempty"`
}

// Results is everything one run measured; docs/benchmarks.json holds the
// last one.
type Results struct {
	Started  time.Time              `json:"started"`
	Machine  map[string]string      `json:"machine"`
	Command  string                 `json:"command"`
	Settings settings               `json:"settings"`
	Handoffs map[string]handoffRun  `json:"handoffs"`
	Speed    map[string]speedResult `json:"speed"`
	Timeline []timelineResult       `json:"timeline"`
	Memory   map[string]memResult   `json:"memory"`
	// Idle is what idle keep-alive connections cost, by target: HTTP/1.1,
	// HTTP/2 over TLS, and IdleManyConns of HTTP/1.1.
	Idle     map[string]idleResult `json:"idle,omitempty"`
	IdleH2   map[string]idleResult `json:"idleH2,omitempty"`
	IdleMany map[string]idleResult `json:"idleMany,omitempty"`
	// IdleManyTogether: the IdleMany targets held their connections at
	// once and took turns at the requests on them (a run from before it
	// was recorded: one target after the other).
	IdleManyTogether bool `json:"idleManyTogether,omitempty"`
	// IdleManyWarm: each pass of the requests on idle connections began
	// with requests straight to the bench's backend, not measured, and
	// the target asked first changed from pass to pass (before, the
	// first request after each sleep, always baton's, paid the wake-up
	// of the bench's own client and backend).
	IdleManyWarm bool `json:"idleManyWarm,omitempty"`
	// TLS are the TLS rows, by target; TLSHandoffs reloads under TLS
	// load; AccessLog baton's keep-alive rate with the access log on and
	// off.
	TLS         map[string]tlsResult  `json:"tls"`
	TLSHandoffs map[string]handoffRun `json:"tlsHandoffs"`
	AccessLog   *accessLogResult      `json:"accessLog,omitempty"`
	// Rounds has each round's rate of a throughput row (its key in
	// interleave.go), by target: the spread behind the sums.
	Rounds map[string]map[string][]float64 `json:"rounds"`
	// RoundsP99 has each round's p99 latency (ms) likewise.
	RoundsP99 map[string]map[string][]float64 `json:"roundsP99"`
	Errors    []string                        `json:"errors,omitempty"`
}

// backendGOGC is the bench process's GOGC, for the backend it serves.
const backendGOGC = 1000

func main() {
	out := flag.String("out", "docs/benchmarks.md", "Markdown report")
	raw := flag.String("json", "docs/benchmarks.json", "raw results")
	bin := flag.String("bin", "bin", "folder with baton and loadgen")
	quick := flag.Bool("quick", os.Getenv("BENCH_QUICK") == "1", "a short run (BENCH_QUICK=1)")
	only := flag.String("targets", "direct,baton,nginx,haproxy,caddy", "targets to measure")
	caddyBin := flag.String("caddy", ".cache/caddybin/caddy", "Caddy's binary (scripts/caddybin.sh)")
	speedOnly := flag.Bool("speed-only", false, "measure throughput and latency only (for profiling; the report lacks the rest)")
	rerender := flag.Bool("report-only", false, "measure nothing: write the report of the raw results in -json anew (after the report's text changed)")
	phases := flag.String("phases", "speed,tls,rsa,accesslog,targets,idle,idlemany,timeline", "what to measure: throughput (speed), the TLS rows (tls), full RSA handshakes (rsa), the access log's cost, each target's reloads and memory (targets), idle connections' memory (idle: HTTP/1.1 and HTTP/2; idlemany: 30,000 from several processes), baton's handoff timeline")
	rowsOnly := flag.String("rows", "", "with -phases speed or tls: only these rows, by their key in the JSON's rounds (tcpShort,tls.passthrough), to look at one row in a minute rather than all in ten")
	attackOut := flag.String("attacks", "", "run the attack suite instead (make attacks), and write its table into `FILE` (docs/security.md)")
	flag.Parse()
	if *rerender {
		var res Results
		b, err := os.ReadFile(*raw)
		if err == nil {
			err = json.Unmarshal(b, &res)
		}
		if err != nil {
			fatal(err)
		}
		if err := os.WriteFile(*out, []byte(report(&res)+keptBlock(*out)), 0o644); err != nil {
			fatal(err)
		}
		return
	}

	s := settings{HandoffRun: 40 * time.Second, TLSHandoffRun: 24 * time.Second, ReloadEvery: 400 * time.Millisecond, Turn: 3 * time.Second, Rounds: 10,
		Concurrency: 32, TimelineHandoffs: 100, TimelineWorkers: []int{1, 2, 4}, IdleConns: 10_000, IdleGiveBack: time.Minute, IdleManyConns: 30_000}
	if *quick {
		s = settings{HandoffRun: 12 * time.Second, TLSHandoffRun: 10 * time.Second, ReloadEvery: 400 * time.Millisecond, Turn: 2 * time.Second, Rounds: 2,
			Concurrency: 32, TimelineHandoffs: 20, TimelineWorkers: []int{1, 2}, IdleConns: 10_000, IdleGiveBack: 10 * time.Second, IdleManyConns: 30_000}
	}
	work, err := os.MkdirTemp("", "baton-bench-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(work)
	absBin, _ := filepath.Abs(*bin)
	absCaddy, _ := filepath.Abs(*caddyBin)
	r := &bench{bin: absBin, caddy: absCaddy, work: work, s: s, res: &Results{
		Started:  time.Now().UTC(),
		Machine:  machine(absCaddy),
		Command:  "make bench" + map[bool]string{true: " BENCH_QUICK=1", false: ""}[*quick],
		Settings: s,
		Handoffs: map[string]handoffRun{},
		Speed:    map[string]speedResult{},
		Memory:   map[string]memResult{},
		Idle:     map[string]idleResult{},
		IdleH2:   map[string]idleResult{},
		IdleMany: map[string]idleResult{},

		TLS:         map[string]tlsResult{},
		TLSHandoffs: map[string]handoffRun{},
		Rounds:      map[string]map[string][]float64{},
		RoundsP99:   map[string]map[string][]float64{},
	}}
	if r.certs, err = makeCerts(work); err != nil {
		fatal(err)
	}
	r.key = "ecdsa"

	// The backend every target reaches runs in this process, and its
	// collector is kept rare: at Go's default it collected 28 times a
	// second under the HTTP rows (a 4 MB heap goal), and each cycle's
	// pauses and mark work landed on whichever target's turn was running.
	// The backend is not what is measured; its cost is every target's.
	debug.SetGCPercent(backendGOGC)
	r.res.Settings.BackendGOGC = backendGOGC
	be, err := backend.Start("bench", backendHTTP, backendTCP)
	if err == nil {
		err = be.ServeTLS(backendTLS)
	}
	if err != nil {
		fatal(err)
	}
	defer be.Close()

	names := strings.Split(*only, ",")
	if *attackOut != "" {
		r.defaults = true
		if err := r.runAttacks(names, be, *attackOut); err != nil {
			fatal(err)
		}
		for _, e := range r.res.Errors {
			fmt.Fprintln(os.Stderr, "bench: error:", e)
		}
		fmt.Printf("wrote the attack table into %s\n", *attackOut)
		return
	}
	do := map[string]bool{}
	for _, p := range strings.Split(*phases, ",") {
		do[p] = true
	}
	if *speedOnly {
		do = map[string]bool{"speed": true}
	}
	withBaton := slices.Contains(names, "baton")
	if do["speed"] || do["tls"] {
		var rows []row
		if do["speed"] {
			rows = append(rows, r.speedRows()...)
		}
		if do["tls"] {
			rows = append(rows, r.tlsRows()...)
		}
		if *rowsOnly != "" {
			keep := strings.Split(*rowsOnly, ",")
			rows = slices.DeleteFunc(rows, func(r row) bool { return !slices.Contains(keep, r.key) })
		}
		ts := r.startAll(names)
		r.keep(r.interleave(ts, rows))
		stopAll(ts)
	}
	if withBaton && do["accesslog"] {
		ts := r.startAll([]string{"baton", "baton-accesslog"})
		r.keep(r.interleave(ts, []row{r.accessLogRow()}))
		stopAll(ts)
	}
	if do["rsa"] {
		// baton built with OpenSSL, beside the default build, where make
		// bench could build it.
		rsaNames := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "direct" })
		if _, err := os.Stat(filepath.Join(absBin, "baton-openssl")); err == nil && withBaton {
			rsaNames = append(rsaNames, "baton-openssl")
		}
		r.key = "rsa"
		ts := r.startAll(rsaNames)
		r.keep(r.interleave(ts, []row{r.rsaRow()}))
		stopAll(ts)
		r.key = "ecdsa"
	}
	for _, name := range names {
		if do["targets"] {
			r.measureTarget(name)
		}
		if do["idle"] && name != "direct" {
			r.run(name, "idle connections", func(t target) error {
				m, err := r.idle(t, s.IdleConns, false, s.IdleGiveBack)
				r.res.Idle[name] = m
				return err
			})
			r.run(name, "idle HTTP/2 connections", func(t target) error {
				m, err := r.idle(t, s.IdleConns, true, s.IdleGiveBack)
				r.res.IdleH2[name] = m
				return err
			})
		}
	}
	if do["idlemany"] {
		// baton and nginx: the others hold fewer under 20,000
		// descriptors a process.
		many := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n != "baton" && n != "nginx" })
		if ts := r.startAll(many); len(ts) > 0 {
			fmt.Fprintf(os.Stderr, "bench: %d idle connections to each of %d targets\n", s.IdleManyConns, len(ts))
			m, err := r.idleMany(ts, s.IdleManyConns)
			maps.Copy(r.res.IdleMany, m)
			r.res.IdleManyTogether, r.res.IdleManyWarm = true, true
			if err != nil {
				r.errorf("idle connections: %v", err)
			}
			stopAll(ts)
		}
	}
	if withBaton && do["timeline"] {
		r.timeline()
	}
	r.res.dropHistograms()
	b, _ := json.MarshalIndent(r.res, "", "  ")
	if err := os.WriteFile(*raw, append(b, '\n'), 0o644); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(*out, []byte(report(r.res)+keptBlock(*out)), 0o644); err != nil {
		fatal(err)
	}
	fmt.Printf("wrote %s and %s\n", *out, *raw)
}

// dropHistograms drops the loads' histograms, which were for merging
// turns: their summaries are what the results keep.
func (r *Results) dropHistograms() {
	var loads []*load.Result
	for _, h := range r.Handoffs {
		loads = append(loads, h.Load)
	}
	for _, h := range r.TLSHandoffs {
		loads = append(loads, h.Load)
	}
	for _, s := range r.Speed {
		loads = append(loads, s.KeepAlive, s.NewConn, s.TCP, s.TCPShort)
	}
	for _, t := range r.TLS {
		loads = append(loads, t.FullECDSA, t.FullRSA, t.Resumed, t.KeepAlive, t.H2, t.Passthrough)
	}
	if a := r.AccessLog; a != nil {
		loads = append(loads, a.Off, a.On)
	}
	for _, m := range r.IdleMany {
		loads = append(loads, m.Probe)
	}
	for _, l := range loads {
		if l != nil {
			l.Histogram = nil
		}
	}
}

type bench struct {
	bin, work string
	caddy     string // Caddy's binary
	s         settings
	res       *Results
	certs     map[string]tlsFiles // by key type: ecdsa, rsa
	key       string              // the key type targets serve now
	// defaults: targets run with their own defaults where the benchmark
	// tunes them (requests per connection), as for the attack suite.
	defaults bool
}

func (b *bench) newTarget(name string, workers int) target {
	dir := filepath.Join(b.work, fmt.Sprintf("%s-%d", name, workers))
	os.MkdirAll(dir, 0o700)
	files := b.certs[b.key]
	switch name {
	case "baton":
		return &baton{name: name, port: 18000, dir: dir, bin: filepath.Join(b.bin, "baton"), workers: workers, tls: files, defaults: b.defaults}
	case "baton-accesslog":
		return &baton{name: name, port: 16000, dir: dir, bin: filepath.Join(b.bin, "baton"), workers: workers, tls: files, accessLog: true}
	case "baton-before":
		// An A/B of a change: bin/baton-before built from the commit
		// before it (-targets baton,baton-before); one that knows
		// http.maxRequestsPerConnection (2826eed and after).
		return &baton{name: name, port: 15000, dir: dir, bin: filepath.Join(b.bin, "baton-before"), workers: workers, tls: files, defaults: b.defaults}
	case "baton-openssl":
		return &baton{name: name, port: 17000, dir: dir, bin: filepath.Join(b.bin, "baton-openssl"), workers: workers, tls: files}
	case "nginx":
		return &nginx{dir: dir, tls: files, defaults: b.defaults}
	case "haproxy":
		return &haproxy{dir: dir, tls: files}
	case "caddy":
		return &caddy{dir: dir, bin: b.caddy, tls: files}
	}
	return direct{}
}

func (b *bench) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "bench:", msg)
	b.res.Errors = append(b.res.Errors, msg)
}

// run starts a fresh instance of target name, runs fn on it, and stops it.
func (b *bench) run(name, what string, fn func(t target) error) {
	t := b.newTarget(name, 2)
	fmt.Fprintf(os.Stderr, "bench: %s: %s\n", name, what)
	if err := start(t); err != nil {
		b.errorf("%s: start: %v", name, err)
		t.Stop()
		return
	}
	defer t.Stop()
	if err := fn(t); err != nil {
		b.errorf("%s: %s: %v", name, what, err)
	}
}

// measureTarget runs the other measurements of one target, started afresh
// for each so that one cannot disturb the next.
func (b *bench) measureTarget(name string) {
	if name == "direct" {
		return
	}
	b.run(name, "memory", func(t target) error {
		m, err := b.memory(t)
		b.res.Memory[name] = m
		return err
	})
	b.run(name, "reloads under load", func(t target) error {
		h, err := b.handoffs(t)
		b.res.Handoffs[name] = h
		return err
	})
	b.run(name, "reloads under TLS load", func(t target) error {
		h, err := b.tlsHandoffs(t)
		b.res.TLSHandoffs[name] = h
		return err
	})
}

// loadgen runs bin/loadgen with args and returns its summary.
func (b *bench) loadgen(args ...string) (*load.Result, error) {
	cmd := exec.Command(filepath.Join(b.bin, "loadgen"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("loadgen %v: %v: %s", args, err, errb.String())
	}
	var res load.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("loadgen output %q: %w", out.String(), err)
	}
	return &res, nil
}

func machine(caddyBin string) map[string]string {
	m := map[string]string{"cpus": fmt.Sprint(runtime.NumCPU()), "go": runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				m["cpu"] = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m["kernel"] = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("/usr/sbin/nginx", "-v").CombinedOutput(); err == nil {
		m["nginx"] = strings.TrimSpace(strings.TrimPrefix(string(out), "nginx version: "))
	}
	if out, err := exec.Command("/usr/sbin/haproxy", "-v").Output(); err == nil {
		m["haproxy"] = strings.Fields(string(out))[2]
	}
	if out, err := exec.Command(caddyBin, "version").Output(); err == nil {
		m["caddy"] = strings.Fields(string(out) + " ?")[0]
	}
	if out, err := exec.Command("wrk", "-v").CombinedOutput(); err == nil || len(out) > 0 {
		m["wrk"] = strings.Fields(string(out) + " ? ?")[1]
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m["memory"] = strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"))
	}
	return m
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// percentile of sorted values.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	i := int(p*float64(len(v)-1) + 0.5)
	return v[i]
}
