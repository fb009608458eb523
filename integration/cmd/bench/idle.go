package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
	// run from before it was recorded, wakeProbes).
	WakeRequests int `json:"wakeRequests,omitempty"`
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

// idleMany holds n idle HTTP/1.1 connections to t from several loadgen
// processes, measures the workers' memory, then runs keep-alive load on
// other connections beside them (the probe: are the requests of a worker
// holding that many still answered at once?).
func (b *bench) idleMany(t target, n int) (idleResult, error) {
	res := idleResult{}
	time.Sleep(time.Second)
	res.RSSBeforeKiB, _ = sumProc(t.PIDs()["worker"])
	type holder struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
	}
	var hs []holder
	defer func() {
		for _, h := range hs {
			h.stdin.Close()
			h.cmd.Wait()
		}
	}()
	for left := n; left > 0; left -= idlePerProcess {
		k := min(left, idlePerProcess)
		// Each from an address of its own: one has only some 28,000
		// ports for one destination.
		from := fmt.Sprintf("127.0.1.%d", len(hs)+1)
		cmd := exec.Command(filepath.Join(b.bin, "loadgen"), "-http", t.HTTPAddr(), "-idle", strconv.Itoa(k), "-idle-from", from)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return res, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		hs = append(hs, holder{cmd, stdin})
		ready := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			ready <- line
		}()
		select {
		case line := <-ready:
			if strings.TrimSpace(line) != "ready" {
				return res, fmt.Errorf("%d idle connections from one process: %q", k, line)
			}
		case <-time.After(3 * time.Minute):
			return res, fmt.Errorf("%d idle connections from one process: not open after 3 minutes", k)
		}
		res.Conns += k
	}
	time.Sleep(idleSettle)
	res.RSSIdleKiB, _ = sumProc(t.PIDs()["worker"])
	res.BytesPerConn = float64(res.RSSIdleKiB-res.RSSBeforeKiB) * 1024 / float64(res.Conns)
	// Requests on idle connections among them: wakeProbes more, from
	// here, each asked once after they all waited, wakePasses times over.
	waiting, err := idleconns.Open(t.HTTPAddr(), "127.0.2.1", wakeProbes, false, 10*time.Second)
	if err != nil {
		return res, fmt.Errorf("probe connections: %w", err)
	}
	defer idleconns.Close(waiting)
	lat := make([]float64, 0, wakePasses*len(waiting))
	for range wakePasses {
		time.Sleep(idleSettle)
		for _, c := range waiting {
			start := time.Now()
			if err := idleconns.Get(c, 10*time.Second); err != nil {
				return res, fmt.Errorf("a request on an idle connection: %w", err)
			}
			lat = append(lat, float64(time.Since(start).Microseconds())/1000)
		}
	}
	slices.Sort(lat)
	res.WakeP50, res.WakeP99, res.WakeRequests = lat[len(lat)/2], lat[len(lat)*99/100], len(lat)
	probe, err := b.loadgen("-http", t.HTTPAddr(), "-keepalive", strconv.Itoa(b.s.Concurrency), "-duration", "3s")
	res.Probe = probe
	return res, err
}

// wakeProbes is how many idle connections get a request in idleMany, and
// wakePasses how many times each does. One pass of 200 made the p99 the
// second-largest of 200 requests: one bad moment of the machine decided
// it (nginx's ranged from 0.76 to 6.3 ms over four runs of the phase);
// with 1,000 it is the tenth-largest.
const (
	wakeProbes = 200
	wakePasses = 5
)
