package integration

import (
	"testing"
	"time"

	"github.com/baton-proxy/baton/integration/internal/harness"
	"github.com/baton-proxy/baton/supervisor"
)

// TestResizeUnderLoad changes the size of a reuseport group on reload
// while keep-alive, new-connection and POST clients and TCP streams run:
// `sockets` 2 → 4 → 1, and `workers` 2 → 4 → 1 with `sockets` left out
// (one socket per worker). The new generation gets sockets of its own, the
// steering program sends new connections to them once it is active, and
// the old sockets close as the old generation drains: the kernel migrates
// what was queued on them (BPF_SK_REUSEPORT_SELECT_OR_MIGRATE). Not one
// failure, counted as a client that never retries sees it (issue 11).
func TestResizeUnderLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		steps   []options // the first starts baton
		sockets []int     // the group's size after each step
	}{
		{"sockets", []options{{workers: 2, sockets: 2}, {workers: 2, sockets: 4}, {workers: 2, sockets: 1}}, []int{2, 4, 1}},
		{"workers", []options{{workers: 2}, {workers: 4}, {workers: 1}}, []int{2, 4, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := startBackend(t)
			config := func(o options) string {
				o.reusePort, o.tcp = true, true
				return o.configYAML(be)
			}
			b := startBaton(t, config(tc.steps[0]))
			checkSockets := func(want int) {
				t.Helper()
				for _, l := range b.Status().Listeners {
					if l.Sockets != want || l.Steering != "bpf" {
						t.Fatalf("listener %s: %d sockets, steering %q; want %d, bpf", l.Name, l.Sockets, l.Steering, want)
					}
				}
			}
			checkSockets(tc.sockets[0])
			l := startLoad(t, b)
			l.wait(t, 10000)
			// Each size twice: the second reload of a size shares the
			// group's sockets, the first opens new ones.
			for i, o := range tc.steps[1:] {
				for range 2 {
					b.WriteConfig(config(o))
					h := b.SIGHUP()
					if h.Outcome != supervisor.OutcomeOK {
						t.Fatalf("reload to %+v: %s: %s", o, h.Outcome, h.Reason)
					}
					checkSockets(tc.sockets[i+1])
					l.wait(t, 10000)
				}
			}
			checkNoFailures(t, l.stop(), 2000)
			// The old sockets are gone once their generations drained.
			waitDrained(t, b, 30*time.Second)
			if got := listeningSockets(t, b.Address("web")); got != tc.sockets[len(tc.sockets)-1] {
				t.Errorf("%d sockets listen on %s after the resizes, want %d", got, b.Address("web"), tc.sockets[len(tc.sockets)-1])
			}
		})
	}
}

// listeningSockets counts the TCP sockets listening on addr (host:port), as
// /proc/net/tcp and tcp6 list them.
func listeningSockets(t *testing.T, addr string) int {
	t.Helper()
	n, err := harness.ListeningSockets(addr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
