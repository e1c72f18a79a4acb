package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"
)

// Compaction of the entry log. A log file is deleted whole once no ledger
// has entries in it (invariant L4); one ledger that lives on would keep
// every file it has entries in, with the deleted ledgers' bytes around
// them. So at each compaction pass (after a checkpoint, and every
// Options.compactEvery bytes of log between them) the file before the
// checkpoint with the smallest share of live bytes, if under
// Options.CompactionThreshold, is compacted:
//
//  1. each live entry in it (found through the index: pointers into the
//     file) is copied to the current log file by the committer, like an
//     add (reqRelocate), but only while its ledger's entries are still in
//     the file (a deleted or dropped ledger is not brought back); the
//     index then points to the copy;
//  2. once every copy is durable, the file is released (reqRelease): no
//     ledger has entries in it any more, and it goes at the first
//     checkpoint after the release, as any emptied file (L4).
//
// A crash in between leaves the file in place with some entries copied:
// both copies are the same bytes, the index points to one of them, and the
// next compaction finds fewer entries to copy. Entries never change once
// written (one writer per ledger; recovery writes the same bytes), so a
// copy is never older than what it replaces.

// errRelocated refuses a compaction copy whose ledger left the file since
// it was read (deleted or dropped).
var errRelocated = errors.New("storage: the ledger's entries left the file")

// compactionBytes bounds the payload bytes of the copies in flight.
const compactionBytes = 16 << 20

// pickCompaction returns the file before the checkpoint with the smallest
// share of live bytes, if under the threshold, and its ledgers.
func (d *DB) pickCompaction() (num uint32, ledgers []int64, ok bool) {
	l, p := d.elog, d.checkpointed
	d.mu.Lock()
	defer d.mu.Unlock()
	best := d.opts.CompactionThreshold
	for n, set := range l.fileLedgers {
		size := l.fileSizes[n]
		if n >= p.file || size <= 0 || len(set) == 0 || l.compactFailed[n] {
			continue
		}
		var live int64
		for _, b := range set {
			live += b
		}
		if r := float64(live) / float64(size); r < best || r == best && ok && n < num {
			best, num, ok = r, n, true
		}
	}
	if ok {
		for ledger := range l.fileLedgers[num] {
			ledgers = append(ledgers, ledger)
		}
		slices.Sort(ledgers)
	}
	return num, ledgers, ok
}

// compact compacts one log file, if one needs it. Run by the checkpointer;
// ctx ends with Close.
func (d *DB) compact(ctx context.Context) error {
	num, ledgers, ok := d.pickCompaction()
	if !ok {
		return nil
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		copied   int
	)
	sem := semaphore.NewWeighted(compactionBytes)
	finish := func(err error) error {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			err = firstErr
		}
		return err
	}
	for _, ledger := range ledgers {
		it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(ledger, 0), UpperBound: entryKey(ledger+1, 0)})
		if err != nil {
			return finish(err)
		}
		for valid := it.First(); valid; valid = it.Next() {
			_, _, entry, err := decodeKey(it.Key())
			if err != nil {
				it.Close()
				return finish(err)
			}
			_, _, ptr, isPtr, err := decodeStoredEntry(entry, it.Value())
			if err != nil {
				it.Close()
				return finish(err)
			}
			if !isPtr || ptr.file != num {
				continue
			}
			h, payload, err := d.elog.read(ledger, entry, ptr)
			if err != nil {
				it.Close()
				d.mu.Lock()
				d.elog.compactFailed[num] = true
				d.mu.Unlock()
				return finish(fmt.Errorf("entry %d/%d in file %d: %w", ledger, entry, num, err))
			}
			mu.Lock()
			failed := firstErr
			mu.Unlock()
			if failed != nil {
				it.Close()
				return finish(nil)
			}
			weight := min(int64(len(payload)), compactionBytes)
			if err := sem.Acquire(ctx, weight); err != nil {
				it.Close()
				return finish(err)
			}
			r := &request{kind: reqRelocate, file: num, entry: Entry{LedgerID: ledger, EntryID: entry, LAC: h.LAC, Length: h.Length, CRC: h.CRC, Payload: payload}}
			r.cb = func(err error) { // on the storage's goroutines: no blocking
				mu.Lock()
				switch {
				case err == nil:
					copied++
				case errors.Is(err, errRelocated):
				case firstErr == nil:
					firstErr = err
				}
				mu.Unlock()
				sem.Release(weight)
				wg.Done()
			}
			wg.Add(1)
			if err := d.enqueue(ctx, r); err != nil {
				r.cb(err)
			}
		}
		if err := it.Close(); err != nil {
			return finish(err)
		}
	}
	if err := finish(nil); err != nil {
		return err
	}
	if err := d.submit(ctx, &request{kind: reqRelease, file: num}); err != nil {
		return err
	}
	d.log.Info("compacted an entry log file", zap.Uint32("file", num), zap.Int("entries copied", copied))
	return nil
}
