package proxy

import (
	"testing"
	"time"
)

// The wheel gives each stream to its check once, at the first sweep at or
// after its time and not before, however far ahead the time (past the
// wheel's span it waits out whole turns), and never one taken out.
func TestStreamWheelChecksEachOnTime(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	var w streamWheel
	w.tick = base.UnixNano() / int64(loopSweepEvery)
	after := []time.Duration{
		100 * time.Millisecond, 250 * time.Millisecond, 260 * time.Millisecond,
		time.Second, 63 * time.Second, 255 * time.Second, 256 * time.Second,
		257 * time.Second, 520 * time.Second, 10 * time.Minute,
	}
	streams := make([]*loopStream, len(after))
	for i, d := range after {
		streams[i] = &loopStream{checkAt: base.Add(d).UnixNano()}
		w.add(streams[i])
	}
	gone := &loopStream{checkAt: base.Add(time.Second).UnixNano()}
	w.add(gone)
	w.remove(gone)
	checked := make(map[*loopStream]time.Time)
	for now := base; now.Before(base.Add(11 * time.Minute)); now = now.Add(loopSweepEvery) {
		w.due(now, func(st *loopStream) {
			if _, ok := checked[st]; ok {
				t.Fatalf("checked twice (at %s)", now.Sub(base))
			}
			checked[st] = now
		})
	}
	if _, ok := checked[gone]; ok {
		t.Fatal("a stream taken out of the wheel was checked")
	}
	for i, st := range streams {
		at, ok := checked[st]
		due := base.Add(after[i])
		switch {
		case !ok:
			t.Errorf("due after %s: never checked", after[i])
		case at.Before(due):
			t.Errorf("due after %s: checked early, after %s", after[i], at.Sub(base))
		case at.Sub(due) >= loopSweepEvery:
			t.Errorf("due after %s: checked late, after %s", after[i], at.Sub(base))
		}
	}
}

// wheelWithOne is a wheel last swept at base, holding one stream due
// after d.
func wheelWithOne(base time.Time, d time.Duration) (*streamWheel, *loopStream) {
	w := &streamWheel{tick: base.UnixNano() / int64(loopSweepEvery)}
	st := &loopStream{checkAt: base.Add(d).UnixNano()}
	w.add(st)
	return w, st
}

// A sweep late by more than the wheel's span (a loop that slept) looks
// at every slot once, and what is due is checked.
func TestStreamWheelLateSweep(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	w, _ := wheelWithOne(base, time.Second)
	n := 0
	w.due(base.Add(20*time.Minute), func(*loopStream) { n++ })
	if n != 1 {
		t.Fatalf("a sweep 20 minutes on checked %d streams, want 1", n)
	}
}

// A check that puts its stream back, for later, does not have it
// checked again in the same sweep.
func TestStreamWheelPutBack(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	w, st := wheelWithOne(base, time.Second)
	now := base.Add(time.Second)
	n := 0
	w.due(now, func(s *loopStream) {
		n++
		s.checkAt = now.Add(wheelSlots * loopSweepEvery).UnixNano() // the same slot, a turn on
		w.add(s)
	})
	if n != 1 || st.wpos == 0 {
		t.Fatalf("checked %d times, in the wheel %v; want once, and put back", n, st.wpos != 0)
	}
}

// BenchmarkStreamSweep is the loop's sweep (every loopSweepEvery) with
// 50,000 streams relaying, none due: what it holds the loop for. Walking
// every stream, it took 0.9 ms.
func BenchmarkStreamSweep(b *testing.B) {
	l := &streamLoop{f: &tcpFrontend{idle: time.Hour}}
	now := time.Now()
	l.now = now
	l.wheel.tick = now.UnixNano() / int64(loopSweepEvery)
	for i := range 50_000 {
		st := &loopStream{state: stateRelay, start: now, activeAt: now, keepOn: true}
		st.a = loopSide{fd: 2*i + 10, st: st}
		st.b = loopSide{fd: 2*i + 11, st: st}
		st.a.peer, st.b.peer = &st.b, &st.a
		l.sides.add(&st.a)
		l.sides.add(&st.b)
		l.schedule(st)
	}
	for b.Loop() {
		l.now = l.now.Add(loopSweepEvery)
		if l.now.Sub(now) >= time.Hour {
			b.Fatal("the streams' idle timeouts came")
		}
		l.sweep()
	}
}
