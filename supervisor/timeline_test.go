package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/baton-proxy/baton/ipc"
)

// The timeline keeps the last five minutes, a sample a second, oldest
// first, and samples the generations that have a live worker only: one
// drained is gone from the next sample on.
func TestTimeline(t *testing.T) {
	old := &generation{id: 1}
	old.slots = []*slot{{gen: old, proc: &proc{}, stats: ipc.Stats{Connections: 5}}, {gen: old, proc: &proc{}, stats: ipc.Stats{Connections: 2}}}
	cur := &generation{id: 2}
	cur.slots = []*slot{{gen: cur, proc: &proc{}, stats: ipc.Stats{Connections: 9}}}
	var tl timeline
	t0 := time.Unix(1000, 0)
	tl.add(t0, []*generation{old, cur})
	if got := tl.list(); len(got) != 1 || got[0].Connections[1] != 7 || got[0].Connections[2] != 9 {
		t.Fatalf("first sample %+v, want generation 1 with 7 and 2 with 9", got)
	}
	old.slots[0].proc, old.slots[1].proc = nil, nil // drained
	for i := 1; i < timelineLen+5; i++ {
		tl.add(t0.Add(time.Duration(i)*time.Second), []*generation{old, cur})
	}
	got := tl.list()
	if len(got) != timelineLen {
		t.Fatalf("%d samples, want %d", len(got), timelineLen)
	}
	if !got[0].At.Equal(t0.Add(5*time.Second)) || !got[len(got)-1].At.Equal(t0.Add((timelineLen+4)*time.Second)) {
		t.Errorf("samples from %v to %v, want the last %d, oldest first", got[0].At, got[len(got)-1].At, timelineLen)
	}
	if _, ok := got[0].Connections[1]; ok {
		t.Errorf("a drained generation sampled: %+v", got[0])
	}
}

// TestBriefStatusLeavesOutTheTimeline: probes and the metrics page ask for
// Brief, which says what Status says but the timeline (300 samples, copied
// for each ask); `baton status` and the status page still get it.
func TestBriefStatusLeavesOutTheTimeline(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.readyGeneration(1)
	st := h.waitStatus("a timeline sample", func(st Status) bool { return len(st.Timeline) > 0 && st.Ready })
	br, ok := h.s.Brief(context.Background())
	if !ok {
		t.Fatal("supervisor gone")
	}
	if br.Timeline != nil {
		t.Errorf("Brief has %d timeline samples, want none", len(br.Timeline))
	}
	if !br.Ready || br.ActiveGeneration != st.ActiveGeneration || len(br.Generations) != len(st.Generations) {
		t.Errorf("Brief = ready %v, active %d, %d generations; Status: ready %v, active %d, %d generations",
			br.Ready, br.ActiveGeneration, len(br.Generations), st.Ready, st.ActiveGeneration, len(st.Generations))
	}
}
