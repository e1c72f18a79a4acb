package bookie

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// latencies is a Prometheus summary of durations, exported in
// milliseconds, with a success label ("true" or "false"), under one name
// or more (BookKeeper exports each request latency as X_REQUEST and X).
// Its quantiles come from counts in log-linear buckets instead of from a
// stream of samples: an observation is a few atomic operations, where
// client_golang's summary buffers, sorts and merges samples (7.5% of the
// CPU samples in the bookie's gRPC add benchmark with 1 KiB adds, 256 in
// flight, against 0.8% with these; docs/benchmarks.md).
//
// Precision: a quantile is reported as the upper bound of the bucket that
// holds it, in whole microseconds: exact below 64 µs, at most 1/32 (3.1%)
// above the true value from there, up to 2^37 µs (38 hours; longer ones
// are reported as that). The quantiles cover the last 30 to 60 seconds
// (two windows of 30 s counted from the collector's creation on the
// monotonic clock, as the summaries' two age buckets did); the count and
// sum cover the bookie's life.
//
// An observation racing with its window's reset (once every 30 s) may be
// lost from the quantiles or counted in the new window; one whose time is
// older than its slot's window (a goroutine delayed 30 s, or a test's
// clock set back) is left out of the quantiles. The count and sum are
// exact.
type latencies struct {
	descs []*prometheus.Desc // one per exported name; label: success
	now   func() time.Time   // time.Now; a test's clock
	base  time.Time          // the windows count from here
	ok    latencySeries      // success="true"
	bad   latencySeries      // success="false"
}

func newLatencies(now func() time.Time, name, help string, twins ...string) *latencies {
	l := &latencies{now: now, base: now()}
	for _, n := range append([]string{name}, twins...) {
		l.descs = append(l.descs, prometheus.NewDesc(n, help, []string{"success"}, nil))
	}
	return l
}

// observe records one operation that took d and ended at now (the
// caller's reading of l's clock, which it took to compute d).
func (l *latencies) observe(now time.Time, d time.Duration, err error) { l.observeN(now, d, err, 1) }

// observeN records n operations that each took d and ended at now.
func (l *latencies) observeN(now time.Time, d time.Duration, err error, n int) {
	if n <= 0 {
		return
	}
	s := &l.ok
	if err != nil {
		s = &l.bad
	}
	s.observeN(l.epoch(now), d, uint64(n))
}

// epoch returns the 30 s window now falls in, counted from l.base.
func (l *latencies) epoch(now time.Time) int64 {
	return int64(now.Sub(l.base) / latencyWindow)
}

func (l *latencies) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range l.descs {
		ch <- d
	}
}

// Collect exports each series once per name, from one reading of it.
func (l *latencies) Collect(ch chan<- prometheus.Metric) {
	e := l.epoch(l.now())
	for _, s := range []struct {
		label  string
		series *latencySeries
	}{{"false", &l.bad}, {"true", &l.ok}} {
		count, sum, q := s.series.read(e)
		for _, d := range l.descs {
			m, err := prometheus.NewConstSummary(d, count, sum, q, s.label)
			if err != nil {
				m = prometheus.NewInvalidMetric(d, err)
			}
			ch <- m
		}
	}
}

const (
	latencyWindow = 30 * time.Second
	// Buckets: a value v in microseconds below 64 has bucket v; above, 32
	// buckets per power of two, up to 2^37 µs (38 hours; longer ones
	// count in the last bucket).
	latencyExact   = 64
	latencySub     = 32
	latencyBuckets = latencyExact + 31*latencySub
)

// latencySeries is one label value's counts.
type latencySeries struct {
	count atomic.Uint64
	sumUS atomic.Uint64 // microseconds
	// windows[e&1] holds the observations of the 30 s epoch e, its
	// epoch field says which; reset (under mu) by the first observer
	// of a later epoch, never to an earlier one.
	windows [2]latencyWindowCounts
	mu      sync.Mutex
}

type latencyWindowCounts struct {
	epoch  atomic.Int64
	counts [latencyBuckets]atomic.Uint64
}

func (s *latencySeries) observe(e int64, d time.Duration) { s.observeN(e, d, 1) }

// observeN records n operations that each took d.
func (s *latencySeries) observeN(e int64, d time.Duration, n uint64) {
	us := uint64(max(d.Microseconds(), 0))
	s.count.Add(n)
	s.sumUS.Add(n * us)
	w := &s.windows[e&1]
	if ep := w.epoch.Load(); ep != e {
		if ep > e {
			return // late: its window is gone
		}
		s.mu.Lock()
		if w.epoch.Load() < e {
			for i := range w.counts {
				w.counts[i].Store(0)
			}
			w.epoch.Store(e)
		}
		s.mu.Unlock()
		if w.epoch.Load() != e {
			return // a later epoch took the window meanwhile
		}
	}
	w.counts[latencyBucket(us)].Add(n)
}

// read returns the count, the sum in milliseconds and the quantiles (in
// milliseconds; NaN without observations in the windows of epochs e-1
// and e, or later: an observer may have started one since e was read).
func (s *latencySeries) read(e int64) (uint64, float64, map[float64]float64) {
	var counts [latencyBuckets]uint64
	var total uint64
	for i := range s.windows {
		w := &s.windows[i]
		if w.epoch.Load() < e-1 {
			continue // out of the last minute (or never used)
		}
		for b := range w.counts {
			n := w.counts[b].Load()
			counts[b] += n
			total += n
		}
	}
	q := make(map[float64]float64, len(objectives))
	for o := range objectives {
		q[o] = math.NaN()
		if total == 0 {
			continue
		}
		rank := uint64(math.Ceil(o * float64(total))) // the rank-th smallest, from 1
		var seen uint64
		for b, n := range counts {
			seen += n
			if seen >= rank {
				q[o] = float64(latencyUpper(b)) / 1000
				break
			}
		}
	}
	return s.count.Load(), float64(s.sumUS.Load()) / 1000, q
}

// latencyBucket returns the bucket of us microseconds.
func latencyBucket(us uint64) int {
	if us < latencyExact {
		return int(us)
	}
	shift := bits.Len64(us) - 6 // us>>shift is in [32, 64)
	b := latencyExact + (shift-1)*latencySub + int(us>>shift) - latencySub
	return min(b, latencyBuckets-1)
}

// latencyUpper returns the largest value, in microseconds, of bucket b.
func latencyUpper(b int) uint64 {
	if b < latencyExact {
		return uint64(b)
	}
	shift := (b-latencyExact)/latencySub + 1
	m := uint64((b-latencyExact)%latencySub + latencySub)
	return (m+1)<<shift - 1
}
