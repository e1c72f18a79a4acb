package ledger_test

import (
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

// The client exports each add's latency per bookie: answered adds as
// successes; an add a bookie did not answer within AddTimeout, and one
// pending on a stream that broke, as failures of that bookie alone.
func TestAddLatencyPerBookie(t *testing.T) {
	c := testcluster.Start(t, 5, testcluster.Options{})
	ctx := ctxT(t)
	const timeout = 500 * time.Millisecond
	cl := c.Client(ledger.Config{AddTimeout: timeout})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cl.Metrics())
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	const n = 20
	for range n {
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

	// A bookie that does not answer: its add fails at the timeout; the
	// writer replaces it.
	slow := ensemble[2]
	c.Bookie(slow).Proxy.Pause()
	if _, err := w.Append(ctx, []byte("late")); err != nil {
		t.Fatal(err)
	}
	c.Bookie(slow).Proxy.Resume()
	if ok, bad, sum := addCounts(t, reg, slow); ok != n || bad != 1 || sum < float64(timeout.Milliseconds()) {
		t.Fatalf("the silent bookie %s: %d answered, %d failed (%v ms); want %d and one of at least %v", slow, ok, bad, sum, n, timeout)
	}
	for _, b := range ensemble[:2] {
		if ok, bad, _ := addCounts(t, reg, b); ok != n+1 || bad != 0 {
			t.Fatalf("bookie %s: %d answered, %d failed; want %d and 0", b, ok, bad, n+1)
		}
	}

	// A stream cut while an add waits on it: that add fails then, well
	// within the add timeout (the default 5 s: not what ends it).
	cl2 := c.Client(ledger.Config{})
	reg2 := prometheus.NewPedanticRegistry()
	reg2.MustRegister(cl2.Metrics())
	w2, err := cl2.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close(ctx)
	if _, err := w2.Append(ctx, []byte("streams open")); err != nil {
		t.Fatal(err)
	}
	cut := w2.Metadata().Segments[0].Bookies[0]
	p := c.Bookie(cut).Proxy
	p.Pause()
	done := make(chan error, 1)
	go func() {
		_, err := w2.Append(ctx, []byte("cut"))
		done <- err
	}()
	select {
	case <-p.Held(): // the add is on the stream, held by the proxy
	case <-ctx.Done():
		t.Fatal("the add never reached the paused bookie's proxy")
	}
	p.CutAll()
	p.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ok, bad, sum := addCounts(t, reg2, cut); ok != 1 || bad != 1 || sum >= 5000 {
		t.Fatalf("the cut bookie %s: %d answered, %d failed (%v ms); want 1 and one failure, before the timeout", cut, ok, bad, sum)
	}
}
