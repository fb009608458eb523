package proxy

import (
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-proxy/baton/internal/config"
)

// valid is s with each byte that is not part of valid UTF-8 replaced by
// U+FFFD, as appendJSONString writes it.
func valid(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		b.WriteRune(r)
		s = s[n:]
	}
	return b.String()
}

// FuzzAppendJSONString: what the access log writes as a JSON string is one
// (encoding/json reads it back) and says s, invalid bytes as U+FFFD.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uo\te`, "ctl\x00\x1f\n\t", "é😀", "bad\xff\xc3", "\u2028<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString([]byte("x"), []byte(s))
		var got string
		if err := json.Unmarshal(out[1:], &got); err != nil {
			t.Fatalf("%q: wrote %s, not a JSON string: %v", s, out[1:], err)
		}
		if want := valid(s); got != want {
			t.Fatalf("%q: wrote %s, which reads %q, want %q", s, out[1:], got, want)
		}
	})
}

// The cached second and the milliseconds appended by hand give what
// time.Format gives, across a second's change.
func TestAccessLogTime(t *testing.T) {
	var c stampCache
	base := time.Date(2026, 12, 1, 23, 59, 59, 998_000_000, time.FixedZone("x", 3600))
	for _, d := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, time.Second + 7*time.Millisecond} {
		e := accessEntry{start: base.Add(d), upstream: -1}
		line := e.appendJSON(nil, &c)
		var v struct{ Time string }
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		if want := e.start.UTC().Format("2006-01-02T15:04:05.000Z07:00"); v.Time != want {
			t.Errorf("time %q, want %q", v.Time, want)
		}
	}
}

// TestAccessLogWritesAFullBatchAtOnce: lines past accessFlushAt are written
// without waiting for the rest of the linger (an hour here), so that a busy
// worker's lines never pile up to the point of being dropped.
func TestAccessLogWritesAFullBatchAtOnce(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := startAccessLog(config.AccessLogJSON, w, time.Hour)
	defer l.close()
	defer r.Close() // first: the writer's last write then fails instead of waiting
	e := accessEntry{start: time.Now(), listener: "web", method: []byte("GET"), target: []byte("/" + strings.Repeat("x", 200)), proto: "HTTP/1.1", status: 200, upstream: -1}
	lines := 0
	for n := 0; n < accessFlushAt; lines++ {
		n += len(e.appendJSON(nil, &stampCache{}))
		l.log(&e)
	}
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(io.LimitReader(r, accessFlushAt))
	if err != nil {
		t.Fatalf("a batch of %d lines (%d KiB) not written within 10 s of a 1 h linger: %v", lines, accessFlushAt>>10, err)
	}
	if c := strings.Count(string(got), "\n"); c == 0 || l.dropped.Load() != 0 {
		t.Errorf("read %d lines, %d dropped", c, l.dropped.Load())
	}
}

// TestAccessLogCloseDoesNotWaitOnAFullPipe: with the log on a pipe nobody
// reads (stderr of a stuck log shipper), close gives up on the last
// write, so that the worker's exit is not held up by it (issue 20,
// problem 3).
func TestAccessLogCloseDoesNotWaitOnAFullPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	l := startAccessLog(config.AccessLogJSON, w, time.Millisecond)
	e := accessEntry{start: time.Now(), listener: "web", method: []byte("GET"), target: []byte("/" + strings.Repeat("x", 200)), proto: "HTTP/1.1", status: 200, upstream: -1}
	for range 2000 { // far more than a pipe's 64 KiB
		l.log(&e)
	}
	closed := make(chan struct{})
	go func() {
		l.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close waited on a pipe nobody reads")
	}
}
