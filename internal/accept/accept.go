// Package accept runs accept loops that outlive failed accepts.
//
// An accept fails when the process is out of descriptors (EMFILE, ENFILE),
// out of memory for sockets, or when a connection was aborted before it
// was taken (ECONNABORTED). None of these ends a loop: it waits a little,
// as net/http's Server does, and tries again, so that a burst of
// connections or a descriptor leak elsewhere degrades service instead of
// ending it. Only closing the listener ends a loop.
package accept

import (
	"errors"
	"net"
	"time"

	"go.uber.org/zap"
)

// Backoff after a failed accept: MinBackoff, doubling up to MaxBackoff
// while accepts keep failing.
const (
	MinBackoff = 5 * time.Millisecond
	MaxBackoff = time.Second
	// LogEvery is the least time between two logs of failing accepts.
	LogEvery = time.Second
)

// Loop accepts on ln and hands each connection to handle, until ln is
// closed. Failed accepts are retried after a backoff and logged at most
// once per LogEvery, with how many failed meanwhile. name says which
// listener, in the logs.
func Loop(ln net.Listener, log *zap.Logger, name string, handle func(net.Conn)) {
	var (
		backoff  time.Duration
		failed   int // since the last log
		lastLog  time.Time
		firstErr error
	)
	for {
		c, err := ln.Accept()
		if err == nil {
			if failed > 0 {
				log.Warn("accept recovered", zap.String("listener", name), zap.Int("failedSinceLastLog", failed))
				failed = 0
			}
			backoff = 0
			handle(c)
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if failed == 0 {
			firstErr = err
		}
		failed++
		if now := time.Now(); now.Sub(lastLog) >= LogEvery {
			log.Error("accept failing; retrying", zap.String("listener", name), zap.Error(firstErr), zap.NamedError("last", err), zap.Int("failed", failed))
			lastLog, failed = now, 0
		}
		if backoff == 0 {
			backoff = MinBackoff
		} else {
			backoff = min(2*backoff, MaxBackoff)
		}
		time.Sleep(backoff)
	}
}
