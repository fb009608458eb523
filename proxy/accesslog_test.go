package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
