package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/baton-proxy/baton/ipc"
)

// The supervisor relays a route provider's routing without reading it:
// to the workers serving (at once, no generation), and to every worker it
// starts after (its hello announces it, the message follows).
func TestRoutingReachesEveryWorker(t *testing.T) {
	h := newHarness(t, 2, nil)
	first := h.readyGeneration(2)
	if first[0].hello.Routing {
		t.Fatal("a hello announced a routing before any was set")
	}
	got := make(chan string, 8)
	for _, p := range first {
		p.w.OnRouting(func(b []byte, v uint64) { got <- fmt.Sprintf("%d %s", v, b) })
	}
	if err := h.s.SetRouting([]byte(`{"rules":["one"]}`)); err != nil {
		t.Fatal(err)
	}
	for range first {
		if p := wait(t, got); p != `1 {"rules":["one"]}` {
			t.Fatalf("a worker got %q, want version 1", p)
		}
	}
	if err := h.s.SetRouting([]byte(`{"rules":["two"]}`)); err != nil {
		t.Fatal(err)
	}
	for range first {
		if p := wait(t, got); p != `2 {"rules":["two"]}` {
			t.Fatalf("a worker got %q, want version 2", p)
		}
	}
	// The status tells a worker that has applied the last routing from
	// one that has not (it reports the version it applied).
	first[0].w.SendStats(ipc.Stats{RoutingVersion: 2})
	first[1].w.SendStats(ipc.Stats{RoutingVersion: 1})
	h.waitStatus("the versions the workers applied", func(st Status) bool {
		ws := st.Generations[0].Workers
		return st.RoutingVersion == 2 && ws[0].RoutingVersion == 2 && ws[1].RoutingVersion == 1
	})
	// A new generation: its hellos say a routing follows, and it is the last.
	out := h.reloadAsync()
	for range 2 {
		p := h.next()
		if !p.hello.Routing {
			t.Fatal("a hello after SetRouting did not announce it")
		}
		next := make(chan string, 1)
		p.w.OnRouting(func(b []byte, v uint64) { next <- fmt.Sprintf("%d %s", v, b) })
		select {
		case b := <-next:
			if b != `2 {"rules":["two"]}` {
				t.Fatalf("a new worker got %q, want the last routing, version 2", b)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a new worker got no routing")
		}
		p.ready(t)
	}
	if hd := wait(t, out); hd.Outcome != OutcomeOK {
		t.Fatalf("handoff %s: %s", hd.Outcome, hd.Reason)
	}
}
