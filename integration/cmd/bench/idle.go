package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/integration/internal/idleconns"
	"github.com/baton-proxy/baton/integration/internal/load"
)

// idleResult is what idle connections cost a target's workers (issue 23):
// Conns connections that each made one request and wait.
type idleResult struct {
	Conns int `json:"conns"`
	// The workers' resident memory (KiB, their sum) before the
	// connections, while they wait, and GiveBack after they closed.
	RSSBeforeKiB int64         `json:"rssBeforeKiB"`
	RSSIdleKiB   int64         `json:"rssIdleKiB"`
	RSSClosedKiB int64         `json:"rssClosedKiB"`
	GiveBack     time.Duration `json:"giveBackNs"`
	// BytesPerConn is (idle - before) / Conns.
	BytesPerConn float64 `json:"bytesPerConn"`
	// Probe is keep-alive load on other connections while they wait;
	// WakeP50 and WakeP99 (ms) the latency of a request on one of them
	// after it waited (the many-connections row only).
	Probe   *load.Result `json:"probe,omitempty"`
	WakeP50 float64      `json:"wakeP50,omitempty"`
	WakeP99 float64      `json:"wakeP99,omitempty"`
	// WakeRequests is how many requests the wake latencies are of (0: a
	// run from before it was recorded: 200).
	WakeRequests int `json:"wakeRequests,omitempty"`
	// WakePasses is how many times each connection was asked (0: a run
	// from before it was recorded, which asked 200 connections a pass).
	WakePasses int `json:"wakePasses,omitempty"`
	// WakeMs are those latencies (ms), sorted: for the percentiles the
	// report does not show, and to set runs side by side.
	WakeMs []float64 `json:"wakeMs,omitempty"`
	// WakeFaults is the workers' minor page faults over those requests.
	WakeFaults int64 `json:"wakeFaults,omitempty"`
}

// idleSettle is how long the idle connections wait before the workers'
// memory is read: what a worker does once its connections wait (baton
// parks them, and gives the memory of their start back) is done by then.
const idleSettle = 5 * time.Second

// idle opens n idle connections to t (HTTP/1.1, or HTTP/2 over TLS with
// h2), measures its workers' memory while they wait, closes them, and
// measures it again after giveBack.
func (b *bench) idle(t target, n int, h2 bool, giveBack time.Duration) (idleResult, error) {
	if l, ok := t.(interface{ maxIdle() int }); ok {
		n = min(n, l.maxIdle())
	}
	res := idleResult{GiveBack: giveBack}
	addr := t.HTTPAddr()
	if h2 {
		addr = t.HTTPSAddr()
	}
	time.Sleep(time.Second) // the workers settle after start
	res.RSSBeforeKiB, _ = sumProc(t.PIDs()["worker"])
	conns, err := idleconns.Open(addr, "", n, h2, 10*time.Second)
	if err != nil {
		return res, err
	}
	res.Conns = len(conns)
	time.Sleep(idleSettle)
	res.RSSIdleKiB, _ = sumProc(t.PIDs()["worker"])
	res.BytesPerConn = float64(res.RSSIdleKiB-res.RSSBeforeKiB) * 1024 / float64(res.Conns)
	idleconns.Close(conns)
	fmt.Fprintf(os.Stderr, "bench: idle (h2 %v): %.0f B a connection; closed, waiting %s\n", h2, res.BytesPerConn, giveBack)
	time.Sleep(giveBack)
	res.RSSClosedKiB, _ = sumProc(t.PIDs()["worker"])
	return res, nil
}

// idlePerProcess is how many idle connections one loadgen holds: this
// machine allows 20,000 descriptors a process.
const idlePerProcess = 10_000

// idleMany holds n idle HTTP/1.1 connections to each of ts at once, from
// several loadgen processes, and measures each target's workers' memory;
// then makes requests on idle connections among them, the targets' in
// turn (the i-th of every target before the next), so that a busy moment
// of the machine meets every target alike, as the throughput rows' turns
// do; then runs keep-alive load on other connections beside them (the
// probe: are the requests of a worker holding that many still answered at
// once?). One target after the other, the wake p99s of baton and nginx
// each moved by a factor of 2 to 3 from one run to the next, and which
// was lower with them.
func (b *bench) idleMany(ts []target, n int) (map[string]idleResult, error) {
	out := make(map[string]idleResult, len(ts))
	time.Sleep(time.Second)
	res := make([]idleResult, len(ts))
	for i, t := range ts {
		res[i].RSSBeforeKiB, _ = sumProc(t.PIDs()["worker"])
	}
	var hs []idleHolder
	defer func() {
		for _, h := range hs {
			h.stop()
		}
	}()
	for i, t := range ts {
		for left := n; left > 0; left -= idlePerProcess {
			k := min(left, idlePerProcess)
			// Each from an address of its own: one has only some 28,000
			// ports for one destination.
			h, err := b.holdIdle(t.HTTPAddr(), k, fmt.Sprintf("127.0.1.%d", len(hs)+1))
			if h.cmd != nil {
				hs = append(hs, h)
			}
			if err != nil {
				return out, fmt.Errorf("%s: %d idle connections from one process: %w", t.Name(), k, err)
			}
			res[i].Conns += k
		}
	}
	time.Sleep(idleSettle)
	for i, t := range ts {
		res[i].RSSIdleKiB, _ = sumProc(t.PIDs()["worker"])
		res[i].BytesPerConn = float64(res[i].RSSIdleKiB-res[i].RSSBeforeKiB) * 1024 / float64(res[i].Conns)
	}
	// Requests on idle connections among them: wakeProbes more a target,
	// each asked once after they all waited, wakePasses times over.
	waiting := make([][]net.Conn, len(ts))
	for i, t := range ts {
		cs, err := idleconns.Open(t.HTTPAddr(), fmt.Sprintf("127.0.2.%d", i+1), wakeProbes, false, 10*time.Second)
		if err != nil {
			return out, fmt.Errorf("%s: probe connections: %w", t.Name(), err)
		}
		defer idleconns.Close(cs)
		waiting[i] = cs
	}
	// The bench's own client and backend wake first after each pass's
	// sleep, on a connection of their own: otherwise the first request
	// of a pass, always the same target's, paid their wake-up too (about
	// a millisecond here, for either target: a tenth of the p99's
	// samples).
	warm, err := idleconns.Open(backendHTTP, "127.0.2.250", 1, false, 10*time.Second)
	if err != nil {
		return out, fmt.Errorf("the bench's backend: %w", err)
	}
	defer idleconns.Close(warm)
	// The bench's own collector stays out of the requests measured: the
	// phases before this one (the 10,000 TLS connections of "idle", in
	// this process) leave garbage and memory to give back, and a cycle or
	// the scavenger meeting a request added its time to whichever target
	// was asked. The requests below allocate a few MB at most.
	debug.FreeOSMemory()
	faults := make([]int64, len(ts))
	for i, t := range ts {
		faults[i] = minorFaults(t.PIDs()["worker"])
	}
	lat, err := func() ([][]float64, error) {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		lat := make([][]float64, len(ts))
		for pass := range wakePasses {
			time.Sleep(idleSettle)
			for range 2 {
				if err := idleconns.Get(warm[0], 10*time.Second); err != nil {
					return nil, fmt.Errorf("the bench's backend: %w", err)
				}
			}
			for k := range wakeProbes {
				for j := range ts {
					i := (j + k + pass) % len(ts) // the first to be asked rotates, within a pass and from one to the next
					start := time.Now()
					if err := idleconns.Get(waiting[i][k], 10*time.Second); err != nil {
						return nil, fmt.Errorf("%s: a request on an idle connection: %w", ts[i].Name(), err)
					}
					lat[i] = append(lat[i], float64(time.Since(start).Microseconds())/1000)
				}
			}
		}
		return lat, nil
	}()
	if err != nil {
		return out, err
	}
	for i, t := range ts {
		res[i].WakeFaults = minorFaults(t.PIDs()["worker"]) - faults[i]
		l := lat[i]
		slices.Sort(l)
		res[i].WakeP50, res[i].WakeP99, res[i].WakeRequests, res[i].WakePasses, res[i].WakeMs = l[len(l)/2], l[len(l)*99/100], len(l), wakePasses, l
		probe, err := b.loadgen("-http", t.HTTPAddr(), "-keepalive", strconv.Itoa(b.s.Concurrency), "-duration", "3s")
		res[i].Probe = probe
		out[t.Name()] = res[i]
		if err != nil {
			return out, fmt.Errorf("%s: %w", t.Name(), err)
		}
	}
	return out, nil
}

// idleHolder is a loadgen process that holds idle connections until its
// standard input closes (stop).
type idleHolder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// holdIdle starts a loadgen that opens n idle connections to addr from
// the address from, and waits until it says they are open. When the
// process started, the holder is returned with it (its cmd set), error or
// not, for the caller to stop.
func (b *bench) holdIdle(addr string, n int, from string) (idleHolder, error) {
	cmd := exec.Command(filepath.Join(b.bin, "loadgen"), "-http", addr, "-idle", strconv.Itoa(n), "-idle-from", from)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return idleHolder{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return idleHolder{}, err
	}
	if err := cmd.Start(); err != nil {
		return idleHolder{}, err
	}
	h := idleHolder{cmd, stdin}
	// The reader ends when the process's output does: at stop, at the
	// latest.
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			return h, fmt.Errorf("%q", line)
		}
		return h, nil
	case <-time.After(3 * time.Minute):
		return h, errors.New("not open after 3 minutes")
	}
}

// stop closes the holder's standard input, which ends it, and waits for
// it.
func (h idleHolder) stop() {
	h.stdin.Close()
	h.cmd.Wait()
}

// wakeProbes is how many idle connections get a request in idleMany, and
// wakePasses how many times each does. One pass of 200 made the p99 the
// second-largest of 200 requests: one bad moment of the machine decided
// it (nginx's ranged from 0.76 to 6.3 ms over four runs of the phase).
// With 1,200 (6 passes of 200) it was the twelfth-largest, and the
// ratio of the two targets' p99s still had a 95% interval of 0.64-2.31
// (the report's bootstrap, on the run of 79e4904); with 3,600 it is the
// thirty-sixth, for about two seconds more. Even, so that each of two
// targets is asked first in as many passes.
const (
	wakeProbes = 600
	wakePasses = 6
)
