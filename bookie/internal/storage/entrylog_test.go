package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

func entryLogOptions() Options {
	return Options{EntryLog: true, EntryLogFileSize: 16 << 10, CheckpointBytes: 1 << 30, CheckpointInterval: 10 * time.Millisecond}
}

// noneLeft says whether none of the log files nums is on fs any more.
func noneLeft(t *testing.T, fs vfs.FS, nums []uint32) bool {
	t.Helper()
	now := logFiles(t, fs)
	for _, num := range nums {
		if slices.Contains(now, num) {
			return false
		}
	}
	return true
}

// checkpointOf returns d's checkpoint key's value, in hex.
func checkpointOf(t *testing.T, d *DB) string {
	t.Helper()
	v, _, err := d.getValue(checkpointKey())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", v)
}

// logFiles lists the entry log's files.
func logFiles(t *testing.T, fs vfs.FS) []uint32 {
	t.Helper()
	l := newEntryLog(fs, "bookie", 0, 0, false, zap.NewNop())
	nums, err := l.files()
	if err != nil {
		t.Fatal(err)
	}
	return nums
}

// The log's files go once every ledger with entries in them is deleted (or
// its entries dropped), and only then; the rest stay readable, before and
// after a restart.
func TestEntryLogFilesGoWithTheirLedgers(t *testing.T) {
	fs := vfs.NewMem()
	opts := entryLogOptions()
	opts.CompactionThreshold = -1 // files go whole only
	d := open(t, opts, fs)
	ctx := ctxT(t)
	for _, l := range []int64{1, 2, 3} {
		for e := int64(0); e < 40; e++ {
			mustAdd(t, d, mkEntry(l, e, 1000))
		}
	}
	// Which files hold which ledgers (the files are 16 KiB: several per
	// ledger, some shared).
	d.mu.Lock()
	holds := map[uint32][]int64{}
	for num, set := range d.elog.fileLedgers {
		for l := range set {
			holds[num] = append(holds[num], l)
		}
	}
	d.mu.Unlock()
	before := logFiles(t, fs)
	usage := d.DiskSpaceUsage()
	if len(before) < 6 {
		t.Fatalf("%d log files for 120 KiB in 16 KiB files", len(before))
	}

	if err := d.DeleteLedgers(ctx, []int64{1}); err != nil {
		t.Fatal(err)
	}
	if err := d.DropEntries(ctx, []int64{3}); err != nil {
		t.Fatal(err)
	}
	// Files that held only ledgers 1 and 3, but the one being written.
	var gone []uint32
	current := slices.Max(before)
	for num, ls := range holds {
		if !slices.Contains(ls, 2) && num != current {
			gone = append(gone, num)
		}
	}
	slices.Sort(gone)
	if len(gone) < 3 {
		t.Fatalf("only %d files without ledger 2: %v", len(gone), holds)
	}
	testutil.Eventually(t, 30*time.Second, "files of deleted ledgers removed at a checkpoint", func() bool { return noneLeft(t, fs, gone) })
	for num, ls := range holds {
		if slices.Contains(ls, 2) && !slices.Contains(logFiles(t, fs), num) {
			t.Fatalf("file %d (ledgers %v) removed while ledger 2 has entries in it", num, ls)
		}
	}
	if after := d.DiskSpaceUsage(); after >= usage {
		t.Fatalf("disk space %d after deleting two thirds, %d before", after, usage)
	}
	check := func(d *DB) {
		t.Helper()
		for e := int64(0); e < 40; e++ {
			checkEntry(t, d, mkEntry(2, e, 1000))
			if _, err := d.ReadEntry(1, e); !errors.Is(err, wire.ErrNoSuchLedger) {
				t.Fatalf("deleted ledger 1 entry %d: %v", e, err)
			}
			if _, err := d.ReadEntry(3, e); !errors.Is(err, wire.ErrNoSuchEntry) {
				t.Fatalf("dropped ledger 3 entry %d: %v", e, err)
			}
		}
	}
	check(d)
	d.Close()
	d = open(t, opts, fs)
	defer d.Close()
	check(d)
	if _, err := d.Fence(ctx, 3, key); err != nil {
		t.Fatal(err)
	}
	if err := d.AddEntry(ctx, mkEntry(3, 40, 10), key, false); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add to a dropped ledger after restart: %v", err)
	}
}

// A torn tail (a crash in the middle of a write never acknowledged) ends
// the log: the entries before it are there, and the log goes on after a
// restart, and another. An empty file after it (made at a rollover or at
// open just before the crash) is no obstacle.
func TestEntryLogTornTail(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := entryLogOptions()
	d := open(t, opts, mem)
	for e := int64(0); e < 10; e++ {
		mustAdd(t, d, mkEntry(1, e, 300))
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	d.Close()

	nums := logFiles(t, crashed)
	last := nums[len(nums)-1]
	l := newEntryLog(crashed, "bookie", 0, 0, false, zap.NewNop())
	f, err := crashed.OpenReadWrite(l.path(last), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	// A record header promising 200 bytes, and only 50 of them.
	torn := append([]byte{1, 2, 3, 4, 0, 0, 0, 200}, bytes.Repeat([]byte{0xab}, 50)...)
	if _, err := f.WriteAt(torn, st.Size()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, err := crashed.Create(l.path(last+1), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()

	d = open(t, opts, crashed)
	for e := int64(0); e < 10; e++ {
		checkEntry(t, d, mkEntry(1, e, 300))
	}
	for e := int64(10); e < 20; e++ {
		mustAdd(t, d, mkEntry(1, e, 300))
	}
	crashed2 := crashed.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	d.Close()
	d = open(t, opts, crashed2)
	defer d.Close()
	for e := int64(0); e < 20; e++ {
		checkEntry(t, d, mkEntry(1, e, 300))
	}
}

// A bad record in a file followed by files with records is not a torn
// tail (a file is synced whole before the next is made): it is
// corruption, and Open refuses rather than drop the acknowledged entries
// after it. So does a file missing in the middle.
func TestEntryLogCorruptionRefusesToOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		harm func(t *testing.T, fs vfs.FS, l *entryLog, nums []uint32)
		want string
	}{
		{"flipped byte", func(t *testing.T, fs vfs.FS, l *entryLog, nums []uint32) {
			f, err := fs.OpenReadWrite(l.path(nums[0]), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xff}, 100); err != nil {
				t.Fatal(err)
			}
		}, "has a bad record"},
		{"missing file", func(t *testing.T, fs vfs.FS, l *entryLog, nums []uint32) {
			if err := fs.Remove(l.path(nums[1])); err != nil {
				t.Fatal(err)
			}
		}, "is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			opts := entryLogOptions()
			opts.CheckpointInterval = time.Hour // replay goes over every file
			d := open(t, opts, mem)
			for e := int64(0); e < 60; e++ {
				mustAdd(t, d, mkEntry(1, e, 1000))
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			d.Close()
			nums := logFiles(t, crashed)
			if len(nums) < 3 {
				t.Fatalf("%d files", len(nums))
			}
			tc.harm(t, crashed, newEntryLog(crashed, "bookie", 0, 0, false, zap.NewNop()), nums)
			o := opts
			o.FS, o.Dir = crashed, "bookie"
			d2, err := Open(o)
			if err == nil {
				d2.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, errCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: %v, want corruption (%q)", err, tc.want)
			}
			if got := logFiles(t, crashed); !slices.Equal(got, nums) && tc.name != "missing file" {
				t.Fatalf("files %v after a refused open, %v before", got, nums)
			}
		})
	}
}

// An entry whose bytes changed on disk is not served: the read fails with
// ErrStorage (the reader goes to another bookie).
func TestEntryLogCorruptEntryIsNotServed(t *testing.T) {
	fs := vfs.NewMem()
	d := open(t, entryLogOptions(), fs)
	defer d.Close()
	for e := int64(0); e < 3; e++ {
		mustAdd(t, d, mkEntry(1, e, 300))
	}
	nums := logFiles(t, fs)
	l := newEntryLog(fs, "bookie", 0, 0, false, zap.NewNop())
	f, err := fs.OpenReadWrite(l.path(nums[len(nums)-1]), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	// Entry 1's payload: the second record's last byte.
	rec := int64(entryRecordOverhead + 300)
	if _, err := f.WriteAt([]byte{0xff}, 2*rec-1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := d.ReadEntry(1, 1); !errors.Is(err, wire.ErrStorage) || !strings.Contains(err.Error(), "bad record") {
		t.Fatalf("read of a corrupt entry: %v", err)
	}
	checkEntry(t, d, mkEntry(1, 0, 300))
	checkEntry(t, d, mkEntry(1, 2, 300))
}

// A bookie whose index was written in version 2 (each entry's header in
// full in Pebble) reads it after an upgrade: its entries, each ledger's
// LAC at open, and compaction's copies of them (written in version 3).
func TestEntryLogReadsVersion2Index(t *testing.T) {
	fs := vfs.NewMem()
	opts := entryLogOptions()
	opts.CompactionThreshold = 0.5
	// No checkpoint but Close's: it flushes the rewritten index below
	// and covers the whole log, so that Open replays none of it.
	quiet := opts
	quiet.CheckpointInterval = time.Hour
	d := open(t, quiet, fs)
	// Each file: a tenth of ledger 1 (kept), nine tenths of ledger 2.
	for e := int64(0); e < 60; e++ {
		mustAdd(t, d, mkEntry(1, e, 100))
		mustAdd(t, d, mkEntry(2, e, 900))
	}
	// Rewrite the index as version 2 wrote it.
	for _, l := range []int64{1, 2} {
		for e := int64(0); e < 60; e++ {
			_, _, p, _, err := decodeStoredEntry(e, indexValue(t, d, l, e))
			if err != nil {
				t.Fatal(err)
			}
			want := mkEntry(l, e, int(p.len))
			old := make([]byte, pointerFixedLen)
			putEntryHeader(old, entryHeader{LAC: want.LAC, Length: want.Length, CRC: want.CRC})
			old[0] = pointerVersionFixed
			binary.BigEndian.PutUint32(old[entryHeaderLen:], p.file)
			binary.BigEndian.PutUint64(old[entryHeaderLen+4:], uint64(p.off))
			binary.BigEndian.PutUint32(old[entryHeaderLen+12:], p.len)
			if err := d.db.Set(entryKey(l, e), old, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.Close()

	d = open(t, opts, fs)
	defer d.Close()
	if v := indexValue(t, d, 1, 59); v[0] != pointerVersionFixed {
		t.Fatalf("entry 1/59's index value after the reopen: %x", v)
	}
	for _, l := range []int64{1, 2} {
		if info, err := d.Info(l); err != nil || info.LAC != 58 || info.LastEntry != 59 {
			t.Fatalf("ledger %d at open: %+v %v", l, info, err)
		}
	}
	for e := int64(0); e < 60; e++ {
		checkEntry(t, d, mkEntry(1, e, 100))
		checkEntry(t, d, mkEntry(2, e, 900))
	}
	// Compaction reads ledger 1's entries through their version 2
	// pointers and indexes the copies in version 3.
	before := logFiles(t, fs)
	old := before[:len(before)-1]
	if err := d.DeleteLedgers(ctxT(t), []int64{2}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "files shared with a deleted ledger compacted and removed", func() bool { return noneLeft(t, fs, old) })
	for e := int64(0); e < 60; e++ {
		checkEntry(t, d, mkEntry(1, e, 100))
	}
	if v := indexValue(t, d, 1, 0); v[0] != pointerVersion {
		t.Fatalf("entry 1/0's index value after compaction: %x", v)
	}
}

// indexValue returns a copy of an entry's value in Pebble.
func indexValue(t *testing.T, d *DB, ledger, entry int64) []byte {
	t.Helper()
	v, closer, err := d.db.Get(entryKey(ledger, entry))
	if err != nil {
		t.Fatalf("index value of %d/%d: %v", ledger, entry, err)
	}
	defer closer.Close()
	return bytes.Clone(v)
}

// With an interval between the entry log's syncs, the adds that come
// meanwhile share the next one: never more syncs than intervals passed,
// and every add is acknowledged once durable.
func TestEntryLogSyncInterval(t *testing.T) {
	const interval = 20 * time.Millisecond
	mem := vfs.NewCrashableMem()
	var syncs atomic.Int64
	count := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSyncData && strings.Contains(op.Path, logDir) {
			syncs.Add(1)
		}
		return nil
	})
	opts := Options{EntryLog: true, CheckpointInterval: time.Hour, EntryLogSyncInterval: interval}
	d := open(t, opts, errorfs.Wrap(mem, count))
	defer d.Close()
	const writers, each = 8, 10
	start := time.Now()
	errs := make(chan error, writers)
	for w := range int64(writers) {
		go func() {
			var err error
			for e := int64(0); e < each && err == nil; e++ {
				err = d.AddEntry(ctxT(t), mkEntry(w+1, e, 300), key, false)
			}
			errs <- err
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	// The first sync starts at once, each later one an interval after
	// the one before at the earliest.
	if n, most := syncs.Load(), int64(elapsed/interval)+1; n > most {
		t.Fatalf("%d syncs in %v: more than one per %v", n, elapsed, interval)
	}
	// Acknowledged means durable: all of it survives a crash.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	d2 := open(t, opts, crashed)
	defer d2.Close()
	for w := int64(1); w <= writers; w++ {
		for e := int64(0); e < each; e++ {
			checkEntry(t, d2, mkEntry(w, e, 300))
		}
	}
}

// OnSync tells where each batch's time went: the wait for the syncer,
// and for the batch whose turn wrote and synced the entry log, the write
// and the fdatasync; a batch an earlier write covered reports neither.
// Writes and syncs are slowed by known amounts, and the first sync held
// until two more batches wait behind it.
func TestEntryLogSyncStats(t *testing.T) {
	const writeDelay, syncDelay, hold = 10 * time.Millisecond, 25 * time.Millisecond, 30 * time.Millisecond
	held, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	slow := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.Contains(op.Path, logDir) {
			return nil
		}
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
			time.Sleep(writeDelay)
		case errorfs.OpFileSyncData:
			if first.CompareAndSwap(false, true) {
				close(held)
				<-release
			}
			time.Sleep(syncDelay)
		}
		return nil
	})
	var mu sync.Mutex
	var stats []SyncStats
	opts := Options{EntryLog: true, CheckpointInterval: time.Hour, OnSync: func(st SyncStats) {
		mu.Lock()
		stats = append(stats, st)
		mu.Unlock()
	}}
	d := open(t, opts, errorfs.Wrap(vfs.NewMem(), slow))
	defer d.Close()
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	defer unhold() // before Close, if the test ends early
	done := make(chan error, 3)
	cb := addFunc(func(err error) { done <- err })
	// z's sync is held; a and b are handed over meanwhile, one at a time.
	for i, size := range []int{100, 200, 300} {
		handed := d.logBytes.Load()
		d.AddEntryAsync(mkEntry(1, int64(i), size), key, false, cb)
		testutil.Eventually(t, 10*time.Second, "the add handed over to the syncer", func() bool { return d.logBytes.Load() > handed })
		if i == 0 {
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal("no sync of the entry log")
			}
		}
	}
	time.Sleep(hold) // the held sync, a and b wait at least this long
	unhold()
	for range 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("adds not acknowledged")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stats) != 3 {
		t.Fatalf("%d batches told, want 3: %+v", len(stats), stats)
	}
	for i, st := range stats {
		if st.Requests != 1 || st.Adds != 1 || st.Bytes != []int{100, 200, 300}[i] || st.Err != nil || st.WriteErr != nil || st.SyncErr != nil {
			t.Errorf("batch %d: %d requests, %d adds, %d bytes, errors %v, %v, %v; want 1, 1, %d, none",
				i, st.Requests, st.Adds, st.Bytes, st.Err, st.WriteErr, st.SyncErr, []int{100, 200, 300}[i])
		}
		if st.Took < st.Queued+st.Write+st.Sync {
			t.Errorf("batch %d took %v, less than its parts: queued %v, write %v, sync %v", i, st.Took, st.Queued, st.Write, st.Sync)
		}
		// z and a wrote and synced; b was written with a.
		if did := i < 2; st.Wrote != did || st.Synced != did {
			t.Errorf("batch %d: wrote %v, synced %v; want %v", i, st.Wrote, st.Synced, did)
		}
		if st.Wrote && (st.Write < writeDelay || st.Sync < syncDelay) {
			t.Errorf("batch %d: write %v, sync %v; want at least %v and %v", i, st.Write, st.Sync, writeDelay, syncDelay)
		}
		if i > 0 && st.Queued < hold {
			t.Errorf("batch %d waited %v for the syncer, want at least %v (behind the held sync)", i, st.Queued, hold)
		}
	}
	if stats[0].Sync < hold+syncDelay {
		t.Errorf("the held sync took %v, want at least %v", stats[0].Sync, hold+syncDelay)
	}
}

// The interval never delays the first sync after a quiet spell, nor
// Close: what waits for the next sync is synced at once and acknowledged.
func TestEntryLogSyncIntervalAndClose(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{EntryLog: true, CheckpointInterval: time.Hour, EntryLogSyncInterval: time.Hour}
	d := open(t, opts, fs)
	mustAdd(t, d, mkEntry(1, 0, 100)) // an hour's wait would end the test
	handed := d.logBytes.Load()
	done := make(chan error, 1)
	d.AddEntryAsync(mkEntry(1, 1, 100), key, false, addFunc(func(err error) { done <- err }))
	testutil.Eventually(t, 10*time.Second, "the add handed over to the syncer", func() bool { return d.logBytes.Load() > handed })
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for the sync interval (an hour)")
	}
	if err := <-done; err != nil {
		t.Fatalf("the add waiting for the interval at Close: %v", err)
	}
	d = open(t, opts, fs)
	defer d.Close()
	checkEntry(t, d, mkEntry(1, 1, 100))
}

// A data directory written with the entry log is not opened without it:
// its entries would not be found.
func TestEntryLogDataNeedsTheEntryLog(t *testing.T) {
	fs := vfs.NewMem()
	d := open(t, entryLogOptions(), fs)
	mustAdd(t, d, mkEntry(1, 0, 10))
	d.Close()
	o := Options{FS: fs, Dir: "bookie"}
	if d, err := Open(o); err == nil || !strings.Contains(err.Error(), "entry log") {
		if err == nil {
			d.Close()
		}
		t.Fatalf("open without the entry log: %v", err)
	}
	// The other way works: Pebble's entries are read as they are.
	fs = vfs.NewMem()
	d = open(t, Options{}, fs)
	mustAdd(t, d, mkEntry(1, 0, 10))
	d.Close()
	d = open(t, entryLogOptions(), fs)
	defer d.Close()
	checkEntry(t, d, mkEntry(1, 0, 10))
	mustAdd(t, d, mkEntry(1, 1, 10))
	checkEntry(t, d, mkEntry(1, 1, 10))
}

// A ledger that lives on does not keep the files it shares with deleted
// ledgers: compaction copies its entries out and the files go. Crashes at
// any point of it lose nothing and bring nothing deleted back.
func TestEntryLogCompaction(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := entryLogOptions()
	opts.CompactionThreshold = 0.5
	opts.EntryLogRecycle = 2 // compacted files kept for reuse, crashes included
	d := open(t, opts, mem)
	ctx := ctxT(t)
	// Each file: a tenth of ledger 1 (kept), nine tenths of ledger 2.
	for e := int64(0); e < 60; e++ {
		mustAdd(t, d, mkEntry(1, e, 100))
		mustAdd(t, d, mkEntry(2, e, 900))
	}
	if _, err := d.Fence(ctx, 1, key); err != nil {
		t.Fatal(err)
	}
	before := logFiles(t, mem)
	usage := d.DiskSpaceUsage()
	if len(before) < 3 {
		t.Fatalf("%d log files", len(before))
	}
	if err := d.DeleteLedgers(ctx, []int64{2}); err != nil {
		t.Fatal(err)
	}
	// Crash images taken while compaction runs.
	var crashes []*vfs.MemFS
	old := before[:len(before)-1] // all but the file written last
	testutil.Eventually(t, 30*time.Second, "files shared with a deleted ledger compacted and removed", func() bool {
		if len(crashes) < 20 {
			crashes = append(crashes, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0}))
		}
		return noneLeft(t, mem, old)
	})
	// Files kept for reuse (EntryLogRecycle) still take their space.
	if after := d.DiskSpaceUsage() - uint64(d.elog.freeBytes.Load()); after*2 >= usage {
		t.Fatalf("disk space %d after compaction (files kept for reuse not counted), %d before", after, usage)
	}
	check := func(d *DB, what string) {
		t.Helper()
		for e := int64(0); e < 60; e++ {
			checkEntry(t, d, mkEntry(1, e, 100))
			if _, err := d.ReadEntry(2, e); !errors.Is(err, wire.ErrNoSuchLedger) {
				t.Fatalf("%s: deleted ledger 2 entry %d: %v", what, e, err)
			}
		}
		if err := d.AddEntry(ctx, mkEntry(1, 60, 10), key, false); !errors.Is(err, wire.ErrFenced) {
			t.Fatalf("%s: fence of ledger 1 lost: %v", what, err)
		}
	}
	check(d, "after compaction")
	d.Close()
	d = open(t, opts, mem)
	check(d, "after a restart")
	d.Close()
	for i, c := range crashes {
		d := open(t, opts, c)
		check(d, fmt.Sprintf("crash image %d of %d", i+1, len(crashes)))
		d.Close()
	}
}

// Checkpoints may be rare (CheckpointBytes up to 64 GiB: each one's
// Pebble flush stalls the log's syncs), compaction passes are not: one
// runs every compactEvery bytes of log without a checkpoint, and the file
// it empties goes at the next checkpoint.
func TestEntryLogCompactionBetweenCheckpoints(t *testing.T) {
	fs := vfs.NewMem()
	opts := entryLogOptions()
	opts.CheckpointInterval = time.Hour // checkpoints only at open, close and CheckpointBytes
	opts.CompactionThreshold = 0.5
	opts.compactEvery = 8 << 10
	d := open(t, opts, fs)
	ctx := ctxT(t)
	// Each file: a tenth of ledger 1 (kept), nine tenths of ledger 2.
	for e := int64(0); e < 60; e++ {
		mustAdd(t, d, mkEntry(1, e, 100))
		mustAdd(t, d, mkEntry(2, e, 900))
	}
	d.Close()
	d = open(t, opts, fs) // its checkpoint puts the files before it: compaction may take them
	checkpoint := func() string { return checkpointOf(t, d) }
	ckpt := checkpoint()
	old := logFiles(t, fs)
	old = old[:len(old)-1] // the file Open started stays
	if len(old) < 3 {
		t.Fatalf("%d log files", len(old))
	}
	if err := d.DeleteLedgers(ctx, []int64{2}); err != nil {
		t.Fatal(err)
	}
	released := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, num := range old {
			if len(d.elog.fileLedgers[num]) > 0 {
				return false
			}
		}
		return true
	}
	// Ledger 3's adds cross compactEvery again and again: a pass each
	// time, one file per pass.
	e := int64(0)
	testutil.Eventually(t, 30*time.Second, "files shared with a deleted ledger compacted without a checkpoint", func() bool {
		for range 10 {
			mustAdd(t, d, mkEntry(3, e, 1000))
			e++
		}
		return released()
	})
	if now := checkpoint(); now != ckpt {
		t.Fatalf("checkpoint moved from %s to %s before CheckpointBytes were written", ckpt, now)
	}
	now := logFiles(t, fs)
	for _, num := range old {
		if !slices.Contains(now, num) {
			t.Fatalf("file %d went before a checkpoint: %v", num, now)
		}
	}
	d.Close() // a checkpoint: the compacted files go
	now = logFiles(t, fs)
	for _, num := range old {
		if slices.Contains(now, num) {
			t.Fatalf("compacted file %d still there after the checkpoint: %v", num, now)
		}
	}
	d = open(t, opts, fs)
	defer d.Close()
	for i := int64(0); i < 60; i++ {
		checkEntry(t, d, mkEntry(1, i, 100))
		if _, err := d.ReadEntry(2, i); !errors.Is(err, wire.ErrNoSuchLedger) {
			t.Fatalf("deleted ledger 2 entry %d: %v", i, err)
		}
	}
	for i := int64(0); i < e; i++ {
		checkEntry(t, d, mkEntry(3, i, 1000))
	}
}

// A compaction copy is refused once its ledger was deleted or its entries
// dropped since compaction read it: nothing deleted comes back.
func TestEntryLogCompactionCopyAfterDelete(t *testing.T) {
	opts := entryLogOptions()
	opts.CompactionThreshold = -1
	d := open(t, opts, vfs.NewMem())
	defer d.Close()
	ctx := ctxT(t)
	mustAdd(t, d, mkEntry(1, 0, 100))
	mustAdd(t, d, mkEntry(2, 0, 100))
	d.mu.Lock()
	file := d.elog.ledgerFiles[1][0]
	d.mu.Unlock()
	if err := d.DeleteLedgers(ctx, []int64{1}); err != nil {
		t.Fatal(err)
	}
	if err := d.DropEntries(ctx, []int64{2}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []int64{1, 2} {
		err := d.submit(ctx, &request{kind: reqRelocate, file: file, entry: mkEntry(l, 0, 100)})
		if !errors.Is(err, errRelocated) {
			t.Fatalf("copy of ledger %d's entry after it left the file: %v", l, err)
		}
	}
	if _, err := d.ReadEntry(1, 0); !errors.Is(err, wire.ErrNoSuchLedger) {
		t.Fatalf("deleted ledger: %v", err)
	}
	if _, err := d.ReadEntry(2, 0); !errors.Is(err, wire.ErrNoSuchEntry) {
		t.Fatalf("dropped entries: %v", err)
	}
}

// L1: the index (Pebble, its WAL off) never refers to log bytes not yet
// synced, even if Pebble flushes while the sync is held: after a crash an
// add that was not acknowledged is simply absent, not a dangling pointer.
func TestEntryLogIndexWaitsForTheSync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	gate := &syncGate{}
	opts := entryLogOptions()
	opts.CheckpointInterval = time.Hour
	d := open(t, opts, errorfs.Wrap(mem, gate))
	ctx := ctxT(t)
	mustAdd(t, d, mkEntry(1, 0, 300))
	gate.hold()
	done := make(chan error, 1)
	go func() { done <- d.AddEntry(ctx, mkEntry(1, 1, 300), key, false) }()
	testutil.Eventually(t, 30*time.Second, "the add's sync to be held", func() bool { return gate.waiting.Load() == 1 })
	if err := d.db.Flush(); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	gate.release()
	<-done
	d.Close()
	d = open(t, opts, crashed)
	defer d.Close()
	checkEntry(t, d, mkEntry(1, 0, 300))
	if _, err := d.ReadEntry(1, 1); !errors.Is(err, wire.ErrNoSuchEntry) {
		t.Fatalf("entry whose sync was held at the crash: %v, want ErrNoSuchEntry", err)
	}
}

// oddSize gives entries sizes that leave the log's writes unaligned.
func oddSize(e int64) int { return 1 + int(e*997)%3000 }

// Writes are aligned and padded: a file holds what was written, then zeros
// up to the next 4 KiB boundary, whether each batch is written alone or
// several are written together (the syncer behind), batches of every
// size, larger than a kept buffer included. On the in-memory filesystem
// (one write per batch) and, where it has direct I/O, on the operating
// system's (pwritev, one system call for several batches).
func TestEntryLogAlignedWrites(t *testing.T) {
	sizes := [][]int{
		{1, 4095, 1, 4096, 100, minBuf - 7, 3, maxKeptBuf + 5000, 4096 - 13, 2, 5, 8191, 4097},
		{10, 5000},
	}
	// More batches than one pwritev takes, each crossing a block boundary.
	many := make([]int, maxIovecs+100)
	for i := range many {
		many[i] = logAlign + 1
	}
	// writeEvery: write after this many batches (1: each alone).
	for _, writeEvery := range []int{1, 2, 3, 5, len(many)} {
		sizes := sizes
		if writeEvery == len(many) {
			sizes = append(sizes, many)
		}
		for _, direct := range []bool{false, true} {
			t.Run(fmt.Sprintf("write-every=%d/direct=%v", writeEvery, direct), func(t *testing.T) {
				var fs vfs.FS = vfs.NewMem()
				dir := "bookie"
				if direct {
					fs, dir = vfs.Default, t.TempDir()
				}
				l := newEntryLog(fs, dir, 0, 0, direct, zap.NewNop())
				if err := fs.MkdirAll(l.dir, 0o755); err != nil {
					t.Fatal(err)
				}
				l.probeDirect()
				if direct && !l.direct {
					t.Skipf("%s has no direct I/O", dir) // the page cache path is the other case
				}
				// The second file starts after an unaligned end of the
				// first: nothing of the first's last block may come with
				// its first write.
				for i, sizes := range sizes {
					num := uint32(i + 1)
					f, err := l.create(num, false)
					if err != nil {
						t.Fatal(err)
					}
					if direct != (f.direct != nil) {
						t.Fatalf("file %d: direct I/O %v, want %v", num, f.direct != nil, direct)
					}
					l.startFile(f)
					var want []byte
					for i, n := range sizes {
						p := bytes.Repeat([]byte{byte(10*num) + byte(i+1)}, n)
						l.reserve(n)
						l.buf = append(l.buf, p...)
						l.handOver()
						want = append(want, p...)
						if (i+1)%writeEvery != 0 && i+1 != len(sizes) {
							continue
						}
						if err := l.writePending(); err != nil {
							t.Fatal(err)
						}
						got, err := readAll(fs, l.path(num))
						if err != nil {
							t.Fatal(err)
						}
						padded := (len(want) + logAlign - 1) / logAlign * logAlign
						if f.written != int64(len(want)) || f.size != int64(len(want)) || len(got) != padded || !bytes.Equal(got[:len(want)], want) || !allZero(got[len(want):]) {
							t.Fatalf("file %d, after batch %d (%d bytes): written %d, size %d, file %d bytes; want %d written, %d bytes: the batches then zeros",
								num, i, n, f.written, f.size, len(got), len(want), padded)
						}
					}
					f.close()
				}
				kept := 0
				for _, b := range l.pending.spare {
					if cap(b) > maxKeptBuf {
						t.Fatalf("a buffer of %d bytes kept, want at most %d", cap(b), maxKeptBuf)
					}
					kept += cap(b)
				}
				if kept != l.pending.spareBytes || kept > maxSpareBytes {
					t.Fatalf("%d bytes kept, counted %d; want at most %d", kept, l.pending.spareBytes, maxSpareBytes)
				}
			})
		}
	}
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, st.Size())
	_, err = f.ReadAt(b, 0)
	return b, err
}

// The zeros after a file's records end it cleanly only when they are the
// writes' padding: up to the end of the file, which is aligned, however
// short (shorter than a record header included) or long. Anything else
// is a torn tail.
func TestEntryLogPaddingEndsAFile(t *testing.T) {
	mem := vfs.NewMem()
	l := newEntryLog(mem, "bookie", 0, 0, false, zap.NewNop())
	if err := mem.MkdirAll(l.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// writeFile writes two entry records that end pad bytes before the
	// second boundary, as the log writes them; it returns the records'
	// end and the file's content.
	writeFile := func(t *testing.T, pad int) (int, []byte) {
		t.Helper()
		f, err := l.create(1, false)
		if err != nil {
			t.Fatal(err)
		}
		defer f.close()
		l.startFile(f)
		first := 1000
		l.addEntry(1, 0, entryHeader{}, payloadOf(1, 0, first))
		l.addEntry(1, 1, entryHeader{}, payloadOf(1, 1, 2*logAlign-pad-2*entryRecordOverhead-first))
		l.handOver()
		if err := l.writePending(); err != nil {
			t.Fatal(err)
		}
		content, err := readAll(mem, l.path(1))
		if err != nil {
			t.Fatal(err)
		}
		if end := int(f.size); end != 2*logAlign-pad || len(content) != 2*logAlign {
			t.Fatalf("records end at %d in a file of %d bytes; want %d in %d", end, len(content), 2*logAlign-pad, 2*logAlign)
		}
		return int(f.size), content
	}
	scan := func(t *testing.T, content []byte) (int, int, error) {
		t.Helper()
		// The same file (the records' CRCs cover its number), rewritten.
		w, err := mem.Create(l.path(1), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(slices.Clone(content)) // Write may change what it is given
		w.Close()
		n := 0
		end, err := l.scanFile(1, 0, func(int64, byte, []byte) error { n++; return nil })
		return int(end), n, err
	}
	for _, pad := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 361, 4095} {
		t.Run(fmt.Sprintf("padding=%d", pad), func(t *testing.T) {
			end, good := writeFile(t, pad)
			cases := []struct {
				name    string
				content []byte
				torn    bool
			}{
				{"padded", good, false},
				{"unpadded (written before padding)", good[:end], false},
				{"zeros past the boundary", append(slices.Clone(good), make([]byte, logAlign)...), true},
			}
			if pad > 0 {
				cases = append(cases,
					struct {
						name    string
						content []byte
						torn    bool
					}{"padding cut short", good[:len(good)-1], pad != 1}, // with pad 1: no padding left, a clean end
					struct {
						name    string
						content []byte
						torn    bool
					}{"non-zero in the padding", append(slices.Clone(good[:len(good)-1]), 1), true})
			}
			for _, c := range cases {
				gotEnd, n, err := scan(t, c.content)
				if gotEnd != end || n != 2 || errors.Is(err, errTorn) != c.torn || (err != nil && !errors.Is(err, errTorn)) {
					t.Errorf("%s: end %d, %d records, err %v; want end %d, 2 records, torn %v", c.name, gotEnd, n, err, end, c.torn)
				}
			}
		})
	}
}

// A file whose records end a few bytes before a boundary (padding shorter
// than a record header), then a rollover, then a crash with the checkpoint
// still in the first file: Open replays both (a valid log, every add
// synced), and refuses nothing.
func TestEntryLogShortPaddingBeforeARollover(t *testing.T) {
	for _, pad := range []int{0, 4, 8} {
		t.Run(fmt.Sprintf("padding=%d", pad), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			opts := entryLogOptions()
			opts.CheckpointInterval = time.Hour
			d := open(t, opts, mem)
			var sizes []int
			add := func(size int) {
				t.Helper()
				mustAdd(t, d, mkEntry(1, int64(len(sizes)), size))
				sizes = append(sizes, size)
			}
			for d.elog.cur.size < 12<<10 {
				add(1000)
			}
			target := int64(5*logAlign - pad) // past the 16 KiB file size
			add(int(target - d.elog.cur.size - entryRecordOverhead))
			if d.elog.cur.num != 1 || d.elog.cur.size != target {
				t.Fatalf("file %d of %d bytes; want file 1 of %d", d.elog.cur.num, d.elog.cur.size, target)
			}
			add(100) // rolls over
			if d.elog.cur.num != 2 {
				t.Fatalf("no rollover: file %d", d.elog.cur.num)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			d.Close()
			d = open(t, opts, crashed)
			defer d.Close()
			for e, size := range sizes {
				checkEntry(t, d, mkEntry(1, int64(e), size))
			}
		})
	}
}

// Replay from a checkpoint several files back: the files before the last
// end in padding, which is no torn tail (else the log would refuse to
// open, a bad record being followed by records).
func TestEntryLogReplayAcrossPaddedFiles(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := entryLogOptions()
	opts.CheckpointInterval = time.Hour // the replay starts at the first file
	d := open(t, opts, mem)
	for e := int64(0); e < 60; e++ {
		mustAdd(t, d, mkEntry(1, e, oddSize(e)))
	}
	if n := len(logFiles(t, mem)); n < 4 {
		t.Fatalf("%d log files: want several", n)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	d.Close()
	d = open(t, opts, crashed)
	defer d.Close()
	for e := int64(0); e < 60; e++ {
		checkEntry(t, d, mkEntry(1, e, oddSize(e)))
	}
}

// With direct I/O on the operating system's filesystem: what is written is
// read back, by the same process (the page cache does not hide the direct
// writes) and after a restart, with or without direct I/O.
func TestEntryLogDirectIO(t *testing.T) {
	dir := t.TempDir()
	probe, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_CREATE|os.O_WRONLY|syscall.O_DIRECT, 0o644)
	supported := err == nil
	if supported {
		probe.Close()
	} else {
		t.Logf("%s has no direct I/O (%v): the writes go through the page cache", dir, err)
	}
	openReal := func(direct bool) *DB {
		t.Helper()
		d, err := Open(Options{Dir: filepath.Join(dir, "bookie"), Logger: zaptest.NewLogger(t), MemTableSize: 1 << 20, CacheSize: 1 << 20,
			EntryLog: true, EntryLogFileSize: 64 << 10, EntryLogDirectIO: direct})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := openReal(true)
	if d.elog.direct != supported {
		t.Fatalf("direct I/O in use: %v; the filesystem supports it: %v", d.elog.direct, supported)
	}
	ctx := ctxT(t)
	const n = 200
	errs := make(chan error, n)
	for e := int64(0); e < n; e++ { // asynchronous: several per write
		d.AddEntryAsync(mkEntry(2, e, oddSize(e)), key, false, addFunc(func(err error) { errs <- err }))
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for e := int64(0); e < n; e++ {
		mustAdd(t, d, mkEntry(3, e, oddSize(e)))
		checkEntry(t, d, mkEntry(3, e, oddSize(e)))
	}
	if _, err := d.Fence(ctx, 2, key); err != nil {
		t.Fatal(err)
	}
	check := func(d *DB) {
		t.Helper()
		for _, l := range []int64{2, 3} {
			for e := int64(0); e < n; e++ {
				checkEntry(t, d, mkEntry(l, e, oddSize(e)))
			}
		}
	}
	check(d)
	d.Close()
	for _, direct := range []bool{true, false, true} {
		d := openReal(direct)
		check(d)
		if err := d.AddEntry(ctx, mkEntry(2, n, 10), key, false); !errors.Is(err, wire.ErrFenced) {
			t.Fatalf("add to the fenced ledger after a restart: %v", err)
		}
		d.Close()
	}
}

// freeFiles lists the entry log's files kept for reuse.
func freeFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List(fs.PathJoin("bookie", logDir))
	if err != nil {
		t.Fatal(err)
	}
	var free []string
	for _, n := range names {
		if _, ok := parseFreeFileName(n); ok {
			free = append(free, n)
		}
	}
	return free
}

// keepFreeFiles adds n entries of size bytes to ledger 1, deletes it and
// waits until two of its files are kept for reuse (EntryLogRecycle 2).
func keepFreeFiles(t *testing.T, d *DB, fs vfs.FS, n int64, size int) {
	t.Helper()
	for e := int64(0); e < n; e++ {
		mustAdd(t, d, mkEntry(1, e, size))
	}
	if err := d.DeleteLedgers(ctxT(t), []int64{1}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "two of the deleted ledger's files kept for reuse", func() bool {
		return len(freeFiles(t, fs)) == 2
	})
}

// Files no ledger has entries in are kept for reuse (up to
// EntryLogRecycle) and overwritten by later rollovers. Their former
// records never come back, and a crash after any add (unsynced data
// dropped whole or in part) loses nothing acknowledged and opens: every
// file but the last ends with its end record, with the former records
// after it. A checkpoint taken right after a recycled file was rolled
// starts the replay before its end record, not after it.
func TestEntryLogRecycledFiles(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := entryLogOptions()
	opts.CompactionThreshold = -1
	opts.EntryLogRecycle = 2
	d := open(t, opts, mem)
	// Thirteen files of 24 KiB (three entries, rolled at 16 KiB): larger
	// than those written below (20 KiB), so former records follow the new
	// ones.
	keepFreeFiles(t, d, mem, 40, 7000)
	kept := freeFiles(t, mem)
	if got := d.elog.freeBytes.Load(); got < 2*opts.EntryLogFileSize {
		t.Fatalf("files kept for reuse counted as %d bytes, want at least two files of %d", got, opts.EntryLogFileSize)
	}
	d.Close()

	// Fewer kept at open: the rest go.
	if err := syncDirOf(mem, mem.PathJoin("bookie", logDir)); err != nil { // the renames to .free
		t.Fatal(err)
	}
	for _, tc := range []struct{ recycle, want int }{{1, 1}, {0, 0}} {
		o := opts
		o.EntryLogRecycle = tc.recycle
		c := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
		if n := len(freeFiles(t, c)); n != 2 {
			t.Fatalf("%d files kept for reuse in the crash image, want 2", n)
		}
		d2 := open(t, o, c)
		if n, m := len(d2.elog.free.files), len(freeFiles(t, c)); n != tc.want || m != tc.want {
			t.Errorf("EntryLogRecycle %d: %d files kept at open, %d on disk, want %d", tc.recycle, n, m, tc.want)
		}
		d2.Close()
	}

	// No checkpoint from here on but one, taken right after the first
	// recycled file is rolled (the committer waits meanwhile): a replay
	// reads every file written below from there, the recycled ones rolled
	// over included.
	opts.CheckpointInterval = time.Hour
	checkpointed := false
	opts.onRolled = func(reused bool) {
		if reused && !checkpointed {
			checkpointed = true
			if err := d.checkpoint(); err != nil {
				t.Errorf("checkpoint after a recycled file's rollover: %v", err)
			}
		}
	}
	d = open(t, opts, mem)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	var clones []*vfs.MemFS
	const n = 200 // 60 KiB: three rollovers or more
	for e := int64(0); e < n; e++ {
		mustAdd(t, d, mkEntry(2, e, 300))
		cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: 0}
		if e%2 == 1 {
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(e)))}
		}
		clones = append(clones, mem.CrashClone(cfg))
	}
	if now := freeFiles(t, mem); len(now) > 0 {
		t.Fatalf("files kept for reuse %v (of %v) not reused by three rollovers", now, kept)
	}
	if !checkpointed {
		t.Fatal("no recycled file was rolled")
	}
	d.Close()
	opts.onRolled = nil

	check := func(d *DB, upTo int64, what string) {
		t.Helper()
		for e := int64(0); e <= upTo; e++ {
			checkEntry(t, d, mkEntry(2, e, 300))
		}
		if _, err := d.ReadEntry(1, 0); !errors.Is(err, wire.ErrNoSuchLedger) {
			t.Fatalf("%s: deleted ledger 1: %v", what, err)
		}
		// A former record replayed would show as ledger 1 in a file.
		d.mu.Lock()
		defer d.mu.Unlock()
		for num, set := range d.elog.fileLedgers {
			if _, ok := set[1]; ok {
				t.Fatalf("%s: file %d has entries of deleted ledger 1: a recycled file's former record was replayed", what, num)
			}
		}
	}
	for i, c := range clones {
		what := fmt.Sprintf("crash after add %d", i)
		d := open(t, opts, c)
		check(d, int64(i), what)
		if i%20 == 19 {
			// The log goes on after the crash, and survives another.
			for e := int64(i + 1); e < int64(i+60); e++ {
				mustAdd(t, d, mkEntry(2, e, 300))
			}
			c2 := c.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			d.Close()
			d = open(t, opts, c2)
			check(d, int64(i+59), what+", then 59 more adds and a second crash")
		}
		d.Close()
	}
}

// A record read whole under another file's number fails its checksum: a
// recycled file's former records never pass for its new ones.
func TestEntryLogFormerRecordsDoNotCheck(t *testing.T) {
	mem := vfs.NewMem()
	opts := entryLogOptions()
	opts.EntryLogFileSize = 1 << 20
	d := open(t, opts, mem)
	for e := int64(0); e < 10; e++ {
		mustAdd(t, d, mkEntry(1, e, 500))
	}
	d.Close()
	l := newEntryLog(mem, "bookie", 0, 0, false, zap.NewNop())
	nums, err := l.files()
	if err != nil || len(nums) == 0 {
		t.Fatalf("log files %v: %v", nums, err)
	}
	src := nums[0]
	records := 0
	if _, err := l.scanFile(src, 0, func(int64, byte, []byte) error { records++; return nil }); err != nil || records < 10 {
		t.Fatalf("file %d: %d records, %v", src, records, err)
	}
	data, err := readAll(mem, l.path(src))
	if err != nil {
		t.Fatal(err)
	}
	f, err := mem.Create(l.path(src+100), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	end, err := l.scanFile(src+100, 0, func(off int64, _ byte, _ []byte) error {
		return fmt.Errorf("record at offset %d checked under another file's number", off)
	})
	if !errors.Is(err, errTorn) || end != 0 {
		t.Fatalf("file %d's bytes as file %d: scan ended at %d with %v, want a record that does not check at 0", src, src+100, end, err)
	}
}

// failEntriesDirSync fails the first sync of the entry log's directory
// once armed.
type failEntriesDirSync struct{ armed, used atomic.Bool }

func (o *failEntriesDirSync) MaybeError(op errorfs.Op) error {
	if op.Kind != errorfs.OpFileSync || op.Path != "bookie/"+logDir || !o.armed.Load() || o.used.Swap(true) {
		return nil
	}
	return errorfs.ErrInjected
}

func (o *failEntriesDirSync) String() string { return "fail-entries-dir-sync" }

// The file Open starts is a new one, never one kept for reuse: it may
// follow a torn tail, where replay takes only an empty file. A crash
// right after Open made it (here its directory's sync fails, which stops
// Open there) leaves a log that opens, with everything acknowledged.
func TestEntryLogOpenStartsANewFile(t *testing.T) {
	mem := vfs.NewCrashableMem()
	opts := entryLogOptions()
	opts.CompactionThreshold = -1
	opts.EntryLogRecycle = 2
	d := open(t, opts, mem)
	keepFreeFiles(t, d, mem, 60, 1000)
	for e := int64(0); e < 20; e++ {
		mustAdd(t, d, mkEntry(2, e, 900)) // a rollover: the renames synced
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	d.Close()
	if len(freeFiles(t, crashed)) == 0 {
		t.Fatal("no file kept for reuse after the crash")
	}
	// A torn tail in the last file.
	nums := logFiles(t, crashed)
	l := newEntryLog(crashed, "bookie", 0, 0, false, zap.NewNop())
	f, err := crashed.OpenReadWrite(l.path(nums[len(nums)-1]), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt(append([]byte{1, 2, 3, 4, 0, 0, 0, 200}, bytes.Repeat([]byte{0xab}, 50)...), st.Size()); err != nil {
		t.Fatal(err)
	}
	f.Close()

	inj := &failEntriesDirSync{}
	inj.armed.Store(true)
	o := opts
	o.FS, o.Dir, o.Logger = errorfs.Wrap(crashed, inj), "bookie", zaptest.NewLogger(t)
	o.MemTableSize, o.CacheSize = 1<<20, 1<<20
	if d, err := Open(o); err == nil {
		d.Close()
		t.Fatal("Open succeeded with its new file's directory sync failing")
	}
	if !inj.used.Load() {
		t.Fatal("the entry log's directory was not synced at open")
	}
	d = open(t, opts, crashed)
	defer d.Close()
	for e := int64(0); e < 20; e++ {
		checkEntry(t, d, mkEntry(2, e, 900))
	}
}

// A file kept for reuse that is gone by the time a rollover wants it
// (removed by hand to free space, say) gives a new file, not a failed
// storage.
func TestEntryLogFreeFileGone(t *testing.T) {
	mem := vfs.NewMem()
	opts := entryLogOptions()
	opts.CompactionThreshold = -1
	opts.EntryLogRecycle = 2
	d := open(t, opts, mem)
	defer d.Close()
	keepFreeFiles(t, d, mem, 40, 7000)
	for _, name := range freeFiles(t, mem) {
		if err := mem.Remove(mem.PathJoin("bookie", logDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for e := int64(0); e < 100; e++ { // 30 KiB: a rollover or more
		mustAdd(t, d, mkEntry(2, e, 300))
	}
	for e := int64(0); e < 100; e++ {
		checkEntry(t, d, mkEntry(2, e, 300))
	}
	if err := d.Err(); err != nil {
		t.Fatalf("storage failed: %v", err)
	}
}

// The index's tables never mix kinds of keys, so the compactions out of L0
// write a ledger's new entries once and leave the tables of its older ones
// alone. When each flush's table ran from the checkpoint key, before every
// entry, to the file accounting keys after them, every compaction out of L0
// read and rewrote the whole index below it.
func TestIndexCompactionWritesEntriesOnce(t *testing.T) {
	opts := Options{EntryLog: true, EntryLogFileSize: 4 << 20, CheckpointBytes: 512 << 10, CheckpointInterval: time.Hour}
	d := open(t, opts, vfs.NewMem())
	defer d.Close()
	const n = 400_000
	errs := make(chan error, 1)
	inflight := make(chan struct{}, 256)
	for e := int64(0); e < n; e++ {
		inflight <- struct{}{}
		d.AddEntryAsync(mkEntry(1, e, 64), key, false, addFunc(func(err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
			<-inflight
		}))
	}
	for range cap(inflight) {
		inflight <- struct{}{}
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	// Bytes a compaction read from tables already in its output level
	// are what it rewrote there; none of the entries' tables should be.
	m := d.db.Metrics()
	var flushed, compacted, rewritten uint64
	for i, l := range m.Levels {
		flushed += l.TableBytesFlushed
		compacted += l.TableBytesCompacted
		if i > 0 && l.TableBytesRead > l.TableBytesIn {
			rewritten += l.TableBytesRead - l.TableBytesIn
		}
	}
	t.Logf("flushed %d KiB, compacted %d KiB, rewritten %d KiB\n%s", flushed>>10, compacted>>10, rewritten>>10, m)
	if flushed < 4<<20 {
		t.Fatalf("only %d bytes flushed: the test needs checkpoints", flushed)
	}
	if m.Compact.Count == 0 {
		t.Fatal("no compaction ran")
	}
	if rewritten > flushed/20 {
		t.Errorf("compactions read %d bytes of older tables for %d flushed: older entries were rewritten", rewritten, flushed)
	}
	levels, err := d.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range levels {
		for _, f := range l {
			if lo, hi := f.Smallest.UserKey, f.Largest.UserKey; lo[0] != hi[0] {
				t.Errorf("L%d table %v holds keys from %q to %q", i, f.FileNum, lo, hi)
			}
		}
	}
}

// Small entries make many index writes per byte of log: a checkpoint comes
// once CheckpointIndexBytes of them were applied, long before
// CheckpointBytes of log, so the index's memtables stay small whatever
// CheckpointBytes is.
func TestCheckpointDueOnIndexBytes(t *testing.T) {
	opts := entryLogOptions() // CheckpointBytes 1 GiB
	opts.CheckpointInterval = time.Hour
	opts.CheckpointIndexBytes = 32 << 10
	d := open(t, opts, vfs.NewMem())
	defer d.Close()
	checkpoint := func() string { return checkpointOf(t, d) }
	ckpt := checkpoint()
	e := int64(0)
	for ; e < 100; e++ { // about 6 KiB of index
		mustAdd(t, d, mkEntry(1, e, 10))
	}
	if now := checkpoint(); now != ckpt {
		t.Fatalf("checkpoint moved from %s to %s after %d small entries", ckpt, now, e)
	}
	testutil.Eventually(t, 30*time.Second, "a checkpoint after CheckpointIndexBytes of index", func() bool {
		for range 50 {
			mustAdd(t, d, mkEntry(1, e, 10))
			e++
		}
		return checkpoint() != ckpt
	})
	if log := d.logBytes.Load(); log >= opts.CheckpointBytes {
		t.Fatalf("%d bytes of log: the checkpoint may have come from CheckpointBytes", log)
	}
	// Each add is a batch of about 57 index bytes (key, pointer, batch
	// header): the checkpoint came near CheckpointIndexBytes of them.
	if most := 2*opts.CheckpointIndexBytes/57 + 50; e > most {
		t.Fatalf("the checkpoint came after %d adds, more than %d", e, most)
	}
}

// A record's checksum is the CRC-32C of its file's number, big-endian,
// then its kind and body, computed without an allocation.
func TestRecordCRC(t *testing.T) {
	for _, tc := range []struct {
		file uint32
		body string
	}{
		{0, ""}, {1, "x"}, {0x01020304, "entry"}, {math.MaxUint32, strings.Repeat("z", 5000)},
	} {
		want := crc32.Checksum(binary.BigEndian.AppendUint32(nil, tc.file), crcTable)
		want = crc32.Update(want, crcTable, []byte(tc.body))
		if got := recordCRC(tc.file, []byte(tc.body)); got != want {
			t.Errorf("recordCRC(%#x, %d bytes) = %#x, want %#x", tc.file, len(tc.body), got, want)
		}
	}
	body := []byte("kind and body")
	if n := testing.AllocsPerRun(100, func() { recordCRC(7, body) }); n != 0 {
		t.Errorf("recordCRC allocates %v times a call, want 0", n)
	}
}

// pwritevAll goes on after short writes and interrupted calls, and
// reports the error that stops it, not a short count.
func TestPwritevAllResumesShortWrites(t *testing.T) {
	iovs := [][]byte{bytes.Repeat([]byte{1}, 4096), bytes.Repeat([]byte{2}, 8192), bytes.Repeat([]byte{3}, 4096)}
	want := bytes.Join(iovs, nil)
	for _, tc := range []struct {
		name  string
		max   int   // the most one call writes
		fails error // returned once room is 0
		room  int
	}{
		{"whole", 1 << 20, nil, 1 << 20},
		{"short writes", 3000, nil, 1 << 20},
		{"a byte at a time", 1, nil, 1 << 20},
		{"no space", 5000, syscall.ENOSPC, 10000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := make([]byte, 100+len(want))
			room, calls := tc.room, 0
			err := pwritevAll(slices.Clone(iovs), 100, func(iovs [][]byte, off int64) (int, error) {
				calls++
				if calls%3 == 0 {
					return 0, unix.EINTR
				}
				if room == 0 {
					return 0, tc.fails
				}
				n := 0
				for _, b := range iovs {
					k := min(len(b), tc.max-n, room-n)
					copy(file[off+int64(n):], b[:k])
					n += k
				}
				room -= n
				return n, nil
			})
			if !errors.Is(err, tc.fails) {
				t.Fatalf("error %v, want %v", err, tc.fails)
			}
			if written := tc.room - room; err == nil && (written != len(want) || !bytes.Equal(file[100:], want)) {
				t.Fatalf("wrote %d bytes (equal: %v), want %d", written, bytes.Equal(file[100:], want), len(want))
			}
		})
	}
}

// A batch whose adds were all refused leaves the next one where it
// belongs: after the file's last partial block, which it must still
// start with.
func TestEntryLogRefusedBatchKeepsThePartialBlock(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{EntryLog: true}
	d := open(t, opts, fs)
	ctx := ctxT(t)
	mustAdd(t, d, mkEntry(1, 0, 1000)) // the file ends inside its first block
	mustAdd(t, d, mkEntry(2, 0, 10))
	if _, err := d.Fence(ctx, 2, key); err != nil {
		t.Fatal(err)
	}
	if err := d.AddEntry(ctx, mkEntry(2, 1, 500), key, false); !errors.Is(err, wire.ErrFenced) {
		t.Fatalf("add to a fenced ledger: %v", err)
	}
	mustAdd(t, d, mkEntry(1, 1, 1000))
	check := func(d *DB) {
		t.Helper()
		checkEntry(t, d, mkEntry(1, 0, 1000))
		checkEntry(t, d, mkEntry(1, 1, 1000))
		checkEntry(t, d, mkEntry(2, 0, 10))
	}
	check(d)
	d.Close()
	d = open(t, opts, fs) // replays the log
	defer d.Close()
	check(d)
}
