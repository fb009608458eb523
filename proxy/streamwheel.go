package proxy

import "time"

// streamWheel holds a stream loop's streams by the time of their next
// check (a deadline, the start of TCP keep-alive, the idle timeout), in
// slots of loopSweepEvery, as a timing wheel: a stream goes in and comes
// out in constant time, and a sweep looks only at the slots whose time
// came, not at every stream. The walk of every stream it replaced took
// 0.9 ms every 250 ms at 50,000 streams a worker (BenchmarkStreamSweep),
// the loop's streams waiting meanwhile; now each stream is looked at
// once a turn of the wheel at most. A time past the wheel's span waits
// in its slot, passed over at each turn until it comes.
type streamWheel struct {
	slots [wheelSlots][]*loopStream
	tick  int64 // the last tick swept: slots up to it are looked at
}

// wheelSlots is the wheel's span in ticks of loopSweepEvery: 256 s
// (24 KiB a loop). A stream with the default idle timeout (10 minutes)
// is looked at about twice before its time.
const wheelSlots = 1024

// tickOf is the tick at or after t.
func tickOf(t int64) int64 {
	d := int64(loopSweepEvery)
	return (t + d - 1) / d
}

// add puts st in the wheel at its check time st.checkAt (Unix
// nanoseconds): swept at the first tick at or after it, and no earlier
// than the next sweep.
func (w *streamWheel) add(st *loopStream) {
	k := max(tickOf(st.checkAt), w.tick+1)
	i := int32(k % wheelSlots)
	w.slots[i] = append(w.slots[i], st)
	st.wslot, st.wpos = i, int32(len(w.slots[i]))
}

// remove takes st out of the wheel, if it is in it.
func (w *streamWheel) remove(st *loopStream) {
	if st.wpos == 0 {
		return
	}
	s := w.slots[st.wslot]
	last := len(s) - 1
	if j := int(st.wpos - 1); j != last {
		s[j] = s[last]
		s[j].wpos = int32(j + 1)
	}
	s[last] = nil
	w.slots[st.wslot] = s[:last]
	st.wpos = 0
}

// due takes out of the wheel each stream whose check time is at or
// before now, from the slots of the ticks since the last sweep up to
// now's, and calls check with it. check may put the stream back, at a
// time after now.
func (w *streamWheel) due(now time.Time, check func(*loopStream)) {
	t := now.UnixNano()
	last := t / int64(loopSweepEvery)
	from := w.tick + 1
	if last < from {
		return
	}
	// A stream put back goes after now's tick: into a slot looked at
	// here only a turn on, as a later turn's.
	w.tick = last
	for k := from; k <= last && k < from+wheelSlots; k++ {
		i := k % wheelSlots
		for j := 0; j < len(w.slots[i]); {
			st := w.slots[i][j]
			if st.checkAt > t {
				j++ // a later turn's
				continue
			}
			w.remove(st) // the last comes to j
			check(st)
		}
	}
}
