// Command idlewake measures what a request on an idle keep-alive
// connection costs a proxy, against one on a connection that just served
// one: it opens -n connections that each make one request, waits -wait
// (long enough for baton to park them), asks one request on each
// ("parked"), then two more on each right away ("hot"). It prints the
// latency percentiles of both and, with -pids, the CPU the given
// processes (the proxy's workers) used per request in each phase.
//
//	go run ./integration/cmd/idlewake -addr 127.0.0.1:8080 -pids "$(pgrep -d' ' -P SUPERVISOR_PID)"
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-proxy/baton/integration/internal/idleconns"
)

func main() {
	addr := flag.String("addr", "", "the proxy's HTTP address")
	n := flag.Int("n", 1000, "connections")
	wait := flag.Duration("wait", 500*time.Millisecond, "how long the connections wait before the parked requests")
	from := flag.String("from", "127.0.3.1", "the connections' source address")
	pids := flag.String("pids", "", "processes whose CPU to count (space-separated)")
	flag.Parse()
	conns, err := idleconns.Open(*addr, *from, *n, false, 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer idleconns.Close(conns)
	time.Sleep(*wait)
	c0 := ticks(*pids)
	parked := make([]float64, 0, len(conns))
	for _, c := range conns {
		parked = append(parked, get(c))
	}
	c1 := ticks(*pids)
	hot := make([]float64, 0, 2*len(conns))
	for _, c := range conns {
		hot = append(hot, get(c), get(c))
	}
	c2 := ticks(*pids)
	fmt.Printf("%s parked: p50 %.3f p90 %.3f p99 %.3f ms", *addr, pct(parked, 50), pct(parked, 90), pct(parked, 99))
	fmt.Printf(" | hot: p50 %.3f p90 %.3f p99 %.3f ms\n", pct(hot, 50), pct(hot, 90), pct(hot, 99))
	if *pids != "" {
		// Clock ticks are 10 ms: with 1,000 requests, 10 us a request.
		fmt.Printf("CPU a request: parked %s, hot %s\n", perRequest(c0, c1, len(parked)), perRequest(c1, c2, len(hot)))
	}
}

// get asks one request on c and returns its latency in milliseconds.
func get(c net.Conn) float64 {
	start := time.Now()
	if err := idleconns.Get(c, 5*time.Second); err != nil {
		log.Fatal(err)
	}
	return float64(time.Since(start).Microseconds()) / 1000
}

// pct returns the p-th percentile of v.
func pct(v []float64, p int) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)*p/100]
}

// cpuTicks are clock ticks of CPU, in user space and in the kernel.
type cpuTicks struct{ user, sys int }

// ticks sums the user and system clock ticks of the processes pids.
func ticks(pids string) cpuTicks {
	var t cpuTicks
	for _, p := range strings.Fields(pids) {
		b, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			log.Fatal(err)
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		u, _ := strconv.Atoi(f[11])
		s, _ := strconv.Atoi(f[12])
		t.user += u
		t.sys += s
	}
	return t
}

// perRequest says the CPU from a to b for each of n requests, in
// microseconds (a tick is 10 ms): all of it, in user space and in the
// kernel.
func perRequest(a, b cpuTicks, n int) string {
	us := func(t int) float64 { return float64(t) * 1e4 / float64(n) }
	u, s := us(b.user-a.user), us(b.sys-a.sys)
	return fmt.Sprintf("%.0f us (user %.0f, system %.0f)", u+s, u, s)
}
