// Command grpcreport turns what scripts/grpcbench.sh measured (grpcload's
// lines, each prefixed with its round and target) into the gRPC section of
// docs/benchmarks.md: the ranges over the rounds for baton, nginx and
// HAProxy, baton's ratio to nginx round by round, and whether issue 24's
// goals hold. It reads standard input and writes the section, markers
// included, to standard output.
package main

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A line: "conns=1 round=2 nginx: calls/s 7704 p50 3.85ms p99 10.37ms
// failed 0", "stream round=1 baton: messages/s ...", "15 reloads under
// stream load, haproxy: messages/s ...".
var line = regexp.MustCompile(`^(conns=(\d+) round=\d+|stream round=\d+|15 reloads under (\w+) load,) (\w+): (?:calls|messages)/s (\d+) p50 (\S+) p99 (\S+)(?: streams \d+)? failed (\d+)$`)

type figure struct {
	rate   float64
	p99    time.Duration
	failed int
}

func main() {
	rows := map[string]map[string][]figure{} // row, target: one a round
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		row := "stream"
		switch {
		case m[2] != "":
			row = "conns=" + m[2]
		case m[3] != "":
			row = "reload " + m[3]
		}
		rate, _ := strconv.ParseFloat(m[5], 64)
		p99, _ := time.ParseDuration(m[7])
		failed, _ := strconv.Atoi(m[8])
		if rows[row] == nil {
			rows[row] = map[string][]figure{}
		}
		rows[row][m[4]] = append(rows[row][m[4]], figure{rate, p99, failed})
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "grpcreport:", err)
		os.Exit(1)
	}
	fmt.Print(section(rows, time.Now()))
}

func section(rows map[string]map[string][]figure, now time.Time) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("<!-- grpc: begin (scripts/grpcbench.sh writes this section) -->\n\n")
	w("## 7. gRPC: unary calls and long-lived streams through baton, nginx's grpc_pass and HAProxy\n\n")
	w("`./scripts/grpcbench.sh` (run by `make bench`; %s, this 2-core machine; load client,\n", now.UTC().Format("2006-01-02"))
	w("proxies and backend share the cores): calls of a 5-byte message through each proxy to the same\n")
	w("backend (`integration/internal/backend`'s gRPC echo, net/http's HTTP/2 server), 3 interleaved\n")
	w("rounds of 5 s each. baton: 2 workers, backend `protocol: h2c`. nginx: 2 workers, `grpc_pass`\n")
	w("with an upstream keepalive pool. HAProxy: 2 threads, `proto h2` on both sides, master-worker\n")
	w("(`-W`, reloaded by SIGUSR2). The client is `integration/cmd/grpcload` (x/net/http2), which\n")
	w("costs as much CPU as the proxies: the ratios matter more than the figures, and they move by\n")
	w("±10%% from run to run.\n\n")
	w("| 32 at once | baton | nginx | HAProxy | baton / nginx, round by round | p99 baton / nginx / HAProxy (ms) |\n")
	w("|---|---|---|---|---|---|\n")
	met := true
	for _, r := range []struct{ key, name string }{
		{"conns=1", "unary calls/s, over 1 connection"},
		{"conns=32", "unary calls/s, over 32 connections"},
		{"stream", "messages/s, 32 bidirectional streams held open over 1 connection (`-stream`)"},
	} {
		fs := rows[r.key]
		if fs == nil {
			continue
		}
		ratios := ratios(fs["baton"], fs["nginx"])
		if len(ratios) == 0 || slices.Min(ratios) < 1 || maxP99(fs["baton"]) > maxP99(fs["nginx"]) {
			met = false
		}
		w("| %s | %s | %s | %s | %s | %s / %s / %s |\n", r.name, rateRange(fs["baton"]), rateRange(fs["nginx"]), rateRange(fs["haproxy"]),
			ratioRange(ratios), p99Range(fs["baton"]), p99Range(fs["nginx"]), p99Range(fs["haproxy"]))
	}
	for _, r := range []struct{ key, name string }{
		{"reload unary", "15 reloads 400 ms apart, unary, 4 connections"},
		{"reload stream", "15 reloads 400 ms apart, 32 streams each held across all 15"},
	} {
		fs := rows[r.key]
		if fs == nil {
			continue
		}
		cell := func(t string) string {
			if len(fs[t]) == 0 {
				return "not run"
			}
			f := fs[t][0]
			return fmt.Sprintf("%s/s, %d failed", thousands(f.rate), f.failed)
		}
		if len(fs["baton"]) == 0 || fs["baton"][0].failed != 0 {
			met = false
		}
		w("| %s | %s | %s | %s | | %s / %s / %s |\n", r.name, cell("baton"), cell("nginx"), cell("haproxy"), p99Range(fs["baton"]), p99Range(fs["nginx"]), p99Range(fs["haproxy"]))
	}
	w("\n")
	if met {
		w("Issue 24's goals hold in this run: at or above nginx's rate in every round, p99 at or under\n")
		w("nginx's, nothing failed across reloads.\n")
	} else {
		w("Issue 24's goals (≥ 1.0× nginx in every round, p99 ≤ nginx's, 0 failed across reloads) do\n")
		w("not all hold in this run. baton relays each call through x/net/http2's client (an\n")
		w("`http.Request` and `http.Response` a call, HEADERS and DATA flushed apart upstream) and each\n")
		w("message through a pipe between two goroutines; the profile and what was tried are in\n")
		w("docs/design.md, \"HTTP/2 to backends\".\n")
	}
	w("\n<!-- grpc: end -->\n")
	return b.String()
}

// ratios are baton's rates over nginx's, round by round.
func ratios(baton, nginx []figure) []float64 {
	var out []float64
	for i := range min(len(baton), len(nginx)) {
		if nginx[i].rate > 0 {
			out = append(out, baton[i].rate/nginx[i].rate)
		}
	}
	return out
}

func rateRange(fs []figure) string {
	if len(fs) == 0 {
		return "not run"
	}
	lo, hi := bounds(fs, func(f figure) float64 { return f.rate })
	if lo == hi {
		return thousands(lo)
	}
	return thousands(lo) + "-" + thousands(hi)
}

// bounds returns the least and the most of what get says of fs (not
// empty).
func bounds[T cmp.Ordered](fs []figure, get func(figure) T) (lo, hi T) {
	lo, hi = get(fs[0]), get(fs[0])
	for _, f := range fs {
		lo, hi = min(lo, get(f)), max(hi, get(f))
	}
	return lo, hi
}

func ratioRange(rs []float64) string {
	if len(rs) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f-%.2fx", slices.Min(rs), slices.Max(rs))
}

func maxP99(fs []figure) time.Duration {
	var m time.Duration
	for _, f := range fs {
		m = max(m, f.p99)
	}
	return m
}

func p99Range(fs []figure) string {
	if len(fs) == 0 {
		return "-"
	}
	lo, hi := bounds(fs, func(f figure) time.Duration { return f.p99 })
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	if ms(lo) == ms(hi) {
		return ms(lo)
	}
	return ms(lo) + "-" + ms(hi)
}

// thousands writes a rate with a comma every three digits.
func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
