package main

import (
	"math"
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
