package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// addFunc is a function as an AddDone.
type addFunc func(error)

func (f addFunc) AddDone(err error) { f(err) }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

var key = []byte("master-key")

// variants runs a test body with every storage setting we ship.
var variants = []struct {
	name string
	opts Options
}{
	{"plain", Options{}},
	{"value-separation", Options{ValueSeparation: true, ValueSeparationMinSize: 64}},
	// Small files and checkpoints, so that tests roll over and checkpoint.
	{"entry-log", Options{EntryLog: true, EntryLogFileSize: 16 << 10, CheckpointBytes: 64 << 10}},
}

func forEachVariant(t *testing.T, fn func(t *testing.T, base Options)) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) { fn(t, v.opts) })
	}
}

func open(t testing.TB, base Options, fs vfs.FS) *DB {
	t.Helper()
	o := base
	o.FS = fs
	o.Dir = "bookie"
	o.Logger = zaptest.NewLogger(t)
	o.MemTableSize = 1 << 20
	o.CacheSize = 1 << 20
	d, err := Open(o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return d
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func payloadOf(ledger, entry int64, size int) []byte {
	p := bytes.Repeat([]byte{byte(ledger*31 + entry)}, size)
	copy(p, fmt.Sprintf("%d/%d", ledger, entry))
	return p
}

func mkEntry(ledger, entry int64, size int) Entry {
	p := payloadOf(ledger, entry, size)
	return Entry{LedgerID: ledger, EntryID: entry, LAC: entry - 1, Length: (entry + 1) * int64(size), CRC: crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)), Payload: p}
}

func mustAdd(t testing.TB, d *DB, e Entry) {
	t.Helper()
	if err := d.AddEntry(ctxT(t), e, key, false); err != nil {
		t.Fatalf("add %d/%d: %v", e.LedgerID, e.EntryID, err)
	}
}

func checkEntry(t testing.TB, d *DB, want Entry) {
	t.Helper()
	got, err := d.ReadEntry(want.LedgerID, want.EntryID)
	if err != nil {
		t.Fatalf("read %d/%d: %v", want.LedgerID, want.EntryID, err)
	}
	if got.LAC != want.LAC || got.Length != want.Length || got.CRC != want.CRC || !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("read %d/%d: got lac %d length %d crc %x %d bytes; want lac %d length %d crc %x %d bytes",
			want.LedgerID, want.EntryID, got.LAC, got.Length, got.CRC, len(got.Payload), want.LAC, want.Length, want.CRC, len(want.Payload))
	}
}

func TestAddReadReopen(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		fs := vfs.NewMem()
		d := open(t, base, fs)
		var all []Entry
		for l := int64(1); l <= 3; l++ {
			for e := int64(0); e < 20; e++ {
				en := mkEntry(l, e, 100+int(e)*50)
				mustAdd(t, d, en)
				all = append(all, en)
			}
		}
		if err := d.WriteLAC(ctxT(t), 2, key, 19); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Fence(ctxT(t), 3, key); err != nil {
			t.Fatal(err)
		}
		check := func(d *DB) {
			for _, en := range all {
				checkEntry(t, d, en)
			}
			for l, want := range map[int64]LedgerInfo{
				1: {LAC: 18, LastEntry: 19},
				2: {LAC: 19, LastEntry: 19},
				3: {LAC: 18, LastEntry: 19, Fenced: true},
			} {
				got, err := d.Info(l)
				if err != nil || got != want {
					t.Fatalf("info of ledger %d: %+v, %v; want %+v", l, got, err, want)
				}
			}
			if got := d.Ledgers(); len(got) != 3 || got[0] != 1 || got[2] != 3 {
				t.Fatalf("ledgers: %v", got)
			}
		}
		check(d)
		if st := d.Stats(); st.Adds != int64(len(all)) || st.Ledgers != 3 {
			t.Fatalf("stats: %+v", st)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d = open(t, base, fs)
		defer d.Close()
		check(d)
	})
}

func TestFenceRefusesAddsButNotRecoveryAdds(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		fs := vfs.NewMem()
		d := open(t, base, fs)
		ctx := ctxT(t)
		mustAdd(t, d, mkEntry(7, 0, 10))
		mustAdd(t, d, mkEntry(7, 1, 10))
		info, err := d.Fence(ctx, 7, key)
		if err != nil {
			t.Fatal(err)
		}
		if info != (LedgerInfo{Fenced: true, LAC: 0, LastEntry: 1}) {
			t.Fatalf("fence returned %+v", info)
		}
		if err := d.AddEntry(ctx, mkEntry(7, 2, 10), key, false); !errors.Is(err, wire.ErrFenced) {
			t.Fatalf("add to fenced ledger: got %v, want ErrFenced", err)
		}
		if err := d.AddEntry(ctx, mkEntry(7, 2, 10), key, true); err != nil {
			t.Fatalf("recovery add: %v", err)
		}
		// Fencing twice is fine; a fence with the wrong key is not.
		if _, err := d.Fence(ctx, 7, key); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Fence(ctx, 7, []byte("other")); !errors.Is(err, wire.ErrBadMasterKey) {
			t.Fatalf("fence with wrong key: %v", err)
		}
		// Fencing a ledger never seen records it: the old writer's first
		// add to this bookie is refused too.
		if _, err := d.Fence(ctx, 8, key); err != nil {
			t.Fatal(err)
		}
		if err := d.AddEntry(ctx, mkEntry(8, 0, 10), key, false); !errors.Is(err, wire.ErrFenced) {
			t.Fatalf("add to a ledger fenced before its first entry: %v", err)
		}
		d.Close()
		d = open(t, base, fs)
		defer d.Close()
		for _, l := range []int64{7, 8} {
			if err := d.AddEntry(ctx, mkEntry(l, 3, 10), key, false); !errors.Is(err, wire.ErrFenced) {
				t.Fatalf("ledger %d: fence lost on reopen: %v", l, err)
			}
		}
		checkEntry(t, d, mkEntry(7, 2, 10))
	})
}

func TestMasterKeyAndMissing(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		d := open(t, base, vfs.NewMem())
		defer d.Close()
		ctx := ctxT(t)
		mustAdd(t, d, mkEntry(1, 0, 10))
		if err := d.AddEntry(ctx, mkEntry(1, 1, 10), []byte("wrong"), false); !errors.Is(err, wire.ErrBadMasterKey) {
			t.Fatalf("add with wrong key: %v", err)
		}
		if err := d.WriteLAC(ctx, 1, []byte("wrong"), 0); !errors.Is(err, wire.ErrBadMasterKey) {
			t.Fatalf("write LAC with wrong key: %v", err)
		}
		if _, err := d.ReadEntry(2, 0); !errors.Is(err, wire.ErrNoSuchLedger) {
			t.Fatalf("read of unknown ledger: %v", err)
		}
		if _, err := d.ReadEntry(1, 5); !errors.Is(err, wire.ErrNoSuchEntry) {
			t.Fatalf("read of missing entry: %v", err)
		}
		if _, err := d.Info(2); !errors.Is(err, wire.ErrNoSuchLedger) {
			t.Fatalf("info of unknown ledger: %v", err)
		}
	})
}

func TestInvalidArguments(t *testing.T) {
	d := open(t, Options{}, vfs.NewMem())
	defer d.Close()
	ctx := ctxT(t)
	good := mkEntry(1, 5, 10)
	for _, tc := range []struct {
		name string
		mod  func(e *Entry, k *[]byte)
	}{
		{"zero ledger", func(e *Entry, _ *[]byte) { e.LedgerID = 0 }},
		{"negative ledger", func(e *Entry, _ *[]byte) { e.LedgerID = -3 }},
		{"negative entry", func(e *Entry, _ *[]byte) { e.EntryID = -1 }},
		{"lac not before entry", func(e *Entry, _ *[]byte) { e.LAC = 5 }},
		{"lac below -1", func(e *Entry, _ *[]byte) { e.LAC = -2 }},
		{"length shorter than payload", func(e *Entry, _ *[]byte) { e.Length = 3 }},
		{"no master key", func(_ *Entry, k *[]byte) { *k = nil }},
		{"huge master key", func(_ *Entry, k *[]byte) { *k = make([]byte, MaxMasterKeyLen+1) }},
	} {
		e, k := good, key
		tc.mod(&e, &k)
		if err := d.AddEntry(ctx, e, k, false); !errors.Is(err, wire.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if _, err := d.Fence(ctx, 0, key); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Errorf("fence of ledger 0: %v", err)
	}
	if err := d.WriteLAC(ctx, 1, key, -5); !errors.Is(err, wire.ErrInvalidArgument) {
		t.Errorf("write LAC -5: %v", err)
	}
	if len(d.Ledgers()) != 0 {
		t.Fatalf("invalid requests created ledgers: %v", d.Ledgers())
	}
}

func TestWaitLAC(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		d := open(t, base, vfs.NewMem())
		defer d.Close()
		ctx := ctxT(t)
		mustAdd(t, d, mkEntry(1, 0, 10)) // lac -1
		got := make(chan LedgerInfo, 1)
		go func() {
			info, err := d.WaitLAC(ctx, 1, -1)
			if err != nil {
				t.Error(err)
			}
			got <- info
		}()
		mustAdd(t, d, mkEntry(1, 1, 10)) // lac 0: wakes the waiter
		select {
		case info := <-got:
			if info.LAC != 0 {
				t.Fatalf("waiter woke with LAC %d", info.LAC)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("waiter not woken by an add carrying a newer LAC")
		}
		// Already past: returns at once. Timeout: returns the current state.
		if info, err := d.WaitLAC(ctx, 1, -1); err != nil || info.LAC != 0 {
			t.Fatalf("wait for a passed LAC: %+v %v", info, err)
		}
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if info, err := d.WaitLAC(short, 1, 0); err != nil || info.LAC != 0 {
			t.Fatalf("timed-out wait: %+v %v", info, err)
		}
		// Explicit LAC wakes waiters too; deletion ends them with an error.
		go func() {
			info, err := d.WaitLAC(ctx, 1, 0)
			if err != nil || info.LAC != 1 {
				t.Errorf("wait for explicit LAC: %+v %v", info, err)
			}
			got <- info
		}()
		if err := d.WriteLAC(ctx, 1, key, 1); err != nil {
			t.Fatal(err)
		}
		<-got
		errc := make(chan error, 1)
		go func() {
			_, err := d.WaitLAC(ctx, 1, 10)
			errc <- err
		}()
		testutil.Eventually(t, 10*time.Second, "waiter to block", func() bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.mu.ledgers[1].lacWait != nil
		})
		if err := d.DeleteLedgers(ctx, []int64{1}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, wire.ErrNoSuchLedger) {
			t.Fatalf("waiter on deleted ledger: %v", err)
		}
	})
}

func TestDeleteLedgers(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		fs := vfs.NewMem()
		d := open(t, base, fs)
		ctx := ctxT(t)
		for l := int64(1); l <= 10; l++ {
			for e := int64(0); e < 5; e++ {
				mustAdd(t, d, mkEntry(l, e, 200))
			}
		}
		// A run (2-4), singles (7, 9) and an unknown id.
		if err := d.DeleteLedgers(ctx, []int64{4, 2, 3, 7, 9, 99, 3}); err != nil {
			t.Fatal(err)
		}
		check := func(d *DB) {
			deleted := map[int64]bool{2: true, 3: true, 4: true, 7: true, 9: true}
			for l := int64(1); l <= 10; l++ {
				for e := int64(0); e < 5; e++ {
					_, err := d.ReadEntry(l, e)
					if deleted[l] != errors.Is(err, wire.ErrNoSuchLedger) || (!deleted[l] && err != nil) {
						t.Fatalf("ledger %d entry %d (deleted %v): %v", l, e, deleted[l], err)
					}
				}
			}
			if got := fmt.Sprint(d.Ledgers()); got != "[1 5 6 8 10]" {
				t.Fatalf("ledgers left: %s", got)
			}
		}
		check(d)
		d.Close()
		d = open(t, base, fs)
		defer d.Close()
		check(d)
	})
}

// syncGate is an errorfs injector that counts WAL syncs and can hold them.
type syncGate struct {
	syncs   atomic.Int64
	mu      sync.Mutex
	blocked chan struct{} // non-nil: syncs wait until it is closed
	waiting atomic.Int64  // syncs currently held
}

func isWALSync(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return strings.HasSuffix(op.Path, ".log")
	}
	return false
}

func (g *syncGate) MaybeError(op errorfs.Op) error {
	if !isWALSync(op) {
		return nil
	}
	g.syncs.Add(1)
	g.mu.Lock()
	ch := g.blocked
	g.mu.Unlock()
	if ch != nil {
		g.waiting.Add(1)
		<-ch
		g.waiting.Add(-1)
	}
	return nil
}

func (g *syncGate) String() string { return "sync-gate" }

func (g *syncGate) hold() {
	g.mu.Lock()
	g.blocked = make(chan struct{})
	g.mu.Unlock()
}

func (g *syncGate) release() {
	g.mu.Lock()
	if g.blocked != nil {
		close(g.blocked)
		g.blocked = nil
	}
	g.mu.Unlock()
}

// Many concurrent adds share WAL syncs: while one sync is held, every add
// that arrives queues behind it and the next sync covers them all.
func TestGroupCommit(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		gate := &syncGate{}
		d := open(t, base, errorfs.Wrap(vfs.NewMem(), gate))
		defer d.Close()
		ctx := ctxT(t)
		mustAdd(t, d, mkEntry(1, 0, 10))

		gate.hold()
		first := make(chan error, 1)
		go func() { first <- d.AddEntry(ctx, mkEntry(1, 1, 10), key, false) }()
		testutil.Eventually(t, 10*time.Second, "first sync to be held", func() bool { return gate.waiting.Load() == 1 })
		before := gate.syncs.Load()

		const n = 500
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := int64(0); i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- d.AddEntry(ctx, mkEntry(2, i, 100), key, false)
			}()
		}
		// All of them queue up; none is acknowledged while the sync is held.
		testutil.Eventually(t, 30*time.Second, "adds to queue", func() bool { return d.Stats().Pending == n+1 })
		select {
		case err := <-errs:
			t.Fatalf("an add was answered (%v) while its sync was held", err)
		default:
		}
		gate.release()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		syncs := gate.syncs.Load() - before
		t.Logf("%d adds committed with %d WAL syncs", n, syncs)
		if syncs > n/10 {
			t.Fatalf("%d adds needed %d syncs: no group commit", n, syncs)
		}
	})
}

// A fence and adds racing on one ledger: every add that succeeded is
// stored, and no add that started after the fence returned succeeds.
func TestFenceAddRace(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		d := open(t, base, vfs.NewMem())
		defer d.Close()
		ctx := ctxT(t)
		const writers = 8
		var fenced atomic.Bool
		var wg sync.WaitGroup
		type result struct {
			entry      int64
			err        error
			afterFence bool
		}
		results := make(chan result, 1<<16)
		for w := int64(0); w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each writer adds until the fence stops it.
				for e := w; ; e += writers {
					after := fenced.Load()
					err := d.AddEntry(ctx, mkEntry(1, e, 50), key, false)
					results <- result{entry: e, err: err, afterFence: after}
					if err != nil {
						return
					}
				}
			}()
		}
		testutil.Eventually(t, 30*time.Second, "some adds to be acknowledged", func() bool { return d.Stats().Adds >= 200 })
		info, err := d.Fence(ctx, 1, key)
		if err != nil {
			t.Fatal(err)
		}
		fenced.Store(true)
		wg.Wait()
		close(results)
		if !info.Fenced {
			t.Fatalf("fence answered %+v", info)
		}
		ok, refused := 0, 0
		for r := range results {
			switch {
			case r.err == nil:
				ok++
				if r.afterFence {
					t.Fatalf("entry %d acknowledged although its add began after the fence returned", r.entry)
				}
				// Every add accepted (so acknowledged) was before the
				// fence: its answer counts it (recovery reads up to it).
				if r.entry > info.LastEntry {
					t.Fatalf("entry %d acknowledged, but the fence answered last entry %d", r.entry, info.LastEntry)
				}
				checkEntry(t, d, mkEntry(1, r.entry, 50))
			case errors.Is(r.err, wire.ErrFenced):
				refused++
			default:
				t.Fatal(r.err)
			}
		}
		t.Logf("%d adds acknowledged, %d refused by the fence", ok, refused)
		if refused != writers {
			t.Fatalf("%d writers were stopped by the fence, want %d", refused, writers)
		}
	})
}

// A long poll on a ledger not stored yet waits for it instead of failing
// at once (a reader tailing a ledger that was just created).
func TestWaitLACOnUnknownLedger(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		d := open(t, base, vfs.NewMem())
		defer d.Close()
		ctx := ctxT(t)
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := d.WaitLAC(short, 9, -1); !errors.Is(err, wire.ErrNoSuchLedger) {
			t.Fatalf("wait on an unknown ledger at its deadline: %v", err)
		}
		got := make(chan LedgerInfo, 1)
		go func() {
			info, err := d.WaitLAC(ctx, 9, -1)
			if err != nil {
				t.Error(err)
			}
			got <- info
		}()
		mustAdd(t, d, mkEntry(9, 0, 10)) // creates the ledger, LAC -1
		mustAdd(t, d, mkEntry(9, 1, 10)) // LAC 0
		if info := <-got; info.LAC != 0 {
			t.Fatalf("woke with %+v", info)
		}
	})
}

// Dropping a ledger's entries (its copies moved to other bookies) keeps
// the ledger's record, fenced, across a reopen: a writer that missed the
// ledger's recovery is refused here as before, while a recovery add (a
// copy moved back) is taken.
func TestDropEntriesKeepsTheFence(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		fs := vfs.NewMem()
		d := open(t, base, fs)
		ctx := ctxT(t)
		for e := int64(0); e < 5; e++ {
			mustAdd(t, d, mkEntry(9, e, 10))
		}
		if err := d.DropEntries(ctx, []int64{9}); err != nil {
			t.Fatal(err)
		}
		if ids, _, err := d.ListEntries(9, 0, 0); err != nil || len(ids) != 0 {
			t.Fatalf("entries after the drop: %v, %v", ids, err)
		}
		d.Close()
		d = open(t, base, fs)
		defer d.Close()
		if ids, _, err := d.ListEntries(9, 0, 0); err != nil || len(ids) != 0 {
			t.Fatalf("entries after the drop and a reopen: %v, %v", ids, err)
		}
		if err := d.AddEntry(ctx, mkEntry(9, 5, 10), key, false); !errors.Is(err, wire.ErrFenced) {
			t.Fatalf("a late writer's add after the drop: %v, want ErrFenced", err)
		}
		if err := d.AddEntry(ctx, mkEntry(9, 2, 10), key, true); err != nil {
			t.Fatalf("recovery add after the drop: %v", err)
		}
		checkEntry(t, d, mkEntry(9, 2, 10))
	})
}

// blockingFS holds the creation of tables and blob files (flushes) until
// release is closed; hit is closed at the first one held.
type blockingFS struct {
	vfs.FS
	hit, release chan struct{}
	once         sync.Once
}

func (fs *blockingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob") {
		fs.once.Do(func() { close(fs.hit) })
		<-fs.release
	}
	return fs.FS.Create(name, cat)
}

// A flush that cannot keep up holds writes back; the stall is reported
// with its reason and length once it ends, and the held adds complete.
func TestWriteStallsAreReported(t *testing.T) {
	fs := &blockingFS{FS: vfs.NewMem(), hit: make(chan struct{}), release: make(chan struct{})}
	began := make(chan struct{})
	var once sync.Once
	type stall struct {
		reason string
		took   time.Duration
	}
	stalls := make(chan stall, 100)
	opts := Options{
		MaxBatchBytes: 64 << 10, // batches well below a memtable, as in production
		onStallBegin:  func() { once.Do(func() { close(began) }) },
		OnWriteStall:  func(reason string, took time.Duration) { stalls <- stall{reason, took} },
	}
	d := open(t, opts, fs) // 1 MiB memtables, two held
	defer d.Close()
	var released sync.Once
	release := func() { released.Do(func() { close(fs.release) }) }
	defer release() // before Close, should the test end early
	const size = 8 << 10
	const n = 512 // 4 MiB: more than the memtables hold
	done := make(chan error, n)
	for i := int64(0); i < n; i++ {
		d.AddEntryAsync(mkEntry(1, i, size), key, false, addFunc(func(err error) { done <- err }))
	}
	ctx := ctxT(t)
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: not in time", what)
		}
	}
	wait(fs.hit, "a flush held")
	wait(began, "writes held back")
	release()
	for i := 0; i < n; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("add: %v", err)
			}
		case <-ctx.Done():
			t.Fatalf("%d adds of %d done after the flush went on", i, n)
		}
	}
	select {
	case s := <-stalls:
		if s.reason != "memtable count limit reached" || s.took <= 0 {
			t.Fatalf("stall reported as %q, %v", s.reason, s.took)
		}
	case <-ctx.Done():
		t.Fatal("the stall's end was not reported")
	}
	for i := int64(0); i < n; i++ {
		checkEntry(t, d, mkEntry(1, i, size))
	}
}

// Entries are stored as written unless Compress is set: the flushed
// tables of compressible payloads are several times larger without it.
func TestCompressionIsOptional(t *testing.T) {
	tables := func(compress bool) int64 {
		fs := vfs.NewMem()
		d := open(t, Options{Compress: compress, MaxBatchBytes: 64 << 10}, fs)
		for i := int64(0); i < 512; i++ { // 4 MiB of repeated bytes: four memtables and more
			mustAdd(t, d, mkEntry(1, i, 8<<10))
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		names, err := fs.List("bookie")
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, n := range names {
			if strings.HasSuffix(n, ".sst") || strings.HasSuffix(n, ".blob") {
				st, err := fs.Stat(fs.PathJoin("bookie", n))
				if err != nil {
					t.Fatal(err)
				}
				total += st.Size()
			}
		}
		return total
	}
	plain, compressed := tables(false), tables(true)
	if plain < 1<<20 || compressed*4 > plain {
		t.Fatalf("tables: %d bytes stored as written, %d compressed", plain, compressed)
	}
}
