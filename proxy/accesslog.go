package proxy

import (
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/baton-proxy/baton/internal/config"
)

// Access log sizes: the queue of lines, the most bytes one write takes, and
// how long lines gather before a write.
const (
	accessQueue = 8192
	accessBatch = 64 << 10
	// accessLinger lets lines gather after the first one of a batch. The
	// writer sleeps meanwhile instead of waiting on the queue, so that a
	// busy worker pays neither a wakeup nor a write per request (one write
	// per request, as nginx's default access_log does, cost 5.8% of req/s).
	accessLinger = 10 * time.Millisecond
)

// accessLog writes one line per request without ever blocking a request:
// lines go into a bounded queue that one goroutine writes out, many lines
// per write; when the queue is full a line is dropped and counted.
type accessLog struct {
	combined bool
	lines    chan *[]byte
	bufs     sync.Pool // of *[]byte
	dropped  atomic.Uint64
	reopen   chan *os.File // a new file to write to (SIGUSR1)
	stop     chan struct{}
	done     sync.WaitGroup
}

// newAccessLog starts an access log writing to out.
func newAccessLog(format string, out *os.File) *accessLog {
	l := &accessLog{
		combined: format == config.AccessLogCombined,
		lines:    make(chan *[]byte, accessQueue),
		reopen:   make(chan *os.File, 1),
		stop:     make(chan struct{}),
	}
	l.done.Go(func() { l.run(out) })
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

// log formats e and queues the line, or drops it when the queue is full.
func (l *accessLog) log(e *accessEntry) {
	bp, _ := l.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, 512)
		bp = &b
	}
	if l.combined {
		*bp = e.appendCombined((*bp)[:0])
	} else {
		*bp = e.appendJSON((*bp)[:0])
	}
	select {
	case l.lines <- bp:
	default:
		l.dropped.Add(1)
		l.bufs.Put(bp)
	}
}

// run writes queued lines to out, gathering what is queued into one write,
// until close; a reopened file replaces out.
func (l *accessLog) run(out *os.File) {
	batch := make([]byte, 0, accessBatch)
	write := func() {
		if len(batch) > 0 && out != nil {
			if _, err := out.Write(batch); err != nil {
				l.dropped.Add(1) // the destination failed: counted, not fatal
			}
		}
		batch = batch[:0]
	}
	take := func(bp *[]byte) {
		batch = append(batch, *bp...)
		l.bufs.Put(bp)
	}
	linger := time.NewTimer(accessLinger)
	linger.Stop()
	for {
		select {
		case bp := <-l.lines:
			take(bp)
			linger.Reset(accessLinger)
			select {
			case <-linger.C:
			case <-l.stop: // written out below and by the stop case
				linger.Stop()
			}
		more:
			for len(batch) < accessBatch {
				select {
				case bp := <-l.lines:
					take(bp)
				default:
					break more
				}
			}
			write()
		case f := <-l.reopen:
			write()
			if out != nil && out != os.Stderr {
				out.Close()
			}
			out = f
		case <-l.stop:
			for {
				select {
				case bp := <-l.lines:
					take(bp)
					if len(batch) >= accessBatch {
						write()
					}
				default:
					write()
					if out != nil && out != os.Stderr {
						out.Close()
					}
					return
				}
			}
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

// close writes out what is queued and stops the writer.
func (l *accessLog) close() {
	close(l.stop)
	l.done.Wait()
}

func (e *accessEntry) appendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = e.start.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
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
func (e *accessEntry) appendCombined(b []byte) []byte {
	b = append(b, e.client...)
	b = append(b, " - - ["...)
	b = e.start.AppendFormat(b, "02/Jan/2006:15:04:05 -0700")
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
		c := s[0]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, `\u00`...)
				b = append(b, hexDigits[c>>4], hexDigits[c&15])
			default:
				b = append(b, c)
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
