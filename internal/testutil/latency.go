package testutil

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// Latencies collects operation latencies in a benchmark and reports their
// percentiles as benchmark metrics.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one latency.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// Percentile returns the p-th percentile (0 < p <= 100).
func (l *Latencies) Percentile(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	i := int(float64(len(l.d))*p/100+0.5) - 1
	return l.d[min(max(i, 0), len(l.d)-1)]
}

// Report adds p50-us and p99-us metrics and the rate in ops/s.
func (l *Latencies) Report(b *testing.B) {
	b.ReportMetric(float64(l.Percentile(50).Microseconds()), "p50-us")
	b.ReportMetric(float64(l.Percentile(99).Microseconds()), "p99-us")
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}

// RunClosedLoop runs n operations with the given number of workers, each
// issuing its next operation when the previous one finished, and records
// every latency. op gets the operation's sequence number.
func RunClosedLoop(b *testing.B, workers int, lat *Latencies, op func(i int) error) {
	b.Helper()
	var next = make(chan int, workers)
	go func() {
		for i := 0; i < b.N; i++ {
			next <- i
		}
		close(next)
	}()
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				start := time.Now()
				if err := op(i); err != nil {
					errc <- err
					for range next {
					}
					return
				}
				lat.Add(time.Since(start))
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		b.Fatal(err)
	}
}
