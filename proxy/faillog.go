package proxy

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// failLogBurst is how many upstream failures a worker logs per second;
// past it they are counted, and the count goes with the next line.
const failLogBurst = 20

// failLog logs each upstream failure once, rate-limited so that a backend
// going down does not flood the log.
type failLog struct {
	log *zap.Logger

	mu         sync.Mutex // protects the rest
	window     time.Time  // start of the current second
	n          int        // lines logged in it
	suppressed int        // failures not logged since the last line
}

// upstreamFailure describes one failed exchange with a backend.
type upstreamFailure struct {
	listener string
	route    *routed
	endpoint string // host:port, or empty when none was reached
	stage    string // connect, request, response
	action   string // what followed: "retry", "next endpoint", or the status answered
	err      error
}

// add logs f, unless the second's burst is spent.
func (l *failLog) add(f upstreamFailure) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.window) >= time.Second {
		l.window, l.n = now, 0
	}
	if l.n >= failLogBurst {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.n++
	suppressed := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	fields := []zap.Field{
		zap.String("listener", f.listener),
		zap.String("backend", f.route.backend.name),
		zap.String("endpoint", f.endpoint),
		zap.String("stage", f.stage),
		zap.String("action", f.action),
		zap.Error(f.err),
	}
	if name := f.route.name(); name != "" {
		fields = append(fields, zap.String("route", name))
	}
	if suppressed > 0 {
		fields = append(fields, zap.Int("suppressed", suppressed))
	}
	l.log.Warn("upstream failed", fields...)
}

// everySecond logs one line a second at most, with the count of the ones
// it left out, for events that a client can cause at any rate.
type everySecond struct {
	log *zap.Logger

	mu         sync.Mutex // protects the rest
	last       time.Time  // when the last line was logged
	suppressed int        // events not logged since
}

// warn logs msg with fields, unless a line was logged less than a second
// ago.
func (l *everySecond) warn(msg string, fields ...zap.Field) {
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.last) < time.Second {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.last = now
	suppressed := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if suppressed > 0 {
		fields = append(fields, zap.Int("suppressed", suppressed))
	}
	l.log.Warn(msg, fields...)
}
