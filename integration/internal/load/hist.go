package load

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets: 256 sub-buckets per
// power of two of microseconds, so a quantile is within 0.4% (or 1 µs).
// Two targets' p99s are compared to a few percent: buckets of 3%, as
// there were, made ratios move by whole buckets.
type Histogram struct {
	counts [64 * subBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const (
	subBucketBits = 8
	subBuckets    = 1 << subBucketBits
)

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
	exp := bits.Len64(us) - subBucketBits - 1 // us >> exp is in [subBuckets, 2*subBuckets)
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

// histogramJSON is a Histogram on the wire: its non-empty buckets as
// [index, count] pairs.
type histogramJSON struct {
	N       uint64      `json:"n"`
	SumNs   int64       `json:"sumNs"`
	MaxNs   int64       `json:"maxNs"`
	Buckets [][2]uint64 `json:"buckets"`
}

// MarshalJSON writes h's non-empty buckets, so that a run's histogram can
// be merged with another's by a program that did not run them (the bench
// interleaves runs of several targets).
func (h *Histogram) MarshalJSON() ([]byte, error) {
	w := histogramJSON{N: h.n, SumNs: int64(h.sum), MaxNs: int64(h.max), Buckets: [][2]uint64{}}
	for i, c := range h.counts {
		if c > 0 {
			w.Buckets = append(w.Buckets, [2]uint64{uint64(i), c})
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var w histogramJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*h = Histogram{n: w.N, sum: time.Duration(w.SumNs), max: time.Duration(w.MaxNs)}
	for _, bc := range w.Buckets {
		if bc[0] >= uint64(len(h.counts)) {
			return fmt.Errorf("histogram bucket %d out of range", bc[0])
		}
		h.counts[bc[0]] += bc[1]
	}
	return nil
}
