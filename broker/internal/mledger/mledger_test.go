package mledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

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

type env struct {
	t     *testing.T
	c     *testcluster.Cluster
	cache *Cache
}

func newEnv(t *testing.T, bookies int) *env {
	return &env{t: t, c: testcluster.Start(t, bookies, testcluster.Options{}), cache: NewCache(64 << 20)}
}

// own takes ownership of a topic: the owner key, and its token.
func (e *env) own(topic string) *metastore.Guard {
	e.t.Helper()
	ctx := ctxT(e.t)
	key := metastore.OwnerKey(topic)
	e.c.Store.Delete(ctx, key)
	rev, err := e.c.Store.Create(ctx, key, []byte("test-broker"))
	if err != nil {
		e.t.Fatal(err)
	}
	return &metastore.Guard{Key: key, Token: rev}
}

// openWith opens a topic, owned anew, whose ledgers go through lc.
func (e *env) openWith(topic string, cfg Config, lc *ledger.Client) *ManagedLedger {
	e.t.Helper()
	ml, err := Open(ctxT(e.t), topic, cfg, Deps{Store: e.c.Store, Ledgers: lc, Guard: e.own(topic), Cache: e.cache, Log: zaptest.NewLogger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	return ml
}

func (e *env) open(topic string, cfg Config, g *metastore.Guard) *ManagedLedger {
	e.t.Helper()
	ml, err := Open(ctxT(e.t), topic, cfg, Deps{
		Store:   e.c.Store,
		Ledgers: e.c.Client(ledger.Config{}),
		Guard:   g,
		Cache:   e.cache,
		Log:     zaptest.NewLogger(e.t),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ml
}

func smallLedgers(n int64) Config {
	cfg := DefaultConfig()
	cfg.MaxEntriesPerLedger = n
	cfg.MinLedgerAge = 0
	return cfg
}

func data(i int) []byte { return []byte(fmt.Sprintf("entry-%05d", i)) }

// readAll walks the partition from First with Next and Read.
func readAll(t *testing.T, ml *ManagedLedger) [][]byte {
	t.Helper()
	var out [][]byte
	p := ml.First()
	for {
		es, err := ml.Read(ctxT(t), p, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return out
		}
		for _, e := range es {
			if e.Pos != p {
				t.Fatalf("entry at %v, expected %v", e.Pos, p)
			}
			out = append(out, e.Data)
			p = ml.Next(p)
		}
	}
}

func appendN(t *testing.T, ml *ManagedLedger, from, n int) []Position {
	t.Helper()
	var ps []Position
	for i := from; i < from+n; i++ {
		p, err := ml.Append(ctxT(t), data(i))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if len(ps) > 0 && !ps[len(ps)-1].Before(p) {
			t.Fatalf("position %v after %v", p, ps[len(ps)-1])
		}
		ps = append(ps, p)
	}
	return ps
}

func checkData(t *testing.T, got [][]byte, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("read %d entries, want %d", len(got), n)
	}
	for i, d := range got {
		if !bytes.Equal(d, data(i)) {
			t.Fatalf("entry %d = %q", i, d)
		}
	}
}

func TestAppendReadRollover(t *testing.T) {
	e := newEnv(t, 1)
	g := e.own("public/default/t")
	ml := e.open("public/default/t", smallLedgers(10), g)
	appendN(t, ml, 0, 55)
	testutil.Eventually(t, 30*time.Second, "rollovers", func() bool { return len(ml.Ledgers()) >= 6 })
	checkData(t, readAll(t, ml), 55)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A new owner (the same broker after a restart) sees everything and
	// goes on in a new ledger.
	ml2 := e.open("public/default/t", smallLedgers(10), e.own("public/default/t"))
	defer ml2.Close(ctxT(t))
	appendN(t, ml2, 55, 5)
	e.cache.Drop("public/default/t") // force reads from the bookies
	checkData(t, readAll(t, ml2), 60)
	for _, ref := range ml2.Ledgers()[:len(ml2.Ledgers())-1] {
		if !ref.Closed {
			t.Fatalf("ledger %d left open: %+v", ref.LedgerId, ref)
		}
	}
}

// Appends pipelined faster than entries complete: no ledger gets more
// than its share (the limit counts appends in flight), and the order of
// the calls is the order of the partition, across rollovers.
func TestPipelinedAppendsRespectLedgerSize(t *testing.T) {
	e := newEnv(t, 1)
	ml := e.open("public/default/p", smallLedgers(10), e.own("public/default/p"))
	defer ml.Close(ctxT(t))
	const n = 95
	done := make(chan error, n)
	for i := 0; i < n; i++ {
		ml.AppendAsync(ctxT(t), data(i), func(_ Position, err error) { done <- err })
	}
	for i := 0; i < n; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	checkData(t, readAll(t, ml), n)
	refs := ml.Ledgers()
	for _, ref := range refs[:len(refs)-1] {
		if ref.Entries > 10 {
			t.Fatalf("ledger %d has %d entries, limit 10", ref.LedgerId, ref.Entries)
		}
	}
	if len(refs) < n/10 {
		t.Fatalf("%d entries in ledgers of 10 made %d ledgers", n, len(refs))
	}
}

// Concurrent appenders: every acknowledged entry is stored once, at the
// position returned, in a total order.
func TestConcurrentAppends(t *testing.T) {
	e := newEnv(t, 3)
	cfg := smallLedgers(50)
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 3, 2
	ml := e.open("public/default/c", cfg, e.own("public/default/c"))
	defer ml.Close(ctxT(t))
	var mu sync.Mutex
	at := map[Position][]byte{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				d := []byte(fmt.Sprintf("w%d-%d", w, i))
				p, err := ml.Append(ctxT(t), d)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if _, dup := at[p]; dup {
					t.Errorf("two entries at %v", p)
				}
				at[p] = d
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	e.cache.Drop("public/default/c")
	p := ml.First()
	n := 0
	for {
		es, err := ml.Read(ctxT(t), p, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		for _, en := range es {
			if !bytes.Equal(at[en.Pos], en.Data) {
				t.Fatalf("entry at %v is %q, acknowledged %q", en.Pos, en.Data, at[en.Pos])
			}
			n++
			p = ml.Next(en.Pos)
		}
	}
	if n != 400 {
		t.Fatalf("read %d entries, 400 acknowledged", n)
	}
}

// A broker that lost ownership without noticing: the new owner's Open
// recovers the ledger (fencing the old writer); the old owner's appends
// fail, its metadata writes fail, and everything it had acknowledged is
// in the partition.
func TestTakeoverFencesOldOwner(t *testing.T) {
	e := newEnv(t, 1)
	old := e.open("public/default/f", smallLedgers(1000), e.own("public/default/f"))
	acked := appendN(t, old, 0, 20)
	// The new owner takes the key over and opens.
	ml := e.open("public/default/f", smallLedgers(1000), e.own("public/default/f"))
	defer ml.Close(ctxT(t))
	_, err := old.Append(ctxT(t), []byte("late"))
	if err == nil {
		t.Fatal("the deposed owner's append succeeded")
	}
	if !errors.Is(err, ledger.ErrFenced) && !errors.Is(err, ErrFenced) && !errors.Is(err, ledger.ErrWriterClosed) {
		t.Fatalf("deposed owner's append: %v", err)
	}
	if err := old.Close(ctxT(t)); err != nil && !errors.Is(err, ErrFenced) {
		t.Logf("old owner's close: %v", err)
	}
	got := readAll(t, ml)
	checkData(t, got, len(acked))
	appendN(t, ml, 20, 3)
	checkData(t, readAll(t, ml), 23)
}

// Ownership lost (the owner key re-created by someone else): the next
// metadata write fails with ErrFenced and nothing more is accepted.
func TestGuardFailureFences(t *testing.T) {
	e := newEnv(t, 1)
	ml := e.open("public/default/g", smallLedgers(5), e.own("public/default/g"))
	defer ml.Close(ctxT(t))
	appendN(t, ml, 0, 3)
	e.own("public/default/g") // someone else owns it now
	// The rollover after entry 5 needs a metadata write: it fails.
	for i := 3; i < 6; i++ {
		ml.Append(ctxT(t), data(i))
	}
	testutil.Eventually(t, 30*time.Second, "the managed ledger to be fenced", func() bool {
		_, err := ml.Append(ctxT(t), []byte("x"))
		return errors.Is(err, ErrFenced)
	})
}

func TestTrimRetention(t *testing.T) {
	e := newEnv(t, 1)
	ml := e.open("public/default/r", smallLedgers(10), e.own("public/default/r"))
	defer ml.Close(ctxT(t))
	ps := appendN(t, ml, 0, 45) // ledgers of 10, 10, 10, 10, and the current one
	testutil.Eventually(t, 30*time.Second, "rollovers", func() bool { return len(ml.Ledgers()) >= 5 })
	refs := ml.Ledgers()
	ctx := ctxT(t)

	// Nothing consumed: nothing trimmed, whatever the retention.
	if gone, err := ml.Trim(ctx, ml.First(), Retention{}); err != nil || len(gone) != 0 {
		t.Fatalf("trim with nothing consumed: %v %v", gone, err)
	}
	// Consumed up to entry 25 (inside the third ledger): the first two go
	// with zero retention; with infinite retention none does.
	if gone, err := ml.Trim(ctx, ps[25], Retention{Time: -1, Size: -1}); err != nil || len(gone) != 0 {
		t.Fatalf("trim with infinite retention: %v %v", gone, err)
	}
	// Size retention: each ledger holds 10 entries of 11 bytes, so 110
	// bytes keep the second ledger only.
	gone, err := ml.Trim(ctx, ps[25], Retention{Time: -1, Size: 110})
	if err != nil || len(gone) != 1 || gone[0] != refs[0].LedgerId {
		t.Fatalf("trim by size: %v %v", gone, err)
	}
	gone, err = ml.Trim(ctx, ps[25], Retention{})
	if err != nil || len(gone) != 1 || gone[0] != refs[1].LedgerId {
		t.Fatalf("trim with zero retention: %v %v", gone, err)
	}
	// What is left is readable, starting at the first kept entry; the
	// trimmed ledgers are gone from the metadata.
	got := readAll(t, ml)
	if len(got) != 25 || !bytes.Equal(got[0], data(20)) {
		t.Fatalf("after trim: %d entries from %q", len(got), got[0])
	}
	for _, id := range []int64{refs[0].LedgerId, refs[1].LedgerId} {
		if _, err := e.c.Client(ledger.Config{}).Metadata(ctx, id); !errors.Is(err, ledger.ErrNoSuchLedger) {
			t.Fatalf("trimmed ledger %d still has metadata: %v", id, err)
		}
	}
	// Everything consumed: all but the current ledger go.
	if _, err := ml.Trim(ctx, ml.Next(ml.LastConfirmed()), Retention{}); err != nil {
		t.Fatal(err)
	}
	if n := len(ml.Ledgers()); n != 1 {
		t.Fatalf("%d ledgers left after consuming everything, want the current one", n)
	}
}

// Tail reads come from the cache, not from the bookies.
func TestTailReadsFromCache(t *testing.T) {
	e := newEnv(t, 1)
	ml := e.open("public/default/tail", DefaultConfig(), e.own("public/default/tail"))
	defer ml.Close(ctxT(t))
	ps := appendN(t, ml, 0, 100)
	_, hits0, misses0 := e.cache.Stats()
	// Stop the bookie: reads can only be served from memory now.
	for _, b := range e.c.Bookies() {
		b.Kill()
	}
	es, err := ml.Read(ctxT(t), ps[0], 100)
	if err != nil || len(es) != 100 {
		t.Fatalf("tail read with the bookie down: %d entries, %v", len(es), err)
	}
	_, hits, misses := e.cache.Stats()
	if hits-hits0 != 100 || misses != misses0 {
		t.Fatalf("cache hits %d, misses %d", hits-hits0, misses-misses0)
	}
}

// A reader catching up reads from the bookies only what the cache lacks:
// the cached tail is served from memory even when a read starts before it.
func TestCatchUpReadsOnlyWhatTheCacheLacks(t *testing.T) {
	e := newEnv(t, 1)
	e.cache = NewCache(int64(50 * len(data(0)))) // the last 50 entries
	var reads atomic.Int64
	ml, err := Open(ctxT(t), "public/default/catchup", DefaultConfig(), Deps{
		Store: e.c.Store, Ledgers: e.c.Client(ledger.Config{}), Guard: e.own("public/default/catchup"),
		Cache: e.cache, StorageReads: &reads, Log: zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close(ctxT(t))
	ps := appendN(t, ml, 0, 100)
	var got [][]byte
	for p := ps[0]; len(got) < 100; {
		es, err := ml.Read(ctxT(t), p, 100)
		if err != nil || len(es) == 0 {
			t.Fatalf("read at %v: %d entries, %v", p, len(es), err)
		}
		for _, x := range es {
			got = append(got, x.Data)
		}
		p = ml.Next(es[len(es)-1].Pos)
	}
	checkData(t, got, 100)
	if n := reads.Load(); n != 50 {
		t.Fatalf("%d entries read from the bookies, want the 50 the cache does not hold", n)
	}
}

func TestWaitAfter(t *testing.T) {
	e := newEnv(t, 1)
	ml := e.open("public/default/w", DefaultConfig(), e.own("public/default/w"))
	defer ml.Close(ctxT(t))
	done := make(chan error, 1)
	go func() { done <- ml.WaitAfter(ctxT(t), ml.LastConfirmed()) }()
	appendN(t, ml, 0, 1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctxT(t), 20*time.Millisecond)
	defer cancel()
	if err := ml.WaitAfter(short, ml.LastConfirmed()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing new: %v", err)
	}
}

// An append's callback runs once the entry is visible and before those
// waiting for a new entry are woken: a publisher's receipt is handed on
// before a dispatcher is woken to deliver the entry (Pulsar's order).
func TestAppendCallbackBeforeWaitersWake(t *testing.T) {
	e := newEnv(t, 1)
	ml := e.open("public/default/order", DefaultConfig(), e.own("public/default/order"))
	defer ml.Close(ctxT(t))
	for i := range 3 {
		moved := ml.Moved()
		type seen struct {
			pos, last Position
			woken     bool
			err       error
		}
		ch := make(chan seen, 1)
		ml.AppendAsync(ctxT(t), data(i), func(pos Position, err error) {
			s := seen{pos: pos, err: err}
			if err != nil { // a failure's callback may hold the managed ledger's lock
				ch <- s
				return
			}
			s.last = ml.LastConfirmed()
			select {
			case <-moved:
				s.woken = true
			default:
			}
			ch <- s
		})
		var s seen
		select {
		case s = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("append %d: no callback", i)
		}
		if s.err != nil {
			t.Fatalf("append %d: %v", i, s.err)
		}
		if s.last != s.pos {
			t.Errorf("append %d: in its callback the last confirmed entry is %v, want %v (visible)", i, s.last, s.pos)
		}
		if s.woken {
			t.Errorf("append %d: waiters were woken before its callback ran", i)
		}
		select {
		case <-moved:
		case <-time.After(10 * time.Second):
			t.Fatalf("append %d: waiters not woken after its callback", i)
		}
	}
}

// A takeover interrupted at each of its steps (claim; claim and fence the
// last ledger; the whole open) leaves the deposed owner unable to get
// anything more stored for good, and whatever it got acknowledged is
// there for the owner that completes the takeover.
func TestDeposedOwnerAtEachTakeoverStep(t *testing.T) {
	for _, step := range []string{"claimed", "fenced", "opened"} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t, 1)
			topic := "public/default/t-" + step
			old := e.open(topic, smallLedgers(5), e.own(topic))
			acked := len(appendN(t, old, 0, 3))
			g := e.own(topic) // the new owner's claim
			switch step {
			case "fenced":
				refs := old.Ledgers()
				if _, err := e.c.Client(ledger.Config{}).OpenRecover(ctxT(t), refs[len(refs)-1].LedgerId); err != nil {
					t.Fatal(err)
				}
			case "opened":
				e.open(topic, smallLedgers(5), g).Close(ctxT(t))
			}
			// The deposed owner keeps trying. Before its ledger is fenced an
			// append may still be acknowledged (the next owner recovers it);
			// the metadata write at the rollover fails on the guard, and
			// from then on (or at once, once fenced) nothing is stored.
			for i := acked; i < 20; i++ {
				if _, err := old.Append(ctxT(t), data(i)); err != nil {
					if !errors.Is(err, ErrFenced) && !errors.Is(err, ledger.ErrFenced) && !errors.Is(err, ErrUnavailable) {
						t.Fatalf("append %d: %v", i, err)
					}
					if step != "claimed" && i != acked {
						t.Fatalf("append %d failed, but an earlier one after the fence succeeded", i)
					}
					break
				}
				if step != "claimed" {
					t.Fatalf("append %d acknowledged after the ledger was fenced", i)
				}
				acked++
			}
			testutil.Eventually(t, 30*time.Second, "the deposed owner to be fenced for good", func() bool {
				_, err := old.Append(ctxT(t), []byte("x"))
				return errors.Is(err, ErrFenced)
			})
			old.Close(ctxT(t))
			// The takeover completes; every acknowledged entry is there.
			next := e.open(topic, smallLedgers(5), e.own(topic))
			defer next.Close(ctxT(t))
			checkData(t, readAll(t, next), acked)
		})
	}
}

// proxiedLedgers returns a ledger client whose metastore connection goes
// through a proxy the test can pause and cut (the managed ledger's own
// metadata store stays direct).
func (e *env) proxiedLedgers() (*ledger.Client, *testutil.Proxy) {
	e.t.Helper()
	p := testutil.StartProxy(e.t, e.c.Etcd.Endpoints()[0])
	st := testutil.OpenStore(e.t, []string{p.Addr()}, "/magnetar")
	lc, err := ledger.New(st, ledger.Config{Logger: zaptest.NewLogger(e.t).Named("ledger")})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { lc.Close() })
	return lc, p
}

// storedList reads the partition's ledger list from the metastore and
// checks that every ledger but the last is closed, in the list and in its
// own metadata (the invariant of the list's protocol); all reports whether
// the last is closed too.
func (e *env) storedList(topic string) (refs []*metapb.LedgerRef, all bool) {
	e.t.Helper()
	ctx := ctxT(e.t)
	kv, err := e.c.Store.Get(ctx, metastore.ManagedLedgerKey(topic))
	if err != nil {
		e.t.Fatal(err)
	}
	var info metapb.ManagedLedgerInfo
	if err := proto.Unmarshal(kv.Value, &info); err != nil {
		e.t.Fatal(err)
	}
	lc := e.c.Client(ledger.Config{})
	all = true
	for i, ref := range info.Ledgers {
		m, err := lc.Metadata(ctx, ref.LedgerId)
		if err != nil {
			e.t.Fatalf("ledger %d of the list: %v", ref.LedgerId, err)
		}
		closed := ref.Closed && m.State == ledger.StateClosed && m.LastEntry+1 == ref.Entries
		if !closed && i < len(info.Ledgers)-1 {
			e.t.Fatalf("ledger %d is not the last and is not closed (list: closed %v, %d entries; metadata: %v, last entry %d)",
				ref.LedgerId, ref.Closed, ref.Entries, m.State, m.LastEntry)
		}
		all = all && closed
	}
	return info.Ledgers, all
}

// appendRetry appends, trying again while the managed ledger refuses
// appends for now (a failed ledger being replaced).
func appendRetry(t *testing.T, ml *ManagedLedger, i int) Position {
	t.Helper()
	for {
		p, err := ml.Append(ctxT(t), data(i))
		if err == nil {
			return p
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("append %d: %v", i, err)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctxT(t).Done():
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// holdRolloverClose appends entries 0..n-1 to a managed ledger of n
// entries per ledger whose ledger client reaches etcd through proxy. The
// last one fills the ledger: the bookie acknowledges it, then the
// rollover's close writes the ledger's metadata, which a paused proxy
// holds. It returns once the write is held (the proxy stays paused).
func holdRolloverClose(t *testing.T, ml *ManagedLedger, proxy *testutil.Proxy, n int) {
	t.Helper()
	appendN(t, ml, 0, n-1)
	proxy.Pause()
	held := proxy.Held()
	appendN(t, ml, n-1, 1)
	<-held
}

// The closing of the full ledger at rollover fails (its metadata write
// is cut): the ledger must be closed by recovery before a new one is
// added, so the list never holds an open ledger before the last, every
// acknowledged entry stays readable (through restarts), and trimming
// goes past it (correctness sweep, item 9).
func TestFailedCloseAtRolloverKeepsEveryEntryReadable(t *testing.T) {
	e := newEnv(t, 1)
	lc, proxy := e.proxiedLedgers()
	const topic = "public/default/failed-close"
	ml := e.openWith(topic, smallLedgers(5), lc)
	holdRolloverClose(t, ml, proxy, 5)
	proxy.CutAll() // the close's write fails, unapplied
	proxy.Resume()
	for i := 5; i < 9; i++ { // the next ledger is not full: no rollover runs
		appendRetry(t, ml, i)
	}
	refs, _ := e.storedList(topic)
	if len(refs) < 2 || refs[0].Entries != 5 {
		t.Fatalf("ledger list %v: want the first ledger closed with its 5 entries", refs)
	}
	e.cache.Drop(topic)
	checkData(t, readAll(t, ml), 9)
	// Everything consumed: every ledger but the current one goes.
	gone, err := ml.Trim(ctxT(t), ml.Next(ml.LastConfirmed()), Retention{})
	if err != nil || len(gone) == 0 || gone[0] != refs[0].LedgerId {
		t.Fatalf("trim with everything consumed: deleted %v, %v", gone, err)
	}
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A new owner reads what is left, and the list is closed throughout.
	if _, all := e.storedList(topic); !all {
		t.Fatal("the list's last ledger is open after a clean close")
	}
	ml2 := e.open(topic, smallLedgers(5), e.own(topic))
	defer ml2.Close(ctxT(t))
	e.cache.Drop(topic)
	got := readAll(t, ml2)
	if len(got) != 4 || !bytes.Equal(got[0], data(5)) || !bytes.Equal(got[3], data(8)) {
		t.Fatalf("after trim and reopen read %q, want entries 5..8", got)
	}
}

// Close while a rollover is closing the full ledger: the rollover must not
// install its new ledger after the close, nor leave it open (correctness
// sweep, item 10). Goroutines of a leaked writer would also fail the
// package's leak check.
func TestCloseDuringRolloverLeavesNothingOpen(t *testing.T) {
	e := newEnv(t, 1)
	lc, proxy := e.proxiedLedgers()
	const topic = "public/default/close-rolling"
	ml := e.openWith(topic, smallLedgers(3), lc)
	holdRolloverClose(t, ml, proxy, 3)
	closed := make(chan error, 1)
	go func() { closed <- ml.Close(ctxT(t)) }()
	testutil.Eventually(t, 10*time.Second, "the close to refuse appends", func() bool {
		_, err := ml.Append(ctxT(t), []byte("late"))
		return errors.Is(err, ErrClosed)
	})
	proxy.Resume()
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	refs, all := e.storedList(topic)
	if !all {
		t.Fatalf("after close, the list %v has an open ledger", refs)
	}
	// Nothing created for the rollover is left open outside the list.
	var open []int64
	if err := e.c.Client(ledger.Config{}).List(ctxT(t), func(id int64) error {
		m, err := e.c.Client(ledger.Config{}).Metadata(ctxT(t), id)
		if err == nil && m.State != ledger.StateClosed {
			open = append(open, id)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Fatalf("ledgers %v left open after close (list %v)", open, refs)
	}
	ml2 := e.open(topic, smallLedgers(3), e.own(topic))
	defer ml2.Close(ctxT(t))
	checkData(t, readAll(t, ml2), 3)
}

// Open recovers every ledger of the list left open, not only the last
// (a list written by an older version could hold one in the middle).
func TestOpenRecoversOpenLedgersBeforeTheLast(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/open-middle"
	lc := e.c.Client(ledger.Config{})
	ctx := ctxT(t)
	var refs []*metapb.LedgerRef
	var stale []*ledger.Writer
	for l := 0; l < 3; l++ {
		w, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, err := w.Append(ctx, data(2*l+i)); err != nil {
				t.Fatal(err)
			}
		}
		// Ledger 0 closed; ledgers 1 and 2 left open (a writer that died).
		ref := &metapb.LedgerRef{LedgerId: w.ID()}
		if l == 0 {
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			ref.Entries, ref.Closed = 2, true
		} else {
			stale = append(stale, w)
		}
		refs = append(refs, ref)
	}
	raw, _ := proto.Marshal(&metapb.ManagedLedgerInfo{Ledgers: refs})
	if _, err := e.c.Store.Create(ctx, metastore.ManagedLedgerKey(topic), raw); err != nil {
		t.Fatal(err)
	}
	ml := e.open(topic, smallLedgers(100), e.own(topic))
	defer ml.Close(ctx)
	for _, w := range stale { // fenced by the recovery: they stop
		w.Close(ctx)
	}
	if got, _ := e.storedList(topic); len(got) != 4 {
		t.Fatalf("list after open: %v", got)
	}
	checkData(t, readAll(t, ml), 6)
}

// Appends share their caller's context (a producer's stream). Once one
// failed because that context ended while it waited for room in the
// writer, a later one of the same context must not be stored: storing it
// would put the producer's next message before one it will resend, and
// deduplication would then answer the resend as a duplicate without
// storing it.
func TestNoAppendStoredAfterItsCallerGaveUp(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/gave-up"
	ml := e.openWith(topic, smallLedgers(100), e.c.Client(ledger.Config{MaxPendingEntries: 1}))
	defer ml.Close(ctxT(t))
	bk := e.c.Bookies()[0]
	stream, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	type res struct {
		pos Position
		err error
	}
	outcome := func() (chan res, func(Position, error)) {
		ch := make(chan res, 1)
		return ch, func(p Position, err error) { ch <- res{p, err} }
	}
	bk.Proxy.Pause() // the bookie is slow: the first append holds the writer's only slot
	first, cb1 := outcome()
	ml.AppendAsync(stream, data(1), cb1)
	second, cb2 := outcome()
	go ml.AppendAsync(stream, data(2), cb2) // waits for room
	cancel()                                // the producer's stream ends
	if r := <-second; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("second append: %v, want the caller's cancellation", r.err)
	}
	bk.Proxy.Resume()
	if r := <-first; r.err != nil {
		t.Fatalf("first append: %v", r.err)
	}
	third, cb3 := outcome()
	ml.AppendAsync(stream, data(3), cb3)
	if r := <-third; r.err == nil {
		t.Fatalf("third append of the same caller stored at %v after the second failed", r.pos)
	}
}

// Fewer bookies are writable than the ensemble size: a partition still
// opens (an existing one and a new one), every stored entry is readable,
// appends are refused at once with ErrNotEnoughBookies, and once a bookie
// is back appends are taken again without reopening, in a ledger added
// after the closed ones. Before, Open failed: nothing stored was readable.
func TestOpenWithNotEnoughBookiesServesReads(t *testing.T) {
	e := newEnv(t, 2)
	const topic, fresh = "public/default/few-bookies", "public/default/few-bookies-new"
	cfg := smallLedgers(8)
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 2, 2, 2
	ml := e.open(topic, cfg, e.own(topic))
	appendN(t, ml, 0, 20)
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.c.Bookies()[1].Kill() // its registration goes: one bookie left for ensembles of 2

	ml = e.open(topic, cfg, e.own(topic))
	defer ml.Close(ctxT(t))
	empty := e.open(fresh, cfg, e.own(fresh))
	defer empty.Close(ctxT(t))
	e.cache.Drop(topic) // reads go to the surviving bookie
	checkData(t, readAll(t, ml), 20)
	if got := readAll(t, empty); len(got) != 0 {
		t.Fatalf("a new partition reads %d entries", len(got))
	}
	refs, all := e.storedList(topic)
	if !all {
		t.Fatalf("opened without a ledger, the list %v has an open ledger", refs)
	}
	for _, m := range []*ManagedLedger{ml, empty} {
		// Refused at once: an append must not wait for bookies.
		short, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
		_, err := m.Append(short, data(20))
		cancel()
		if !errors.Is(err, ErrNotEnoughBookies) || !errors.Is(err, ledger.ErrNotEnoughBookies) {
			t.Fatalf("append to %s with one bookie of 2: %v, want ErrNotEnoughBookies", m.Name(), err)
		}
	}

	e.c.AddBookie(testcluster.Options{})
	for _, m := range []*ManagedLedger{ml, empty} {
		testutil.Eventually(t, 30*time.Second, "appends to be taken again", func() bool {
			_, err := m.Append(ctxT(t), data(20))
			if err != nil && !errors.Is(err, ErrNotEnoughBookies) && !errors.Is(err, ErrUnavailable) {
				t.Fatalf("append once a bookie is back: %v", err)
			}
			return err == nil
		})
	}
	e.cache.Drop(topic)
	checkData(t, readAll(t, ml), 21)
	if got := readAll(t, empty); len(got) != 1 || !bytes.Equal(got[0], data(20)) {
		t.Fatalf("new partition after a bookie came back: %q", got)
	}
	refs2, _ := e.storedList(topic)
	if len(refs2) != len(refs)+1 || !proto.Equal(refs2[len(refs)-1], refs[len(refs)-1]) {
		t.Fatalf("list after a bookie came back: %v, want %v and a new ledger", refs2, refs)
	}
}

// Closing a partition opened without a ledger does not wait for the
// creation's backoff, leaves its list closed, and a later owner opens it.
func TestCloseWithoutLedger(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/close-few-bookies"
	cfg := smallLedgers(8)
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 2, 2, 2
	ml := e.open(topic, cfg, e.own(topic))
	if _, err := ml.Append(ctxT(t), data(0)); !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("append: %v", err)
	}
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := ml.Append(ctxT(t), data(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if refs, all := e.storedList(topic); !all || len(refs) != 0 {
		t.Fatalf("list after close: %v", refs)
	}
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 1, 1, 1
	ml = e.open(topic, cfg, e.own(topic))
	defer ml.Close(ctxT(t))
	appendN(t, ml, 0, 3)
	checkData(t, readAll(t, ml), 3)
}

// A rollover that cannot create a ledger for want of bookies (here the
// ensemble grew past the bookies there are) refuses appends with
// ErrNotEnoughBookies, what is stored stays readable, and appends go on
// in a new ledger once a bookie joins.
func TestRolloverWithNotEnoughBookies(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/roll-few-bookies"
	ml := e.open(topic, smallLedgers(5), e.own(topic))
	defer ml.Close(ctxT(t))
	cfg := smallLedgers(5)
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 2, 2, 2
	ml.SetConfig(cfg)
	appendN(t, ml, 0, 5) // the last fills the ledger: the rollover needs a ledger of 2
	testutil.Eventually(t, 30*time.Second, "appends to be refused for want of bookies", func() bool {
		_, err := ml.Append(ctxT(t), data(5))
		if err == nil {
			t.Fatal("an append was stored with no ledger to take it")
		}
		return errors.Is(err, ErrNotEnoughBookies)
	})
	e.cache.Drop(topic)
	checkData(t, readAll(t, ml), 5)
	e.c.AddBookie(testcluster.Options{})
	testutil.Eventually(t, 30*time.Second, "appends to be taken again", func() bool {
		_, err := ml.Append(ctxT(t), data(5))
		if err != nil && !errors.Is(err, ErrNotEnoughBookies) && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("append once a bookie is back: %v", err)
		}
		return err == nil
	})
	checkData(t, readAll(t, ml), 6)
	if refs, _ := e.storedList(topic); len(refs) != 2 || refs[0].Entries != 5 {
		t.Fatalf("list %v, want the full ledger closed and a new one", refs)
	}
}

// Terminate with appends in flight: each one is either stored (before
// the returned position, and read back) or refused with ErrTerminated;
// later appends are refused; the termination survives a new owner, which
// creates no ledger, serves every entry, trims, and answers Terminate
// with the same position.
func TestTerminate(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/terminated"
	ml := e.open(topic, smallLedgers(10), e.own(topic))
	appendN(t, ml, 0, 25)
	// Appends racing the termination.
	type res struct {
		p   Position
		err error
	}
	results := make(chan res, 40)
	for i := 25; i < 45; i++ {
		ml.AppendAsync(ctxT(t), data(i), func(p Position, err error) { results <- res{p, err} })
	}
	last, err := ml.Terminate(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 45; i < 65; i++ { // after Terminate returned: refused at once
		ml.AppendAsync(ctxT(t), data(i), func(p Position, err error) { results <- res{p, err} })
	}
	stored, refused := 25, false
	for i := range 40 {
		r := <-results
		switch {
		case r.err == nil && refused:
			// AppendAsync's rule: a client resending from its first
			// failure must not find a later message stored.
			t.Fatalf("append %d stored after an earlier one was refused", 25+i)
		case r.err == nil:
			stored++
			if last.Before(r.p) {
				t.Fatalf("an append stored at %v, after the termination's %v", r.p, last)
			}
		case !errors.Is(r.err, ErrTerminated):
			t.Fatalf("an append racing Terminate failed with %v, want stored or ErrTerminated", r.err)
		default:
			refused = true
		}
	}
	if got := ml.LastConfirmed(); got != last || !ml.Terminated() {
		t.Fatalf("after Terminate: last %v (returned %v), terminated %v", got, last, ml.Terminated())
	}
	if _, err := ml.Append(ctxT(t), data(99)); !errors.Is(err, ErrTerminated) {
		t.Fatalf("append after Terminate: %v, want ErrTerminated", err)
	}
	if again, err := ml.Terminate(ctxT(t)); err != nil || again != last {
		t.Fatalf("Terminate again: %v, %v; want %v", again, err, last)
	}
	checkData(t, readAll(t, ml), stored)
	ledgers := len(ml.Ledgers())
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	ml2 := e.open(topic, smallLedgers(10), e.own(topic))
	defer ml2.Close(ctxT(t))
	if !ml2.Terminated() || ml2.LastConfirmed() != last {
		t.Fatalf("reopened: terminated %v, last %v; want true, %v", ml2.Terminated(), ml2.LastConfirmed(), last)
	}
	if got := len(ml2.Ledgers()); got != ledgers {
		t.Fatalf("reopened with %d ledgers, want %d (no new one)", got, ledgers)
	}
	for _, ref := range ml2.Ledgers() {
		if !ref.Closed {
			t.Fatalf("ledger %d of a terminated list is open", ref.LedgerId)
		}
	}
	if _, err := ml2.Append(ctxT(t), data(99)); !errors.Is(err, ErrTerminated) {
		t.Fatalf("append on the new owner: %v, want ErrTerminated", err)
	}
	e.cache.Drop(topic)
	checkData(t, readAll(t, ml2), stored)
	if again, err := ml2.Terminate(ctxT(t)); err != nil || again != last {
		t.Fatalf("Terminate on the new owner: %v, %v; want %v", again, err, last)
	}
	// Retention goes on: every consumed ledger but the last is trimmed,
	// the list stays terminated.
	ids, err := ml2.Trim(ctxT(t), ml2.Next(last), Retention{})
	if err != nil || len(ids) != ledgers-1 {
		t.Fatalf("trim of a terminated list: %v, %v; want %d ledgers", ids, err, ledgers-1)
	}
	var info metapb.ManagedLedgerInfo
	kv, err := e.c.Store.Get(ctxT(t), metastore.ManagedLedgerKey(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(kv.Value, &info); err != nil || !info.Terminated || len(info.Ledgers) != 1 {
		t.Fatalf("stored after the trim: terminated %v, %d ledgers (want 1), %v", info.Terminated, len(info.Ledgers), err)
	}
}

// The last position of a terminated partition survives trimming the
// ledger that holds it: here the last ledger is empty (the termination
// came right after a rollover), retention drops the one before, and a new
// owner still knows the end.
func TestTerminateKeepsTheEndAcrossTrims(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/terminated-trimmed"
	ml := e.open(topic, smallLedgers(10), e.own(topic))
	ps := appendN(t, ml, 0, 10)
	testutil.Eventually(t, 30*time.Second, "the rollover to an empty ledger", func() bool { return len(ml.Ledgers()) == 2 })
	last, err := ml.Terminate(ctxT(t))
	if err != nil || last != ps[9] {
		t.Fatalf("Terminate: %v %v, want %v", last, err, ps[9])
	}
	if ids, err := ml.Trim(ctxT(t), ml.Next(last), Retention{}); err != nil || len(ids) != 1 {
		t.Fatalf("trim: %v %v, want the first ledger dropped", ids, err)
	}
	if err := ml.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ml2 := e.open(topic, smallLedgers(10), e.own(topic))
	defer ml2.Close(ctxT(t))
	if got := ml2.LastConfirmed(); got != last {
		t.Fatalf("reopened after the trim: last %v, want %v", got, last)
	}
	if again, err := ml2.Terminate(ctxT(t)); err != nil || again != last {
		t.Fatalf("Terminate on the new owner: %v %v, want %v", again, err, last)
	}
	if es, err := ml2.Read(ctxT(t), ml2.Next(last), 10); err != nil || len(es) != 0 {
		t.Fatalf("read past the end: %v %v", es, err)
	}
}

// An append asked once Terminate is under way is refused only after the
// appends in flight then are answered: a refusal never overtakes an
// earlier success (AppendAsync's order rule), so that a producer that
// stops at its first failure knows exactly what was stored.
func TestTerminateAnswersInFlightAppendsFirst(t *testing.T) {
	e := newEnv(t, 1)
	const topic = "public/default/terminated-in-flight"
	ml := e.open(topic, DefaultConfig(), e.own(topic))
	appendN(t, ml, 0, 3)
	proxy := e.c.Bookies()[0].Proxy
	proxy.Pause()
	held := proxy.Held()
	outcomes := make(chan string, 2)
	ml.AppendAsync(ctxT(t), data(3), func(_ Position, err error) { outcomes <- fmt.Sprint("in flight: ", err) })
	<-held // the append is stuck on its way to the bookie
	terminated := make(chan error, 1)
	go func() {
		_, err := ml.Terminate(ctxT(t))
		terminated <- err
	}()
	testutil.Eventually(t, 10*time.Second, "Terminate under way", ml.Terminating)
	ml.AppendAsync(ctxT(t), data(4), func(_ Position, err error) {
		outcomes <- fmt.Sprint("after: ", errors.Is(err, ErrTerminated))
	})
	proxy.Resume()
	if err := <-terminated; err != nil {
		t.Fatal(err)
	}
	if first, second := <-outcomes, <-outcomes; first != "in flight: <nil>" || second != "after: true" {
		t.Fatalf("outcomes in order: %q, %q; want the append in flight stored, then the later one refused", first, second)
	}
	ml.Close(ctxT(t))
}
