package load

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets: 32 sub-buckets per
// power of two of microseconds, so a quantile is within about 3%.
type Histogram struct {
	counts [64 * subBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const subBuckets = 32

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	h.n++
	h.sum += d
	h.max = max(h.max, d)
	h.counts[bucket(d)]++
}

func bucket(d time.Duration) int {
	us := uint64(max(d.Microseconds(), 0))
	if us < subBuckets {
		return int(us)
	}
	exp := bits.Len64(us) - 6 // us >> exp is in [32, 64)
	return (exp+1)*subBuckets + int(us>>exp) - subBuckets
}

// lower returns the smallest duration in bucket i.
func lower(i int) time.Duration {
	if i < subBuckets {
		return time.Duration(i) * time.Microsecond
	}
	exp := i/subBuckets - 1
	m := uint64(i%subBuckets + subBuckets)
	return time.Duration(m<<exp) * time.Microsecond
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// Quantile returns the duration below which a fraction q of the records lie.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank && c > 0 {
			return min(lower(i+1), h.max)
		}
	}
	return h.max
}

// LatencySummary is a histogram's quantiles in milliseconds.
type LatencySummary struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// Summary returns h's quantiles.
func (h *Histogram) Summary() LatencySummary {
	msOf := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	s := LatencySummary{Count: h.n, P50: msOf(h.Quantile(0.5)), P99: msOf(h.Quantile(0.99)), P999: msOf(h.Quantile(0.999)), Max: msOf(h.max)}
	if h.n > 0 {
		s.Mean = msOf(h.sum / time.Duration(h.n))
	}
	return s
}
