package load

import (
	"encoding/json"
	"testing"
	"time"
)

func TestBucketsAreMonotonicAndTight(t *testing.T) {
	prev := -1
	for us := int64(0); us < 10_000_000; us = us*21/20 + 1 {
		d := time.Duration(us) * time.Microsecond
		b := bucket(d)
		if b < prev {
			t.Fatalf("bucket(%v) = %d < %d", d, b, prev)
		}
		prev = b
		lo, hi := lower(b), lower(b+1)
		if d < lo || d >= hi {
			t.Fatalf("%v not in bucket %d [%v, %v)", d, b, lo, hi)
		}
		if us > 2*subBuckets && float64(hi-lo)/float64(lo) > 0.004 {
			t.Fatalf("bucket %d [%v, %v) wider than 0.4%%", b, lo, hi)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, 1000 * time.Millisecond}} {
		got := h.Quantile(tt.q)
		if d := float64(got-tt.want) / float64(tt.want); d < 0 || d > 0.004 {
			t.Errorf("Quantile(%v) = %v, want %v within +0.4%%", tt.q, got, tt.want)
		}
	}
}

// TestMergeAfterJSON: two runs' results, through JSON as loadgen writes
// them, merge into the counts and quantiles of one run of both.
func TestMergeAfterJSON(t *testing.T) {
	var fast, slow, both Histogram
	for i := 1; i <= 900; i++ {
		fast.Record(time.Duration(i) * time.Microsecond)
		both.Record(time.Duration(i) * time.Microsecond)
	}
	for i := 1; i <= 100; i++ {
		slow.Record(time.Duration(i) * time.Millisecond)
		both.Record(time.Duration(i) * time.Millisecond)
	}
	decode := func(r *Result) *Result {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var out Result
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	a := decode(&Result{Duration: 1, Requests: 900, Failures: map[string]uint64{ClassReset: 1}, Latency: fast.Summary(), Histogram: &fast})
	b := decode(&Result{Duration: 2, Requests: 100, Failures: map[string]uint64{ClassReset: 2, ClassEOF: 1}, Latency: slow.Summary(), Histogram: &slow})
	a.Merge(b)
	if a.Duration != 3 || a.Requests != 1000 || a.Failures[ClassReset] != 3 || a.Failures[ClassEOF] != 1 {
		t.Errorf("merged counts: %+v", a)
	}
	if want := both.Summary(); a.Latency != want {
		t.Errorf("merged latency %+v, want %+v (one histogram of both)", a.Latency, want)
	}
}
