package autorecovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/metastore"
)

// startHealingCluster runs n bookies each with its own autorecovery, as in
// production (lost-bookie delay 0).
func startHealingCluster(t *testing.T, n int) *testcluster.Cluster {
	return testcluster.Start(t, n, testcluster.Options{Configure: func(c *bookie.Config) {
		c.Autorecovery = true
		c.LostBookieRecoveryDelay = 0
		c.GCInterval = 100 * time.Millisecond
	}})
}

func statusOf(t *testing.T, store *metastore.Store, id string) autorecovery.BookieStatus {
	t.Helper()
	all, err := autorecovery.Bookies(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range all {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no bookie %s in %+v", id, all)
	return autorecovery.BookieStatus{}
}

// TestDecommissionUnderLoad: a bookie is decommissioned while a writer
// appends to a ledger on it: no append fails, the bookie turns read-only,
// every copy it held moves elsewhere, and it ends decommissioned holding
// no fragment of any ledger.
func TestDecommissionUnderLoad(t *testing.T) {
	tc := startHealingCluster(t, 5)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	var closed []int64
	for i := 0; i < 3; i++ {
		_, id := writeLedger(t, lc, 30, false)
		closed = append(closed, id)
	}
	victim := ensembleOf(t, lc, closed[0])[0]

	// A writer keeps appending to a ledger on the victim.
	var w *ledger.Writer
	var liveID int64
	for w == nil {
		cw, id := writeLedger(t, lc, 5, true)
		if slices.Contains(ensembleOf(t, lc, id), victim) {
			w, liveID = cw, id
		} else {
			cw.Close(ctx)
		}
	}
	var appended atomic.Int64
	appended.Store(5)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var appendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := appended.Load()
			if _, err := w.Append(ctx, payload(liveID, n)); err != nil {
				appendErr = err
				return
			}
			appended.Add(1)
		}
	}()

	if err := autorecovery.Decommission(ctx, tc.Store, victim); err != nil {
		t.Fatal(err)
	}
	if st := statusOf(t, tc.Store, victim).State; st != autorecovery.StateDraining {
		t.Fatalf("state after decommission: %s", st)
	}
	// The writer moves off the draining bookie by itself.
	eventually(t, 30*time.Second, func() error {
		m, err := lc.Metadata(ctx, liveID)
		if err != nil {
			return err
		}
		if slices.Contains(m.Segments[len(m.Segments)-1].Bookies, victim) {
			return errors.New("the writer still writes to the draining bookie")
		}
		return nil
	})
	close(stop)
	wg.Wait()
	if appendErr != nil {
		t.Fatalf("an append failed during the decommission: %v", appendErr)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		st := statusOf(t, tc.Store, victim)
		if st.State != autorecovery.StateDecommissioned || st.Ledgers != 0 {
			return fmt.Errorf("victim %+v", st)
		}
		return nil
	})
	for _, id := range append(closed, liveID) {
		if names(t, lc, id, victim, false) {
			t.Fatalf("ledger %d still names the decommissioned bookie", id)
		}
		if err := checkCopies(ctx, lc, id); err != nil {
			t.Fatal(err)
		}
	}
	r, err := lc.OpenRecover(ctx, liveID)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.LastAddConfirmed() + 1; got != appended.Load() {
		t.Fatalf("ledger holds %d entries, %d were acknowledged", got, appended.Load())
	}
	// New ledgers avoid it.
	for i := 0; i < 5; i++ {
		_, id := writeLedger(t, lc, 1, false)
		if slices.Contains(ensembleOf(t, lc, id), victim) {
			t.Fatal("a new ledger was placed on the decommissioned bookie")
		}
	}
	// Recommission makes it writable again.
	if err := autorecovery.Recommission(ctx, tc.Store, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if st := statusOf(t, tc.Store, victim).State; st != autorecovery.StateWritable {
			return fmt.Errorf("state after recommission: %s", st)
		}
		return nil
	})
	if err := autorecovery.Recommission(ctx, tc.Store, victim); !errors.Is(err, autorecovery.ErrNotDraining) {
		t.Fatalf("second recommission: %v", err)
	}
}

func TestDecommissionRefused(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	_, id := writeLedger(t, lc, 1, false)
	b := ensembleOf(t, lc, id)[0]
	err := autorecovery.Decommission(ctx, tc.Store, b)
	if !errors.Is(err, autorecovery.ErrTooFewBookies) {
		t.Fatalf("decommission with 3 bookies at E3: %v", err)
	}
	if err := autorecovery.Decommission(ctx, tc.Store, "no-such-bookie"); !errors.Is(err, autorecovery.ErrUnknownBookie) {
		t.Fatalf("decommission of an unknown bookie: %v", err)
	}
	if st := statusOf(t, tc.Store, b).State; st != autorecovery.StateWritable {
		t.Fatalf("refused decommission changed the state: %s", st)
	}
}

// wipedBookie writes n closed ledgers, then wipes a bookie of the
// first one's ensemble while no auditor runs (stopped, its data and cookie
// removed, started again as a new instance) and returns the ledgers and
// the bookie.
func wipedBookie(t *testing.T, tc *testcluster.Cluster, lc *ledger.Client, n int) ([]int64, *testcluster.Bookie) {
	t.Helper()
	var ids []int64
	for range n {
		_, id := writeLedger(t, lc, 20, false)
		ids = append(ids, id)
	}
	victim := tc.Bookie(ensembleOf(t, lc, ids[0])[1])
	victim.Stop()
	if err := os.RemoveAll(victim.Dir); err != nil {
		t.Fatal(err)
	}
	if err := tc.Store.Delete(ctxT(t), metastore.BookieCookieKey(victim.ID)); err != nil {
		t.Fatal(err)
	}
	tc.Restart(victim)
	return ids, victim
}

// TestWipedBookieIsRefilled: a bookie's data directory is wiped; the
// operator deletes its cookie and it comes back under the same id with a
// new instance. The periodic check finds what it lacks and copies it back.
func TestWipedBookieIsRefilled(t *testing.T) {
	tc := startCluster(t, 4)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	ids, victim := wipedBookie(t, tc, lc, 3)
	if err := checkCopies(ctx, lc, ids[0]); err == nil {
		t.Fatal("the wiped bookie still has its copies")
	}
	s := startService(t, tc, "ar-1", func(c *autorecovery.Config) { c.CheckInterval = 100 * time.Millisecond })
	eventually(t, 60*time.Second, func() error {
		for _, id := range ids {
			if err := checkCopies(ctx, lc, id); err != nil {
				return err
			}
		}
		return nil
	})
	if s.Stats().CopiedEntries == 0 {
		t.Fatal("nothing copied")
	}
	// The bookie kept its place in the metadata: it was refilled, not
	// replaced.
	if !names(t, lc, ids[0], victim.ID, false) {
		t.Fatal("the wiped bookie was replaced rather than refilled")
	}
}

// TestDecommissionMovesIdleWriters: a drain does not wait for idle
// writers to write or close: they move off the draining bookie by
// themselves, and the drain completes while their ledger stays open.
func TestDecommissionMovesIdleWriters(t *testing.T) {
	tc := startHealingCluster(t, 5)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{ExplicitLACInterval: 100 * time.Millisecond})
	w, id := writeLedger(t, lc, 10, true)
	victim := ensembleOf(t, lc, id)[1]
	if err := autorecovery.Decommission(ctx, tc.Store, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		if st := statusOf(t, tc.Store, victim); st.State != autorecovery.StateDecommissioned {
			return fmt.Errorf("victim %+v", st)
		}
		return nil
	})
	if names(t, lc, id, victim, false) {
		t.Fatal("the open ledger still names the decommissioned bookie")
	}
	if _, err := w.Append(ctx, payload(id, 10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := checkCopies(ctx, lc, id); err != nil {
		t.Fatal(err)
	}
}

// TestDecommissionSingleCopy: a ledger with one copy (E1/Qw1) on a
// draining bookie: the bookie itself is the only source, and the copy
// moves.
func TestDecommissionSingleCopy(t *testing.T) {
	tc := startHealingCluster(t, 3)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	_, id := writeLedgerWith(t, lc, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}, 20, false)
	victim := ensembleOf(t, lc, id)[0]
	if err := autorecovery.Decommission(ctx, tc.Store, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		if st := statusOf(t, tc.Store, victim); st.State != autorecovery.StateDecommissioned {
			return fmt.Errorf("victim %+v", st)
		}
		return nil
	})
	if names(t, lc, id, victim, false) {
		t.Fatal("the ledger still names the decommissioned bookie")
	}
	if err := checkCopies(ctx, lc, id); err != nil {
		t.Fatal(err)
	}
}

// TestReaderFollowsMovedCopies: a reader opened on a closed ledger keeps
// reading after every copy it knew of moved to other bookies (both of its
// bookies decommissioned, their copies collected).
func TestReaderFollowsMovedCopies(t *testing.T) {
	tc := startHealingCluster(t, 4)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	_, id := writeLedgerWith(t, lc, ledger.CreateOptions{Ensemble: 2, WriteQuorum: 2, AckQuorum: 2}, 10, false)
	r, err := lc.Open(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, 9); err != nil {
		t.Fatal(err)
	}
	old := ensembleOf(t, lc, id)
	for _, b := range old {
		if err := autorecovery.Decommission(ctx, tc.Store, b); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, func() error {
		for _, b := range old {
			if st := statusOf(t, tc.Store, b); st.State != autorecovery.StateDecommissioned {
				return fmt.Errorf("%+v", st)
			}
			n := 0
			if err := lc.ListEntries(ctx, b, id, func(ids []int64) error { n += len(ids); return nil }); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("%s still holds %d entries", b, n)
			}
		}
		return nil
	})
	got, err := r.Read(ctx, 0, 9)
	if err != nil {
		t.Fatalf("read after the copies moved: %v", err)
	}
	for _, e := range got {
		if !bytes.Equal(e.Payload, payload(id, e.ID)) {
			t.Fatalf("entry %d: %q", e.ID, e.Payload)
		}
	}
}

// Forget removes a decommissioned bookie that is gone (what the
// autoscaler does after lowering the replicas): refused while it drains,
// while it is registered, or for a bookie never decommissioned; after it,
// a bookie started under the same id on an empty disk is a new, writable
// one (before, its cookie made it refuse to start).
func TestForgetDecommissionedBookie(t *testing.T) {
	tc := startHealingCluster(t, 4)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	_, id := writeLedger(t, lc, 20, false)
	victim := ensembleOf(t, lc, id)[0]
	if err := autorecovery.Forget(ctx, tc.Store, victim); !errors.Is(err, autorecovery.ErrNotDecommissioned) {
		t.Fatalf("forget of a writable bookie: %v", err)
	}
	if err := autorecovery.Decommission(ctx, tc.Store, victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		if st := statusOf(t, tc.Store, victim); st.State != autorecovery.StateDecommissioned {
			if err := autorecovery.Forget(ctx, tc.Store, victim); !errors.Is(err, autorecovery.ErrNotDecommissioned) {
				t.Fatalf("forget while %s: %v", st.State, err)
			}
			return fmt.Errorf("victim %+v", st)
		}
		return nil
	})
	if err := autorecovery.Forget(ctx, tc.Store, victim); !errors.Is(err, autorecovery.ErrNotDecommissioned) || !strings.Contains(err.Error(), "still registered") {
		t.Fatalf("forget of a registered bookie: %v", err)
	}
	b := tc.Bookie(victim)
	b.Stop()
	cfg := b.Config()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	if s, err := bookie.Start(ctx, cfg, bookie.WithStore(tc.Store)); err == nil {
		s.Close()
		t.Fatal("a bookie on an empty disk started under a known id before Forget")
	}
	if err := autorecovery.Forget(ctx, tc.Store, victim); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{metastore.BookieCookieKey(victim), metastore.BookieDrainKey(victim)} {
		if _, err := tc.Store.Get(ctx, key); !errors.Is(err, metastore.ErrNotFound) {
			t.Fatalf("%s after Forget: %v", key, err)
		}
	}
	s, err := bookie.Start(ctx, cfg, bookie.WithStore(tc.Store))
	if err != nil {
		t.Fatalf("a fresh bookie under the forgotten id: %v", err)
	}
	defer s.Close()
	eventually(t, 10*time.Second, func() error {
		if st := statusOf(t, tc.Store, victim); st.State != autorecovery.StateWritable {
			return fmt.Errorf("the new bookie is %s", st.State)
		}
		return nil
	})
	if err := checkCopies(ctx, lc, id); err != nil {
		t.Fatal(err)
	}
}

// The periodic check compares every fragment of a closed ledger, its last
// segment included, with what each bookie holds, and marks a bookie that
// lacks entries: here, one whose disk was wiped while no auditor ran. The
// repairs are held back to look at the marks one check leaves.
func TestCheckMarksBookieLackingEntriesOfClosedLedgers(t *testing.T) {
	tc := startCluster(t, 4)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	ids, victim := wipedBookie(t, tc, lc, 2)
	checked := make(chan struct{}, 1)
	startServiceWithHook(t, tc, "ar-1", func(c *autorecovery.Config) { c.CheckInterval = 100 * time.Millisecond }, func(step string, _ int64) error {
		switch step {
		case "checked":
			select {
			case checked <- struct{}{}:
			default:
			}
		case "planned":
			return errors.New("test: no repair")
		}
		return nil
	})
	select {
	case <-checked:
	case <-ctx.Done():
		t.Fatal("no check")
	}
	for _, id := range ids {
		if !names(t, lc, id, victim.ID, false) {
			continue
		}
		if _, err := tc.Store.Get(ctx, metastore.UnderReplicatedKey(id, victim.ID)); err != nil {
			t.Errorf("ledger %d: %s lacks its entries, but after a check: %v", id, victim.ID, err)
		}
	}
}
