package proxy

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/baton-proxy/baton/internal/config"
)

// Access log sizes: the bytes of lines a worker holds for its writer (past
// them, lines are dropped and counted), and how long lines gather before a
// write.
const (
	accessBuffer = 4 << 20
	// accessLinger lets lines gather after the first one of a batch: a
	// busy worker pays neither a wakeup nor a write per request (one write
	// per request, as nginx's default access_log does, cost 5.8% of req/s).
	// Each write is a system call announced to the scheduler, which wakes
	// the runtime's monitor thread from its sleep; it then polls every
	// 20 µs for a while: at a write every 10 ms that was 3.7% of a busy
	// worker's CPU (nanosleeps, futex wake-ups), and the log cost 14.7%
	// more worker CPU per request; at 100 ms, 6.2%.
	accessLinger = 100 * time.Millisecond
	// accessFlushAt: a batch this large is written without waiting for
	// the rest of the linger, so that a busy worker's lines do not pile up
	// towards accessBuffer.
	accessFlushAt = 256 << 10
)

// accessLog writes one line per request without ever blocking a request:
// a request formats its line straight into a buffer shared under a mutex
// (a worker has one processor: the mutex is as good as never contended),
// and one goroutine swaps the buffer out and writes it, many lines per
// write. When the buffer is full (the file does not keep up), a line is
// dropped and counted.
type accessLog struct {
	linger   time.Duration // accessLinger, but in tests
	combined bool
	mu       sync.Mutex // protects buf and the stamp caches
	buf      []byte     // lines not yet written
	json     stampCache
	clf      stampCache
	dropped  atomic.Uint64
	wake     chan struct{} // lines arrived in an empty buffer
	full     chan struct{} // the buffer reached accessFlushAt
	reopen   chan *os.File // a new file to write to (SIGUSR1)
	stop     chan struct{}
	done     chan struct{} // closed when run returns
}

// accessCloseWait bounds close's wait for the last lines to be written: a
// destination that takes nothing (stderr on a pipe nobody reads) must not
// hold up the worker's exit.
const accessCloseWait = time.Second

// newAccessLog starts an access log writing to out.
func newAccessLog(format string, out *os.File) *accessLog {
	return startAccessLog(format, out, accessLinger)
}

// startAccessLog is newAccessLog with the linger given.
func startAccessLog(format string, out *os.File, linger time.Duration) *accessLog {
	l := &accessLog{
		linger:   linger,
		combined: format == config.AccessLogCombined,
		buf:      make([]byte, 0, 64<<10),
		wake:     make(chan struct{}, 1),
		full:     make(chan struct{}, 1),
		reopen:   make(chan *os.File, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go func() {
		defer close(l.done)
		l.run(out)
	}()
	return l
}

// protoTCP is the protocol of a tcp listener's stream in the access log:
// such a line has no method, host or path.
const protoTCP = "TCP"

// accessEntry is what a line says of one request. Its byte slices are the
// caller's, valid during log.
type accessEntry struct {
	start                time.Time
	listener             string
	client               []byte
	method, host, target []byte
	proto                string
	status               int
	bytesIn, bytesOut    int64         // on the wire, heads included
	bodyOut              int64         // the response body's bytes
	upstream             time.Duration // -1: no upstream exchange
	backend, endpoint    string
	generation           uint64
	tlsVersion, sni      string
	referer, userAgent   []byte
}

// log formats e's line into the buffer, or drops it when the buffer is
// full.
func (l *accessLog) log(e *accessEntry) {
	l.mu.Lock()
	n := len(l.buf)
	if n >= accessBuffer {
		l.mu.Unlock()
		l.dropped.Add(1)
		return
	}
	if l.combined {
		l.buf = e.appendCombined(l.buf, &l.clf)
	} else {
		l.buf = e.appendJSON(l.buf, &l.json)
	}
	m := len(l.buf)
	l.mu.Unlock()
	switch {
	case n == 0:
		signal(l.wake)
	case n < accessFlushAt && m >= accessFlushAt:
		signal(l.full)
	}
}

// signal wakes the goroutine waiting on c, if it is not awake already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run writes the lines out, accessLinger after the first of each batch or
// once they reach accessFlushAt, until close; a reopened file replaces out.
func (l *accessLog) run(out *os.File) {
	var spare []byte // the buffer not in use, swapped at each write
	flush := func() {
		l.mu.Lock()
		b := l.buf
		l.buf = spare[:0]
		l.mu.Unlock()
		select {
		case <-l.full: // of the lines swapped out
		default:
		}
		if len(b) > 0 && out != nil {
			if _, err := out.Write(b); err != nil {
				// The destination failed: its lines are counted, not fatal.
				l.dropped.Add(uint64(bytes.Count(b, []byte{'\n'})))
			}
		}
		spare = b[:0]
	}
	closeOut := func() {
		if out != nil && out != os.Stderr {
			out.Close()
		}
	}
	linger := time.NewTimer(l.linger)
	linger.Stop()
	for {
		select {
		case <-l.wake:
			linger.Reset(l.linger)
			select {
			case <-linger.C:
			case <-l.full:
				linger.Stop()
			case <-l.stop: // written out below, then by the stop case
				linger.Stop()
			}
			flush()
		case f := <-l.reopen:
			flush()
			closeOut()
			out = f
		case <-l.stop:
			flush()
			closeOut()
			return
		}
	}
}

// setFile makes the log write to f from now on (a reopened file).
func (l *accessLog) setFile(f *os.File) {
	select {
	case l.reopen <- f:
	case <-l.stop:
		f.Close()
	}
}

// close writes out what is buffered and stops the writer, waiting for it
// at most accessCloseWait: a writer stuck in a write that the destination
// does not take is left to end with the process. Lines logged after close
// are dropped.
func (l *accessLog) close() {
	close(l.stop)
	t := time.NewTimer(accessCloseWait)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
	}
}

// stampCache keeps the text of the last second a layout formatted: the
// lines of a busy log mostly fall in the same second.
type stampCache struct {
	sec  int64
	text []byte
}

func (c *stampCache) append(b []byte, t time.Time, layout string) []byte {
	if sec := t.Unix(); sec != c.sec || c.text == nil {
		c.sec = sec
		c.text = t.AppendFormat(c.text[:0], layout)
	}
	return append(b, c.text...)
}

func (e *accessEntry) appendJSON(b []byte, stamp *stampCache) []byte {
	b = append(b, `{"time":"`...)
	t := e.start.UTC()
	b = stamp.append(b, t, "2006-01-02T15:04:05")
	ms := t.Nanosecond() / 1e6
	b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z')
	b = append(b, `","listener":`...)
	b = appendJSONString(b, []byte(e.listener))
	b = append(b, `,"client":`...)
	b = appendJSONString(b, e.client)
	if e.proto != protoTCP {
		b = append(b, `,"method":`...)
		b = appendJSONString(b, e.method)
		b = append(b, `,"host":`...)
		b = appendJSONString(b, e.host)
		b = append(b, `,"path":`...)
		b = appendJSONString(b, e.target)
	}
	b = append(b, `,"protocol":"`...)
	b = append(b, e.proto...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"bytesIn":`...)
	b = strconv.AppendInt(b, e.bytesIn, 10)
	b = append(b, `,"bytesOut":`...)
	b = strconv.AppendInt(b, e.bytesOut, 10)
	b = append(b, `,"duration":`...)
	b = strconv.AppendFloat(b, time.Since(e.start).Seconds(), 'f', 6, 64)
	if e.upstream >= 0 {
		b = append(b, `,"upstreamTime":`...)
		b = strconv.AppendFloat(b, e.upstream.Seconds(), 'f', 6, 64)
	}
	if e.backend != "" {
		b = append(b, `,"backend":`...)
		b = appendJSONString(b, []byte(e.backend))
	}
	if e.endpoint != "" {
		b = append(b, `,"endpoint":`...)
		b = appendJSONString(b, []byte(e.endpoint))
	}
	b = append(b, `,"generation":`...)
	b = strconv.AppendUint(b, e.generation, 10)
	if e.tlsVersion != "" {
		b = append(b, `,"tls":"`...)
		b = append(b, e.tlsVersion...)
		b = append(b, `","sni":`...)
		b = appendJSONString(b, []byte(e.sni))
	}
	return append(b, "}\n"...)
}

// appendCombined writes Apache's combined format:
// client - - [time] "method target proto" status bytes "referer" "agent".
func (e *accessEntry) appendCombined(b []byte, stamp *stampCache) []byte {
	b = append(b, e.client...)
	b = append(b, " - - ["...)
	b = stamp.append(b, e.start, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	if e.proto != protoTCP {
		b = appendQuoted(b, e.method)
		b = append(b, ' ')
		b = appendQuoted(b, e.target)
		b = append(b, ' ')
	}
	b = append(b, e.proto...)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.bodyOut, 10)
	b = append(b, ` "`...)
	b = appendQuoted(b, e.referer)
	b = append(b, `" "`...)
	b = appendQuoted(b, e.userAgent)
	return append(b, "\"\n"...)
}

// appendQuoted appends s for a quoted field of the combined format: '"'
// and '\' escaped, bytes outside printable ASCII as \xHH (as nginx).
func appendQuoted(b, s []byte) []byte {
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c >= 0x7f:
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD.
func appendJSONString(b, s []byte) []byte {
	b = append(b, '"')
	for len(s) > 0 {
		// The run that needs no escaping goes at once.
		i := 0
		for i < len(s) && s[i] >= 0x20 && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\' {
			i++
		}
		b = append(b, s[:i]...)
		s = s[i:]
		if len(s) == 0 {
			break
		}
		c := s[0]
		if c < utf8.RuneSelf {
			if c == '"' || c == '\\' {
				b = append(b, '\\', c)
			} else {
				b = append(b, `\u00`...)
				b = append(b, hexDigits[c>>4], hexDigits[c&15])
			}
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[:n]...)
		}
		s = s[n:]
	}
	return append(b, '"')
}
