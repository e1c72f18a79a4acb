// Package storage is the bookie's storage engine: ledger entries, fences and
// last-add-confirmed values in one Pebble database.
//
// Every write (add, fence, explicit LAC, ledger deletion) goes through one
// committer goroutine, in arrival order. The committer checks each request
// against the in-memory ledger state (master key, fence), applies the
// accepted ones to a Pebble batch, hands the batch to Pebble with a synced
// commit and goes on with the next batch while the WAL sync runs; a second
// goroutine waits for each sync and only then answers the requests. So:
//
//   - nothing is acknowledged before it is durable (group commit: all the
//     requests that queued up during one sync share the next one);
//   - a fence and an add on the same ledger are ordered: an add accepted
//     before the fence is in the same or an earlier WAL sync than the fence,
//     and every add after it is refused (BookKeeper pull 4701);
//   - a failed write or sync stops the engine (ErrStorage from then on): it
//     never acknowledges anything after an I/O error; restart to recover.
//     A write that failed for lack of space (ENOSPC) stops only the writes
//     (ErrNoSpace from then on): reads go on, since the disk is sound; the
//     write-ahead log cannot be written again by this process, so writes
//     come back only with a restart, once space was freed.
//
// Reads go straight to Pebble. A read may see an entry whose sync is still
// running; that is harmless because readers only trust entries up to the
// last add confirmed, and a recovery reader re-replicates what it finds.
// The ledgers' last entry and LAC move only once durable, when the syncer
// answers.
//
// With Options.EntryLog the committer builds the batch's records for an
// entry log of our own instead (each payload written once) and hands them
// to the syncer, which writes everything handed over with one write (direct
// I/O where the filesystem has it), syncs, and then applies the batches to
// Pebble, which holds only an index: see entrylog.go.
package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/wire"
)

// Options configure a DB.
type Options struct {
	// Dir is the database directory.
	Dir string
	// FS is the filesystem; nil means the operating system's. Tests pass
	// Pebble's crash-simulating or error-injecting filesystems.
	FS vfs.FS
	// Logger; nil discards.
	Logger *zap.Logger
	// ValueSeparation stores payloads of at least ValueSeparationMinSize
	// bytes in Pebble blob files so that compactions do not rewrite them.
	ValueSeparation        bool
	ValueSeparationMinSize int
	// MemTableSize; default 64 MiB.
	MemTableSize uint64
	// MemtablesHeld is Pebble's MemTableStopWritesThreshold: writes wait
	// while this many memtables' worth are queued. Default 2.
	MemtablesHeld int
	// CacheSize is Pebble's block cache; default 64 MiB.
	CacheSize int64
	// MaxBatchBytes caps the payload bytes of one group commit; default
	// 16 MiB.
	MaxBatchBytes int
	// OnSync, if set, is told of each batch of a group commit once it is
	// durable or failed: what it held and where its time went (metrics).
	// Called by the syncer: it must not block.
	OnSync func(SyncStats)
	// OnWriteStall, if set, is told of each time Pebble held writes back
	// (its memtables or level 0 full: flushes or compactions behind), with
	// the reason and how long. Called from Pebble: it must not block.
	OnWriteStall func(reason string, took time.Duration)
	// Compress compresses Pebble's blocks (and blob files) with Snappy.
	// Default false: entries are stored as written, as BookKeeper stores
	// them. Payloads are most often compressed by producers already (or
	// random), and compressing them again in every flush and compaction
	// cost CPU for nothing (docs/benchmarks.md).
	Compress bool
	// EntryLog stores entries in a log of our own, written once and
	// synced before acknowledgement, with Pebble (its WAL off) as the
	// index (entrylog.go). Off: everything is in Pebble, written to its
	// WAL and again at memtable flushes.
	EntryLog bool
	// EntryLogFileSize is the size at which a log file is rolled; default
	// 128 MiB. Files are deleted whole, once no ledger has entries in them.
	EntryLogFileSize int64
	// EntryLogRecycle is how many files no ledger has entries in are kept
	// for reuse instead of deleted: a later rollover overwrites one
	// (entrylog.go). Default 0: none. Overwriting syncs faster than
	// appending, but gave a far worse tail on this project's test machine
	// (docs/benchmarks.md).
	EntryLogRecycle int
	// EntryLogSyncInterval is the least time from the start of one write
	// and sync of the entry log to the start of the next: the batches
	// handed over meanwhile wait and share the next one, so a loaded
	// bookie makes fewer, larger I/O requests. Default 0: each starts as
	// soon as the one before ended. An add waits up to this much longer,
	// and so does every add of a lone writer that waits for each (one
	// after a quiet spell does not). On this project's test machine, a
	// virtual machine whose host stops it, it seems, when its I/O
	// requests come too often beside a busy CPU, 4ms took a loaded
	// standalone's disk from 1,700 flushes a second to 700 and the
	// machine's pauses from 5% of the time to 0-1% (docs/benchmarks.md,
	// "A smaller index; fewer I/O requests").
	EntryLogSyncInterval time.Duration
	// EntryLogDirectIO writes the entry log with O_DIRECT, around the page
	// cache: copying every byte into freshly allocated page-cache pages
	// was the bookie's largest CPU cost. Only on the operating system's
	// filesystem (FS nil or vfs.Default), and only where it accepts
	// direct I/O (not tmpfs): elsewhere the writes go through the page
	// cache. Reads always do.
	EntryLogDirectIO bool
	// CheckpointBytes of log written since the last checkpoint start the
	// next (a Pebble flush of the index; it bounds the replay at open:
	// about 1.5 s per GiB here); default 64 MiB. Each checkpoint's
	// flush, with its sstable, manifest and directory syncs, stalls the
	// log's syncs of every bookie on the disk: at 64 MiB, checkpoints
	// come every second at half a standalone's maximum rate, and 1 GiB
	// halved its p99 in one set of runs (about a tenth in a later
	// one); small entries would then fill the index's
	// memtables between checkpoints (a 3-bookie standalone went past its
	// memory budget), which CheckpointIndexBytes now prevents
	// (docs/benchmarks.md).
	// CheckpointInterval starts one anyway once something was written,
	// default 1 minute: deleted ledgers' files go at checkpoints.
	CheckpointBytes    int64
	CheckpointInterval time.Duration
	// CheckpointIndexBytes of index writes (Pebble batch bytes) applied
	// since the last checkpoint also start the next, so that the index's
	// memtables stay as small between checkpoints as with frequent ones
	// whatever CheckpointBytes is: small entries make many index writes
	// per byte of log. Default a quarter of MemTableSize.
	CheckpointIndexBytes int64
	// CompactionThreshold: a log file whose live entries (of ledgers not
	// deleted) take less than this share of it is compacted: they are
	// copied to the current file and the file goes (at the next
	// checkpoint). One file at most per pass; a pass every compactEvery
	// bytes of log and after each checkpoint. Default 0.5; negative:
	// never.
	CompactionThreshold float64
	// compactEvery is the log bytes between compaction passes, whether a
	// checkpoint is due or not; default 64 MiB.
	compactEvery int64

	// onStallBegin, for tests, is told when a write stall begins.
	onStallBegin func()
	// onRolled, for tests, is called by the committer once a rolled
	// file is synced whole, before the next exists; reused: it was a
	// recycled file.
	onRolled func(reused bool)
}

// Entry is a stored ledger entry.
type Entry struct {
	LedgerID int64
	EntryID  int64
	// LAC is the writer's last add confirmed carried by this entry.
	LAC int64
	// Length is the ledger's total payload bytes up to and including it.
	Length  int64
	CRC     uint32
	Payload []byte
}

// LedgerInfo is the bookie's view of a ledger.
type LedgerInfo struct {
	Fenced bool
	// LAC is the highest last add confirmed seen (from adds or WriteLAC),
	// -1 if none.
	LAC int64
	// LastEntry is the highest entry id stored, -1 if none.
	LastEntry int64
}

// ledgerState is the in-memory state of one ledger. Guarded by DB.mu.
//
// fenced and accLAC are the committer's view (requests accepted, maybe not
// yet durable); lac and lastEntry are what is durable, updated by the
// syncer, so that a reader told of them finds the entries.
type ledgerState struct {
	masterKey []byte
	fenced    bool
	// accLAC is the highest last add confirmed accepted (from adds or
	// WriteLAC): what the ledger record holds.
	accLAC    int64
	lac       int64
	lastEntry int64
	// lacWait is closed (and reset to nil) when lac advances or the ledger
	// is deleted; nil while nobody waits.
	lacWait chan struct{}
}

func (s *ledgerState) info() LedgerInfo {
	return LedgerInfo{Fenced: s.fenced, LAC: s.lac, LastEntry: s.lastEntry}
}

func (s *ledgerState) wake() {
	if s.lacWait != nil {
		close(s.lacWait)
		s.lacWait = nil
	}
}

type reqKind uint8

const (
	reqAdd reqKind = iota
	reqFence
	reqWriteLAC
	reqDelete
	reqDrop
	reqSystem
	reqRelocate // compaction: an entry copied to the current log file
	reqRelease  // compaction: a log file whose entries were all copied
)

// request is one write handed to the committer.
type request struct {
	kind      reqKind
	entry     Entry  // reqAdd
	masterKey []byte // reqAdd, reqFence, reqWriteLAC
	recovery  bool   // reqAdd: bypass the fence
	lac       int64  // reqWriteLAC
	ledgers   []int64
	sysKey    []byte // reqSystem
	sysValue  []byte
	file      uint32 // reqRelocate: the file copied from; reqRelease
	deleted   bool   // reqFence: the ledger was deleted before the answer

	// Set by the committer or syncer, then finish closes done or tells
	// added or cb.
	err  error
	info LedgerInfo // reqFence
	done chan struct{}
	cb   func(error) // the storage's own asynchronous requests (compaction)
	// added is told an AddEntryAsync's outcome; pending is the DB's count
	// of them, decremented first.
	added   AddDone
	pending *atomic.Int64
}

// finish answers the request. Called once, by the committer, the syncer or
// Close.
func (r *request) finish(err error) {
	r.err = err
	switch {
	case r.added != nil:
		r.pending.Add(-1)
		r.added.AddDone(err)
	case r.cb != nil:
		r.cb(err)
	default:
		close(r.done)
	}
}

// SyncStats is what the syncer tells Options.OnSync of one batch.
type SyncStats struct {
	Requests int // requests in the batch (adds, fences, LAC writes, compaction's moves...)
	Adds     int // of which adds
	Bytes    int // the adds' payload bytes
	// Queued is the time from the batch's hand-over to the syncer taking
	// it (waiting behind the syncs before); Took, to durable or failed.
	// A wait for --entry-log-sync-interval comes after Queued and before
	// Write: it is only in Took.
	Queued, Took time.Duration
	// With the entry log only (without it Pebble writes and syncs its WAL
	// itself, and neither is set). Wrote: the syncer wrote the entry log
	// for this batch, in Write, with WriteErr (everything handed over by
	// then: a batch a write covered already is not written again).
	// Synced: it then synced the log for this batch, in Sync, with
	// SyncErr.
	Wrote, Synced     bool
	Write, Sync       time.Duration
	WriteErr, SyncErr error
	// Err is the batch's outcome: also a failure before its turn, or of
	// its index commit after the sync.
	Err error
}

type inflight struct {
	batch   *pebble.Batch
	reqs    []*request
	started time.Time     // when the batch was handed to Pebble (or to the syncer, with the entry log)
	queued  time.Duration // from started to the syncer taking it (set by the syncer)

	// With the entry log: the file to sync, a file rolled over (its
	// writes all synced by earlier batches) to close, and where the
	// batch ends in the log.
	file       *logFile
	closeAfter *logFile
	end        logPos
	logBytes   int64
	// barrier, if set, is told once the syncer synced file up to end
	// and through (or failed): a rollover waits for it. through is the
	// end of the file's end record, which end (where the index is
	// applied to, and so where a checkpoint may start the replay) is
	// before: the replay then reads the end record and goes on to the
	// next file, where one starting after it would read a recycled
	// file's former records.
	barrier chan error
	through int64
}

// DB is a bookie's storage. It is safe for concurrent use.
type DB struct {
	opts Options
	log  *zap.Logger
	db   *pebble.DB

	reqs    chan *request // QueueLength
	syncs   chan inflight // SyncQueueLength
	quit    chan struct{} // closed by Close
	stopped sync.WaitGroup
	done    chan struct{} // closed by Close once both loops have stopped

	sendMu     sync.RWMutex // held (read) while enqueueing; Close takes it to stop enqueues
	sendClosed bool
	failed     chan struct{} // closed on the first storage failure
	noSpace    chan struct{} // closed on the first write that failed for lack of space

	// Counters of acknowledged adds, for the bookie's load report.
	adds     atomic.Int64
	addBytes atomic.Int64
	// pending counts requests queued or being committed.
	pending atomic.Int64
	// fullWaits counts requests that found the queue full (they wait
	// for room unless their context has ended; QueueFullWaits).
	fullWaits atomic.Int64

	// elog is the entry log; nil when everything is in Pebble.
	elog *entryLog
	// logBytes is the size of the log's files.
	logBytes atomic.Int64
	// ckptKick wakes the checkpointer.
	ckptKick chan struct{}
	// stopCtx ends with Close (compaction's requests).
	stopCtx  context.Context
	stopping context.CancelFunc
	// checkpointed is the last checkpoint. Owned by the checkpointer
	// (and Open and Close, when it does not run).
	checkpointed logPos

	mu struct {
		sync.Mutex
		ledgers map[int64]*ledgerState
		// created is closed (and replaced) whenever a ledger is created,
		// waking long polls on ledgers not seen yet.
		created chan struct{}
		// err is sticky: the first storage failure, or ErrClosed-like
		// unavailability after Close.
		err error
		// noSpace is sticky too: set (wrapping ErrNoSpace) when a write
		// failed for lack of space. Writes are refused, reads go on.
		noSpace error
		closed  bool
		// applied is the end of the last log batch applied to Pebble;
		// sinceCheckpoint counts the log bytes applied since the last
		// checkpoint, indexSinceCheckpoint the Pebble batch bytes.
		applied              logPos
		sinceCheckpoint      int64
		indexSinceCheckpoint int64
	}
}

// DefaultCheckpointBytes is Options.CheckpointBytes's default.
const DefaultCheckpointBytes = 64 << 20

var (
	// ErrClosed is returned after Close.
	ErrClosed = fmt.Errorf("%w: storage closed", wire.ErrUnavailable)
	// ErrNoSpace: a write failed because the disk is full. Every write is
	// refused from then on, until the bookie is restarted; reads go on.
	// It is a wire.ErrReadOnly: clients go to another bookie.
	ErrNoSpace = fmt.Errorf("%w: out of disk space", wire.ErrReadOnly)
)

// Open opens (or creates) the database and loads every ledger's state.
func Open(opts Options) (*DB, error) {
	if opts.Dir == "" {
		return nil, errors.New("storage: no directory given")
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.MemTableSize == 0 {
		opts.MemTableSize = 64 << 20
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = 64 << 20
	}
	if opts.MaxBatchBytes == 0 {
		opts.MaxBatchBytes = 16 << 20
	}
	if opts.ValueSeparationMinSize == 0 {
		opts.ValueSeparationMinSize = 1024
	}
	if opts.EntryLogFileSize == 0 {
		opts.EntryLogFileSize = 128 << 20
	}
	if opts.CheckpointBytes == 0 {
		opts.CheckpointBytes = DefaultCheckpointBytes
	}
	if opts.compactEvery == 0 {
		opts.compactEvery = 64 << 20
	}
	if opts.CheckpointInterval == 0 {
		opts.CheckpointInterval = time.Minute
	}
	if opts.CheckpointIndexBytes <= 0 {
		opts.CheckpointIndexBytes = int64(max(opts.MemTableSize/4, 1))
	}
	if opts.CompactionThreshold == 0 {
		opts.CompactionThreshold = 0.5
	}
	d := &DB{
		opts:    opts,
		log:     opts.Logger,
		reqs:    make(chan *request, QueueLength),
		syncs:   make(chan inflight, SyncQueueLength),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		failed:  make(chan struct{}),
		noSpace: make(chan struct{}),
	}
	if opts.EntryLog {
		d.elog = newEntryLog(opts.FS, opts.Dir, opts.EntryLogFileSize, opts.EntryLogRecycle, opts.EntryLogDirectIO, opts.Logger)
		d.ckptKick = make(chan struct{}, 1)
	}
	d.mu.ledgers = make(map[int64]*ledgerState)
	d.mu.created = make(chan struct{})
	d.stopCtx, d.stopping = context.WithCancel(context.Background())

	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	po := &pebble.Options{
		FS:                          opts.FS,
		Cache:                       cache,
		MemTableSize:                opts.MemTableSize,
		MemTableStopWritesThreshold: opts.MemtablesHeld,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{opts.Logger.Named("pebble").Sugar()},
	}
	// No sstable mixes key kinds (see splitAtPrefixes): a flush's
	// checkpoint and accounting keys would otherwise make its table
	// overlap the whole entry index, and every compaction out of L0
	// rewrote all of it.
	po.Experimental.SpanPolicyFunc = splitAtPrefixes
	if !opts.Compress {
		po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	}
	if opts.OnWriteStall != nil {
		var stall struct {
			sync.Mutex
			reason string
			since  time.Time
		}
		po.EventListener = &pebble.EventListener{
			WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
				stall.Lock()
				stall.reason, stall.since = info.Reason, time.Now()
				stall.Unlock()
				if opts.onStallBegin != nil {
					opts.onStallBegin()
				}
			},
			WriteStallEnd: func() {
				stall.Lock()
				reason, since := stall.reason, stall.since
				stall.since = time.Time{}
				stall.Unlock()
				if !since.IsZero() {
					opts.OnWriteStall(reason, time.Since(since))
				}
			},
		}
	}
	if opts.EntryLog {
		// The entry log is the write-ahead log: Pebble's writes are
		// applied after the log's sync and replayed from it at open.
		po.DisableWAL = true
	}
	if opts.ValueSeparation && !opts.EntryLog {
		minSize := opts.ValueSeparationMinSize
		po.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
			return pebble.ValueSeparationPolicy{
				Enabled:               true,
				MinimumSize:           minSize,
				MaxBlobReferenceDepth: 10,
				RewriteMinimumAge:     5 * 60e9,
				TargetGarbageRatio:    0.2,
			}
		}
	}
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", opts.Dir, err)
	}
	d.db = db
	if d.elog == nil {
		if _, used, err := d.getValue(checkpointKey()); err != nil || used {
			db.Close()
			if err == nil {
				err = errors.New("its entries are in an entry log: open it with the entry log on")
			}
			return nil, fmt.Errorf("storage: open %s: %w", opts.Dir, err)
		}
	}
	if d.elog != nil {
		if err := d.openLog(); err != nil {
			d.elog.closeReaders()
			db.Close()
			return nil, err
		}
	}
	if err := d.load(); err != nil {
		if d.elog != nil {
			d.elog.cur.close()
			d.elog.closeReaders()
		}
		db.Close()
		return nil, err
	}
	d.stopped.Add(2)
	go d.commitLoop()
	go d.syncLoop()
	if d.elog != nil {
		d.stopped.Add(1)
		go d.checkpointLoop()
	}
	return d, nil
}

// load reads every ledger's state: the ledger records, then for each ledger
// with entries its last entry (whose LAC may be newer than the record's).
func (d *DB) load() error {
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixLedger}, UpperBound: []byte{prefixLedger + 1}})
	if err != nil {
		return fmt.Errorf("storage: load ledgers: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		_, ledger, _, err := decodeKey(it.Key())
		if err != nil {
			it.Close()
			return err
		}
		rec, err := decodeLedgerRecord(it.Value())
		if err != nil {
			it.Close()
			return fmt.Errorf("storage: ledger %d: %w", ledger, err)
		}
		d.mu.ledgers[ledger] = &ledgerState{masterKey: rec.MasterKey, fenced: rec.Fenced, accLAC: rec.LAC, lac: rec.LAC, lastEntry: -1}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("storage: load ledgers: %w", err)
	}

	it, err = d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEntry}, UpperBound: []byte{prefixEntry + 1}})
	if err != nil {
		return fmt.Errorf("storage: load entries: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; {
		_, ledger, _, err := decodeKey(it.Key())
		if err != nil {
			return err
		}
		// Jump to the ledger's last entry.
		if !it.SeekLT(entryKey(ledger+1, 0)) {
			return fmt.Errorf("storage: ledger %d vanished while loading", ledger)
		}
		_, _, last, err := decodeKey(it.Key())
		if err != nil {
			return err
		}
		h, _, _, _, err := decodeStoredEntry(last, it.Value())
		if err != nil {
			return fmt.Errorf("storage: ledger %d entry %d: %w", ledger, last, err)
		}
		st := d.mu.ledgers[ledger]
		if st == nil {
			return fmt.Errorf("%w: ledger %d has entries but no ledger record", errCorrupt, ledger)
		}
		st.lastEntry = last
		st.lac = max(st.lac, h.LAC)
		st.accLAC = st.lac
		ok = it.SeekGE(entryKey(ledger+1, 0))
	}
	return nil
}

// Close stops the committer, fails queued requests with ErrClosed, wakes
// LAC waiters and closes Pebble.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.mu.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.closed = true
	if d.mu.err == nil {
		d.mu.err = ErrClosed
	}
	for _, st := range d.mu.ledgers {
		st.wake()
	}
	close(d.mu.created)
	d.mu.created = make(chan struct{})
	d.mu.Unlock()
	d.stopping()
	// Wait for enqueues in progress (the committer still runs and takes
	// them); none starts after this.
	d.sendMu.Lock()
	d.sendClosed = true
	d.sendMu.Unlock()
	close(d.quit)
	d.stopped.Wait()
	close(d.done)
	d.drainClosed() // requests queued after the committer's last look
	if d.elog != nil {
		// A last checkpoint spares the next Open a replay (best effort:
		// the log has everything anyway).
		if d.failure() == nil { // not when a write failed, even while closing
			if err := d.checkpoint(); err != nil {
				d.log.Warn("last checkpoint", zap.Error(err))
			}
		}
		d.elog.cur.close()
		for _, f := range d.elog.retired {
			f.close()
		}
		d.elog.closeReaders()
	}
	return d.db.Close()
}

// Failed is closed when the storage fails; Err then says why.
func (d *DB) Failed() <-chan struct{} { return d.failed }

// Err is the sticky failure (or ErrClosed), nil while healthy.
func (d *DB) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mu.err
}

// NoSpace is closed when a write failed for lack of space: writes are
// refused with ErrNoSpace from then on, reads still work.
func (d *DB) NoSpace() <-chan struct{} { return d.noSpace }

// writeErrLocked is why writes are refused, nil if they are not.
func (d *DB) writeErrLocked() error {
	if d.mu.err != nil {
		return d.mu.err
	}
	return d.mu.noSpace
}

// failure is the storage's failure (an I/O error, or no space), nil while
// it has none; being closed is not one.
func (d *DB) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.err != nil && d.mu.err != ErrClosed {
		return d.mu.err
	}
	return d.mu.noSpace
}

// writeErr is writeErrLocked taking the lock.
func (d *DB) writeErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writeErrLocked()
}

// isNoSpace reports whether a write failed because the disk is full.
func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// fail makes err sticky: every later request fails. An error for lack of
// space stops only the writes.
func (d *DB) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.err != nil && d.mu.err != ErrClosed || d.mu.noSpace != nil {
		return // already failed; a failure while closing is still recorded
	}
	if isNoSpace(err) {
		d.mu.noSpace = fmt.Errorf("%w: %v", ErrNoSpace, err)
		d.log.Error("disk full: refusing writes until restarted; reads go on", zap.Error(err))
		close(d.noSpace)
		return
	}
	d.mu.err = fmt.Errorf("%w: %v", wire.ErrStorage, err)
	d.log.Error("storage failed; refusing all requests until restarted", zap.Error(err))
	for _, st := range d.mu.ledgers {
		st.wake()
	}
	close(d.mu.created)
	d.mu.created = make(chan struct{})
	close(d.failed)
}

// enqueue hands r to the committer; after a nil return r is answered
// exactly once. Close waits for enqueue calls in progress, so nothing is
// queued after the committer drained the queue.
func (d *DB) enqueue(ctx context.Context, r *request) error {
	d.sendMu.RLock()
	defer d.sendMu.RUnlock()
	if d.sendClosed {
		return ErrClosed
	}
	if err := d.writeErr(); err != nil {
		return err
	}
	select {
	case d.reqs <- r:
		return nil
	default:
	}
	d.fullWaits.Add(1)
	select {
	case d.reqs <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// QueueLength bounds the requests queued for the committer: past it, a
// request waits for room. SyncQueueLength bounds the batches the
// committer hands to the syncer ahead of it: past it, the committer waits.
const (
	QueueLength     = 1024
	SyncQueueLength = 4
)

// QueueLen is how many requests are queued for the committer now.
func (d *DB) QueueLen() int { return len(d.reqs) }

// SyncQueueLen is how many batches wait for the syncer now.
func (d *DB) SyncQueueLen() int { return len(d.syncs) }

// QueueFullWaits is how many requests found the queue full (the disk, or
// the committer, behind) since Open: each waited for room, unless its
// context had ended.
func (d *DB) QueueFullWaits() int64 { return d.fullWaits.Load() }

// submit queues r and waits for its answer. If ctx ends first the request
// may still be applied, but the caller is not told it succeeded.
func (d *DB) submit(ctx context.Context, r *request) error {
	r.done = make(chan struct{})
	if err := d.enqueue(ctx, r); err != nil {
		return err
	}
	d.pending.Add(1)
	defer d.pending.Add(-1)
	select {
	case <-r.done:
		return r.err
	case <-d.done:
		select {
		case <-r.done:
			return r.err
		default:
			return ErrClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func validate(ledger, entry int64, masterKey []byte) error {
	switch {
	case ledger <= 0:
		return fmt.Errorf("%w: ledger id %d must be positive", wire.ErrInvalidArgument, ledger)
	case entry < 0:
		return fmt.Errorf("%w: entry id %d must not be negative", wire.ErrInvalidArgument, entry)
	case len(masterKey) == 0:
		return fmt.Errorf("%w: missing master key", wire.ErrInvalidArgument)
	case len(masterKey) > MaxMasterKeyLen:
		return fmt.Errorf("%w: master key of %d bytes (at most %d)", wire.ErrInvalidArgument, len(masterKey), MaxMasterKeyLen)
	}
	return nil
}

func checkAdd(e Entry, masterKey []byte) error {
	if err := validate(e.LedgerID, e.EntryID, masterKey); err != nil {
		return err
	}
	if len(e.Payload) > MaxPayload {
		return fmt.Errorf("%w: entry %d of ledger %d has %d bytes (at most %d)", wire.ErrInvalidArgument, e.EntryID, e.LedgerID, len(e.Payload), MaxPayload)
	}
	if e.LAC < -1 || e.LAC >= e.EntryID || e.Length < int64(len(e.Payload)) {
		return fmt.Errorf("%w: entry %d of ledger %d carries last add confirmed %d and length %d", wire.ErrInvalidArgument, e.EntryID, e.LedgerID, e.LAC, e.Length)
	}
	return nil
}

// AddEntry stores an entry and returns once it is durable.
func (d *DB) AddEntry(ctx context.Context, e Entry, masterKey []byte, recovery bool) error {
	if err := checkAdd(e, masterKey); err != nil {
		return err
	}
	return d.submit(ctx, &request{kind: reqAdd, entry: e, masterKey: masterKey, recovery: recovery})
}

// AddDone is told the outcome of an AddEntryAsync: nil once the entry is
// durable, or why it was refused. AddDone is called exactly once, on the
// storage's goroutines (or AddEntryAsync's caller's, for a request refused
// at once), and must not block. An interface rather than a function, so
// that a caller answers with the record it keeps per add anyway, with no
// closure allocated per add.
type AddDone interface {
	AddDone(err error)
}

// AddEntryAsync queues an add and returns; done gets its outcome.
// AddEntryAsync itself blocks while the queue is full.
func (d *DB) AddEntryAsync(e Entry, masterKey []byte, recovery bool, done AddDone) {
	d.AddEntryInto(context.Background(), &AddRequest{}, e, masterKey, recovery, done)
}

// AddRequest is the storage's record of one add, for a caller to keep in
// its own record of the add (AddEntryInto): one allocation for both.
type AddRequest struct{ r request }

// AddEntryInto is AddEntryAsync with the storage's record of the add in
// ar, which must be zero and not be used again. ctx bounds its wait for
// room in the queue (done then gets ctx's error); once queued, the add
// goes on whatever ctx does.
func (d *DB) AddEntryInto(ctx context.Context, ar *AddRequest, e Entry, masterKey []byte, recovery bool, done AddDone) {
	if err := checkAdd(e, masterKey); err != nil {
		done.AddDone(err)
		return
	}
	r := &ar.r
	*r = request{kind: reqAdd, entry: e, masterKey: masterKey, recovery: recovery, added: done, pending: &d.pending}
	d.pending.Add(1)
	if err := d.enqueue(ctx, r); err != nil {
		r.finish(err)
	}
}

// Fence marks the ledger fenced, durably, and returns its state. Fencing a
// ledger the bookie has never seen records it, with the master key, so that
// a late add from the old writer is refused.
func (d *DB) Fence(ctx context.Context, ledger int64, masterKey []byte) (LedgerInfo, error) {
	if err := validate(ledger, 0, masterKey); err != nil {
		return LedgerInfo{}, err
	}
	r := &request{kind: reqFence, entry: Entry{LedgerID: ledger}, masterKey: masterKey}
	if err := d.submit(ctx, r); err != nil {
		return LedgerInfo{}, err // r.info may still be written by the committer
	}
	return r.info, nil
}

// WriteLAC records an explicit last add confirmed.
func (d *DB) WriteLAC(ctx context.Context, ledger int64, masterKey []byte, lac int64) error {
	if err := validate(ledger, max(lac, 0), masterKey); err != nil {
		return err
	}
	if lac < -1 {
		return fmt.Errorf("%w: last add confirmed %d", wire.ErrInvalidArgument, lac)
	}
	return d.submit(ctx, &request{kind: reqWriteLAC, entry: Entry{LedgerID: ledger}, masterKey: masterKey, lac: lac})
}

// DeleteLedgers removes the ledgers and all their entries.
func (d *DB) DeleteLedgers(ctx context.Context, ledgers []int64) error {
	if len(ledgers) == 0 {
		return nil
	}
	return d.submit(ctx, &request{kind: reqDelete, ledgers: slices.Clone(ledgers)})
}

// DropEntries durably deletes the entries of ledgers this bookie no longer
// holds copies of (moved elsewhere), keeping each ledger's record, fenced,
// so that a writer that missed the ledger's recovery is still refused.
func (d *DB) DropEntries(ctx context.Context, ledgers []int64) error {
	if len(ledgers) == 0 {
		return nil
	}
	return d.submit(ctx, &request{kind: reqDrop, ledgers: slices.Clone(ledgers)})
}

// PutSystem durably stores a small system value (the bookie's cookie).
func (d *DB) PutSystem(ctx context.Context, name string, value []byte) error {
	if len(name) > 256 || len(value) > maxSystemValue {
		return fmt.Errorf("%w: system value %q of %d bytes (at most %d)", wire.ErrInvalidArgument, name, len(value), maxSystemValue)
	}
	return d.submit(ctx, &request{kind: reqSystem, sysKey: systemKey(name), sysValue: value})
}

// maxSystemValue caps a system value (a cookie is a few hundred bytes).
const maxSystemValue = 1 << 20

// GetSystem reads a system value; ok is false if it was never stored.
func (d *DB) GetSystem(name string) (value []byte, ok bool, err error) {
	v, closer, err := d.db.Get(systemKey(name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", wire.ErrStorage, err)
	}
	defer closer.Close()
	return bytes.Clone(v), true, nil
}

// ReadEntry returns a stored entry.
func (d *DB) ReadEntry(ledger, entry int64) (Entry, error) {
	d.mu.Lock()
	err := d.mu.err
	st := d.mu.ledgers[ledger]
	var lac int64
	if st != nil {
		lac = st.lac
	}
	d.mu.Unlock()
	if err != nil {
		return Entry{}, err
	}
	if st == nil {
		return Entry{}, fmt.Errorf("%w: ledger %d", wire.ErrNoSuchLedger, ledger)
	}
	h, payload, ptr, isPtr, err := d.lookup(ledger, entry, lac)
	if err != nil {
		return Entry{}, err
	}
	for attempt := 0; isPtr; attempt++ {
		var readErr error
		if h, payload, readErr = d.elog.read(ledger, entry, ptr); readErr == nil {
			break
		}
		if _, ierr := d.Info(ledger); ierr != nil {
			return Entry{}, ierr // deleted meanwhile, or failed
		}
		if attempt == 0 {
			// Compaction may have copied the entry, and its old file
			// gone, since the lookup: look again.
			var moved entryPointer
			_, _, moved, isPtr, err = d.lookup(ledger, entry, lac)
			if err != nil {
				return Entry{}, err
			}
			if isPtr && moved != ptr {
				ptr = moved
				continue
			}
		}
		return Entry{}, fmt.Errorf("%w: read ledger %d entry %d from the log: %v", wire.ErrStorage, ledger, entry, readErr)
	}
	return Entry{LedgerID: ledger, EntryID: entry, LAC: h.LAC, Length: h.Length, CRC: h.CRC, Payload: payload}, nil
}

// lookup reads an entry's value in Pebble: the entry (payload copied) or,
// with the entry log, where it is.
func (d *DB) lookup(ledger, entry, lac int64) (h entryHeader, payload []byte, ptr entryPointer, isPtr bool, err error) {
	v, closer, err := d.db.Get(entryKey(ledger, entry))
	if errors.Is(err, pebble.ErrNotFound) {
		return h, nil, ptr, false, fmt.Errorf("%w: ledger %d entry %d (last add confirmed %d)", wire.ErrNoSuchEntry, ledger, entry, lac)
	}
	if err != nil {
		return h, nil, ptr, false, fmt.Errorf("%w: read ledger %d entry %d: %v", wire.ErrStorage, ledger, entry, err)
	}
	defer closer.Close()
	h, payload, ptr, isPtr, err = decodeStoredEntry(entry, v)
	if err != nil {
		return h, nil, ptr, false, fmt.Errorf("%w: ledger %d entry %d: %v", wire.ErrStorage, ledger, entry, err)
	}
	return h, bytes.Clone(payload), ptr, isPtr, nil
}

// Info returns the ledger's state.
func (d *DB) Info(ledger int64) (LedgerInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.err != nil {
		return LedgerInfo{}, d.mu.err
	}
	st := d.mu.ledgers[ledger]
	if st == nil {
		return LedgerInfo{}, fmt.Errorf("%w: ledger %d", wire.ErrNoSuchLedger, ledger)
	}
	return st.info(), nil
}

// WaitLAC returns the ledger's state once its LAC is greater than previous,
// or its current state when ctx ends (ctx ending is not an error here: a
// long poll that times out answers with what it has). A ledger not stored
// yet is waited for; one deleted during the wait ends it with
// ErrNoSuchLedger.
func (d *DB) WaitLAC(ctx context.Context, ledger, previous int64) (LedgerInfo, error) {
	known := false // the ledger existed during this wait
	for {
		d.mu.Lock()
		if d.mu.err != nil {
			err := d.mu.err
			d.mu.Unlock()
			return LedgerInfo{}, err
		}
		st := d.mu.ledgers[ledger]
		if st == nil && known {
			d.mu.Unlock()
			return LedgerInfo{}, fmt.Errorf("%w: ledger %d was deleted", wire.ErrNoSuchLedger, ledger)
		}
		if st == nil {
			// Wait for the ledger's first entry (a tailing reader of a
			// ledger just created), or until ctx ends.
			created := d.mu.created
			d.mu.Unlock()
			select {
			case <-created:
				continue
			case <-ctx.Done():
				return LedgerInfo{}, fmt.Errorf("%w: ledger %d", wire.ErrNoSuchLedger, ledger)
			}
		}
		known = true
		if st.lac > previous {
			info := st.info()
			d.mu.Unlock()
			return info, nil
		}
		if st.lacWait == nil {
			st.lacWait = make(chan struct{})
		}
		ch := st.lacWait
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return d.Info(ledger)
		}
	}
}

// Ledgers returns the ids of every ledger stored, in increasing order.
func (d *DB) Ledgers() []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]int64, 0, len(d.mu.ledgers))
	for id := range d.mu.ledgers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Stats are counters for the bookie's load report.
type Stats struct {
	Ledgers  int
	Adds     int64
	AddBytes int64
	// Pending requests: queued, or waiting for their sync.
	Pending int64
}

// Stats returns the counters of acknowledged adds since Open.
func (d *DB) Stats() Stats {
	d.mu.Lock()
	n := len(d.mu.ledgers)
	d.mu.Unlock()
	return Stats{Ledgers: n, Adds: d.adds.Load(), AddBytes: d.addBytes.Load(), Pending: d.pending.Load()}
}

// Limits of one group commit.
const maxBatchRequests = 4096

// commitLoop is the single writer: it takes queued requests, applies the
// valid ones to one batch and commits it without waiting for the sync.
func (d *DB) commitLoop() {
	defer d.stopped.Done()
	defer close(d.syncs)
	reqs := make([]*request, 0, maxBatchRequests)
	for {
		reqs = reqs[:0]
		select {
		case r := <-d.reqs:
			reqs = append(reqs, r)
		case <-d.quit:
			d.drainClosed()
			return
		}
		bytes := len(reqs[0].entry.Payload)
	more:
		for len(reqs) < maxBatchRequests && bytes < d.opts.MaxBatchBytes {
			select {
			case r := <-d.reqs:
				reqs = append(reqs, r)
				bytes += len(r.entry.Payload)
			default:
				break more
			}
		}
		d.commit(reqs)
	}
}

// drainClosed answers everything still queued with ErrClosed.
func (d *DB) drainClosed() {
	for {
		select {
		case r := <-d.reqs:
			r.finish(ErrClosed)
		default:
			return
		}
	}
}

// writes is the batch a commit builds: Pebble's batch and, with the entry
// log, the log records of the same writes (entries go to the log whole and
// to Pebble as pointers).
type writes struct {
	b   *pebble.Batch
	log *entryLog // nil: everything in Pebble
	// emptied are log files the batch's deletions leave without entries.
	emptied []uint32
}

func (w *writes) set(k, v []byte) error {
	if w.log != nil {
		w.log.addSet(k, v)
	}
	return w.b.Set(k, v, nil)
}

func (w *writes) deleteRange(start, end []byte) error {
	if w.log != nil {
		w.log.addDeleteRange(start, end)
	}
	return w.b.DeleteRange(start, end, nil)
}

// entry stores e. Called with DB.mu held (the entry log's accounting).
func (w *writes) entry(e *Entry) error {
	h := entryHeader{LAC: e.LAC, Length: e.Length, CRC: e.CRC}
	if w.log != nil {
		ptr := w.log.addEntry(e.LedgerID, e.EntryID, h, e.Payload)
		var buf [maxEntryPointerLen]byte
		v := appendEntryPointer(buf[:0], e.EntryID, e.LAC, ptr)
		op := w.b.SetDeferred(entryKeyLen, len(v))
		putEntryKey(op.Key, e.LedgerID, e.EntryID)
		copy(op.Value, v)
		if err := op.Finish(); err != nil {
			return err
		}
		return w.log.noteEntryLocked(w.b, e.LedgerID, int64(entryRecordOverhead+len(e.Payload)))
	}
	op := w.b.SetDeferred(entryKeyLen, entryHeaderLen+len(e.Payload))
	putEntryKey(op.Key, e.LedgerID, e.EntryID)
	putEntryHeader(op.Value, h)
	copy(op.Value[entryHeaderLen:], e.Payload)
	return op.Finish()
}

// forget drops the ledger's entries from the entry log's accounting.
// Called with DB.mu held.
func (w *writes) forget(ledger int64) error {
	if w.log == nil {
		return nil
	}
	emptied, err := w.log.forgetLedgerLocked(w.b, ledger)
	w.emptied = append(w.emptied, emptied...)
	return err
}

func (d *DB) commit(reqs []*request) {
	w := &writes{b: d.db.NewBatch(), log: d.elog}
	var closeAfter *logFile
	if l := d.elog; l != nil && l.cur.size >= l.fileSize && d.writeErr() == nil {
		var err error
		if closeAfter, err = d.roll(w); err != nil {
			d.fail(err) // every request below is refused
		}
	}
	if l := d.elog; l != nil {
		// Room for the batch's records at once: growing the buffer by
		// doubling copied every byte again and again (a quarter of the
		// CPU while a new bookie's first large batches came in).
		need := 0
		for _, r := range reqs {
			need += entryRecordOverhead + len(r.entry.Payload) + 64 // 64: a ledger record
		}
		l.reserve(need)
	}
	accepted := make([]*request, 0, len(reqs))
	d.mu.Lock()
	failed := d.writeErrLocked()
	var refused []*request
	for _, r := range reqs {
		err := failed
		if err == nil {
			err = d.applyLocked(w, r)
		}
		if err != nil {
			r.err = err
			refused = append(refused, r)
			continue
		}
		accepted = append(accepted, r)
	}
	d.mu.Unlock()
	// Answered outside the lock: callbacks may do anything but block.
	for _, r := range refused {
		r.finish(r.err)
	}
	if len(accepted) == 0 && closeAfter == nil {
		if d.elog != nil {
			d.elog.discard()
		}
		w.b.Close()
		return
	}
	started := time.Now()
	f := inflight{batch: w.b, reqs: accepted, started: started, closeAfter: closeAfter}
	var err error
	if l := d.elog; l != nil {
		// The syncer writes the records, before it syncs for this batch.
		before := l.cur.size
		l.handOver()
		f.logBytes = l.cur.size - before
		d.logBytes.Add(f.logBytes)
		f.file, f.end = l.cur, logPos{file: l.cur.num, off: l.cur.size}
		if len(w.emptied) > 0 {
			d.mu.Lock()
			for _, num := range w.emptied {
				l.emptiedAt[num] = f.end
			}
			d.mu.Unlock()
		}
	} else {
		err = d.applyNoSyncWait(w.b)
	}
	if err != nil {
		d.fail(err)
		err = d.writeErr()
		for _, r := range accepted {
			r.finish(err)
		}
		w.b.Close()
		if closeAfter != nil {
			// An earlier batch's sync may still be running on it: closed by
			// Close.
			d.elog.retired = append(d.elog.retired, closeAfter)
		}
		return
	}
	d.syncs <- f
}

// roll starts the entry log's next file; the current one is closed once
// its writes are synced. Its end is recorded in w.
func (d *DB) roll(w *writes) (*logFile, error) {
	l := d.elog
	old := l.cur
	// A recycled file ends with an end record: its former records,
	// after it, are not read. (A new file ends with zeros to its end, as
	// files did before files were recycled.)
	endRec := old.size
	if old.reused {
		l.addEnd()
		l.handOver()
		d.logBytes.Add(old.size - endRec)
	}
	// The file is synced whole before the next exists, so that only the
	// last file can have a torn tail (replay's rule). The syncer does it,
	// after the batches queued before: its error is sticky, where a
	// second fdatasync after a failed one may report success.
	done := make(chan error, 1)
	d.syncs <- inflight{batch: d.db.NewBatch(), started: time.Now(), file: old, end: logPos{file: old.num, off: endRec}, barrier: done, through: old.size}
	if err := <-done; err != nil {
		return nil, err
	}
	if d.opts.onRolled != nil {
		d.opts.onRolled(old.reused)
	}
	nf, err := l.create(old.num+1, true)
	if err != nil {
		return nil, err
	}
	l.startFile(nf)
	clear(l.curLedgers)
	// On disk the file ends with the writes' padding (handOver).
	padded := (old.size + logAlign - 1) &^ (logAlign - 1)
	d.logBytes.Add(padded - old.size)
	d.mu.Lock()
	defer d.mu.Unlock()
	l.fileSizes[old.num] = padded
	if len(l.fileLedgers[old.num]) == 0 {
		w.emptied = append(w.emptied, old.num) // only ledger records: it can go
	}
	// Each ledger's bytes in the file, for compaction to weigh it.
	for ledger, n := range l.fileLedgers[old.num] {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(n))
		if err := w.set(fileLedgerKey(old.num, ledger), v[:]); err != nil {
			l.retired = append(l.retired, old)
			return nil, err
		}
	}
	return old, nil
}

// applyNoSyncWait applies b to the memtable and WAL without waiting for the
// sync. Pebble reports a failed WAL write through Logger.Fatalf, which our
// logger turns into a panic caught here.
func (d *DB) applyNoSyncWait(b *pebble.Batch) (err error) {
	defer func() {
		if p := recover(); p != nil {
			fe, ok := p.(fatalError)
			if !ok {
				panic(p)
			}
			err = fe
		}
	}()
	return d.db.ApplyNoSyncWait(b, pebble.Sync)
}

// syncLoop waits for each batch's sync in commit order (Pebble's WAL, or
// the entry log's file, then applies the batch to Pebble), makes its
// writes visible and answers its requests.
func (d *DB) syncLoop() {
	defer d.stopped.Done()
	var group []inflight
	// failed is the first failed sync: no batch after it is answered
	// with success, even if its own sync works (after a failed fdatasync
	// Linux may drop the dirty pages and report the next one clean).
	var failed error
	var lastSync time.Time
	for f := range d.syncs {
		f.queued = time.Since(f.started)
		if f.file == nil {
			err := f.batch.SyncWait()
			if failed != nil {
				err = failed
			}
			failed = err
			d.synced(f, SyncStats{}, err)
			continue
		}
		// Every batch queued by now was written before this sync starts:
		// one sync per file covers them all (group commit).
		group = append(group[:0], f)
	drain:
		for len(group) < maxSyncGroup {
			select {
			case g, ok := <-d.syncs:
				if !ok {
					break drain
				}
				g.queued = time.Since(g.started)
				group = append(group, g)
			default:
				break drain
			}
		}
		err := failed
		for _, g := range group {
			var st SyncStats
			// One write and one sync cover every batch handed over by
			// then: the rest of the group, and maybe batches not received
			// yet (their sync is then skipped).
			if err == nil && max(g.end.off, g.through) > g.file.synced {
				if d.opts.EntryLogSyncInterval > 0 {
					d.waitSyncInterval(lastSync)
					lastSync = time.Now()
				}
				t0 := time.Now()
				err = d.elog.writePending()
				t1 := time.Now()
				st.Wrote, st.Write, st.WriteErr = true, t1.Sub(t0), err
				if err == nil {
					err = g.file.f.SyncData()
					st.Synced, st.Sync, st.SyncErr = true, time.Since(t1), err
				}
				if err == nil {
					g.file.synced = g.file.written
				}
			}
			if g.closeAfter != nil {
				g.closeAfter.close() // synced by earlier batches
			}
			if err == nil {
				err = g.batch.Commit(pebble.NoSync)
			}
			failed = err
			d.synced(g, st, err)
		}
	}
}

// waitSyncInterval waits until Options.EntryLogSyncInterval has passed
// since last, the start of the previous write and sync, or Close. The
// batches handed over meanwhile are written and synced with the next.
func (d *DB) waitSyncInterval(last time.Time) {
	wait := d.opts.EntryLogSyncInterval - time.Since(last)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-d.quit: // closing: what is left is synced at once
	}
}

// maxSyncGroup bounds the batches one entry log sync covers.
const maxSyncGroup = 64

// synced ends a batch once its sync did: it fails the storage or makes the
// batch's writes visible, and answers its requests.
func (d *DB) synced(f inflight, st SyncStats, err error) {
	if d.opts.OnSync != nil && f.barrier == nil {
		for _, r := range f.reqs {
			if r.kind == reqAdd {
				st.Adds++
				st.Bytes += len(r.entry.Payload)
			}
		}
		st.Requests, st.Queued, st.Took, st.Err = len(f.reqs), f.queued, time.Since(f.started), err
		d.opts.OnSync(st)
	}
	if err == nil {
		err = d.failure()
	}
	if err != nil {
		d.fail(err)
		err = d.writeErr()
	} else {
		d.visible(f)
	}
	for _, r := range f.reqs {
		if err == nil && r.deleted {
			r.finish(fmt.Errorf("%w: ledger %d was deleted", wire.ErrNoSuchLedger, r.entry.LedgerID))
			continue
		}
		if err == nil && r.kind == reqAdd {
			d.adds.Add(1)
			d.addBytes.Add(int64(len(r.entry.Payload)))
		}
		r.finish(err)
	}
	f.batch.Close()
	if f.barrier != nil {
		f.barrier <- err
	}
}

// visible makes a durable batch's adds and last-add-confirmed values
// visible to readers, in order, and tells fences the ledger's state.
func (d *DB) visible(f inflight) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range f.reqs {
		st := d.mu.ledgers[r.entry.LedgerID]
		if st == nil {
			// Deleted since it was accepted (or a request on no ledger):
			// a fence must not answer with a state it does not have.
			r.deleted = r.kind == reqFence
			continue
		}
		switch r.kind {
		case reqAdd:
			st.lastEntry = max(st.lastEntry, r.entry.EntryID)
			if r.entry.LAC > st.lac {
				st.lac = r.entry.LAC
				st.wake()
			}
		case reqWriteLAC:
			if r.lac > st.lac {
				st.lac = r.lac
				st.wake()
			}
		case reqFence:
			r.info = st.info()
		}
	}
	if f.file != nil {
		d.mu.applied = f.end
		before := d.mu.sinceCheckpoint
		d.mu.sinceCheckpoint += f.logBytes
		d.mu.indexSinceCheckpoint += int64(f.batch.Len())
		// The checkpointer's turn: a checkpoint is due, or a compaction
		// pass (every compactEvery bytes).
		if d.checkpointDueLocked() ||
			before/d.opts.compactEvery != d.mu.sinceCheckpoint/d.opts.compactEvery {
			select {
			case d.ckptKick <- struct{}{}:
			default:
			}
		}
	}
}

// applyLocked validates r against the ledger state, updates the state and
// adds r's writes to w. Called with d.mu held, by the committer only.
func (d *DB) applyLocked(w *writes, r *request) error {
	switch r.kind {
	case reqDelete:
		return d.deleteLocked(w, r.ledgers)
	case reqDrop:
		return d.dropLocked(w, r.ledgers)
	case reqSystem:
		return w.set(r.sysKey, r.sysValue)
	case reqRelocate:
		// Copied only while the ledger's entries are still in the file:
		// not deleted or dropped since compaction read them.
		if !slices.Contains(d.elog.ledgerFiles[r.entry.LedgerID], r.file) {
			return errRelocated
		}
		if err := w.entry(&r.entry); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		return nil
	case reqRelease:
		if err := d.elog.releaseFileLocked(w.b, r.file); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		w.emptied = append(w.emptied, r.file)
		return nil
	}
	ledger := r.entry.LedgerID
	st, err := d.ledgerForWriteLocked(w, ledger, r.masterKey, r.kind == reqFence)
	if err != nil {
		return err
	}
	switch r.kind {
	case reqAdd:
		if st.fenced && !r.recovery {
			return fmt.Errorf("%w: ledger %d, add of entry %d refused", wire.ErrFenced, ledger, r.entry.EntryID)
		}
		if err := w.entry(&r.entry); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		st.accLAC = max(st.accLAC, r.entry.LAC)
	case reqFence:
		st.fenced = true // r.info is set once the fence is durable
	case reqWriteLAC:
		if r.lac <= st.accLAC {
			return nil // nothing new; answered after the batch's sync anyway
		}
		st.accLAC = r.lac
		if err := w.set(ledgerKey(ledger), encodeLedgerRecord(st.record())); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
	}
	return nil
}

func (s *ledgerState) record() ledgerRecord {
	return ledgerRecord{Fenced: s.fenced, LAC: s.accLAC, MasterKey: s.masterKey}
}

// ledgerForWriteLocked returns the ledger's state after checking the master
// key, creating the ledger (and its record, in w) on first sight. A fence
// always rewrites the record.
func (d *DB) ledgerForWriteLocked(w *writes, ledger int64, masterKey []byte, fence bool) (*ledgerState, error) {
	st := d.mu.ledgers[ledger]
	if st != nil && !bytes.Equal(st.masterKey, masterKey) {
		return nil, fmt.Errorf("%w: ledger %d", wire.ErrBadMasterKey, ledger)
	}
	if st != nil && (!fence || st.fenced) {
		// Re-fencing still goes through a synced batch: the caller's
		// reply waits until the earlier fence is durable.
		return st, nil
	}
	if st == nil {
		st = &ledgerState{masterKey: bytes.Clone(masterKey), accLAC: -1, lac: -1, lastEntry: -1}
		d.mu.ledgers[ledger] = st
		close(d.mu.created)
		d.mu.created = make(chan struct{})
	}
	rec := st.record()
	rec.Fenced = rec.Fenced || fence
	if err := w.set(ledgerKey(ledger), encodeLedgerRecord(rec)); err != nil {
		return nil, fmt.Errorf("%w: %v", wire.ErrStorage, err)
	}
	return st, nil
}

// dropLocked deletes the ledgers' entries but keeps each ledger's record,
// fenced: a writer that missed the ledger's recovery must still be refused
// here, although this bookie no longer holds copies.
func (d *DB) dropLocked(w *writes, ids []int64) error {
	for _, id := range ids {
		st := d.mu.ledgers[id]
		if st == nil {
			continue
		}
		st.fenced = true
		if err := w.set(ledgerKey(id), encodeLedgerRecord(st.record())); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		if err := w.deleteRange(entryKey(id, 0), entryKey(id+1, 0)); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		if err := w.forget(id); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
	}
	return nil
}

// deleteLocked removes ledgers, coalescing runs of consecutive ids into one
// range deletion each (many small range tombstones slow Pebble down).
func (d *DB) deleteLocked(w *writes, ids []int64) error {
	slices.Sort(ids)
	ids = slices.Compact(ids)
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		first, last := ids[i], ids[j]
		if err := w.deleteRange(entryKey(first, 0), entryKey(last+1, 0)); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		if err := w.deleteRange(ledgerKey(first), ledgerKey(last+1)); err != nil {
			return fmt.Errorf("%w: %v", wire.ErrStorage, err)
		}
		for id := first; id <= last; id++ {
			if st := d.mu.ledgers[id]; st != nil {
				st.wake()
				delete(d.mu.ledgers, id)
			}
			if err := w.forget(id); err != nil {
				return fmt.Errorf("%w: %v", wire.ErrStorage, err)
			}
		}
		i = j + 1
	}
	return nil
}

// fatalError is what pebbleLogger.Fatalf panics with. err is the first
// error among Fatalf's arguments, so that its cause (ENOSPC) can be told.
type fatalError struct {
	msg string
	err error
}

func (e fatalError) Error() string { return e.msg }
func (e fatalError) Unwrap() error { return e.err }

// pebbleLogger routes Pebble's logs to zap. Fatalf panics instead of
// exiting: on the commit path the panic is recovered and the storage fails
// cleanly; elsewhere it stops the process, as Pebble intends.
type pebbleLogger struct{ s *zap.SugaredLogger }

func (l pebbleLogger) Infof(format string, args ...any)  { l.s.Debugf(format, args...) }
func (l pebbleLogger) Errorf(format string, args ...any) { l.s.Errorf(format, args...) }
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.s.Error(msg)
	fe := fatalError{msg: msg}
	for _, a := range args {
		if err, ok := a.(error); ok {
			fe.err = err
			break
		}
	}
	panic(fe)
}
