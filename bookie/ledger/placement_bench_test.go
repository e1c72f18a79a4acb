package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
)

// BenchmarkNewBookieShare: how soon a bookie added to a loaded cluster
// takes its share of new ledgers and of the write load
// (docs/benchmarks.md, "Autorecovery (issue 11)"). Run it with
//
//	go test -run '^$' -bench NewBookieShare -benchtime 1x ./bookie/ledger/
//
// 4 bookies in the process (autorecovery off), 8 writers each creating
// E3/Qw3/Qa2 ledgers in turn, rolling over every 1,000 entries of 1 KiB
// (16 appends in flight per writer); after 5 s a fifth bookie is added,
// then 10 s more. Placement weighs bookies by free disk / (1 + write
// rate / 50 MB/s); in-process bookies share one filesystem, so their free
// disk is equal and only the write rate tells them apart.
//
// Reported: ledgers created after its registration until the new bookie's
// share of new ensembles (a sliding window of 20 ledgers) is within 25% of
// the mean (3/5 with 5 bookies and E=3), and when; its share over the 10 s;
// and the time until its registered write rate is within 25% of the mean
// of the five bookies' rates.
func BenchmarkNewBookieShare(b *testing.B) {
	const (
		writers   = 8
		perLedger = 1000
		inflight  = 16
		before    = 5 * time.Second
		after     = 10 * time.Second
		window    = 20
		ensemble  = 3
	)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tc := testcluster.Start(b, 4, testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
		cl := tc.Client(ledger.Config{Logger: zaptest.NewLogger(b, zaptest.Level(zap.WarnLevel))})
		ctx, cancel := context.WithCancel(context.Background())

		type created struct {
			at       time.Time
			ensemble []string
		}
		var mu sync.Mutex
		var ledgers []created
		var firstErr error
		payload := make([]byte, 1<<10)
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem := make(chan struct{}, inflight)
				for ctx.Err() == nil {
					at := time.Now() // placement reads the registry first thing
					lw, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: ensemble, WriteQuorum: 3, AckQuorum: 2})
					if err != nil {
						if ctx.Err() == nil {
							mu.Lock()
							firstErr = err
							mu.Unlock()
						}
						return
					}
					mu.Lock()
					ledgers = append(ledgers, created{at, lw.Metadata().Segments[0].Bookies})
					mu.Unlock()
					for e := 0; e < perLedger && ctx.Err() == nil; e++ {
						sem <- struct{}{}
						if err := lw.AppendAsync(ctx, payload, func(_ int64, err error) { <-sem }); err != nil {
							<-sem
						}
					}
					lw.Close(context.Background())
				}
			}()
		}

		// The registrations' write rates, every 200 ms (the bookies
		// refresh them as often).
		type sample struct {
			at    time.Time
			rates map[string]float64
		}
		var samples []sample
		pollDone := make(chan struct{})
		go func() {
			defer close(pollDone)
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				bs, err := cl.Bookies(ctx)
				if err != nil {
					continue
				}
				s := sample{at: time.Now(), rates: map[string]float64{}}
				for _, bk := range bs {
					s.rates[bk.ID] = bk.Info.WriteBytesPerSec
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}()

		time.Sleep(before)
		b.StartTimer()
		addAt := time.Now()
		nb := tc.AddBookie(testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
		registeredAt := time.Now() // AddBookie returns once it is registered
		registered := registeredAt.Sub(addAt)
		time.Sleep(after)
		b.StopTimer()
		end := time.Now()
		cancel()
		wg.Wait()
		<-pollDone
		if firstErr != nil {
			b.Fatal(firstErr)
		}

		mu.Lock()
		sort.Slice(ledgers, func(i, j int) bool { return ledgers[i].at.Before(ledgers[j].at) })
		// Ledgers whose creation started once the new bookie was
		// registered (those started while it registered may or may not see
		// it, and are left out).
		var post []created
		nBefore := 0
		for _, l := range ledgers {
			if !l.at.Before(registeredAt) && l.at.Before(end) {
				post = append(post, l)
			} else if l.at.Before(addAt) {
				nBefore++
			}
		}
		mean := float64(ensemble) / 5
		with := func(ls []created) float64 {
			n := 0
			for _, l := range ls {
				if slices.Contains(l.ensemble, nb.ID) {
					n++
				}
			}
			return float64(n) / float64(len(ls))
		}
		firstWith := -1
		for j, l := range post {
			if slices.Contains(l.ensemble, nb.ID) {
				firstWith = j + 1
				break
			}
		}
		shareAt, shareLedgers := -1.0, -1
		for j := window; j <= len(post); j++ {
			if s := with(post[j-window : j]); s >= 0.75*mean && s <= 1.25*mean {
				shareAt, shareLedgers = post[j-1].at.Sub(addAt).Seconds(), j
				break
			}
		}
		// Per-second shares after the addition, for the log.
		var perSec []string
		for s := 0; s < int(after/time.Second); s++ {
			var in []created
			for _, l := range post {
				if d := l.at.Sub(addAt); d >= time.Duration(s)*time.Second && d < time.Duration(s+1)*time.Second {
					in = append(in, l)
				}
			}
			if len(in) > 0 {
				perSec = append(perSec, fmt.Sprintf("%.2f(%d)", with(in), len(in)))
			}
		}
		// The write rate: first sample after the addition where the new
		// bookie's rate is within 25% of the mean of the five.
		writeAt := -1.0
		var rateLog []string
		var oldRate, newRate float64
		var nRates int
		for _, s := range samples {
			if !s.at.After(addAt) {
				continue
			}
			r, ok := s.rates[nb.ID]
			if !ok || len(s.rates) != 5 {
				continue
			}
			sum := 0.0
			for _, v := range s.rates {
				sum += v
			}
			m := sum / 5
			if len(rateLog) < 12 {
				rateLog = append(rateLog, fmt.Sprintf("%.1fs:%.1f/%.1f", s.at.Sub(addAt).Seconds(), r/1e6, m/1e6))
			}
			if writeAt < 0 && m > 0 && r >= 0.75*m && r <= 1.25*m {
				writeAt = s.at.Sub(addAt).Seconds()
			}
			if s.at.Sub(addAt) > after/2 {
				newRate += r
				oldRate += (sum - r) / 4
				nRates++
			}
		}
		mu.Unlock()

		b.ReportMetric(float64(len(post))/end.Sub(registeredAt).Seconds(), "ledgers/s")
		b.ReportMetric(float64(firstWith), "ledgers-to-first")
		b.ReportMetric(float64(shareLedgers), "ledgers-to-share")
		b.ReportMetric(shareAt, "s-to-share")
		b.ReportMetric(with(post)/mean, "share/mean")
		b.ReportMetric(writeAt, "s-to-write-share")
		if nRates > 0 {
			b.ReportMetric(newRate/oldRate, "new/old-write-rate")
		}
		b.Logf("registered in %v; %d ledgers before, %d after the addition; new bookie's share of new ensembles per second (ledgers): %v (mean %.2f)",
			registered.Round(time.Millisecond), nBefore, len(post), perSec, mean)
		b.Logf("write rate after the addition, new bookie / mean of five, MB/s: %v", rateLog)
	}
}
