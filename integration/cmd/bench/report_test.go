package main

import (
	"math"
	"strings"
	"testing"
)

// The median's interval from order statistics (a distribution-free
// confidence interval for the median, as in Conover, "Practical
// Nonparametric Statistics", 3.2): with 10 rounds, the second lowest to
// the second highest, at 1 - 2*P(Binomial(10, 1/2) <= 1) = 97.85%.
func TestMedianInterval(t *testing.T) {
	for _, c := range []struct {
		xs     []float64
		lo, hi float64
		conf   float64
		ok     bool
	}{
		{xs: []float64{0.98, 0.84, 0.95, 1.03, 0.97, 0.92, 1.02, 0.99, 0.95, 0.98}, lo: 0.92, hi: 1.02, conf: 1 - 2*11.0/1024, ok: true},
		{xs: []float64{1, 2, 3, 4, 5, 6}, lo: 1, hi: 6, conf: 1 - 2.0/64, ok: true},
		{xs: []float64{1, 2, 3, 4, 5}, ok: false}, // 1 - 2/32 < 95%: no interval
		{xs: nil, ok: false},
	} {
		lo, hi, conf, ok := medianInterval(c.xs)
		if ok != c.ok || lo != c.lo || hi != c.hi || math.Abs(conf-c.conf) > 1e-9 {
			t.Errorf("medianInterval(%v) = %v, %v, %v, %v; want %v, %v, %v, %v", c.xs, lo, hi, conf, ok, c.lo, c.hi, c.conf, c.ok)
		}
	}
}

// The wake quantiles' interval is a percentile bootstrap (Efron and
// Tibshirani, "An Introduction to the Bootstrap", 13.3): the same
// latencies are level whatever their quantile, latencies all twice as
// long are behind at every quantile, and a sample whose slowest 2% alone
// differ is behind at its p99 and level at its p50.
func TestQuantileRatio(t *testing.T) {
	base := make([]float64, 1200)
	for i := range base {
		base[i] = 0.1 + 0.9*float64(i)/float64(len(base)) // 0.1 to 1 ms, spread evenly
	}
	double := make([]float64, len(base))
	tail := make([]float64, len(base))
	for i, v := range base {
		double[i] = 2 * v
		tail[i] = v
		if i >= len(base)*98/100 {
			tail[i] = 10 * v
		}
	}
	for _, c := range []struct {
		b    []float64
		q    float64
		want string
	}{
		{base, 0.99, "1.00×, 95% interval"},
		{base, 0.99, ": level"},
		{double, 0.5, "2.00×"},
		{double, 0.99, ": behind"},
		{tail, 0.99, ": behind"},
		{tail, 0.5, "1.00×"},
		{tail, 0.5, ": level"},
	} {
		if got := quantileRatio(c.b, base, c.q); !strings.Contains(got, c.want) {
			t.Errorf("quantileRatio(q %v) = %q, want it to hold %q", c.q, got, c.want)
		}
	}
	if got, want := quantileRatio(double, base, 0.99), quantileRatio(double, base, 0.99); got != want {
		t.Errorf("a report renders differently twice: %q, then %q", got, want)
	}
}
