package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/integration/internal/load"
)

// handoffRun is one target's reload-under-load result.
type handoffRun struct {
	Reloads int          `json:"reloads"` // reloads asked for
	Done    int          `json:"done"`    // handoffs that happened (baton counts them; peers: asked)
	Load    *load.Result `json:"load"`
	// Raw failures per 100 handoffs, and what a client that retries
	// idempotent requests once would still see.
	RawPer100     float64 `json:"rawPer100"`
	RetriedPer100 float64 `json:"retriedPer100"`
	ReloadErrors  int     `json:"reloadErrors"`
}

// handoffs runs mixed load while reloading the target every ReloadEvery.
func (b *bench) handoffs(t target) (handoffRun, error) {
	args := append([]string{"-http", t.HTTPAddr(), "-keepalive", "8", "-newconn", "4", "-post", "4", "-retry"}, tcpArgs(t, "4", "2s")...)
	return b.reloadUnderLoad(t, b.s.HandoffRun, args...)
}

// tcpArgs are loadgen's arguments for streams TCP echo streams of life
// each to t, none when t proxies no TCP (Caddy).
func tcpArgs(t target, streams, life string) []string {
	if t.TCPAddr() == "" {
		return nil
	}
	return []string{"-tcp", t.TCPAddr(), "-tcp-streams", streams, "-stream-life", life}
}

// reloadUnderLoad runs loadgen with args for run while reloading the
// target every ReloadEvery.
func (b *bench) reloadUnderLoad(t target, run time.Duration, args ...string) (handoffRun, error) {
	var hr handoffRun
	var before int // the last handoff's ID before the run
	if bt, ok := t.(*baton); ok {
		st, err := bt.status()
		if err != nil {
			return hr, err
		}
		if len(st.Handoffs) == 0 {
			j, _ := json.Marshal(st)
			return hr, fmt.Errorf("baton status shows no handoff after start: %s", j)
		}
		before = st.Handoffs[len(st.Handoffs)-1].ID
	}
	type result struct {
		r   *load.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := b.loadgen(append(args, "-duration", run.String())...)
		done <- result{r, err}
	}()
	time.Sleep(500 * time.Millisecond) // load running
	tick := time.NewTicker(b.s.ReloadEvery)
	defer tick.Stop()
	end := time.Now().Add(run - 3*time.Second) // the last streams end in the old generation
	for now := range tick.C {
		if now.After(end) {
			break
		}
		hr.Reloads++
		if err := t.Reload(); err != nil {
			hr.ReloadErrors++
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	res := <-done
	if res.err != nil {
		return hr, res.err
	}
	hr.Load = res.r
	hr.Done = hr.Reloads
	if bt, ok := t.(*baton); ok {
		if st, err := bt.status(); err == nil && len(st.Handoffs) > 0 {
			// Status keeps the last 50 handoffs: count by ID, less the
			// failures it still shows.
			hr.Done = st.Handoffs[len(st.Handoffs)-1].ID - before
			for _, h := range st.Handoffs {
				if h.ID > before && h.Outcome != "ok" {
					hr.Done--
				}
			}
		}
	}
	if hr.Done > 0 {
		raw := float64(res.r.TotalFailures())
		hr.RawPer100 = raw * 100 / float64(hr.Done)
		hr.RetriedPer100 = (raw - float64(res.r.Recovered)) * 100 / float64(hr.Done)
	}
	return hr, nil
}

// speedResult is one target's throughput and latency.
type speedResult struct {
	KeepAlive *load.Result `json:"keepAlive"`
	NewConn   *load.Result `json:"newConn"`
	TCP       *load.Result `json:"tcp"`
	// TCPShort are short TCP connections: connect, one echo, close.
	TCPShort *load.Result `json:"tcpShort,omitempty"`
	Wrk      *wrkResult   `json:"wrk,omitempty"`
}

// wrkResult is wrk's own measurement, a cross-check of ours.
type wrkResult struct {
	RPS    float64 `json:"rps"`
	P50    float64 `json:"p50Ms"`
	P99    float64 `json:"p99Ms"`
	Errors int     `json:"errors"`

	seconds float64 // how long wrk ran
}

var (
	wrkRPS     = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkLatency = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([\d.]+)(us|ms|s)`)
	wrkErrors  = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)|Non-2xx or 3xx responses: (\d+)`)
)

func runWrk(addr string, conns int, d time.Duration) (*wrkResult, error) {
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, nil
	}
	out, err := exec.Command("wrk", "-t2", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(int(d.Seconds()))+"s", "--latency", "http://"+addr+"/").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("wrk: %v: %s", err, out)
	}
	s := string(out)
	w := &wrkResult{seconds: d.Seconds()}
	if m := wrkRPS.FindStringSubmatch(s); m != nil {
		w.RPS, _ = strconv.ParseFloat(m[1], 64)
	}
	for _, m := range wrkLatency.FindAllStringSubmatch(s, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		switch m[3] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		if m[1] == "50" {
			w.P50 = v
		} else {
			w.P99 = v
		}
	}
	for _, m := range wrkErrors.FindAllStringSubmatch(s, -1) {
		for _, x := range m[1:] {
			n, _ := strconv.Atoi(x)
			w.Errors += n
		}
	}
	return w, nil
}

// timelineResult is the handoff timeline of baton with some workers.
type timelineResult struct {
	Workers   int       `json:"workers"`
	Handoffs  int       `json:"handoffs"`
	Failed    int       `json:"failed"`
	ReadyP50  float64   `json:"readyP50Ms"`
	ReadyP99  float64   `json:"readyP99Ms"`
	StartP50  float64   `json:"startupP50Ms"`
	StartP99  float64   `json:"startupP99Ms"`
	DrainP50  float64   `json:"drainP50Ms"`
	DrainP99  float64   `json:"drainP99Ms"`
	SpawnP50  float64   `json:"spawnP50Ms"`
	Overhead  float64   `json:"overheadP50Ms"` // ready - startup: the supervisor's part
	ReadyList []float64 `json:"-"`
}

// timeline runs handoffs back to back through `baton reload` (which waits
// for each), with light keep-alive load, and reads their timings.
func (b *bench) timeline() {
	for _, workers := range b.s.TimelineWorkers {
		fmt.Fprintf(os.Stderr, "bench: baton: timeline with %d workers\n", workers)
		t := b.newTarget("baton", workers).(*baton)
		if err := start(t); err != nil {
			b.errorf("timeline %d workers: %v", workers, err)
			t.Stop()
			continue
		}
		stop := make(chan struct{})
		loadDone := make(chan struct{})
		go func() {
			defer close(loadDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.loadgen("-http", t.HTTPAddr(), "-keepalive", "4", "-duration", "2s")
			}
		}()
		tr := timelineResult{Workers: workers}
		var ready, startup, spawn, overhead []float64
		for range b.s.TimelineHandoffs {
			h, err := t.ReloadWait()
			if err != nil {
				tr.Failed++
				continue
			}
			tr.Handoffs++
			ready = append(ready, float64(h.ReadyMs))
			startup = append(startup, float64(h.StartupMs))
			spawn = append(spawn, float64(h.SpawnMs))
			overhead = append(overhead, float64(h.ReadyMs-h.StartupMs))
		}
		close(stop)
		<-loadDone
		// Drain times arrive as the old generations exit.
		var drain []float64
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			st, err := t.status()
			if err != nil {
				break
			}
			drain = drain[:0]
			pending := false
			for _, h := range st.Handoffs {
				if h.Trigger != "control" || h.Outcome != "ok" {
					continue
				}
				if h.DrainMs == nil {
					pending = true
					continue
				}
				drain = append(drain, float64(*h.DrainMs))
			}
			if !pending {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		tr.ReadyP50, tr.ReadyP99 = percentile(ready, 0.5), percentile(ready, 0.99)
		tr.StartP50, tr.StartP99 = percentile(startup, 0.5), percentile(startup, 0.99)
		tr.SpawnP50 = percentile(spawn, 0.5)
		tr.Overhead = percentile(overhead, 0.5)
		tr.DrainP50, tr.DrainP99 = percentile(drain, 0.5), percentile(drain, 0.99)
		b.res.Timeline = append(b.res.Timeline, tr)
		t.Stop()
	}
}

// memResult is a target's memory and descriptors, idle and under load.
type memResult struct {
	MasterRSSKiB int64 `json:"masterRssKiB"`
	// MasterPrivateKiB is the part of MasterRSSKiB that is the process's
	// own (RssAnon): the rest is the binary's pages, shared with workers.
	MasterPrivateKiB int64 `json:"masterPrivateKiB"`
	WorkerRSSIdleKiB int64 `json:"workerRssIdleKiB"` // per worker, average
	WorkerRSSLoadKiB int64 `json:"workerRssLoadKiB"`
	MasterFDs        int   `json:"masterFds"`
	WorkerFDsIdle    int   `json:"workerFdsIdle"`
	WorkerFDsLoad    int   `json:"workerFdsLoad"`
	Workers          int   `json:"workers"`
}

func (b *bench) memory(t target) (memResult, error) {
	var m memResult
	// Let the workers settle after start.
	time.Sleep(time.Second)
	pids := t.PIDs()
	m.Workers = len(pids["worker"])
	m.MasterRSSKiB, m.MasterFDs = sumProc(pids["master"])
	for _, p := range pids["master"] {
		m.MasterPrivateKiB += procField(p, "RssAnon:")
	}
	m.WorkerRSSIdleKiB, m.WorkerFDsIdle = avgProc(pids["worker"])
	done := make(chan error, 1)
	go func() {
		_, err := b.loadgen(append([]string{"-http", t.HTTPAddr(), "-keepalive", strconv.Itoa(b.s.Concurrency), "-duration", "4s"}, tcpArgs(t, "8", "1h")...)...)
		done <- err
	}()
	time.Sleep(3 * time.Second)
	m.WorkerRSSLoadKiB, m.WorkerFDsLoad = avgProc(t.PIDs()["worker"])
	return m, <-done
}

func sumProc(pids []int) (rss int64, fds int) {
	for _, p := range pids {
		r, f := procStats(p)
		rss += r
		fds += f
	}
	return rss, fds
}

func avgProc(pids []int) (int64, int) {
	if len(pids) == 0 {
		return 0, 0
	}
	rss, fds := sumProc(pids)
	return rss / int64(len(pids)), fds / len(pids)
}

// procStats returns a process's resident memory in KiB and its open
// descriptors.
func procStats(pid int) (rssKiB int64, fds int) {
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(ents)
	}
	return procField(pid, "VmRSS:"), fds
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on
// every Linux architecture Go runs on).
const clockTicks = 100

// cpuTicks returns the CPU time (user and system) the processes used so
// far, in clock ticks.
func cpuTicks(pids []int) int64 { return statSum(pids, 14, 15) }

// minorFaults returns the page faults the processes took so far that
// needed no read from disk (a page first touched, or touched again after
// it was given back to the system).
func minorFaults(pids []int) int64 { return statSum(pids, 10) }

// statSum sums fields of the processes' /proc/PID/stat, numbered as in
// proc(5).
func statSum(pids []int, fields ...int) int64 {
	var n int64
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// The fields after the command (which may hold spaces), from
		// state (field 3) on.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		for _, k := range fields {
			if k-3 < len(f) {
				v, _ := strconv.ParseInt(f[k-3], 10, 64)
				n += v
			}
		}
	}
	return n
}

// procField returns a KiB figure of /proc/PID/status.
func procField(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			n, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return n
		}
	}
	return 0
}
