package autorecovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

func TestMain(m *testing.M) {
	testutil.PoisonReleased()
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// startCluster runs n bookies without their own autorecovery: each test
// starts the instances it needs.
// eventually retries cond until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startCluster(t *testing.T, n int) *testcluster.Cluster {
	return testcluster.Start(t, n, testcluster.Options{Configure: func(c *bookie.Config) { c.Autorecovery = false }})
}

func startService(t *testing.T, tc *testcluster.Cluster, id string, mod func(*autorecovery.Config)) *autorecovery.Service {
	t.Helper()
	return startServiceWithHook(t, tc, id, mod, nil)
}

// startServiceWithHook is startService with a step hook in place from
// the start.
func startServiceWithHook(t *testing.T, tc *testcluster.Cluster, id string, mod func(*autorecovery.Config), hook func(step string, ledgerID int64) error) *autorecovery.Service {
	t.Helper()
	cfg := autorecovery.Config{
		ID:            id,
		AuditInterval: 50 * time.Millisecond,
		PollInterval:  100 * time.Millisecond,
		SessionTTL:    2 * time.Second,
		Logger:        zaptest.NewLogger(t).Named(id),
	}
	if mod != nil {
		mod(&cfg)
	}
	s, err := autorecovery.StartWithHook(tc.Store, tc.Client(ledger.Config{Logger: cfg.Logger}), cfg, hook)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func payload(id, e int64) []byte {
	return []byte(fmt.Sprintf("ledger %d entry %d %s", id, e, bytes.Repeat([]byte("p"), int(e%40))))
}

// writeLedger writes n entries at E3/Qw3/Qa2 and closes the ledger unless
// keepOpen; it returns the writer (nil once closed) and the ledger id.
func writeLedger(t *testing.T, lc *ledger.Client, n int, keepOpen bool) (*ledger.Writer, int64) {
	return writeLedgerWith(t, lc, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2}, n, keepOpen)
}

// writeLedgerWith is writeLedger with other replication.
func writeLedgerWith(t *testing.T, lc *ledger.Client, opts ledger.CreateOptions, n int, keepOpen bool) (*ledger.Writer, int64) {
	t.Helper()
	ctx := ctxT(t)
	w, err := lc.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for e := int64(0); e < int64(n); e++ {
		if _, err := w.Append(ctx, payload(w.ID(), e)); err != nil {
			t.Fatalf("append %d: %v", e, err)
		}
	}
	if keepOpen {
		t.Cleanup(func() { w.Close(context.Background()) })
		return w, w.ID()
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return nil, w.ID()
}

// checkCopies reads every copy of every entry of the ledger's fragments
// (all segments of a closed ledger, all but the last of an open one)
// directly from its bookie. Fragments on a bookie in skip (dead, and not
// expected to be replaced yet) are not read. It returns the first problem.
func checkCopies(ctx context.Context, lc *ledger.Client, id int64, skip ...string) error {
	m, err := lc.Metadata(ctx, id)
	if err != nil {
		return err
	}
	for i, seg := range m.Segments {
		if m.State != ledger.StateClosed && i == len(m.Segments)-1 {
			break
		}
		for e := seg.First; e <= m.SegmentEnd(i); e++ {
			for _, p := range ledger.WriteSet(e, m.Ensemble, m.WriteQuorum) {
				b := seg.Bookies[p]
				if slices.Contains(skip, b) {
					continue
				}
				resp, err := lc.ReadFrom(ctx, m, b, e)
				if err != nil {
					return fmt.Errorf("ledger %d entry %d on %s (segment %d): %w", id, e, b, i, err)
				}
				if !bytes.Equal(resp.Payload, payload(id, e)) {
					return fmt.Errorf("ledger %d entry %d on %s: wrong payload", id, e, b)
				}
			}
		}
	}
	return nil
}

// names says whether the ledger's metadata (all segments, or all but the
// last when onlyClosed and the ledger is open) names bookie b.
func names(t *testing.T, lc *ledger.Client, id int64, b string, onlyClosed bool) bool {
	t.Helper()
	m, err := lc.Metadata(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range m.Segments {
		if onlyClosed && m.State != ledger.StateClosed && i == len(m.Segments)-1 {
			break
		}
		if slices.Contains(s.Bookies, b) {
			return true
		}
	}
	return false
}

func marks(t *testing.T, store *metastore.Store) []string {
	t.Helper()
	var out []string
	if err := store.ListAll(context.Background(), metastore.UnderReplicatedPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		out = append(out, kv.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// ensembleOf returns the bookies of the ledger's first segment.
func ensembleOf(t *testing.T, lc *ledger.Client, id int64) []string {
	m, err := lc.Metadata(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return m.Segments[0].Bookies
}

func TestLostBookieIsReReplicated(t *testing.T) {
	tc := startCluster(t, 5)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	var closed []int64
	for i := 0; i < 4; i++ {
		_, id := writeLedger(t, lc, 40, false)
		closed = append(closed, id)
	}
	victim := ensembleOf(t, lc, closed[0])[1]

	// An open ledger whose writer is alive (its lease) on the victim.
	sess, err := tc.Store.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	wlc := tc.Client(ledger.Config{WriterLease: func() int64 { return int64(sess.Lease()) }})
	var live *ledger.Writer
	var liveID int64
	for live == nil {
		w, id := writeLedger(t, wlc, 10, true)
		if slices.Contains(ensembleOf(t, lc, id), victim) {
			live, liveID = w, id
		} else {
			w.Close(ctx)
		}
	}
	// An open ledger whose writer is gone (its lease revoked) on the
	// victim: autorecovery recovers it first.
	var goneID int64
	for goneID == 0 {
		gsess, err := tc.Store.NewSession(ctx, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		glc := tc.Client(ledger.Config{WriterLease: func() int64 { return int64(gsess.Lease()) }})
		w, id := writeLedger(t, glc, 10, true)
		// The writer "dies": its lease goes, the ledger stays open.
		gsess.Close()
		glc.Close()
		_ = w
		if slices.Contains(ensembleOf(t, lc, id), victim) {
			goneID = id
		}
	}

	tc.Bookie(victim).Kill()
	startService(t, tc, "ar-1", nil)

	eventually(t, 60*time.Second, func() error {
		for _, id := range append(slices.Clone(closed), goneID) {
			if names(t, lc, id, victim, false) {
				return fmt.Errorf("ledger %d still names %s", id, victim)
			}
		}
		return nil
	})
	for _, id := range append(slices.Clone(closed), goneID) {
		if err := checkCopies(ctx, lc, id); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := lc.Metadata(ctx, goneID)
	if m.State != ledger.StateClosed || m.LastEntry != 9 {
		t.Fatalf("ledger of the gone writer: %s at %d, want closed at 9", m.State, m.LastEntry)
	}
	// The live writer's ledger keeps its last segment (and its mark) until
	// the writer closes it: it was not fenced.
	if _, err := live.Append(ctx, payload(liveID, 10)); err != nil {
		t.Fatalf("the live writer was disturbed: %v", err)
	}
	if err := live.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		if names(t, lc, liveID, victim, false) {
			return fmt.Errorf("ledger %d still names %s", liveID, victim)
		}
		if ms := marks(t, tc.Store); len(ms) > 0 {
			return fmt.Errorf("marks left: %v", ms)
		}
		return nil
	})
	if err := checkCopies(ctx, lc, liveID); err != nil {
		t.Fatal(err)
	}
	// The index no longer lists the victim.
	if n := countIndex(t, tc.Store, victim); n != 0 {
		t.Fatalf("index still lists %d ledgers on %s", n, victim)
	}
}

func countIndex(t *testing.T, store *metastore.Store, b string) int {
	n := 0
	if err := store.ListAll(context.Background(), metastore.BookieLedgersOf(b), metastore.ListOptions{KeysOnly: true}, func(metastore.KV) error {
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLostBookieDelay(t *testing.T) {
	tc := startCluster(t, 4)
	ctx := ctxT(t)
	lc := tc.Client(ledger.Config{})
	_, id := writeLedger(t, lc, 20, false)
	victim := tc.Bookie(ensembleOf(t, lc, id)[0])
	s := startService(t, tc, "ar-1", func(c *autorecovery.Config) { c.LostBookieDelay = time.Hour })
	eventually(t, 10*time.Second, func() error {
		if !s.IsAuditor() {
			return errors.New("not auditor yet")
		}
		return nil
	})
	// A restart within the delay copies nothing.
	victim.Stop()
	eventually(t, 10*time.Second, func() error {
		if _, err := tc.Store.Get(ctx, metastore.BookieAvailableKey(victim.ID)); err == nil {
			return errors.New("still registered")
		}
		return nil
	})
	tc.Restart(victim)
	if ms := marks(t, tc.Store); len(ms) != 0 {
		t.Fatalf("marks after a short restart: %v", ms)
	}
	if st := s.Stats(); st.CopiedEntries != 0 {
		t.Fatalf("copied %d entries after a short restart", st.CopiedEntries)
	}
}

// TestRepairCrashAtEveryStep: the worker dies at each step of a repair (it
// stops there holding the ledger's lock); a second worker cannot touch the
// ledger meanwhile, and finishes once the first is gone. At every step the
// metadata names only bookies that hold their copies.
func TestRepairCrashAtEveryStep(t *testing.T) {
	for _, step := range []string{"planned", "filled", "copied", "swapped"} {
		t.Run(step, func(t *testing.T) {
			tc := startCluster(t, 5)
			ctx := ctxT(t)
			lc := tc.Client(ledger.Config{})
			_, id := writeLedger(t, lc, 30, false)
			victim := ensembleOf(t, lc, id)[2]

			var mu sync.Mutex
			var invErr error
			crashed := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			s1 := startService(t, tc, "ar-1", nil)
			s1.SetHook(func(name string, lid int64) error {
				if lid != id {
					return nil
				}
				if err := checkCopies(ctx, lc, id, victim); err != nil {
					mu.Lock()
					invErr = errors.Join(invErr, fmt.Errorf("at %s: %w", name, err))
					mu.Unlock()
				}
				if name == step {
					hit := false
					once.Do(func() { hit = true })
					if hit {
						close(crashed)
						<-release // "dead" until Close takes its session away
						return errors.New("crashed")
					}
				}
				return nil
			})
			tc.Bookie(victim).Kill()
			<-crashed
			// A second worker, while the first holds the lock.
			s2 := startService(t, tc, "ar-2", nil)
			var s2steps []string
			lockedOut := make(chan struct{}, 100)
			s2.SetHook(func(name string, lid int64) error {
				if lid != id {
					return nil
				}
				if name == "locked-out" {
					select {
					case lockedOut <- struct{}{}:
					default:
					}
					return nil
				}
				mu.Lock()
				s2steps = append(s2steps, name)
				mu.Unlock()
				return nil
			})
			// Until the swap the marks remain: three tries of s2 find the
			// lock taken. After it there is nothing left to try.
			for i := 0; i < 3 && step != "swapped"; i++ {
				<-lockedOut
			}
			mu.Lock()
			if len(s2steps) != 0 {
				t.Errorf("second worker repaired the ledger while the first held its lock: %v", s2steps)
			}
			mu.Unlock()
			close(release)
			s1.Close()
			eventually(t, 60*time.Second, func() error {
				if names(t, lc, id, victim, false) {
					return fmt.Errorf("ledger still names %s", victim)
				}
				if ms := marks(t, tc.Store); len(ms) > 0 {
					return fmt.Errorf("marks left: %v", ms)
				}
				return nil
			})
			if err := checkCopies(ctx, lc, id); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if invErr != nil {
				t.Fatal(invErr)
			}
		})
	}
}

// TestAuditorHandOverMidScan: the auditor dies after marking one of the
// lost bookie's ledgers; the next auditor marks the rest and every ledger
// is repaired.
func TestAuditorHandOverMidScan(t *testing.T) {
	tc := startCluster(t, 4)
	lc := tc.Client(ledger.Config{})
	var ids []int64
	for i := 0; i < 4; i++ {
		_, id := writeLedger(t, lc, 10, false)
		ids = append(ids, id)
	}
	// With 4 bookies and E3 every ledger is on 3 of them: pick the bookie
	// on the most ledgers.
	count := map[string]int{}
	for _, id := range ids {
		for _, b := range ensembleOf(t, lc, id) {
			count[b]++
		}
	}
	victim := ""
	for b, n := range count {
		if victim == "" || n > count[victim] || (n == count[victim] && b < victim) {
			victim = b
		}
	}
	on := 0
	for _, id := range ids {
		if slices.Contains(ensembleOf(t, lc, id), victim) {
			on++
		}
	}
	if on < 2 {
		t.Fatalf("victim on %d ledgers", on)
	}

	marked := make(chan struct{})
	release := make(chan struct{})
	var n int
	var mu sync.Mutex
	a := startService(t, tc, "ar-a", func(c *autorecovery.Config) { c.PollInterval = time.Hour })
	eventually(t, 10*time.Second, func() error {
		if !a.IsAuditor() {
			return errors.New("a is not the auditor")
		}
		return nil
	})
	a.SetHook(func(name string, lid int64) error {
		switch name {
		case "mark":
			mu.Lock()
			n++
			second := n == 2
			mu.Unlock()
			if second {
				close(marked)
				<-release
				return errors.New("auditor died")
			}
		case "planned":
			return errors.New("a does not repair") // leave the work to b
		}
		return nil
	})
	tc.Bookie(victim).Kill()
	<-marked
	if ms := marks(t, tc.Store); len(ms) != 1 {
		t.Fatalf("marks after the first auditor's first mark: %v", ms)
	}
	b := startService(t, tc, "ar-b", nil)
	close(release)
	a.Close()
	eventually(t, 60*time.Second, func() error {
		if !b.IsAuditor() {
			return errors.New("b is not the auditor")
		}
		for _, id := range ids {
			if names(t, lc, id, victim, false) {
				return fmt.Errorf("ledger %d still names %s", id, victim)
			}
		}
		return nil
	})
	for _, id := range ids {
		if err := checkCopies(ctxT(t), lc, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriterEnsembleChangeRacesRepair: a live writer changes its ensemble
// between the worker's copy and its compare-and-swap; the worker plans
// again, nothing is lost and the writer never fails.
func TestWriterEnsembleChangeRacesRepair(t *testing.T) {
	tc := startCluster(t, 6)
	ctx := ctxT(t)
	sess, err := tc.Store.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	lc := tc.Client(ledger.Config{WriterLease: func() int64 { return int64(sess.Lease()) }, AddTimeout: time.Second})
	w, id := writeLedger(t, lc, 20, true)
	first := ensembleOf(t, lc, id)
	victim := first[0]
	tc.Bookie(victim).Kill()
	// The writer's next append changes its ensemble: entries 0..19 stay
	// on the first segment, with the victim.
	next := int64(20)
	appendOne := func() {
		t.Helper()
		if _, err := w.Append(ctx, payload(id, next)); err != nil {
			t.Fatalf("append %d: %v", next, err)
		}
		next++
	}
	appendOne()
	// The append completes with the live bookies' acks; the ensemble
	// change follows the dead one's failure, maybe a little later.
	testutil.Eventually(t, 30*time.Second, "the ensemble change", func() bool { return len(w.Metadata().Segments) == 2 })

	var raced, replanned bool
	var mu sync.Mutex
	s := startService(t, tc, "ar-1", nil)
	s.SetHook(func(name string, lid int64) error {
		if lid != id {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if name == "copied" && !raced {
			raced = true
			// A second bookie of the writer's current ensemble fails:
			// the writer changes its ensemble before our swap.
			m, _ := lc.Metadata(ctx, id)
			cur := m.Segments[len(m.Segments)-1].Bookies
			tc.Bookie(cur[1]).Kill()
			appendOne()
			for deadline := time.Now().Add(30 * time.Second); len(w.Metadata().Segments) != 3; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					return fmt.Errorf("the writer did not change its ensemble: %+v", w.Metadata().Segments)
				}
			}
		} else if name == "planned" && raced {
			replanned = true
		}
		return nil
	})
	eventually(t, 60*time.Second, func() error {
		if names(t, lc, id, victim, true) {
			return fmt.Errorf("closed segments still name %s", victim)
		}
		return nil
	})
	mu.Lock()
	if !raced || !replanned {
		t.Fatalf("raced %v, planned again after the race %v", raced, replanned)
	}
	mu.Unlock()
	for i := 0; i < 5; i++ {
		appendOne()
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		if ms := marks(t, tc.Store); len(ms) > 0 {
			return fmt.Errorf("marks left: %v", ms)
		}
		return nil
	})
	if err := checkCopies(ctx, lc, id); err != nil {
		t.Fatal(err)
	}
	r, err := lc.OpenRecover(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, next-1)
	if err != nil || int64(len(got)) != next {
		t.Fatalf("read back: %d entries, %v; want %d", len(got), err, next)
	}
	for _, e := range got {
		if !bytes.Equal(e.Payload, payload(id, e.ID)) {
			t.Fatalf("entry %d: %q", e.ID, e.Payload)
		}
	}
}

// A mark of a bookie in the last segment of a ledger whose writer is alive
// is kept by the worker (A5: only the writer may touch that segment, and
// the mark is what brings the copies back once it is closed), not deleted
// with the marks it satisfied; once the writer closes the ledger, the
// worker repairs it and clears the mark.
func TestWorkerKeepsMarkOfWritersSegment(t *testing.T) {
	tc := startCluster(t, 3)
	ctx := ctxT(t)
	sess, err := tc.Store.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	lc := tc.Client(ledger.Config{WriterLease: func() int64 { return int64(sess.Lease()) }})
	w, id := writeLedger(t, lc, 10, true)
	b := ensembleOf(t, lc, id)[0]
	key := metastore.UnderReplicatedKey(id, b)
	raw, _ := proto.Marshal(&metapb.UnderReplicated{Reason: metapb.UnderReplicated_REASON_MISSING, MarkedBy: "test"})
	if _, err := tc.Store.Put(ctx, key, raw); err != nil {
		t.Fatal(err)
	}
	swapped := make(chan struct{}, 1)
	startServiceWithHook(t, tc, "ar-1", nil, func(step string, lid int64) error {
		if lid == id && step == "swapped" {
			select {
			case swapped <- struct{}{}:
			default:
			}
		}
		return nil
	})
	select {
	case <-swapped: // a repair of the open ledger went through
	case <-ctx.Done():
		t.Fatal("no repair of the marked ledger")
	}
	if _, err := tc.Store.Get(ctx, key); err != nil {
		t.Fatalf("the mark of %s, in the writer's segment, after a repair: %v", b, err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error {
		if ms := marks(t, tc.Store); len(ms) > 0 {
			return fmt.Errorf("marks left once the ledger is closed: %v", ms)
		}
		return nil
	})
	if err := checkCopies(ctx, lc, id); err != nil {
		t.Fatal(err)
	}
}
