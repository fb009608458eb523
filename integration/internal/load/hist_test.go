package load

import (
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
		if us > 64 && float64(hi-lo)/float64(lo) > 0.04 {
			t.Fatalf("bucket %d [%v, %v) wider than 4%%", b, lo, hi)
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
		if d := float64(got-tt.want) / float64(tt.want); d < 0 || d > 0.04 {
			t.Errorf("Quantile(%v) = %v, want %v within +4%%", tt.q, got, tt.want)
		}
	}
}
