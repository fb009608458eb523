package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// idleResult is what idle keep-alive connections cost a target's workers
// (issue 23): Conns connections that each made one request and wait.
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
}

// idle opens n keep-alive connections to t, one request each, measures
// its workers' memory while they wait, closes them, and measures it again
// after giveBack.
func (b *bench) idle(t target, n int, giveBack time.Duration) (idleResult, error) {
	if l, ok := t.(interface{ maxIdle() int }); ok {
		n = min(n, l.maxIdle())
	}
	res := idleResult{GiveBack: giveBack}
	time.Sleep(time.Second) // the workers settle after start
	workers := t.PIDs()["worker"]
	res.RSSBeforeKiB, _ = sumProc(workers)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", t.HTTPAddr(), 5*time.Second)
		if err != nil {
			return res, fmt.Errorf("connection %d: %w", len(conns), err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")); err != nil {
			return res, fmt.Errorf("connection %d: %w", len(conns), err)
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
		if err != nil {
			return res, fmt.Errorf("connection %d: %w", len(conns), err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return res, fmt.Errorf("connection %d: status %d", len(conns), resp.StatusCode)
		}
		c.SetDeadline(time.Time{})
	}
	res.Conns = len(conns)
	time.Sleep(5 * time.Second) // what a worker does once its connections wait (baton: they park, and the memory goes back)
	res.RSSIdleKiB, _ = sumProc(t.PIDs()["worker"])
	res.BytesPerConn = float64(res.RSSIdleKiB-res.RSSBeforeKiB) * 1024 / float64(res.Conns)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	fmt.Fprintf(os.Stderr, "bench: idle: %.0f B a connection; closed, waiting %s\n", res.BytesPerConn, giveBack)
	time.Sleep(giveBack)
	res.RSSClosedKiB, _ = sumProc(t.PIDs()["worker"])
	return res, nil
}
