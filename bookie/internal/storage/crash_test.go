package storage

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// Power loss while adds are in flight: everything acknowledged survives,
// and adds whose sync had not finished were not acknowledged (and, with no
// unsynced data kept by the crash, are gone).
func TestPowerLossKeepsAcknowledged(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		mem := vfs.NewCrashableMem()
		gate := &syncGate{}
		d := open(t, base, errorfs.Wrap(mem, gate))
		ctx := ctxT(t)
		for e := int64(0); e < 50; e++ {
			mustAdd(t, d, mkEntry(1, e, 300))
			mustAdd(t, d, mkEntry(2, e, 300))
		}
		if _, err := d.Fence(ctx, 2, key); err != nil {
			t.Fatal(err)
		}

		gate.hold()
		const inflight = 20
		var wg sync.WaitGroup
		answered := make(chan int64, inflight)
		for e := int64(50); e < 50+inflight; e++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := d.AddEntry(ctx, mkEntry(1, e, 300), key, false); err == nil {
					answered <- e
				}
			}()
		}
		testutil.Eventually(t, 30*time.Second, "in-flight adds to queue", func() bool { return d.Stats().Pending == inflight })
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		gate.release()
		wg.Wait()
		d.Close()
		close(answered)
		t.Logf("%d in-flight adds were acknowledged after the crash point (their sync ran after the clone)", len(answered))

		d2 := open(t, base, crashed)
		defer d2.Close()
		for e := int64(0); e < 50; e++ {
			checkEntry(t, d2, mkEntry(1, e, 300))
			checkEntry(t, d2, mkEntry(2, e, 300))
		}
		for e := int64(50); e < 50+inflight; e++ {
			if _, err := d2.ReadEntry(1, e); !errors.Is(err, wire.ErrNoSuchEntry) {
				t.Fatalf("unsynced entry %d: %v (the crash kept no unsynced data)", e, err)
			}
		}
		if err := d2.AddEntry(ctx, mkEntry(2, 60, 300), key, false); !errors.Is(err, wire.ErrFenced) {
			t.Fatalf("acknowledged fence lost in the crash: %v", err)
		}
	})
}

// Random crash points under concurrent adds and fences, keeping a random
// share of unsynced data: every acknowledged add and fence survives.
func TestPowerLossRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	rounds := 4 * len(variants)
	if testing.Short() {
		rounds = len(variants)
	}
	for round := 0; round < rounds; round++ {
		mem := vfs.NewCrashableMem()
		v := variants[round%len(variants)]
		d := open(t, v.opts, mem)
		ctx, cancel := context.WithCancel(ctxT(t))

		var (
			mu     sync.Mutex
			acked  []Entry
			fences = map[int64]bool{}
			wg     sync.WaitGroup
		)
		const ledgers = 4
		for l := int64(1); l <= ledgers; l++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for e := int64(0); ctx.Err() == nil; e++ {
					en := mkEntry(l, e, 64+int(e%7)*100)
					if err := d.AddEntry(ctx, en, key, false); err != nil {
						return
					}
					mu.Lock()
					acked = append(acked, en)
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		fenceAt := rng.IntN(200)
		go func() {
			defer wg.Done()
			for d.Stats().Adds < int64(fenceAt) {
				if ctx.Err() != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := d.Fence(ctx, 3, key); err == nil {
				mu.Lock()
				fences[3] = true
				mu.Unlock()
			}
		}()
		crashAt := int64(rng.IntN(400))
		testutil.Eventually(t, 30*time.Second, "adds before crash", func() bool { return d.Stats().Adds >= crashAt })
		// Take the acknowledged set first: anything acknowledged before
		// the clone is certainly in it.
		mu.Lock()
		mustSurvive := append([]Entry(nil), acked...)
		fenced := fences[3]
		mu.Unlock()
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(round)))})
		cancel()
		wg.Wait()
		d.Close()

		d2 := open(t, v.opts, crashed)
		for _, en := range mustSurvive {
			checkEntry(t, d2, en)
		}
		if fenced {
			if err := d2.AddEntry(ctxT(t), mkEntry(3, 1<<20, 10), key, false); !errors.Is(err, wire.ErrFenced) {
				t.Fatalf("round %d: acknowledged fence lost: %v", round, err)
			}
		}
		d2.Close()
		t.Logf("round %d (%s): %d acknowledged adds survived (fenced %v)", round, v.name, len(mustSurvive), fenced)
	}
}

// An injected WAL sync failure: the add is refused with ErrStorage, the
// storage stops (later adds and reads fail too), and after the crash and a
// restart everything acknowledged before is there.
func TestSyncFailureIsNeverAcknowledged(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		// Pebble syncs its WAL with fdatasync (SyncData); "write" fails the
		// WAL write itself.
		for _, kind := range []errorfs.OpKind{errorfs.OpFileSyncData, errorfs.OpFileWrite} {
			t.Run(kindName(kind), func(t *testing.T) {
				mem := vfs.NewCrashableMem()
				toggle := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
					if strings.HasSuffix(op.Path, ".log") && sameKind(op.Kind, kind) {
						return errorfs.ErrInjected
					}
					return nil
				})}
				d := open(t, base, errorfs.Wrap(mem, toggle))
				ctx := ctxT(t)
				for e := int64(0); e < 10; e++ {
					mustAdd(t, d, mkEntry(1, e, 100))
				}
				toggle.On()
				err := d.AddEntry(ctx, mkEntry(1, 10, 100), key, false)
				if !errors.Is(err, wire.ErrStorage) {
					t.Fatalf("add with a failing WAL %s: got %v, want ErrStorage", kindName(kind), err)
				}
				select {
				case <-d.Failed():
				default:
					t.Fatal("Failed() not closed after a storage failure")
				}
				toggle.Off()
				if err := d.AddEntry(ctx, mkEntry(1, 11, 100), key, false); !errors.Is(err, wire.ErrStorage) {
					t.Fatalf("add after the failure: %v", err)
				}
				if _, err := d.Fence(ctx, 1, key); !errors.Is(err, wire.ErrStorage) {
					t.Fatalf("fence after the failure: %v", err)
				}
				if _, err := d.ReadEntry(1, 0); !errors.Is(err, wire.ErrStorage) {
					t.Fatalf("read after the failure: %v", err)
				}
				crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				d.Close()
				d2 := open(t, base, crashed)
				defer d2.Close()
				for e := int64(0); e < 10; e++ {
					checkEntry(t, d2, mkEntry(1, e, 100))
				}
			})
		}
	})
}

// sameKind: "write" is Write (Pebble's WAL) or WriteAt (the entry log).
func sameKind(op, k errorfs.OpKind) bool {
	return op == k || (k == errorfs.OpFileWrite && op == errorfs.OpFileWriteAt)
}

func kindName(k errorfs.OpKind) string {
	switch k {
	case errorfs.OpFileSyncData:
		return "syncdata"
	case errorfs.OpFileWrite:
		return "write"
	}
	return "op"
}

// A WAL write or sync that fails for lack of space (ENOSPC) stops the
// writes only: the add is refused with ErrNoSpace (a wire.ErrReadOnly, so
// that writers go to another bookie), NoSpace is closed, Failed is not,
// reads go on, and every later write is refused the same way, recovery
// adds and fences included, even once space is back (the WAL cannot be
// written again by this process). After a restart everything
// acknowledged is there and writes work again.
func TestNoSpaceStopsWritesNotReads(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		for _, kind := range []errorfs.OpKind{errorfs.OpFileSyncData, errorfs.OpFileWrite} {
			t.Run(kindName(kind), func(t *testing.T) {
				mem := vfs.NewCrashableMem()
				toggle := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
					if strings.HasSuffix(op.Path, ".log") && sameKind(op.Kind, kind) {
						return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
					}
					return nil
				})}
				d := open(t, base, errorfs.Wrap(mem, toggle))
				ctx := ctxT(t)
				for e := int64(0); e < 10; e++ {
					mustAdd(t, d, mkEntry(1, e, 100))
				}
				toggle.On()
				err := d.AddEntry(ctx, mkEntry(1, 10, 100), key, false)
				if !errors.Is(err, ErrNoSpace) || !errors.Is(err, wire.ErrReadOnly) || errors.Is(err, wire.ErrStorage) {
					t.Fatalf("add on a full disk (%s): got %v, want ErrNoSpace", kindName(kind), err)
				}
				select {
				case <-d.NoSpace():
				default:
					t.Fatal("NoSpace() not closed after a write failed for lack of space")
				}
				select {
				case <-d.Failed():
					t.Fatal("Failed() closed: a full disk is not a failed one")
				default:
				}
				if err := d.Err(); err != nil {
					t.Fatalf("Err() = %v on a full disk", err)
				}
				toggle.Off()
				if err := d.AddEntry(ctx, mkEntry(1, 11, 100), key, false); !errors.Is(err, ErrNoSpace) {
					t.Fatalf("add after running out of space: %v", err)
				}
				if err := d.AddEntry(ctx, mkEntry(2, 0, 100), key, true); !errors.Is(err, ErrNoSpace) {
					t.Fatalf("recovery add after running out of space: %v", err)
				}
				if _, err := d.Fence(ctx, 1, key); !errors.Is(err, ErrNoSpace) {
					t.Fatalf("fence after running out of space: %v", err)
				}
				for e := int64(0); e < 10; e++ {
					checkEntry(t, d, mkEntry(1, e, 100))
				}
				if info, err := d.Info(1); err != nil || info.LAC < 8 {
					t.Fatalf("info after running out of space: %+v %v", info, err)
				}
				crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				d.Close()
				d2 := open(t, base, crashed)
				defer d2.Close()
				for e := int64(0); e < 10; e++ {
					checkEntry(t, d2, mkEntry(1, e, 100))
				}
				mustAdd(t, d2, mkEntry(1, 10, 100))
			})
		}
	})
}

// onceFailingSync holds the first WAL or entry log sync once armed, then
// fails it; the syncs after it succeed.
type onceFailingSync struct {
	armed, used atomic.Bool
	held        chan struct{} // closed once the failing sync is held
	release     chan struct{}
}

func (o *onceFailingSync) MaybeError(op errorfs.Op) error {
	if !isWALSync(op) || !o.armed.Load() || o.used.Swap(true) {
		return nil
	}
	close(o.held)
	<-o.release
	return errorfs.ErrInjected
}

func (o *onceFailingSync) String() string { return "once-failing-sync" }

// A sync that fails stops the storage: a batch queued behind it is not
// acknowledged, although its own sync succeeds (after a failed fdatasync
// Linux may drop the dirty pages and report the next one clean).
func TestNoAcknowledgementAfterAFailedSync(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		mem := vfs.NewCrashableMem()
		inj := &onceFailingSync{held: make(chan struct{}), release: make(chan struct{})}
		d := open(t, base, errorfs.Wrap(mem, inj))
		defer d.Close()
		ctx := ctxT(t)
		mustAdd(t, d, mkEntry(1, 0, 100))
		inj.armed.Store(true)
		errs := make(chan error, 2)
		go func() { errs <- d.AddEntry(ctx, mkEntry(1, 1, 100), key, false) }()
		<-inj.held
		go func() { errs <- d.AddEntry(ctx, mkEntry(1, 2, 100), key, false) }()
		testutil.Eventually(t, 30*time.Second, "the second add to queue behind the held sync", func() bool { return d.Stats().Pending == 2 })
		close(inj.release)
		for i := 0; i < 2; i++ {
			if err := <-errs; !errors.Is(err, wire.ErrStorage) {
				t.Fatalf("add %d after a failed sync: %v, want ErrStorage", i+1, err)
			}
		}
	})
}

// A fence accepted before its ledger's deletion, answered after it, does not
// report a state the ledger no longer has.
func TestFenceOfALedgerDeletedMeanwhile(t *testing.T) {
	forEachVariant(t, func(t *testing.T, base Options) {
		gate := &syncGate{}
		d := open(t, base, errorfs.Wrap(vfs.NewMem(), gate))
		defer d.Close()
		ctx := ctxT(t)
		mustAdd(t, d, mkEntry(1, 0, 100))
		gate.hold()
		type answer struct {
			info LedgerInfo
			err  error
		}
		fenced := make(chan answer, 1)
		go func() {
			info, err := d.Fence(ctx, 1, key)
			fenced <- answer{info, err}
		}()
		testutil.Eventually(t, 30*time.Second, "the fence to be accepted", func() bool { return d.Stats().Pending == 1 })
		deleted := make(chan error, 1)
		go func() { deleted <- d.DeleteLedgers(ctx, []int64{1}) }()
		testutil.Eventually(t, 30*time.Second, "the deletion to be accepted", func() bool {
			_, err := d.Info(1)
			return errors.Is(err, wire.ErrNoSuchLedger)
		})
		gate.release()
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		a := <-fenced
		if !errors.Is(a.err, wire.ErrNoSuchLedger) {
			t.Fatalf("fence answered %+v, %v after the ledger was deleted; want ErrNoSuchLedger", a.info, a.err)
		}
	})
}
