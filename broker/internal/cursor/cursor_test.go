package cursor

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type env struct {
	t     *testing.T
	c     *testcluster.Cluster
	topic string
}

func newEnv(t *testing.T) *env {
	return &env{t: t, c: testcluster.Start(t, 1, testcluster.Options{}), topic: "public/default/t"}
}

// owner takes the topic over (as a new broker would) and opens its
// managed ledger.
func (e *env) owner() (*mledger.ManagedLedger, Deps) {
	e.t.Helper()
	ctx := ctxT(e.t)
	key := metastore.OwnerKey(e.topic)
	e.c.Store.Delete(ctx, key)
	rev, err := e.c.Store.Create(ctx, key, []byte("b"))
	if err != nil {
		e.t.Fatal(err)
	}
	g := &metastore.Guard{Key: key, Token: rev}
	cl := e.c.Client(ledger.Config{})
	ml, err := mledger.Open(ctx, e.topic, mledger.DefaultConfig(), mledger.Deps{Store: e.c.Store, Ledgers: cl, Guard: g, Log: zaptest.NewLogger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ml.Close(context.Background()) })
	return ml, Deps{Store: e.c.Store, Ledgers: cl, Guard: g, Log: zaptest.NewLogger(e.t), Ensemble: 1, WriteQuorum: 1, AckQuorum: 1}
}

func open(t *testing.T, ml *mledger.ManagedLedger, d Deps, name string) (*Cursor, bool) {
	t.Helper()
	c, created, err := Open(ctxT(t), ml, name, Position{Ledger: -1, Entry: -1}, d)
	if err != nil {
		t.Fatal(err)
	}
	return c, created
}

func TestPersistAndReload(t *testing.T) {
	e := newEnv(t)
	ml, d := e.owner()
	ctx := ctxT(t)
	var ps []Position
	for i := 0; i < 20; i++ {
		p, err := ml.Append(ctx, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	c, created := open(t, ml, d, "sub")
	if !created || c.ReadPosition() != ps[0] {
		t.Fatalf("new cursor: created %v, read position %v", created, c.ReadPosition())
	}
	c.Ack(ps[0], ps[1], ps[5], ps[7])
	if err := c.AckBatchIndex(ps[9], 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c2, created := open(t, ml, d, "sub")
	defer c2.Close(ctx)
	if created {
		t.Fatal("existing subscription created again")
	}
	st := c2.Stats()
	if st.MarkDelete != ps[1] || st.Holes != 2 || c2.ReadPosition() != ps[2] {
		t.Fatalf("reloaded: %+v", st)
	}
	if !c2.IsAcked(ps[5]) || c2.IsAcked(ps[6]) || !c2.BatchAcked(ps[9], 1) || c2.BatchAcked(ps[9], 0) {
		t.Fatal("reloaded acknowledgements differ")
	}
	// The new incarnation has its own cursor ledger; the old one is gone.
	if st.CursorLedger == 0 {
		t.Fatal("no cursor ledger")
	}
}

// A million ack holes persist across a crash of the owner (the cursor is
// never closed; the next owner recovers the cursor ledger). The state is
// far larger than etcd takes in one request.
func TestMillionAckHolesSurviveCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a multi-megabyte cursor state")
	}
	e := newEnv(t)
	ml, d := e.owner()
	ctx := ctxT(t)
	c, _ := open(t, ml, d, "holes")
	// Stops the crashed owner's goroutines once the test is over (its
	// snapshot fails then: it is fenced).
	defer c.Close(ctx)
	// Positions in the current ledger; the cursor does not need the entries
	// to exist. Random gaps make the state compress poorly (several chunks).
	ledgerID := ml.Next(Position{Ledger: -1, Entry: -1}).Ledger
	rng := rand.New(rand.NewPCG(7, 7))
	const holes = 1_000_000
	var acked []int64
	e2 := int64(0)
	for i := 0; i < holes; i++ {
		e2 += 2 + rng.Int64N(1000) // at least one unacknowledged entry between
		acked = append(acked, e2)
	}
	for _, en := range acked {
		c.Ack(Position{Ledger: ledgerID, Entry: en})
	}
	if got := c.Stats().Holes; got != holes {
		t.Fatalf("%d holes, want %d", got, holes)
	}
	if err := c.Persist(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cursor ledger holds %d bytes in %d snapshots", c.written, c.snapSeq)

	// Crash: the owner is gone without closing anything. A new owner.
	ml2, d2 := e.owner()
	c2, created := open(t, ml2, d2, "holes")
	defer c2.Close(ctx)
	if created {
		t.Fatal("the subscription was lost")
	}
	if got := c2.Stats().Holes; got != holes {
		t.Fatalf("after the crash: %d holes, want %d", got, holes)
	}
	for i := 0; i < 1000; i++ {
		en := acked[rng.IntN(len(acked))]
		if !c2.IsAcked(Position{Ledger: ledgerID, Entry: en}) || c2.IsAcked(Position{Ledger: ledgerID, Entry: en - 1}) && !contains(acked, en-1) {
			t.Fatalf("entry %d: acknowledgement lost or invented", en)
		}
	}
}

func contains(sorted []int64, v int64) bool {
	lo, hi := 0, len(sorted)
	for lo < hi {
		m := (lo + hi) / 2
		if sorted[m] < v {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo < len(sorted) && sorted[lo] == v
}

// A snapshot cut short by a crash (its last chunks never written) is
// skipped: the one before is loaded.
func TestIncompleteSnapshotIsSkipped(t *testing.T) {
	e := newEnv(t)
	ml, d := e.owner()
	ctx := ctxT(t)
	w, err := d.Ledgers.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	good := NewState(Position{Ledger: 5, Entry: 3}, ml.Next).Snapshot()
	data, _ := encodeSnapshot(good)
	half := len(data) / 2
	write := func(snap int64, idx, count int32, b []byte) {
		raw, _ := proto.Marshal(&metapb.CursorChunk{Snapshot: snap, Index: idx, Count: count, Data: b})
		if _, err := w.Append(ctx, raw); err != nil {
			t.Fatal(err)
		}
	}
	write(1, 0, 2, data[:half])
	write(1, 1, 2, data[half:])
	write(2, 0, 3, []byte("the start of a snapshot never finished"))
	w.Close(ctx)
	c := &Cursor{topic: e.topic, name: "x", ml: ml, d: d, log: zaptest.NewLogger(t)}
	st, err := c.load(ctx, &metapb.CursorInfo{CursorLedgerId: w.ID()})
	if err != nil {
		t.Fatal(err)
	}
	if st.MarkDelete() != (Position{Ledger: 5, Entry: 3}) {
		t.Fatalf("loaded mark-delete %v", st.MarkDelete())
	}
}

func TestDeleteAndFencing(t *testing.T) {
	e := newEnv(t)
	ml, d := e.owner()
	ctx := ctxT(t)
	c, _ := open(t, ml, d, "gone")
	cl := c.Stats().CursorLedger
	if err := c.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Store.Get(ctx, metastore.CursorKey(e.topic, "gone")); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("cursor metadata after delete: %v", err)
	}
	if _, err := d.Ledgers.Metadata(ctx, cl); !errors.Is(err, ledger.ErrNoSuchLedger) {
		t.Fatalf("cursor ledger after delete: %v", err)
	}
	// Another broker owns the topic now: opening a cursor with the old
	// token fails.
	e.owner()
	if _, _, err := Open(ctx, ml, "late", Position{Ledger: -1, Entry: -1}, d); !errors.Is(err, ErrFenced) {
		t.Fatalf("open with a stale token: %v", err)
	}
}

// A cursor closed (its partition unloaded) while the broker's persist loop
// still holds it refuses to persist; it used to write to its closed
// cursor ledger and crash the broker (found by the e2e fault suite).
func TestPersistAfterCloseIsRefused(t *testing.T) {
	e := newEnv(t)
	ml, d := e.owner()
	ctx := ctxT(t)
	p, err := ml.Append(ctx, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"close", "delete"} {
		c, _ := open(t, ml, d, "sub-"+end)
		if end == "close" {
			err = c.Close(ctx)
		} else {
			err = c.Delete(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Ack(p)
		if err := c.Persist(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("persist after %s: %v, want ErrClosed", end, err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatalf("close after %s: %v", end, err)
		}
	}
}

// Fewer bookies are writable than a cursor ledger's ensemble: an existing
// subscription and a new one still open, so that they can be read. The
// existing one keeps its stored state (metadata and previous cursor
// ledger) until it changes; a changed state is persisted as its
// mark-delete position alone, in the metadata; once a cursor ledger can
// be created again, the whole state goes into it again.
func TestCursorWithoutLedger(t *testing.T) {
	e := newEnv(t)
	ml, d := e.owner()
	ctx := ctxT(t)
	var ps []Position
	for i := 0; i < 20; i++ {
		p, err := ml.Append(ctx, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	old, _ := open(t, ml, d, "old")
	old.Ack(ps[0], ps[3])
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	few := d // cursor ledgers of 2 on the cluster's one bookie
	few.Ensemble, few.WriteQuorum, few.AckQuorum = 2, 2, 2
	info := func(name string) *metapb.CursorInfo {
		t.Helper()
		kv, err := e.c.Store.Get(ctx, metastore.CursorKey(e.topic, name))
		if err != nil {
			t.Fatal(err)
		}
		var i metapb.CursorInfo
		if err := proto.Unmarshal(kv.Value, &i); err != nil {
			t.Fatal(err)
		}
		return &i
	}

	c, created := open(t, ml, few, "old")
	if created || c.MarkDelete() != ps[0] || !c.IsAcked(ps[3]) || c.Stats().CursorLedger != 0 {
		t.Fatalf("existing subscription without a cursor ledger: created %v, %+v", created, c.Stats())
	}
	kept := info("old").CursorLedgerId
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := info("old").CursorLedgerId; got != kept || got == 0 {
		t.Fatalf("unchanged state: the metadata names cursor ledger %d, want %d kept", got, kept)
	}

	c, created = open(t, ml, few, "new")
	if !created {
		t.Fatal("new subscription not created")
	}
	c.Ack(ps[0], ps[1], ps[4])
	if err := c.Persist(ctx); err != nil {
		t.Fatalf("persist without a cursor ledger: %v", err)
	}
	if i := info("new"); i.CursorLedgerId != 0 || (Position{Ledger: i.MarkDeleteLedger, Entry: i.MarkDeleteEntry}) != ps[1] {
		t.Fatalf("metadata without a cursor ledger: %v, want mark-delete %v", i, ps[1])
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, _ = open(t, ml, few, "new")
	if c.MarkDelete() != ps[1] || c.IsAcked(ps[4]) {
		t.Fatalf("reloaded from the metadata alone: %+v", c.Stats())
	}

	e.c.AddBookie(testcluster.Options{}) // cursor ledgers of 2 fit again
	c.Ack(ps[4])
	if err := c.Persist(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Stats().CursorLedger == 0 || info("new").CursorLedgerId != c.Stats().CursorLedger {
		t.Fatalf("once bookies are back: cursor ledger %d, metadata %v", c.Stats().CursorLedger, info("new"))
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, _ = open(t, ml, few, "new")
	defer c.Close(ctx)
	if c.MarkDelete() != ps[1] || !c.IsAcked(ps[4]) {
		t.Fatalf("reloaded from the new cursor ledger: %+v", c.Stats())
	}
}

// A cursor ledger that is missing when the cursor loads (deleted, or named
// but empty: its owner crashed before a snapshot in it was acknowledged)
// leaves the mark-delete position of the metadata, written with every new
// cursor ledger: the cursor restarts at exactly that position, and
// acknowledgements after it are delivered again.
func TestMissingCursorLedgerFallsBackToMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, e *env, d Deps, info *metapb.CursorInfo)
	}{
		{"deleted", func(t *testing.T, e *env, d Deps, info *metapb.CursorInfo) {
			if err := d.Ledgers.Delete(ctxT(t), info.CursorLedgerId); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, e *env, d Deps, info *metapb.CursorInfo) {
			w, err := d.Ledgers.Create(ctxT(t), ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close(ctxT(t)) // after the test's owner recovered it: fenced
			info.CursorLedgerId = w.ID()
			raw, _ := proto.Marshal(info)
			if _, err := e.c.Store.Put(ctxT(t), metastore.CursorKey(e.topic, "sub"), raw); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ml, d := e.owner()
			ctx := ctxT(t)
			var ps []Position
			for i := 0; i < 12; i++ {
				p, err := ml.Append(ctx, []byte{byte(i)})
				if err != nil {
					t.Fatal(err)
				}
				ps = append(ps, p)
			}
			c, _ := open(t, ml, d, "sub")
			c.Ack(ps[0], ps[1], ps[2], ps[3], ps[4], ps[7])
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The next incarnation names a new cursor ledger, and the
			// position in the metadata with it.
			c, _ = open(t, ml, d, "sub")
			c.Ack(ps[5]) // in its cursor ledger only
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			kv, err := e.c.Store.Get(ctx, metastore.CursorKey(e.topic, "sub"))
			if err != nil {
				t.Fatal(err)
			}
			var info metapb.CursorInfo
			if err := proto.Unmarshal(kv.Value, &info); err != nil {
				t.Fatal(err)
			}
			if got := (Position{Ledger: info.MarkDeleteLedger, Entry: info.MarkDeleteEntry}); got != ps[4] || info.CursorLedgerId == 0 {
				t.Fatalf("metadata: mark-delete %v, cursor ledger %d; want %v and a ledger", got, info.CursorLedgerId, ps[4])
			}
			tc.lose(t, e, d, &info)

			ml2, d2 := e.owner()
			c2, created := open(t, ml2, d2, "sub")
			defer c2.Close(ctx)
			if created {
				t.Fatal("the subscription was created again")
			}
			if md := c2.MarkDelete(); md != ps[4] || c2.ReadPosition() != ps[5] {
				t.Fatalf("without its cursor ledger: mark-delete %v, read position %v; want %v, %v", md, c2.ReadPosition(), ps[4], ps[5])
			}
			if c2.IsAcked(ps[5]) || c2.IsAcked(ps[7]) {
				t.Fatal("acknowledgements known only to the lost cursor ledger came back")
			}
		})
	}
}
