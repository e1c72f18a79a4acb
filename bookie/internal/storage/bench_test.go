package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

// The disk's raw rate: 4 KiB appends, each followed by fdatasync, one at a
// time. The baseline every other figure is compared with.
func BenchmarkRawFsync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	var lat testutil.Latencies
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs() // allocations per operation (issue 14)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
		lat.Add(time.Since(start))
	}
	b.StopTimer()
	lat.Report(b)
}

// The disk alone under the I/O a standalone's bookies did at 70,000 1 KiB
// msg/s (RATE=70000 scripts/bench-tail-ab.sh: 3 bookies, 3/3/2): three
// writers, one per bookie, each appending 128 KiB with direct I/O and
// fdatasync after each, 600 times a second (the bookies did about 600
// group commits a second each, of 117 KiB of payload on average). No
// Magnetar code runs: the latencies are of the write and its fdatasync
// only, with no queueing behind a sync in progress (the bookies'
// bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE; before 2026-12-05 their
// JOURNAL_SYNC included it and the write). A writer that fell behind
// its pace catches up back to back, where a bookie would put the adds
// that waited into one sync. docs/benchmarks.md compares the two.
//
// The pace makes it take N/1800 seconds, so ns/op and MB/s only echo it
// (ops/s below 1,800: the disk fell behind); run with -benchtime=20000x,
// which writes 2.5 GiB under TMPDIR: it must be on the disk under test.
//
// calls=syscall makes the calls as Go code does (if a call lasts and other
// goroutines wait, the runtime may give its P to another thread, and the
// thread needs one again when the call returns); calls=raw with
// RawSyscall, which keeps the P through the call (nothing else runs on
// it meanwhile): an experiment of docs/benchmarks.md, not something the
// storage does. Linux, 64-bit. due-* is from when the write was due to
// the end of its sync: it also counts a writer late to start, which the
// other latencies leave out (with raw calls, writers in their calls may
// hold every P).
func BenchmarkRawFsyncLoad(b *testing.B) {
	for _, raw := range []bool{false, true} {
		name := "calls=syscall"
		if raw {
			name = "calls=raw"
		}
		b.Run(name, func(b *testing.B) { rawFsyncLoad(b, raw) })
	}
}

func rawFsyncLoad(b *testing.B, raw bool) {
	const writers, chunk, perSecond = 3, 128 << 10, 600
	dir := b.TempDir()
	files := make([]*os.File, writers)
	for i := range files {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(i)), os.O_CREATE|os.O_WRONLY|syscall.O_DIRECT, 0o644)
		if errors.Is(err, syscall.EINVAL) {
			b.Skipf("no direct I/O in %s: %v", dir, err)
		}
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	buf := alignedBuf(chunk)
	var lat, writes, syncs, due testutil.Latencies
	b.SetBytes(chunk)
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w, f := range files {
		n := b.N / writers
		if w < b.N%writers {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now()
			for i := 0; i < n; i++ {
				next = next.Add(time.Second / perSecond)
				time.Sleep(time.Until(next))
				start := time.Now()
				var err error
				if raw {
					n, _, e := syscall.RawSyscall6(syscall.SYS_PWRITE64, f.Fd(), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(int64(i)*chunk), 0, 0)
					if e != 0 {
						err = e
					} else if n != uintptr(len(buf)) {
						err = fmt.Errorf("short write: %d of %d bytes", n, len(buf))
					}
				} else {
					_, err = f.WriteAt(buf, int64(i)*chunk)
				}
				if err != nil {
					errs <- err
					return
				}
				written := time.Now()
				if raw {
					if _, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, f.Fd(), 0, 0); e != 0 {
						err = e
					}
				} else {
					err = syscall.Fdatasync(int(f.Fd()))
				}
				if err != nil {
					errs <- err
					return
				}
				lat.Add(time.Since(start))
				writes.Add(written.Sub(start))
				syncs.Add(time.Since(written))
				due.Add(time.Since(next))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	lat.Report(b)
	b.ReportMetric(float64(lat.Percentile(99.9).Microseconds()), "p99.9-us")
	b.ReportMetric(float64(lat.Percentile(100).Microseconds()), "max-us")
	// The two calls apart: a direct write waits for the device to take the
	// bytes, fdatasync for its cache flush (docs/benchmarks.md compares
	// them with a CPU busy and without).
	for _, q := range []struct {
		name string
		l    *testutil.Latencies
	}{{"write", &writes}, {"sync", &syncs}, {"due", &due}} {
		for _, p := range []struct {
			unit string
			p    float64
		}{{"p50", 50}, {"p99", 99}, {"p99.9", 99.9}, {"max", 100}} {
			b.ReportMetric(float64(q.l.Percentile(p.p).Microseconds()), q.name+"-"+p.unit+"-us")
		}
	}
}

var benchSizes = []int{1 << 10, 64 << 10}
var benchInflight = []int{1, 16, 256}

// The storage engine alone (no network): durable adds of one ledger.
func BenchmarkStorageAdd(b *testing.B) {
	for _, engine := range []struct {
		name string
		opts Options
	}{{"pebble", Options{}}, {"valuesep", Options{ValueSeparation: true}}, {"entrylog", Options{EntryLog: true}}} {
		for _, size := range benchSizes {
			for _, inflight := range benchInflight {
				b.Run(fmt.Sprintf("engine=%s/size=%dKiB/inflight=%d", engine.name, size>>10, inflight), func(b *testing.B) {
					o := engine.opts
					o.Dir, o.FS, o.Logger = b.TempDir(), vfs.Default, zap.NewNop()
					d, err := Open(o)
					if err != nil {
						b.Fatal(err)
					}
					defer d.Close()
					payload := make([]byte, size)
					ctx := context.Background()
					var lat testutil.Latencies
					b.SetBytes(int64(size))
					b.ReportAllocs() // allocations per operation (issue 14)
					b.ResetTimer()
					testutil.RunClosedLoop(b, inflight, &lat, func(i int) error {
						e := Entry{LedgerID: 1, EntryID: int64(i), LAC: -1, Length: int64(size), Payload: payload}
						return d.AddEntry(ctx, e, key, false)
					})
					b.StopTimer()
					lat.Report(b)
				})
			}
		}
	}
}

// journal is the write path of the other storage design (BookKeeper's
// DbLedgerStorage): a journal file with group commit, entries acknowledged
// after its fdatasync. The entry log and the index it also needs are left
// out, so this is an upper bound of that design's add rate.
type journal struct {
	f    *os.File
	reqs chan journalReq
	done chan struct{}
}

type journalReq struct {
	data []byte
	ack  chan error
}

func openJournal(dir string) (*journal, error) {
	f, err := os.Create(filepath.Join(dir, "journal"))
	if err != nil {
		return nil, err
	}
	j := &journal{f: f, reqs: make(chan journalReq, 1024), done: make(chan struct{})}
	go j.loop()
	return j, nil
}

func (j *journal) loop() {
	defer close(j.done)
	var batch []journalReq
	var buf []byte
	for r := range j.reqs {
		batch = append(batch[:0], r)
	more:
		for len(batch) < maxBatchRequests {
			select {
			case r, ok := <-j.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		buf = buf[:0]
		for _, r := range batch {
			buf = append(buf, r.data...)
		}
		_, err := j.f.Write(buf)
		if err == nil {
			err = syscall.Fdatasync(int(j.f.Fd()))
		}
		for _, r := range batch {
			r.ack <- err
		}
	}
}

func (j *journal) close() {
	close(j.reqs)
	<-j.done
	j.f.Close()
}

var ackPool = sync.Pool{New: func() any { return make(chan error, 1) }}

func (j *journal) add(data []byte) error {
	ack := ackPool.Get().(chan error)
	j.reqs <- journalReq{data: data, ack: ack}
	err := <-ack
	ackPool.Put(ack)
	return err
}

func BenchmarkJournalPrototype(b *testing.B) {
	for _, size := range benchSizes {
		for _, inflight := range benchInflight {
			b.Run(fmt.Sprintf("size=%dKiB/inflight=%d", size>>10, inflight), func(b *testing.B) {
				j, err := openJournal(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer j.close()
				payload := make([]byte, size+entryHeaderLen+entryKeyLen)
				var lat testutil.Latencies
				b.SetBytes(int64(size))
				b.ReportAllocs() // allocations per operation (issue 14)
				b.ResetTimer()
				testutil.RunClosedLoop(b, inflight, &lat, func(int) error { return j.add(payload) })
				b.StopTimer()
				lat.Report(b)
			})
		}
	}
}

// The entry log's group commit on new files (appended to) and on files
// kept for reuse (overwritten; a bookie in a steady state, its retention
// deleting ledgers): 1 KiB adds, 256 in flight, direct I/O as a bookie
// writes. Before the timer, the recycled case writes a ledger as large as
// the run will write and deletes it, so that its files are kept for
// reuse; the run's first file (the last of that ledger) is appended to.
// Compare with BenchmarkRawFsync, run in the same invocation.
func BenchmarkStorageAddRecycled(b *testing.B) {
	const size, inflight, fileSize = 1 << 10, 256, 32 << 20
	for _, recycled := range []bool{false, true} {
		b.Run(fmt.Sprintf("recycled=%v", recycled), func(b *testing.B) {
			o := Options{EntryLog: true, EntryLogDirectIO: true, EntryLogFileSize: fileSize}
			o.Dir, o.FS, o.Logger = b.TempDir(), vfs.Default, zap.NewNop()
			if recycled {
				o.EntryLogRecycle = 1 << 20
			}
			d, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			ctx := context.Background()
			if recycled {
				need := int64(b.N)*(size+entryRecordOverhead) + fileSize
				big := make([]byte, 1<<20)
				for e := int64(0); e*int64(len(big)) < need; e++ {
					if err := d.AddEntry(ctx, Entry{LedgerID: 2, EntryID: e, LAC: -1, Length: int64(len(big)), Payload: big}, key, false); err != nil {
						b.Fatal(err)
					}
				}
				if err := d.DeleteLedgers(ctx, []int64{2}); err != nil {
					b.Fatal(err)
				}
				d.Close() // its last checkpoint keeps the files for reuse
				if d, err = Open(o); err != nil {
					b.Fatal(err)
				}
				defer d.Close()
				if n := d.elog.freeBytes.Load(); n < need-2*fileSize {
					b.Fatalf("%d bytes of files kept for reuse, for %d", n, need)
				}
			}
			payload := make([]byte, size)
			var lat testutil.Latencies
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			testutil.RunClosedLoop(b, inflight, &lat, func(i int) error {
				e := Entry{LedgerID: 1, EntryID: int64(i), LAC: -1, Length: size, Payload: payload}
				return d.AddEntry(ctx, e, key, false)
			})
			b.StopTimer()
			lat.Report(b)
		})
	}
}
