package supervisor

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// Without BPF a canary takes k of a group's N sockets: percent of N
// rounded, at least one and at least one left to the active generation.
func TestPlanSlots(t *testing.T) {
	for _, tc := range []struct {
		percent, sockets int
		canary           []int // the sockets the canary accepts on
		share            float64
	}{
		{10, 2, []int{1}, 50},
		{10, 4, []int{3}, 25},
		{50, 4, []int{2, 3}, 50},
		{90, 4, []int{1, 2, 3}, 75},
		{99, 2, []int{1}, 50},
	} {
		socks := make([]*socket, tc.sockets)
		g := &generation{plan: &plan{listeners: []plannedListener{{spec: ListenerSpec{Name: "web"}, sockets: socks, slots: true}}}}
		c := &canaryRun{percent: tc.percent}
		c.planSlots(g)
		if !reflect.DeepEqual(c.activePaused["web"], tc.canary) || c.share != tc.share {
			t.Errorf("%d%% of %d sockets: canary on %v (share %v), want %v (%v)", tc.percent, tc.sockets, c.activePaused["web"], c.share, tc.canary, tc.share)
		}
		if len(g.paused["web"])+len(c.activePaused["web"]) != tc.sockets {
			t.Errorf("%d%% of %d sockets: canary paused on %v, active on %v: not a split", tc.percent, tc.sockets, g.paused["web"], c.activePaused["web"])
		}
	}
}

// A canary without BPF (the harness has none) takes 1 of the group's 2
// sockets: its workers start paused on the other and the active
// generation's workers pause on its socket once it serves; a reload queued
// while it started is refused with the reason; abort resumes the active
// workers and drains the canary.
func TestCanarySlotsLifecycle(t *testing.T) {
	h := newHarness(t, 2, nil)
	old := h.readyGeneration(2)
	var oldPaused []chan map[string][]int
	for _, p := range old {
		c := make(chan map[string][]int, 8)
		p.w.OnPaused(func(m map[string][]int) { c <- m })
		if m := wait(t, c); len(m) != 0 {
			t.Fatalf("an active worker starts paused on %v", m)
		}
		oldPaused = append(oldPaused, c)
	}
	canary := make(chan Handoff, 1)
	go func() { canary <- h.s.ReloadCanary(50) }()
	n1, n2 := h.next(), h.next()
	for _, p := range []*fakeProc{n1, n2} {
		if p.hello.CanaryOf != 1 || !reflect.DeepEqual(p.hello.Paused, map[string][]int{"web": {0}}) {
			t.Errorf("canary hello: canaryOf %d, paused %v; want 1, web [0]", p.hello.CanaryOf, p.hello.Paused)
		}
	}
	queued := h.reloadAsync()
	n1.ready(t)
	n2.ready(t)
	if ho := wait(t, canary); ho.Outcome != OutcomeCanary || ho.Trigger != "canary" || ho.Canary == nil || ho.Canary.Percent != 50 {
		t.Fatalf("canary handoff: %+v", ho)
	}
	if ho := wait(t, queued); ho.Outcome != OutcomeRefused || !strings.Contains(ho.Reason, "canary is running") {
		t.Errorf("reload queued while the canary started: %s: %s", ho.Outcome, ho.Reason)
	}
	for _, c := range oldPaused {
		if m := wait(t, c); !reflect.DeepEqual(m, map[string][]int{"web": {1}}) {
			t.Errorf("active worker told to pause on %v, want web [1]", m)
		}
	}
	st := h.status()
	if st.Canary == nil || st.Canary.Share != 50 || !strings.HasPrefix(st.Canary.Steering, "slots") || genState(st, 2) != GenCanary {
		t.Fatalf("status during the canary: %+v, generation 2 %s", st.Canary, genState(st, 2))
	}
	if ho := h.s.Abort(); ho.Outcome != OutcomeAborted || ho.Canary.Verdict != "aborted" || ho.Canary.By != "operator" {
		t.Fatalf("abort: %+v (%+v)", ho, ho.Canary)
	}
	for _, c := range oldPaused {
		if m := wait(t, c); len(m) != 0 {
			t.Errorf("after abort an active worker stays paused on %v", m)
		}
	}
	for _, p := range []*fakeProc{n1, n2} {
		select {
		case <-p.w.Draining():
		case <-time.After(10 * time.Second):
			t.Fatal("the aborted canary's worker was not told to drain")
		}
	}
	if st := h.status(); st.Canary != nil || st.ActiveGeneration != 1 {
		t.Errorf("after abort: canary %+v, active %d", st.Canary, st.ActiveGeneration)
	}
}
