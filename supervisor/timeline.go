package supervisor

import "time"

// sampleEvery and timelineLen: the connections timeline holds a sample a
// second for five minutes.
const (
	sampleEvery = time.Second
	timelineLen = 300
)

// timeline is a ring of the last timelineLen samples.
type timeline struct {
	samples []Sample
	next    int // where the next sample goes once the ring is full
}

// add records the connections of every generation with a live worker.
func (t *timeline) add(now time.Time, gens []*generation) {
	s := Sample{At: now.Round(time.Millisecond), Connections: map[uint64]int64{}}
	for _, g := range gens {
		if !g.live() {
			continue
		}
		var n int64
		for _, sl := range g.slots {
			n += sl.stats.Connections
		}
		s.Connections[g.id] = n
	}
	if len(t.samples) < timelineLen {
		t.samples = append(t.samples, s)
		return
	}
	t.samples[t.next] = s
	t.next = (t.next + 1) % timelineLen
}

// list returns the samples, oldest first.
func (t *timeline) list() []Sample {
	out := make([]Sample, 0, len(t.samples))
	out = append(out, t.samples[t.next:]...)
	return append(out, t.samples[:t.next]...)
}
