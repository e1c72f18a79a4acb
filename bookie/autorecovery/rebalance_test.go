package autorecovery_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
)

// copiesPerBookie counts, from the metadata, the closed ledgers each
// bookie holds a copy of.
func copiesPerBookie(t *testing.T, lc *ledger.Client, ids []int64) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		m, err := lc.Metadata(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range m.Bookies() {
			out[b]++
		}
	}
	return out
}

// TestRebalanceAfterScaleOut: 3 bookies hold every copy of 12 ledgers; 2
// bookies join and a rebalance is requested: copies move until the spread
// is within the target, every copy is still readable, and the sources
// delete what they gave away.
func TestRebalanceAfterScaleOut(t *testing.T) {
	tc := testcluster.Start(t, 3, testcluster.Options{Configure: func(c *bookie.Config) {
		c.Autorecovery = true
		c.GCInterval = 100 * time.Millisecond
	}})
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	var ids []int64
	for i := 0; i < 12; i++ {
		_, id := writeLedger(t, lc, 40, false)
		ids = append(ids, id)
	}
	first := tc.Bookies()
	tc.AddBookie(testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
	tc.AddBookie(testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
	if st, err := autorecovery.GetRebalance(ctx, tc.Store); err != nil || st.Active {
		t.Fatalf("rebalance before the request: %+v %v", st, err)
	}
	if err := autorecovery.RequestRebalance(ctx, tc.Store, 0.3); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		st, err := autorecovery.GetRebalance(ctx, tc.Store)
		if err != nil {
			return err
		}
		if st.Active || st.PendingMoves > 0 {
			return fmt.Errorf("rebalance running: %+v", st)
		}
		return nil
	})
	counts := copiesPerBookie(t, lc, ids)
	lo, hi := 1<<30, 0
	for _, b := range tc.Bookies() {
		lo, hi = min(lo, counts[b.ID]), max(hi, counts[b.ID])
	}
	mean := 36.0 / 5
	if float64(hi-lo)/mean > 0.3 {
		t.Fatalf("copies per bookie after the rebalance: %v", counts)
	}
	for _, id := range ids {
		if err := checkCopies(ctx, lc, id); err != nil {
			t.Fatal(err)
		}
	}
	// The sources delete the copies they gave away.
	eventually(t, 30*time.Second, func() error {
		for _, b := range first {
			for _, id := range ids {
				if names(t, lc, id, b.ID, false) {
					continue
				}
				n := 0
				if err := lc.ListEntries(ctx, b.ID, id, func(es []int64) error { n += len(es); return nil }); err != nil {
					return err
				}
				if n > 0 {
					return fmt.Errorf("bookie %s still holds %d entries of ledger %d it gave away", b.ID, n, id)
				}
			}
		}
		return nil
	})
	if err := autorecovery.RequestRebalance(ctx, tc.Store, -1); err != nil {
		t.Fatal(err)
	}
	if err := autorecovery.RequestRebalance(ctx, tc.Store, 11); !errors.Is(err, autorecovery.ErrInvalidArgument) {
		t.Fatalf("target 11: %v", err)
	}
}

// TestAutoRebalance: with automatic rebalancing on, no request is needed:
// the auditor evens the copies out after a scale-out by itself.
func TestAutoRebalance(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	var ids []int64
	for i := 0; i < 12; i++ {
		_, id := writeLedger(t, lc, 40, false)
		ids = append(ids, id)
	}
	tc.AddBookie(testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
	tc.AddBookie(testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
	startService(t, tc, "ar-auto", func(c *autorecovery.Config) {
		c.AutoRebalance = true
		c.RebalanceInterval = 100 * time.Millisecond
		c.RebalanceSpread = 0.3
	})
	eventually(t, 60*time.Second, func() error {
		counts := copiesPerBookie(t, lc, ids)
		lo, hi := 1<<30, 0
		for _, b := range tc.Bookies() {
			lo, hi = min(lo, counts[b.ID]), max(hi, counts[b.ID])
		}
		if float64(hi-lo)/(36.0/5) > 0.3 {
			return fmt.Errorf("copies per bookie %v", counts)
		}
		st, err := autorecovery.GetRebalance(ctx, tc.Store)
		if err != nil || st.PendingMoves > 0 {
			return fmt.Errorf("rebalance %+v %v", st, err)
		}
		if st.Active {
			return errors.New("a rebalance request appeared: auto mode needs none")
		}
		return nil
	})
	for _, id := range ids {
		if err := checkCopies(ctx, lc, id); err != nil {
			t.Fatal(err)
		}
	}
}
