// Package latency exports operation latencies as Prometheus summaries in
// milliseconds, BookKeeper's way (a success label, true or false), with
// quantiles counted in log-linear buckets instead of sampled: an
// observation is a few atomic operations, where client_golang's summary
// buffers, sorts and merges samples (7.5% of the CPU samples in the
// bookie's gRPC add benchmark with 1 KiB adds, 256 in flight, against
// 0.8% with these; docs/benchmarks.md). The bookie's request and group
// commit latencies and the ledger client's per-bookie add and read
// latencies use it.
//
// Precision: a quantile is reported as the upper bound of the bucket that
// holds it, in whole microseconds: exact below 64 µs, at most 1/32 (3.1%)
// above the true value from there, up to 2^37 µs (38 hours; longer ones
// are reported as that). The quantiles cover the last 30 to 60 seconds
// (two windows of 30 s counted from the collector's creation on the
// monotonic clock, as client_golang's summaries' two age buckets did); the
// count and sum cover the collector's life.
//
// An observation racing with its window's reset (once every 30 s) may be
// lost from the quantiles or counted in the new window; one whose time is
// older than its slot's window (a goroutine delayed 30 s, or a test's
// clock set back) is left out of the quantiles. The count and sum are
// exact.
package latency

import (
	"maps"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// objectives are the quantiles exported (with client_golang's notation of
// an allowed error, which the buckets' bound replaces).
var objectives = map[float64]float64{0.5: 0.05, 0.75: 0.02, 0.95: 0.005, 0.99: 0.001, 0.999: 0.0001}

// Objectives returns the quantiles exported, for client_golang summaries
// that are to report the same ones (a new map: the caller's to change).
func Objectives() map[float64]float64 { return maps.Clone(objectives) }

// Summary is one operation's latencies under one name or more
// (BookKeeper exports each request latency as X_REQUEST and X), with the
// success label only.
type Summary struct {
	descs []*prometheus.Desc // one per exported name; label: success
	clock
	pair
}

// clock is a collector's time: now is time.Now or a test's clock; the
// windows count from base.
type clock struct {
	now  func() time.Time
	base time.Time
}

// epoch returns the 30 s window t falls in.
func (c clock) epoch(t time.Time) int64 { return int64(t.Sub(c.base) / latencyWindow) }

// pair is one operation's two series.
type pair struct {
	ok  latencySeries // success="true"
	bad latencySeries // success="false"
}

func (p *pair) observeN(e int64, d time.Duration, err error, n int) {
	if n <= 0 {
		return
	}
	s := &p.ok
	if err != nil {
		s = &p.bad
	}
	s.observeN(e, d, uint64(n))
}

// collect sends p's two series under every desc, each from one reading;
// labels are the values of the descs' labels before success.
func (p *pair) collect(ch chan<- prometheus.Metric, descs []*prometheus.Desc, e int64, labels ...string) {
	for _, s := range []struct {
		label  string
		series *latencySeries
	}{{"false", &p.bad}, {"true", &p.ok}} {
		count, sum, q := s.series.read(e)
		values := append(slices.Clip(labels), s.label)
		for _, d := range descs {
			m, err := prometheus.NewConstSummary(d, count, sum, q, values...)
			if err != nil {
				m = prometheus.NewInvalidMetric(d, err)
			}
			ch <- m
		}
	}
}

// New returns a Summary exported as name and each of twins, with help.
// now is time.Now, or a test's clock.
func New(now func() time.Time, name, help string, twins ...string) *Summary {
	l := &Summary{clock: clock{now: now, base: now()}}
	for _, n := range append([]string{name}, twins...) {
		l.descs = append(l.descs, prometheus.NewDesc(n, help, []string{"success"}, nil))
	}
	return l
}

// Observe records one operation that took d and ended at now (the
// caller's reading of l's clock, which it took to compute d); err says
// whether it failed.
func (l *Summary) Observe(now time.Time, d time.Duration, err error) { l.ObserveN(now, d, err, 1) }

// ObserveN records n operations that each took d and ended at now.
func (l *Summary) ObserveN(now time.Time, d time.Duration, err error, n int) {
	l.pair.observeN(l.epoch(now), d, err, n)
}

func (l *Summary) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range l.descs {
		ch <- d
	}
}

// Collect exports each series once per name, from one reading of it.
func (l *Summary) Collect(ch chan<- prometheus.Metric) {
	l.pair.collect(ch, l.descs, l.epoch(l.now()))
}

// Vec is one operation's latencies split by the values of one more label
// (the ledger client's adds and reads by bookie), each value with its two
// success series. Observations go to a Child (With, which takes no lock
// once the value has one; a caller may keep it).
type Vec struct {
	desc *prometheus.Desc // labels: label, success
	clock
	children sync.Map // label value -> *Child; never deleted
}

// Child is the series of one label value of a Vec.
type Child struct {
	clock
	pair
}

// NewVec returns a Vec exported as name, with help, split by label.
func NewVec(now func() time.Time, name, help, label string) *Vec {
	return &Vec{
		desc:  prometheus.NewDesc(name, help, []string{label, "success"}, nil),
		clock: clock{now: now, base: now()},
	}
}

// With returns the child of value, created on first use; its series are
// exported from then on (with no observation yet): values are never
// dropped, so they must be bounded (the bookies a client writes to or
// reads from).
func (v *Vec) With(value string) *Child {
	if c, ok := v.children.Load(value); ok {
		return c.(*Child)
	}
	c, _ := v.children.LoadOrStore(value, &Child{clock: v.clock})
	return c.(*Child)
}

// Observe records one operation that took d and ended at now (a reading
// of the Vec's clock).
func (c *Child) Observe(now time.Time, d time.Duration, err error) {
	c.pair.observeN(c.epoch(now), d, err, 1)
}

func (v *Vec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect exports every child's two series.
func (v *Vec) Collect(ch chan<- prometheus.Metric) {
	e := v.epoch(v.now())
	descs := []*prometheus.Desc{v.desc}
	v.children.Range(func(value, c any) bool {
		c.(*Child).pair.collect(ch, descs, e, value.(string))
		return true
	})
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
