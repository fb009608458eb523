// Package metrics is the worker's side of baton's metrics: histograms with
// fixed buckets, recorded without locks on the request path, and Series,
// their wire form. A worker reports every series it has, cumulative since
// it started; the supervisor sums the series of every worker, those that
// exited included, so that what it exposes only grows across handoffs.
package metrics

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Buckets are the upper bounds, in seconds, of every duration histogram:
// from half a millisecond (a proxied request on a LAN) to a minute (a
// backend's responseTimeout).
var Buckets = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// bounds are Buckets in nanoseconds.
var bounds = func() (b [len(Buckets)]int64) {
	for i, s := range Buckets {
		b[i] = int64(s * 1e9)
	}
	return b
}()

// Histogram counts durations by bucket. The zero value is ready; it is
// safe for concurrent use.
type Histogram struct {
	counts [len(Buckets) + 1]atomic.Uint64 // the last is +Inf
	sum    atomic.Int64                    // nanoseconds
}

// Observe records d.
func (h *Histogram) Observe(d time.Duration) {
	i := 0
	for i < len(bounds) && int64(d) > bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(int64(d))
}

// Count returns how many durations h recorded.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// Series returns h as a series named name with labels (name, value
// pairs).
func (h *Histogram) Series(name string, labels ...string) Series {
	s := Series{Name: name, Labels: labels, Counts: make([]uint64, len(h.counts)), Sum: float64(h.sum.Load()) / 1e9}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	return s
}

// Series is one metric series of a worker: a counter's value, or a
// histogram's counts per bucket (Buckets, then +Inf; not cumulative) and
// sum in seconds.
type Series struct {
	Name   string   `json:"n"`
	Labels []string `json:"l,omitempty"` // name, value, name, value, …
	Value  uint64   `json:"v,omitempty"`
	Counts []uint64 `json:"c,omitempty"`
	Sum    float64  `json:"s,omitempty"`
}

// IsHistogram reports whether s is a histogram's.
func (s *Series) IsHistogram() bool { return s.Counts != nil }

// Label returns the value of the label named name, or "".
func (s *Series) Label(name string) string {
	for i := 0; i+1 < len(s.Labels); i += 2 {
		if s.Labels[i] == name {
			return s.Labels[i+1]
		}
	}
	return ""
}

func (s *Series) key() string {
	return s.Name + "\x00" + strings.Join(s.Labels, "\x00")
}

// Set is the sum of series from many workers, keyed by name and labels.
type Set map[string]*Series

// Add adds series to the set: counters and histograms of the same name and
// labels are summed. A histogram with another number of buckets than the
// set's (a worker of another version) is skipped.
func (set Set) Add(series ...Series) {
	for i := range series {
		s := &series[i]
		k := s.key()
		t := set[k]
		if t == nil {
			c := *s
			c.Labels = slices.Clone(s.Labels)
			c.Counts = slices.Clone(s.Counts)
			set[k] = &c
			continue
		}
		if len(t.Counts) != len(s.Counts) {
			continue
		}
		t.Value += s.Value
		t.Sum += s.Sum
		for j := range s.Counts {
			t.Counts[j] += s.Counts[j]
		}
	}
}

// AddSet adds every series of o.
func (set Set) AddSet(o Set) {
	for _, s := range o {
		set.Add(*s)
	}
}

// Clone returns a copy of set.
func (set Set) Clone() Set {
	c := make(Set, len(set))
	c.AddSet(set)
	return c
}

// Sorted returns the series by name, then labels.
func (set Set) Sorted() []Series {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]Series, len(keys))
	for i, k := range keys {
		out[i] = *set[k]
	}
	return out
}

// ClassIndex is the index of an HTTP status's class: 0 for 1xx to 4 for
// 5xx. No status (the client went away before its answer, nginx's 499)
// counts as 4xx; a status above 599 as 5xx.
func ClassIndex(status int) int {
	switch {
	case status < 100:
		return 3
	case status > 599:
		return 4
	}
	return status/100 - 1
}

// Classes are the names of the status classes, by ClassIndex.
var Classes = [5]string{"1xx", "2xx", "3xx", "4xx", "5xx"}
