package metrics

import (
	"slices"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{0, 500 * time.Microsecond, 501 * time.Microsecond, 3 * time.Millisecond, 2 * time.Minute} {
		h.Observe(d)
	}
	s := h.Series("x_seconds", "backend", "app")
	want := make([]uint64, len(Buckets)+1)
	want[0] = 2            // 0 and 0.5ms: upper bounds are inclusive
	want[1] = 1            // 0.501ms
	want[3] = 1            // 3ms, in (2.5ms, 5ms]
	want[len(Buckets)] = 1 // past 60s: +Inf
	if !slices.Equal(s.Counts, want) {
		t.Errorf("counts %v, want %v", s.Counts, want)
	}
	if h.Count() != 5 || s.Sum < 120.00400 || s.Sum > 120.00401 {
		t.Errorf("count %d sum %g", h.Count(), s.Sum)
	}
}

// TestSetAdd: series of the same name and labels sum; others stay apart;
// a histogram of another shape is skipped, not mixed in.
func TestSetAdd(t *testing.T) {
	set := Set{}
	var a, b Histogram
	a.Observe(time.Millisecond)
	b.Observe(time.Millisecond)
	b.Observe(time.Second)
	set.Add(a.Series("d", "backend", "x"), Series{Name: "c", Labels: []string{"listener", "web"}, Value: 3})
	set.Add(b.Series("d", "backend", "x"), b.Series("d", "backend", "y"), Series{Name: "c", Labels: []string{"listener", "web"}, Value: 4})
	set.Add(Series{Name: "d", Labels: []string{"backend", "x"}, Counts: []uint64{1, 2}})
	got := set.Sorted()
	if len(got) != 3 || got[0].Name != "c" || got[0].Value != 7 {
		t.Fatalf("sorted %+v", got)
	}
	if dx := got[1]; dx.Label("backend") != "x" || dx.Counts[1] != 2 || dx.Counts[10] != 1 || dx.Sum < 1.0019 || dx.Sum > 1.0031 {
		t.Errorf("summed histogram %+v", dx)
	}
	c := set.Clone()
	c.Add(Series{Name: "c", Labels: []string{"listener", "web"}, Value: 1})
	if set.Sorted()[0].Value != 7 {
		t.Errorf("Clone shares its series with the original")
	}
}

func TestClassIndex(t *testing.T) {
	for status, want := range map[int]int{0: 3, 101: 0, 200: 1, 304: 2, 404: 3, 499: 3, 502: 4, 600: 4} {
		if got := ClassIndex(status); got != want {
			t.Errorf("ClassIndex(%d) = %d, want %d", status, got, want)
		}
	}
}
