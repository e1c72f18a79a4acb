package latency

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

// gatherSummaries returns the registry's summaries: name -> success label
// -> summary.
func gatherSummaries(t *testing.T, reg *prometheus.Registry) map[string]map[string]*dto.Summary {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]*dto.Summary{}
	for _, f := range families {
		if f.GetType() != dto.MetricType_SUMMARY {
			t.Fatalf("%s is a %v, want a summary", f.GetName(), f.GetType())
		}
		byLabel := map[string]*dto.Summary{}
		for _, m := range f.Metric {
			if len(m.Label) != 1 || m.Label[0].GetName() != "success" {
				t.Fatalf("%s: labels %v, want success only", f.GetName(), m.Label)
			}
			byLabel[m.Label[0].GetValue()] = m.Summary
		}
		out[f.GetName()] = byLabel
	}
	return out
}

// The bucketed quantiles are never below the true ones and at most 1/32
// above them (exact below 64 µs), whatever the distribution.
func TestLatencyQuantilesWithinABucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		draw func() time.Duration
	}{
		{"constant 2ms", func() time.Duration { return 2 * time.Millisecond }},
		{"under a microsecond", func() time.Duration { return time.Duration(rng.IntN(1000)) }},
		{"uniform 0-100us", func() time.Duration { return time.Duration(rng.IntN(100)) * time.Microsecond }},
		{"uniform 1-50ms", func() time.Duration { return time.Millisecond + time.Duration(rng.Int64N(int64(49*time.Millisecond))) }},
		{"log-normal around 3ms", func() time.Duration {
			return time.Duration(math.Exp(math.Log(3000)+rng.NormFloat64())) * time.Microsecond
		}},
		{"a tail of seconds", func() time.Duration {
			if rng.IntN(100) == 0 {
				return time.Duration(1+rng.IntN(5)) * time.Second
			}
			return time.Duration(500+rng.IntN(2000)) * time.Microsecond
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := testutil.NewClock(time.Unix(1_000_000, 0))
			l := New(clock.Now, "x", "h")
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(l)
			const n = 20_000
			us := make([]int64, n)
			var sum int64
			for i := range us {
				d := tc.draw()
				us[i] = d.Microseconds()
				sum += us[i]
				l.Observe(clock.Now(), d, nil)
			}
			slices.Sort(us)
			s := gatherSummaries(t, reg)["x"]["true"]
			if s.GetSampleCount() != n || s.GetSampleSum() != float64(sum)/1000 {
				t.Fatalf("count %d sum %v, want %d and %v", s.GetSampleCount(), s.GetSampleSum(), n, float64(sum)/1000)
			}
			for q := range objectives {
				want := float64(us[int(math.Ceil(q*n))-1])        // the rank-th smallest
				got := math.Round(testutil.Quantile(s, q) * 1000) // whole µs
				if got < want || got > want+want/32 || want < latencyExact && got != want {
					t.Errorf("quantile %v: %v µs, want %v µs to %v", q, got, want, want+want/32)
				}
			}
		})
	}
}

// Every bucket's upper bound is the largest value that falls in it, and
// the next value falls in the next bucket.
func TestLatencyBuckets(t *testing.T) {
	for b := range latencyBuckets - 1 {
		u := latencyUpper(b)
		if got := latencyBucket(u); got != b {
			t.Fatalf("bucket of %d (upper bound of %d) is %d", u, b, got)
		}
		if got := latencyBucket(u + 1); got != b+1 {
			t.Fatalf("bucket of %d is %d, want %d", u+1, got, b+1)
		}
	}
	if got := latencyBucket(math.MaxUint64); got != latencyBuckets-1 {
		t.Fatalf("a huge value's bucket is %d, want the last (%d)", got, latencyBuckets-1)
	}
	if got := latencyUpper(latencyBuckets - 1); got != 1<<37-1 {
		t.Fatalf("the last bucket ends at %d, want 2^37-1", got)
	}
	for b := latencyExact; b < latencyBuckets; b++ { // the width bound
		lower := latencyUpper(b-1) + 1
		if width := latencyUpper(b) - lower; width > lower/32 {
			t.Fatalf("bucket %d: %d to %d, wider than 1/32 of its lower bound", b, lower, latencyUpper(b))
		}
	}
}

// A negative duration (a clock step inside an operation) counts as zero,
// not in the last bucket.
func TestLatencyNegativeIsZero(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	l := New(clock.Now, "x", "h")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l)
	l.Observe(clock.Now(), -time.Second, nil)
	s := gatherSummaries(t, reg)["x"]["true"]
	if s.GetSampleCount() != 1 || s.GetSampleSum() != 0 || testutil.Quantile(s, 0.999) != 0 {
		t.Fatalf("%v, want one observation of 0", s)
	}
}

// A clock set back does not reset a window to an older epoch: the
// observations of the last minute stay.
func TestLatencyClockBack(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	l := New(clock.Now, "x", "h")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l)
	for range 100 {
		l.Observe(clock.Now(), time.Millisecond, nil)
	}
	clock.Advance(-60 * time.Second)
	l.Observe(clock.Now(), time.Second, nil)
	clock.Advance(60 * time.Second)
	s := gatherSummaries(t, reg)["x"]["true"]
	if s.GetSampleCount() != 101 {
		t.Fatalf("count %d, want 101", s.GetSampleCount())
	}
	if got := testutil.Quantile(s, 0.5); got < 1 || got > 1.04 {
		t.Fatalf("median %v ms after the clock went back and forth, want 1 ms", got)
	}
}

// The quantiles cover the last 30 to 60 seconds; the count and sum the
// whole life. Failures are a series of their own.
func TestLatencyWindows(t *testing.T) {
	clock := testutil.NewClock(time.Unix(3_000_000, 0)) // the start of a window
	l := New(clock.Now, "x", "h")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l)
	median := func() float64 { return testutil.Quantile(gatherSummaries(t, reg)["x"]["true"], 0.5) }
	near := func(got, want float64) bool { return got >= want && got <= want*33/32 }
	for range 300 {
		l.Observe(clock.Now(), time.Millisecond, nil)
	}
	clock.Advance(35 * time.Second) // the next window
	for range 100 {
		l.Observe(clock.Now(), 10*time.Millisecond, nil)
	}
	l.Observe(clock.Now(), 7*time.Second, errors.New("failed"))
	if got := median(); !near(got, 1) {
		t.Fatalf("after 35 s the median is %v ms, want 1 ms (both windows: 300 at 1 ms, 100 at 10 ms)", got)
	}
	s := gatherSummaries(t, reg)["x"]
	if ok := s["true"]; ok.GetSampleCount() != 400 || ok.GetSampleSum() != 1300 {
		t.Fatalf("count %d sum %v ms, want 400 and 1300", ok.GetSampleCount(), ok.GetSampleSum())
	}
	if bad := s["false"]; bad.GetSampleCount() != 1 || !near(testutil.Quantile(bad, 0.99), 7000) {
		t.Fatalf("failures: %v, want one of 7 s", bad)
	}
	clock.Advance(30 * time.Second) // the first window is older than a minute
	if got := median(); !near(got, 10) {
		t.Fatalf("after 65 s the median is %v ms, want 10 ms (the 1 ms ones are out)", got)
	}
	clock.Advance(30 * time.Second)
	s = gatherSummaries(t, reg)["x"]
	if ok := s["true"]; ok.GetSampleCount() != 400 || !math.IsNaN(testutil.Quantile(ok, 0.5)) {
		t.Fatalf("after 95 s: count %d median %v, want 400 and no quantile", ok.GetSampleCount(), testutil.Quantile(ok, 0.5))
	}
	// A new observation reuses a window, reset.
	l.Observe(clock.Now(), 2*time.Millisecond, nil)
	if got := testutil.Quantile(gatherSummaries(t, reg)["x"]["true"], 0.999); !near(got, 2) {
		t.Fatalf("the only recent observation is 2 ms, p99.9 %v", got)
	}
}

// Both names carry the same figures, each from one reading, also while
// observations go on; both success values are there before any.
func TestLatenciesExportBothNames(t *testing.T) {
	l := New(time.Now, "x_REQUEST", "h", "x")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l)
	check := func() {
		t.Helper()
		s := gatherSummaries(t, reg)
		a, b := s["x_REQUEST"], s["x"]
		if len(a) != 2 || len(b) != 2 {
			t.Fatalf("x_REQUEST %v, x %v: want success true and false in both", a, b)
		}
		for _, label := range []string{"true", "false"} {
			sa, sb := a[label], b[label]
			if sa.GetSampleCount() != sb.GetSampleCount() || sa.GetSampleSum() != sb.GetSampleSum() || len(sa.Quantile) != len(objectives) {
				t.Fatalf("success=%s: x_REQUEST %v, x %v", label, sa, sb)
			}
			for _, q := range sa.Quantile {
				va, vb := q.GetValue(), testutil.Quantile(sb, q.GetQuantile())
				if va != vb && !(math.IsNaN(va) && math.IsNaN(vb)) {
					t.Fatalf("success=%s quantile %v: %v and %v", label, q.GetQuantile(), va, vb)
				}
			}
		}
	}
	check()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				l.Observe(time.Now(), time.Duration(i%100)*time.Microsecond, nil)
			}
		}
	}()
	for range 200 {
		check()
	}
	close(stop)
	<-done
}

// A Vec exports each label value's two series from its first With, each
// child counted apart, under one name.
func TestVec(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	v := NewVec(clock.Now, "x", "h", "bookie")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(v)
	a, b := v.With("a"), v.With("b")
	if v.With("a") != a {
		t.Fatal("With returned a new child for a value it has")
	}
	g := testutil.Gather(t, reg)
	for _, value := range []string{"a", "b"} {
		for _, success := range []string{"true", "false"} {
			if s := g.Summary(t, "x", "bookie", value, "success", success); s == nil || s.GetSampleCount() != 0 {
				t.Fatalf("bookie=%s success=%s: %v, want a series without observations", value, success, s)
			}
		}
	}
	for range 10 {
		a.Observe(clock.Now(), 2*time.Millisecond, nil)
	}
	b.Observe(clock.Now(), 30*time.Millisecond, nil)
	b.Observe(clock.Now(), 5*time.Second, errors.New("timed out"))
	g = testutil.Gather(t, reg)
	near := func(got, want float64) bool { return got >= want && got <= want*33/32 }
	if s := g.Summary(t, "x", "bookie", "a", "success", "true"); s.GetSampleCount() != 10 || s.GetSampleSum() != 20 || !near(testutil.Quantile(s, 0.99), 2) {
		t.Fatalf("a: %v, want 10 of 2 ms", s)
	}
	if s := g.Summary(t, "x", "bookie", "b", "success", "true"); s.GetSampleCount() != 1 || !near(testutil.Quantile(s, 0.5), 30) {
		t.Fatalf("b: %v, want one of 30 ms", s)
	}
	if s := g.Summary(t, "x", "bookie", "b", "success", "false"); s.GetSampleCount() != 1 || !near(testutil.Quantile(s, 0.5), 5000) {
		t.Fatalf("b failed: %v, want one of 5 s", s)
	}
	if s := g.Summary(t, "x", "bookie", "a", "success", "false"); s.GetSampleCount() != 0 {
		t.Fatalf("a failed: %v, want none", s)
	}
}
