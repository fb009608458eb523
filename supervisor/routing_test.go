package supervisor

import (
	"testing"
	"time"
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
		p.w.OnRouting(func(b []byte) { got <- string(b) })
	}
	if err := h.s.SetRouting([]byte(`{"rules":["one"]}`)); err != nil {
		t.Fatal(err)
	}
	for range first {
		if p := wait(t, got); p != `{"rules":["one"]}` {
			t.Fatalf("a worker got %q", p)
		}
	}
	if err := h.s.SetRouting([]byte(`{"rules":["two"]}`)); err != nil {
		t.Fatal(err)
	}
	for range first {
		wait(t, got)
	}
	// A new generation: its hellos say a routing follows, and it is the last.
	out := h.reloadAsync()
	for range 2 {
		p := h.next()
		if !p.hello.Routing {
			t.Fatal("a hello after SetRouting did not announce it")
		}
		next := make(chan string, 1)
		p.w.OnRouting(func(b []byte) { next <- string(b) })
		select {
		case b := <-next:
			if b != `{"rules":["two"]}` {
				t.Fatalf("a new worker got %q, want the last routing", b)
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
