package ledger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

const addLatency = "bookkeeper_client_per_channel_bookie_client_ADD_ENTRY"

// addCounts returns how many adds to bookie the client's metrics counted
// as answered and as failed, and the failed ones' latency sum (ms).
func addCounts(t *testing.T, reg prometheus.Gatherer, bookie string) (ok, bad uint64, badSumMs float64) {
	t.Helper()
	g := testutil.Gather(t, reg)
	s, f := g.Summary(t, addLatency, "bookie", bookie, "success", "true"), g.Summary(t, addLatency, "bookie", bookie, "success", "false")
	return s.GetSampleCount(), f.GetSampleCount(), f.GetSampleSum()
}

// meteredWriter returns a client with cfg (no explicit LAC: no traffic
// but the test's), the registry of its metrics, and a writer whose
// streams to its three bookies are open (one entry appended).
func meteredWriter(t *testing.T, c *testcluster.Cluster, cfg ledger.Config) (*ledger.Client, *prometheus.Registry, *ledger.Writer) {
	t.Helper()
	ctx := ctxT(t)
	cfg.ExplicitLACInterval = -1
	cl := c.Client(cfg)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cl.Metrics())
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(ctx) })
	if _, err := w.Append(ctx, []byte("streams open")); err != nil {
		t.Fatal(err)
	}
	return cl, reg, w
}

// pendingOn waits until an add waits on bookie's stream.
func pendingOn(t *testing.T, cl *ledger.Client, bookie string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ledger.PendingAdds(cl, bookie) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no add ever waited on bookie %s's stream", bookie)
		}
	}
}

// The client exports each add's latency per bookie: answered adds as
// successes; an add a bookie did not answer within AddTimeout, and one
// pending on a stream that broke, as failures of that bookie alone; an
// add failed by the client's closing not at all.
func TestAddLatencyPerBookie(t *testing.T) {
	c := testcluster.Start(t, 5, testcluster.Options{})
	ctx := ctxT(t)
	_, reg, w := meteredWriter(t, c, ledger.Config{})
	const n = 20
	for range n - 1 {
		if _, err := w.Append(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Qa = 3: every bookie answered each add before it completed.
	ensemble := w.Metadata().Segments[0].Bookies
	for _, b := range ensemble {
		if ok, bad, _ := addCounts(t, reg, b); ok != n || bad != 0 {
			t.Fatalf("bookie %s: %d answered, %d failed; want %d and 0", b, ok, bad, n)
		}
	}
	for _, b := range c.Bookies() {
		_, found := testutil.Gather(t, reg).Value(t, addLatency, "bookie", b.ID, "success", "true")
		if want := slices.Contains(ensemble, b.ID); found != want {
			t.Fatalf("bookie %s: a series %v, want one only for the ensemble's bookies (%v)", b.ID, found, ensemble)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		// A bookie that does not answer: its add fails at the timeout;
		// the writer replaces it.
		const timeout = 2 * time.Second
		_, reg, w := meteredWriter(t, c, ledger.Config{AddTimeout: timeout})
		slow := w.Metadata().Segments[0].Bookies[2]
		c.Bookie(slow).Proxy.Pause()
		if _, err := w.Append(ctx, []byte("late")); err != nil {
			t.Fatal(err)
		}
		c.Bookie(slow).Proxy.Resume()
		if ok, bad, sum := addCounts(t, reg, slow); ok != 1 || bad != 1 || sum < float64(timeout.Milliseconds()) {
			t.Fatalf("the silent bookie %s: %d answered, %d failed (%v ms); want 1 and one of at least %v", slow, ok, bad, sum, timeout)
		}
	})

	t.Run("stream cut", func(t *testing.T) {
		// A stream cut while an add waits on it: that add fails then, well
		// within the add timeout (the default 5 s: not what ends it).
		cl, reg, w := meteredWriter(t, c, ledger.Config{})
		cut := w.Metadata().Segments[0].Bookies[0]
		p := c.Bookie(cut).Proxy
		p.Pause()
		done := make(chan error, 1)
		go func() {
			_, err := w.Append(ctx, []byte("cut"))
			done <- err
		}()
		pendingOn(t, cl, cut)
		p.CutAll()
		p.Resume()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if ok, bad, sum := addCounts(t, reg, cut); ok != 1 || bad != 1 || sum >= 5000 {
			t.Fatalf("the cut bookie %s: %d answered, %d failed (%v ms); want 1 and one failure, before the timeout", cut, ok, bad, sum)
		}
	})

	t.Run("client closed", func(t *testing.T) {
		// The client closing while an add waits: no failure of the bookie.
		cl, reg, w := meteredWriter(t, c, ledger.Config{})
		b := w.Metadata().Segments[0].Bookies[1]
		p := c.Bookie(b).Proxy
		p.Pause()
		defer p.Resume()
		done := make(chan error, 1)
		go func() {
			_, err := w.Append(ctx, []byte("closed"))
			done <- err
		}()
		pendingOn(t, cl, b)
		cl.Close()
		if err := <-done; err == nil {
			t.Fatal("an append across the client's closing worked")
		}
		if ok, bad, _ := addCounts(t, reg, b); ok != 1 || bad != 0 {
			t.Fatalf("bookie %s after the client closed: %d answered, %d failed; want 1 and 0", b, ok, bad)
		}
	})
}

const readLatency = "bookkeeper_client_per_channel_bookie_client_READ_ENTRY"

// Reads too, per bookie: each answered read counts for the bookie that
// answered; one a bookie did not answer within ReadTimeout as its
// failure, and so one still out when another replica answered; one given
// up by its caller not at all.
func TestReadLatencyPerBookie(t *testing.T) {
	c := testcluster.Start(t, 3, testcluster.Options{})
	ctx := ctxT(t)
	const timeout = 2 * time.Second
	// No speculative reads: each entry is read from one bookie.
	cl := c.Client(ledger.Config{ReadTimeout: timeout, SpeculativeReadTimeout: time.Hour})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cl.Metrics())
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for range n {
		if _, err := w.Append(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, n-1); err != nil {
		t.Fatal(err)
	}
	counts := func(b string) (ok, bad uint64, badSumMs float64) {
		g := testutil.Gather(t, reg)
		s, f := g.Summary(t, readLatency, "bookie", b, "success", "true"), g.Summary(t, readLatency, "bookie", b, "success", "false")
		return s.GetSampleCount(), f.GetSampleCount(), f.GetSampleSum()
	}
	var total uint64
	for _, b := range c.Bookies() {
		ok, bad, _ := counts(b.ID)
		if ok == 0 || bad != 0 {
			t.Fatalf("bookie %s: %d reads answered, %d failed; want some and none (reads rotate over the write set)", b.ID, ok, bad)
		}
		total += ok
	}
	if total != n {
		t.Fatalf("%d reads answered in all, want %d (one per entry)", total, n)
	}

	// A bookie that does not answer: a failure at the timeout.
	m := r.Metadata()
	slow := c.Bookie(m.Segments[0].Bookies[0]) // entry 0's first replica
	okBefore, _, _ := counts(slow.ID)
	slow.Proxy.Pause()
	if _, err := cl.ReadFrom(ctx, m, slow.ID, 0); err == nil {
		t.Fatal("a read from a paused bookie worked")
	}
	if ok, bad, sum := counts(slow.ID); ok != okBefore || bad != 1 || sum < float64(timeout.Milliseconds()) {
		t.Fatalf("the paused bookie: %d answered, %d failed (%v ms); want %d and one of at least %v", ok, bad, sum, okBefore, timeout)
	}

	// A read its caller gives up: not counted. (A new pause, so that
	// Held says the proxy holds this read's bytes, not the last one's.)
	slow.Proxy.Resume()
	slow.Proxy.Pause()
	rctx, cancel := context.WithCancel(ctx)
	held := slow.Proxy.Held()
	done := make(chan error, 1)
	go func() {
		_, err := cl.ReadFrom(rctx, m, slow.ID, 1)
		done <- err
	}()
	select {
	case <-held: // the read is in the proxy
	case <-ctx.Done():
		t.Fatal("the read never reached the paused bookie's proxy")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a read given up worked")
	}
	if ok, bad, _ := counts(slow.ID); ok != okBefore || bad != 1 {
		t.Fatalf("the paused bookie after a read given up: %d answered, %d failed; want %d and 1", ok, bad, okBefore)
	}

	// A read still out when a speculative read to another replica
	// answered: a failure of its bookie, of at least the speculative
	// timeout. (It ends after the entry is returned: wait for it.)
	const speculate = 50 * time.Millisecond
	cl2 := c.Client(ledger.Config{SpeculativeReadTimeout: speculate})
	reg2 := prometheus.NewPedanticRegistry()
	reg2.MustRegister(cl2.Metrics())
	r2, err := cl2.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Read(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		g := testutil.Gather(t, reg2)
		lost := g.Summary(t, readLatency, "bookie", slow.ID, "success", "false")
		if lost.GetSampleCount() == 1 {
			if sum := lost.GetSampleSum(); sum < float64(speculate.Milliseconds()) {
				t.Fatalf("the read lost to a speculative one took %v ms, want at least %v", sum, speculate)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the read lost to a speculative one: %d failures of %s counted, want 1", lost.GetSampleCount(), slow.ID)
		}
	}
	slow.Proxy.Resume()
}
