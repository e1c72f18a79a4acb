package storage

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The entry log (Options.EntryLog) is the write-once storage design: every
// write is appended to a log of our own and made durable by its fdatasync,
// as BookKeeper's journal is; payloads stay in the log, and Pebble, with
// its write-ahead log off, holds only an index (entry id -> position in
// the log and LAC) and the ledger records. Each payload is written to
// disk once per bookie instead of twice (Pebble's WAL, then a blob file or
// sstable at the memtable's flush).
//
// Invariants:
//   - The log is the source of truth for everything after the checkpoint:
//     a Pebble batch is applied only after the log bytes holding its
//     writes were synced, so Pebble never refers to bytes that may be lost.
//   - The checkpoint (key 'c') is a log position P such that every write
//     before P is in Pebble's sstables (a Pebble flush made it durable).
//     Open replays the log from P in order; replaying a write twice is
//     harmless (sets and range deletions only, last write wins).
//   - The log is a strict prefix after a crash. A file is synced whole
//     before the next is created, so only the last file written to can
//     have a torn tail: replay stops at the first record that does not
//     check there. A bad record in a file followed by a file with records
//     is corruption, and Open refuses (as etcd and Pebble do): it never
//     drops what follows. File numbers are contiguous from the
//     checkpoint's on.
//   - A log file is deleted once no ledger has entries in it (keys 'f':
//     file, ledger), the deletions that emptied it are before the
//     checkpoint, and it is before the checkpoint's file: so replay never
//     needs it, and everything it held that still matters (ledger records)
//     is in Pebble's sstables.
//   - Or, instead of being deleted, it is kept for reuse (recycled, as
//     Pebble recycles its WAL files and BookKeeper its journal's): renamed
//     <number>.free, then renamed to the next file's name at a rollover
//     and overwritten from its start. Overwriting blocks a file already
//     has needs no metadata for fdatasync to commit (no block allocation,
//     no size change), where an append makes every sync a commit of the
//     filesystem's journal. A recycled file holds its former
//     records after the new ones. They never pass for new ones: a record's
//     checksum covers its file's number, and a CRC-32 detects every burst
//     error of 32 bits or fewer (as a change of that 4-byte number is),
//     so a record read whole under another number fails it always. A rollover ends a recycled file with an end
//     record, after which the scan reads nothing (a new file ends with
//     zeros to its end): so every file but the last ends cleanly, and
//     only the last (the one a crash interrupted) may end in a record
//     that does not check, torn or former. The file Open starts is never
//     a recycled one: it may follow a torn tail, where only an empty file
//     may. Off by default (Options.EntryLogRecycle): on one of this
//     project's test machines, overwriting gave a faster median sync but
//     a far worse tail under load; on another, faster syncs and the same
//     tail (docs/benchmarks.md).
//
// Log file: <dir>/entries/<number, 10 digits>.log, a sequence of records
//
//	crc32c(4) length(4) kind(1) body(length-1)
//
// where the checksum covers the file's number (4 bytes) and kind and body.
// Kinds: entry (key(17), entry header(21), payload), set (key length(2),
// key, value), delete range (start length(2), start, end), end (no body:
// the file ends here; written when a recycled file is rolled). The records may
// be followed by up to 4 KiB of zeros, the writes' padding to the next
// 4 KiB boundary (handOver); zeros that run to an aligned end of file
// end it, anything else that does not check is a torn record.
const (
	logDir             = "entries"
	logRecordHeaderLen = 8
	maxLogRecord       = MaxPayload + 1<<10

	logKindEntry       byte = 1
	logKindSet         byte = 2
	logKindDeleteRange byte = 3
	logKindEnd         byte = 4

	prefixCheckpoint byte = 'c'
	prefixFileLedger byte = 'f'

	// An indexed entry's value is where its payload is in the log:
	//
	//	version(1)=3, file, offset, payload length, entry id - LAC
	//
	// as unsigned varints (the last one wrapping: LAC -1 is entry+1), so
	// about 10 bytes for a small file's entry with the usual LAC. The
	// rest of the entry's header (its length and checksum) is in the log
	// record, which every read reads whole anyway; the LAC is kept so
	// that Open learns each ledger's from its last entry without reading
	// the log. Version 2, written before (and still read), was 37 bytes:
	// version(1)=2, the header's fields (20), file(4), offset(8), payload
	// length(4); the index was most of what the bookie's Pebble flushed
	// and compacted (docs/benchmarks.md, "A smaller index").
	pointerVersionFixed = 2
	pointerFixedLen     = entryHeaderLen + 4 + 8 + 4
	pointerVersion      = 3
	// version, file, offset, payload length, gap
	maxEntryPointerLen = 1 + binary.MaxVarintLen32 + binary.MaxVarintLen64 + binary.MaxVarintLen32 + binary.MaxVarintLen64
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// logPos is a position in the log: a file and an offset in it.
type logPos struct {
	file uint32
	off  int64
}

func (p logPos) less(q logPos) bool {
	return p.file < q.file || p.file == q.file && p.off < q.off
}

func checkpointKey() []byte { return []byte{prefixCheckpoint} }

func encodePos(p logPos) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, p.file)
	binary.BigEndian.PutUint64(b[4:], uint64(p.off))
	return b
}

func decodePos(v []byte) (logPos, error) {
	if len(v) != 12 {
		return logPos{}, fmt.Errorf("%w: log position of %d bytes", errCorrupt, len(v))
	}
	return logPos{file: binary.BigEndian.Uint32(v), off: int64(binary.BigEndian.Uint64(v[4:]))}, nil
}

func fileLedgerKey(file uint32, ledger int64) []byte {
	k := make([]byte, 13)
	k[0] = prefixFileLedger
	binary.BigEndian.PutUint32(k[1:], file)
	binary.BigEndian.PutUint64(k[5:], uint64(ledger))
	return k
}

func logFileName(num uint32) string { return fmt.Sprintf("%010d.log", num) }

// A file kept for reuse: <its former number>.free.
func freeFileName(num uint32) string { return fmt.Sprintf("%010d.free", num) }

func parseFreeFileName(name string) (uint32, bool) {
	s, ok := strings.CutSuffix(name, ".free")
	if !ok || len(s) != 10 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

func parseLogFileName(name string) (uint32, bool) {
	s, ok := strings.CutSuffix(name, ".log")
	if !ok || len(s) != 10 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// entryPointer is where an indexed entry's payload is in the log.
type entryPointer struct {
	file uint32
	off  int64
	len  uint32
}

// appendEntryPointer appends the index value of entry, whose LAC is lac,
// stored at p (version 3).
func appendEntryPointer(dst []byte, entry, lac int64, p entryPointer) []byte {
	dst = append(dst, pointerVersion)
	dst = binary.AppendUvarint(dst, uint64(p.file))
	dst = binary.AppendUvarint(dst, uint64(p.off))
	dst = binary.AppendUvarint(dst, uint64(p.len))
	return binary.AppendUvarint(dst, uint64(entry)-uint64(lac))
}

// decodeStoredEntry decodes entry's value in Pebble: either the entry
// itself (payload inline, Pebble storage) or, in the entry log's index,
// where its record is (isPtr). For a pointer, h holds the LAC only: the
// rest of the header is the log record's (entryLog.read returns it).
func decodeStoredEntry(entry int64, v []byte) (h entryHeader, payload []byte, ptr entryPointer, isPtr bool, err error) {
	if len(v) == 0 {
		return h, nil, ptr, false, fmt.Errorf("%w: empty entry value", errCorrupt)
	}
	switch v[0] {
	case pointerVersion:
		ptr, h.LAC, err = decodeEntryPointer(entry, v)
		return h, nil, ptr, true, err
	case pointerVersionFixed:
		if len(v) != pointerFixedLen {
			return h, nil, ptr, false, fmt.Errorf("%w: entry pointer of %d bytes", errCorrupt, len(v))
		}
		ptr = entryPointer{
			file: binary.BigEndian.Uint32(v[entryHeaderLen:]),
			off:  int64(binary.BigEndian.Uint64(v[entryHeaderLen+4:])),
			len:  binary.BigEndian.Uint32(v[entryHeaderLen+12:]),
		}
		h.LAC = int64(binary.BigEndian.Uint64(v[1:]))
		return h, nil, ptr, true, nil
	}
	h, payload, err = decodeEntry(v)
	return h, payload, ptr, false, err
}

// decodeEntryPointer decodes a version 3 index value. It accepts only
// what appendEntryPointer writes: no overlong varint, nothing after.
func decodeEntryPointer(entry int64, v []byte) (p entryPointer, lac int64, err error) {
	var f [4]uint64
	rest := v[1:]
	for i := range f {
		x, n := binary.Uvarint(rest)
		if n <= 0 {
			return p, 0, fmt.Errorf("%w: entry pointer %x", errCorrupt, v)
		}
		f[i], rest = x, rest[n:]
	}
	if f[0] > 1<<32-1 || f[1] > 1<<63-1 || f[2] > MaxPayload || len(rest) != 0 {
		return p, 0, fmt.Errorf("%w: entry pointer %x", errCorrupt, v)
	}
	p = entryPointer{file: uint32(f[0]), off: int64(f[1]), len: uint32(f[2])}
	lac = int64(uint64(entry) - f[3])
	var buf [maxEntryPointerLen]byte
	if !bytes.Equal(appendEntryPointer(buf[:0], entry, lac, p), v) {
		return p, 0, fmt.Errorf("%w: entry pointer %x not in its shortest form", errCorrupt, v)
	}
	return p, lac, nil
}

// logFile is a log file being written. Owned by the committer; the syncer
// writes what the committer handed over, syncs and closes it.
type logFile struct {
	num  uint32
	f    vfs.File
	size int64 // committer-owned: bytes appended (written or handed over)
	// reused: a recycled file (its former records after the new ones);
	// it gets an end record when rolled.
	reused bool

	// w takes the writes: f, or direct, the same file opened for direct
	// I/O (Options.EntryLogDirectIO).
	w      io.WriterAt
	direct *os.File

	// Syncer-owned: bytes written (not counting the padding after them),
	// and bytes known synced.
	written, synced int64
}

// close closes the file's handles.
func (f *logFile) close() error {
	err := f.f.Close()
	if f.direct != nil {
		if derr := f.direct.Close(); err == nil {
			err = derr
		}
	}
	return err
}

// freeFile is a log file kept for reuse.
type freeFile struct {
	num  uint32 // its former number: its name is freeFileName(num)
	size int64
}

// entryLog is the entry log: its files, the committer's write state and
// which ledgers have entries in which file.
type entryLog struct {
	fs       vfs.FS
	dir      string
	fileSize int64 // a file is rolled once it holds this much
	log      *zap.Logger
	// direct: files are written with O_DIRECT (the operating system's
	// filesystem only). Turned off if the filesystem refuses it.
	direct bool

	// Committer-owned.
	cur *logFile
	// buf is the batch being built, as it will be written: aligned in
	// memory, starting at an aligned offset of cur with the file's last
	// partial block (lead bytes, handed over with the batch before), then
	// the batch's records. The syncer writes it as it is, with direct
	// I/O, without copying it (writePending).
	buf  []byte
	lead int

	// pending holds the batches the committer handed over (handOver) and
	// the syncer has not written yet (writePending): with direct I/O one
	// write per group commit instead of one per batch. They all belong to file, the
	// committer's current file: a rollover waits until the syncer wrote
	// and synced the old file whole, so pending never spans two files.
	pending struct {
		sync.Mutex
		file   *logFile
		pieces []logPiece
		// spare are written buffers, for reuse: spareBytes in all.
		spare      [][]byte
		spareBytes int
	}
	// idle is the syncer's: the pieces slice it last wrote, swapped back
	// into pending at the next writePending.
	idle []logPiece
	// curLedgers are the ledgers whose 'f' key for cur is set (or in the
	// batch being built).
	curLedgers map[int64]struct{}
	// retired are files rolled over on a failure path, closed by Close.
	retired []*logFile

	// free holds the files kept for reuse (<number>.free), at most
	// recycle of them; freeBytes their sizes. Put by collect
	// (checkpointer), taken by roll (committer).
	recycle int
	free    struct {
		sync.Mutex
		files []freeFile
	}
	freeBytes atomic.Int64

	// Guarded by DB.mu: the committer's view (including writes not yet
	// synced). fileLedgers holds, for each file, the record bytes of each
	// ledger's entries in it (what compaction would copy); fileSizes the
	// files' sizes once they are no longer written.
	fileLedgers map[uint32]map[int64]int64
	fileSizes   map[uint32]int64
	ledgerFiles map[int64][]uint32
	// emptiedAt is, for a file whose last ledger was removed, the end of
	// the batch that removed it: the file may go once the checkpoint is
	// past it.
	emptiedAt map[uint32]logPos
	// compactFailed are files compaction could not read: not tried again.
	compactFailed map[uint32]bool

	// readers are read handles of the files, opened on first read.
	readers struct {
		sync.RWMutex
		m map[uint32]vfs.File
	}
}

func newEntryLog(fs vfs.FS, dir string, fileSize int64, recycle int, direct bool, log *zap.Logger) *entryLog {
	l := &entryLog{
		fs:            fs,
		dir:           fs.PathJoin(dir, logDir),
		fileSize:      fileSize,
		recycle:       recycle,
		log:           log,
		direct:        direct && fs == vfs.Default,
		curLedgers:    make(map[int64]struct{}),
		fileLedgers:   make(map[uint32]map[int64]int64),
		fileSizes:     make(map[uint32]int64),
		ledgerFiles:   make(map[int64][]uint32),
		emptiedAt:     make(map[uint32]logPos),
		compactFailed: make(map[uint32]bool),
	}
	l.readers.m = make(map[uint32]vfs.File)
	return l
}

func (l *entryLog) path(num uint32) string { return l.fs.PathJoin(l.dir, logFileName(num)) }

// files lists the log's files in order.
func (l *entryLog) files() ([]uint32, error) {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return nil, err
	}
	var nums []uint32
	for _, n := range names {
		if num, ok := parseLogFileName(n); ok {
			nums = append(nums, num)
		}
	}
	slices.Sort(nums)
	return nums, nil
}

// syncDir makes the directory's entries (files created or removed) durable.
func (l *entryLog) syncDir() error { return syncDirOf(l.fs, l.dir) }

// create makes log file num, durably (its directory entry synced): a
// file kept for reuse if reuse is set and there is one, else a new one.
func (l *entryLog) create(num uint32, reuse bool) (*logFile, error) {
	var (
		f      vfs.File
		err    error
		reused bool
	)
	if ff, ok := l.takeFree(reuse); ok {
		err = l.fs.Rename(l.fs.PathJoin(l.dir, freeFileName(ff.num)), l.path(num))
		switch {
		case err == nil:
			reused = true
			if f, err = l.fs.OpenReadWrite(l.path(num), vfs.WriteCategoryUnspecified); err != nil {
				return nil, fmt.Errorf("reuse entry log file %d as %d: %w", ff.num, num, err)
			}
		case oserrorIsNotExist(err):
			// Gone (removed by hand to free space, say): a new file.
			l.log.Warn("entry log: a file kept for reuse is gone; starting a new one", zap.String("file", freeFileName(ff.num)))
		default:
			return nil, fmt.Errorf("reuse entry log file %d as %d: %w", ff.num, num, err)
		}
	}
	if f == nil {
		if f, err = l.fs.Create(l.path(num), vfs.WriteCategoryUnspecified); err != nil {
			return nil, err
		}
	}
	if err := l.syncDir(); err != nil {
		f.Close()
		return nil, err
	}
	lf := &logFile{num: num, f: f, w: f, reused: reused}
	if l.direct {
		df, err := os.OpenFile(l.path(num), os.O_WRONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0)
		if err != nil {
			// tmpfs, for one, has no direct I/O: the same writes, through
			// the page cache.
			l.log.Info("entry log: no direct I/O here, writing through the page cache", zap.String("dir", l.dir), zap.Error(err))
			l.direct = false
		} else {
			lf.w, lf.direct = df, df
		}
	}
	return lf, nil
}

// takeFree takes a file kept for reuse, if ok and there is one.
func (l *entryLog) takeFree(ok bool) (freeFile, bool) {
	if !ok {
		return freeFile{}, false
	}
	l.free.Lock()
	defer l.free.Unlock()
	n := len(l.free.files)
	if n == 0 {
		return freeFile{}, false
	}
	ff := l.free.files[n-1]
	l.free.files = l.free.files[:n-1]
	l.freeBytes.Add(-ff.size)
	return ff, true
}

// release removes log file num, or keeps it for reuse if fewer than
// recycle files are kept. size is its size on disk.
func (l *entryLog) release(num uint32, size int64) error {
	l.free.Lock()
	keep := len(l.free.files) < l.recycle // only collect adds files: no race to the append below
	l.free.Unlock()
	if !keep {
		return l.remove(num)
	}
	// Not synced: if the rename is lost, the file is found again under
	// its number, before the checkpoint, with no ledger in it, and goes
	// again.
	if err := l.closeReaderAnd(num, func() error {
		return l.fs.Rename(l.path(num), l.fs.PathJoin(l.dir, freeFileName(num)))
	}); err != nil {
		return err
	}
	l.free.Lock()
	defer l.free.Unlock()
	if !slices.ContainsFunc(l.free.files, func(f freeFile) bool { return f.num == num }) {
		l.free.files = append(l.free.files, freeFile{num: num, size: size})
		l.freeBytes.Add(size)
	}
	return nil
}

// loadFree finds the files kept for reuse, and removes those beyond
// recycle. At open.
func (l *entryLog) loadFree() error {
	names, err := l.fs.List(l.dir)
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		num, ok := parseFreeFileName(name)
		if !ok {
			continue
		}
		path := l.fs.PathJoin(l.dir, name)
		st, err := l.fs.Stat(path)
		if err != nil {
			return err
		}
		if len(l.free.files) >= l.recycle {
			if err := l.fs.Remove(path); err != nil {
				return err
			}
			continue
		}
		l.free.files = append(l.free.files, freeFile{num: num, size: st.Size()})
		l.freeBytes.Add(st.Size())
	}
	return nil
}

// appendRecord appends a record's header and returns the body to fill.
func (l *entryLog) appendRecord(kind byte, bodyLen int) []byte {
	n := len(l.buf)
	l.reserve(logRecordHeaderLen + 1 + bodyLen)
	l.buf = l.buf[:n+logRecordHeaderLen+1+bodyLen]
	rec := l.buf[n:]
	binary.BigEndian.PutUint32(rec[4:], uint32(1+bodyLen))
	rec[logRecordHeaderLen] = kind
	return rec[logRecordHeaderLen+1:]
}

// sealRecord computes the checksum of the record that starts at off in buf.
func (l *entryLog) sealRecord(off int) {
	rec := l.buf[off:]
	crc := recordCRC(l.cur.num, rec[logRecordHeaderLen:])
	binary.BigEndian.PutUint32(rec, crc)
}

// recordCRC is a record's checksum: the CRC-32C of its file's number
// (four bytes, big-endian) followed by its kind and body. The number's
// bytes go through the table here: a slice of them handed to crc32.Update
// would escape, one allocation per record.
func recordCRC(file uint32, kindAndBody []byte) uint32 {
	crc := ^uint32(0)
	for shift := 24; shift >= 0; shift -= 8 {
		crc = crcTable[byte(crc)^byte(file>>shift)] ^ crc>>8
	}
	return crc32.Update(^crc, crcTable, kindAndBody)
}

// addEntry appends an entry record and returns where its payload will be.
func (l *entryLog) addEntry(ledger, entry int64, h entryHeader, payload []byte) entryPointer {
	off := len(l.buf)
	body := l.appendRecord(logKindEntry, entryKeyLen+entryHeaderLen+len(payload))
	putEntryKey(body, ledger, entry)
	putEntryHeader(body[entryKeyLen:], h)
	copy(body[entryKeyLen+entryHeaderLen:], payload)
	l.sealRecord(off)
	payloadOff := l.cur.size + int64(off-l.lead+logRecordHeaderLen+1+entryKeyLen+entryHeaderLen)
	return entryPointer{file: l.cur.num, off: payloadOff, len: uint32(len(payload))}
}

func (l *entryLog) addSet(key, value []byte) {
	off := len(l.buf)
	body := l.appendRecord(logKindSet, 2+len(key)+len(value))
	binary.BigEndian.PutUint16(body, uint16(len(key)))
	copy(body[2:], key)
	copy(body[2+len(key):], value)
	l.sealRecord(off)
}

// addEnd appends the record that ends the file: the scan reads nothing
// after it (a recycled file's former records follow).
func (l *entryLog) addEnd() {
	off := len(l.buf)
	l.appendRecord(logKindEnd, 0)
	l.sealRecord(off)
}

func (l *entryLog) addDeleteRange(start, end []byte) {
	off := len(l.buf)
	body := l.appendRecord(logKindDeleteRange, 2+len(start)+len(end))
	binary.BigEndian.PutUint16(body, uint16(len(start)))
	copy(body[2:], start)
	copy(body[2+len(start):], end)
	l.sealRecord(off)
}

// Buffers of the batches: sizes are powers of two from minBuf, so that
// they fit one another's batches; one kept for reuse is at most
// maxKeptBuf (a huge batch's is dropped), and those kept add up to at most
// maxSpareBytes.
const (
	minBuf        = 64 << 10
	maxKeptBuf    = 4 << 20
	maxSpareBytes = 8 << 20
)

// logPiece is a batch handed over: buf[:n] are the bytes of the file from
// off (aligned), buf[n:] zeros up to the next aligned length.
type logPiece struct {
	buf []byte
	off int64
	n   int
}

// reserve makes room in buf for n more bytes and the padding after them,
// keeping it aligned. Committer only.
func (l *entryLog) reserve(n int) {
	need := len(l.buf) + n + logAlign
	if cap(l.buf) >= need {
		return
	}
	l.pending.Lock()
	nb := l.takeSpareLocked(need)
	l.pending.Unlock()
	if nb == nil {
		size := max(minBuf, 1<<bits.Len(uint(need-1)))
		if size > maxKeptBuf { // not kept: no more than it needs
			size = (need + logAlign - 1) &^ (logAlign - 1)
		}
		nb = alignedBuf(size)
	}
	old := l.buf
	l.buf = append(nb[:0], old...)
	if cap(old) > 0 {
		l.pending.Lock()
		l.keepLocked(old) // for a smaller batch
		l.pending.Unlock()
	}
}

// keepLocked keeps b for reuse if there is room. With pending's lock held.
func (l *entryLog) keepLocked(b []byte) {
	if cap(b) <= maxKeptBuf && l.pending.spareBytes+cap(b) <= maxSpareBytes {
		l.pending.spare = append(l.pending.spare, b[:0])
		l.pending.spareBytes += cap(b)
	}
}

// takeSpareLocked is takeSpare with pending's lock held.
func (l *entryLog) takeSpareLocked(n int) []byte {
	for i, b := range l.pending.spare {
		if cap(b) >= n {
			last := len(l.pending.spare) - 1
			l.pending.spare[i] = l.pending.spare[last]
			l.pending.spare[last] = nil
			l.pending.spare = l.pending.spare[:last]
			l.pending.spareBytes -= cap(b)
			return b
		}
	}
	return nil
}

// startFile makes f the file the committer appends to, from its start.
// No batch may be in progress.
func (l *entryLog) startFile(f *logFile) {
	l.cur = f
	l.buf = l.buf[:0]
	l.lead = 0
}

// discard drops the records of the batch in progress.
func (l *entryLog) discard() { l.buf = l.buf[:l.lead] }

// handOver passes the batch built in buf to the syncer, which writes it
// (writePending) before its next sync. Committer only.
func (l *entryLog) handOver() {
	end := len(l.buf)
	if end == l.lead {
		return
	}
	start := l.cur.size - int64(l.lead)
	l.cur.size += int64(end - l.lead)
	padded := (end + logAlign - 1) &^ (logAlign - 1)
	b := l.buf[:padded] // reserve left room for the padding
	clear(b[end:])
	// The next batch starts with this one's last partial block.
	last := end &^ (logAlign - 1)
	l.lead = end - last
	l.pending.Lock()
	l.pending.pieces = append(l.pending.pieces, logPiece{buf: b, off: start, n: end})
	l.pending.file = l.cur
	next := l.takeSpareLocked(0)
	l.pending.Unlock()
	if next == nil {
		next = alignedBuf(minBuf)
	}
	l.buf = append(next[:0], b[last:end]...)
}

// writePending writes what the committer handed over to its file: with
// direct I/O one system call, otherwise one write per batch. Syncer only;
// the committer appends meanwhile.
func (l *entryLog) writePending() error {
	l.pending.Lock()
	pieces, f := l.pending.pieces, l.pending.file
	l.pending.pieces = l.idle[:0]
	l.pending.Unlock()
	if len(pieces) == 0 {
		l.idle = pieces
		return nil
	}
	err := writePieces(f, pieces)
	l.pending.Lock()
	for i := range pieces {
		l.keepLocked(pieces[i].buf)
		pieces[i] = logPiece{}
	}
	l.pending.Unlock()
	l.idle = pieces[:0]
	return err
}

// contribution is what pieces[i] adds to the file: all of it for the
// last, for the others what comes before the next one starts (the next
// repeats its last partial block; nothing if it ends in that block).
func contribution(pieces []logPiece, i int) []byte {
	if i+1 < len(pieces) {
		return pieces[i].buf[:pieces[i+1].off-pieces[i].off]
	}
	return pieces[i].buf
}

// writePieces writes consecutive pieces to f.
func writePieces(f *logFile, pieces []logPiece) error {
	last := pieces[len(pieces)-1]
	var err error
	if f.direct != nil {
		err = pwritev(f.direct, pieces)
	} else {
		for i, p := range pieces {
			b := contribution(pieces, i)
			if len(b) == 0 {
				continue
			}
			var m int
			m, err = f.w.WriteAt(b, p.off)
			if err == nil && m != len(b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	f.written = last.off + int64(last.n)
	return nil
}

// maxIovecs is the most buffers one pwritev takes (Linux's IOV_MAX).
const maxIovecs = 1024

// pwritev writes the pieces to the direct file with as few system calls
// as it takes, one in the common case.
func pwritev(f *os.File, pieces []logPiece) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	iovs := make([][]byte, 0, min(len(pieces), maxIovecs))
	off := pieces[0].off
	flush := func() error {
		want := 0
		for _, b := range iovs {
			want += len(b)
		}
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			werr = pwritevAll(iovs, off, func(iovs [][]byte, off int64) (int, error) {
				return unix.Pwritev(int(fd), iovs, off)
			})
			return true
		}); err != nil {
			return err
		}
		off += int64(want)
		iovs = iovs[:0]
		return werr
	}
	for i := range pieces {
		b := contribution(pieces, i)
		if len(b) == 0 {
			continue
		}
		if len(iovs) == maxIovecs {
			if err := flush(); err != nil {
				return err
			}
		}
		iovs = append(iovs, b)
	}
	return flush()
}

// pwritevAll writes iovs at off, again after a short write (as
// os.File.WriteAt does), so that a failure reports its error (ENOSPC: no
// space), not a short count. iovs is consumed.
func pwritevAll(iovs [][]byte, off int64, pwritev func([][]byte, int64) (int, error)) error {
	for len(iovs) > 0 {
		n, err := pwritev(iovs, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		off += int64(n)
		for n > 0 {
			k := min(n, len(iovs[0]))
			iovs[0] = iovs[0][k:]
			n -= k
			if len(iovs[0]) == 0 {
				iovs = iovs[1:]
			}
		}
	}
	return nil
}

// probeDirect turns direct I/O off unless an aligned direct write works
// in the log's directory: a filesystem may take the O_DIRECT open and
// refuse the writes.
func (l *entryLog) probeDirect() {
	if !l.direct {
		return
	}
	path := l.fs.PathJoin(l.dir, "direct-io-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_DIRECT|syscall.O_CLOEXEC, 0o644)
	if err == nil {
		_, err = f.WriteAt(alignedBuf(logAlign), 0)
		f.Close()
		os.Remove(path)
	}
	if err != nil {
		l.log.Info("entry log: no direct I/O here, writing through the page cache", zap.String("dir", l.dir), zap.Error(err))
		l.direct = false
	}
}

// Writes to a log file start and end on logAlign boundaries, as direct
// I/O needs (offsets, lengths and memory aligned to the device's logical
// block; 4 KiB covers every device), with or without direct I/O: one
// layout, tested on the in-memory filesystem too. Zeros pad a write's
// end; the next write starts with the last partial block again and
// overwrites them. A file's records are thus followed by zeros up to the
// next boundary, which scanFile takes for the file's end.
// Each batch is built in memory as it will be written (entryLog.buf): it
// starts with the file's last partial block and handOver pads it.
const logAlign = 4096

// alignedBuf returns n bytes whose address is a multiple of logAlign.
func alignedBuf(n int) []byte {
	b := make([]byte, n+logAlign)
	off := (logAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(logAlign-1))) & (logAlign - 1)
	return b[off : off+n : off+n]
}

// noteEntryLocked records that ledger has an entry record of recBytes in
// the current file, adding its 'f' key to b the first time (the key's
// value, the ledger's bytes in the file, is set when the file is rolled
// over). Called with DB.mu held.
func (l *entryLog) noteEntryLocked(b *pebble.Batch, ledger, recBytes int64) error {
	num := l.cur.num
	set := l.fileLedgers[num]
	if set == nil {
		set = make(map[int64]int64)
		l.fileLedgers[num] = set
	}
	if _, ok := set[ledger]; !ok {
		l.ledgerFiles[ledger] = append(l.ledgerFiles[ledger], num)
	}
	set[ledger] += recBytes
	if _, ok := l.curLedgers[ledger]; ok {
		return nil
	}
	l.curLedgers[ledger] = struct{}{}
	return b.Set(fileLedgerKey(num, ledger), nil, nil)
}

// releaseFileLocked drops file num from the accounting, as if every ledger
// in it had been forgotten there (its entries were copied elsewhere by
// compaction), deleting the 'f' keys in b and logging it.
func (l *entryLog) releaseFileLocked(b *pebble.Batch, num uint32) error {
	for ledger := range l.fileLedgers[num] {
		l.ledgerFiles[ledger] = slices.DeleteFunc(l.ledgerFiles[ledger], func(n uint32) bool { return n == num })
		if len(l.ledgerFiles[ledger]) == 0 {
			delete(l.ledgerFiles, ledger)
		}
		k := fileLedgerKey(num, ledger)
		if err := b.Delete(k, nil); err != nil {
			return err
		}
		l.addDeleteRange(k, append(slices.Clone(k), 0))
	}
	delete(l.fileLedgers, num)
	return nil
}

// forgetLedgerLocked removes the ledger's entries from the file accounting,
// deleting its 'f' keys in b (and logging the deletions), and returns the
// files it leaves empty. Called with DB.mu held, by the committer.
func (l *entryLog) forgetLedgerLocked(b *pebble.Batch, ledger int64) (emptied []uint32, err error) {
	for _, num := range l.ledgerFiles[ledger] {
		set := l.fileLedgers[num]
		delete(set, ledger)
		k := fileLedgerKey(num, ledger)
		if err := b.Delete(k, nil); err != nil {
			return nil, err
		}
		l.addDeleteRange(k, append(slices.Clone(k), 0)) // [k, k's successor)
		if len(set) == 0 {
			emptied = append(emptied, num)
		}
	}
	delete(l.ledgerFiles, ledger)
	delete(l.curLedgers, ledger)
	return emptied, nil
}

// entryRecordOverhead is an entry record's bytes before its payload.
// An entry record is entryRecordOverhead + payload bytes long.
const entryRecordOverhead = logRecordHeaderLen + 1 + entryKeyLen + entryHeaderLen

// read returns an entry's header and payload from the log, after checking
// its record: the checksum (the disk's bits) and the key (the index's
// pointer).
func (l *entryLog) read(ledger, entry int64, p entryPointer) (entryHeader, []byte, error) {
	l.readers.RLock()
	f := l.readers.m[p.file]
	l.readers.RUnlock()
	if f == nil {
		l.readers.Lock()
		if f = l.readers.m[p.file]; f == nil {
			var err error
			if f, err = l.fs.Open(l.path(p.file)); err != nil {
				l.readers.Unlock()
				return entryHeader{}, nil, err
			}
			l.readers.m[p.file] = f
		}
		l.readers.Unlock()
	}
	if p.off < entryRecordOverhead || p.len > MaxPayload {
		return entryHeader{}, nil, fmt.Errorf("%w: entry pointer to %d bytes at offset %d", errCorrupt, p.len, p.off)
	}
	rec := make([]byte, entryRecordOverhead+int(p.len))
	l.readers.RLock()
	if l.readers.m[p.file] != f {
		l.readers.RUnlock()
		return entryHeader{}, nil, fmt.Errorf("log file %d was removed", p.file)
	}
	_, err := f.ReadAt(rec, p.off-entryRecordOverhead)
	l.readers.RUnlock()
	if err != nil {
		return entryHeader{}, nil, err
	}
	body := rec[logRecordHeaderLen:]
	if binary.BigEndian.Uint32(rec[4:]) != uint32(len(body)) || body[0] != logKindEntry ||
		recordCRC(p.file, body) != binary.BigEndian.Uint32(rec) {
		return entryHeader{}, nil, fmt.Errorf("%w: entry log file %d: bad record at offset %d", errCorrupt, p.file, p.off-entryRecordOverhead)
	}
	if _, kl, ke, err := decodeKey(body[1 : 1+entryKeyLen]); err != nil || kl != ledger || ke != entry {
		return entryHeader{}, nil, fmt.Errorf("%w: entry log file %d: the record at offset %d is not entry %d/%d", errCorrupt, p.file, p.off-entryRecordOverhead, ledger, entry)
	}
	h, payload, err := decodeEntry(body[1+entryKeyLen:])
	if err != nil {
		return entryHeader{}, nil, fmt.Errorf("entry log file %d, offset %d: %w", p.file, p.off-entryRecordOverhead, err)
	}
	return h, payload, nil
}

// remove deletes a log file. The readers' lock is held throughout, so
// that no read opens it again in between.
func (l *entryLog) remove(num uint32) error {
	return l.closeReaderAnd(num, func() error { return l.fs.Remove(l.path(num)) })
}

// closeReaderAnd closes file num's read handle, if open, and calls fn,
// with the readers' lock held throughout: no read opens the file again
// in between.
func (l *entryLog) closeReaderAnd(num uint32, fn func() error) error {
	l.readers.Lock()
	defer l.readers.Unlock()
	if f := l.readers.m[num]; f != nil {
		f.Close()
		delete(l.readers.m, num)
	}
	return fn()
}

func (l *entryLog) closeReaders() {
	l.readers.Lock()
	defer l.readers.Unlock()
	for n, f := range l.readers.m {
		f.Close()
		delete(l.readers.m, n)
	}
}

// errTorn ends a file's valid records.
var errTorn = errors.New("torn record")

// scanFile reads file num's records from off, calling fn for each with the
// record's offset, kind and body (which aliases a buffer reused by the next
// call), up to the end record if there is one (not passed to fn). It
// returns the offset after the last valid record; err is errTorn if a
// record did not check before the end of the file.
func (l *entryLog) scanFile(num uint32, off int64, fn func(recOff int64, kind byte, body []byte) error) (int64, error) {
	f, err := l.fs.Open(l.path(num))
	if err != nil {
		return off, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(io.NewSectionReader(f, off, 1<<62), 1<<20)
	var hdr [logRecordHeaderLen]byte
	var rec []byte
	for {
		if atPadding(r, off) {
			return off, nil
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF { // no padding: a file written before it
				return off, nil
			}
			if err == io.ErrUnexpectedEOF {
				return off, errTorn
			}
			return off, err
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n == 0 || n > maxLogRecord {
			return off, errTorn
		}
		if cap(rec) < int(n) {
			rec = make([]byte, n)
		}
		rec = rec[:n]
		if _, err := io.ReadFull(r, rec); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return off, errTorn
			}
			return off, err
		}
		if recordCRC(num, rec) != binary.BigEndian.Uint32(hdr[:]) {
			return off, errTorn
		}
		if rec[0] == logKindEnd {
			return off, nil
		}
		if err := fn(off, rec[0], rec[1:]); err != nil {
			return off, err
		}
		off += logRecordHeaderLen + int64(n)
	}
}

// atPadding reports whether r, at offset off of its file, holds the
// writes' padding (handOver): zeros only, up to the end of the file,
// which is the next logAlign boundary (or off itself). It reads nothing.
func atPadding(r *bufio.Reader, off int64) bool {
	k := int((logAlign - off%logAlign) % logAlign)
	b, err := r.Peek(k + 1)
	return err == io.EOF && len(b) == k && allZero(b)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// replayRecord applies one log record to b. recOff is the record's offset
// in file num.
func replayRecord(b *pebble.Batch, num uint32, recOff int64, kind byte, body []byte) error {
	switch kind {
	case logKindEntry:
		if len(body) < entryKeyLen+entryHeaderLen {
			return fmt.Errorf("%w: entry log record of %d bytes", errCorrupt, len(body))
		}
		_, ledger, entry, err := decodeKey(body[:entryKeyLen])
		if err != nil {
			return err
		}
		h, payload, err := decodeEntry(body[entryKeyLen:])
		if err != nil {
			return err
		}
		ptr := entryPointer{file: num, off: recOff + logRecordHeaderLen + 1 + entryKeyLen + entryHeaderLen, len: uint32(len(payload))}
		var v [maxEntryPointerLen]byte
		if err := b.Set(entryKey(ledger, entry), appendEntryPointer(v[:0], entry, h.LAC, ptr), nil); err != nil {
			return err
		}
		return b.Set(fileLedgerKey(num, ledger), nil, nil)
	case logKindSet, logKindDeleteRange:
		if len(body) < 2 || int(binary.BigEndian.Uint16(body)) > len(body)-2 {
			return fmt.Errorf("%w: log record of kind %d", errCorrupt, kind)
		}
		k := int(binary.BigEndian.Uint16(body))
		a, z := body[2:2+k], body[2+k:]
		if kind == logKindSet {
			return b.Set(a, z, nil)
		}
		return b.DeleteRange(a, z, nil)
	}
	return fmt.Errorf("%w: log record kind %d", errCorrupt, kind)
}

// getValue reads a small value from Pebble.
func (d *DB) getValue(k []byte) ([]byte, bool, error) {
	v, closer, err := d.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer closer.Close()
	return slices.Clone(v), true, nil
}

// openLog replays the entry log from the checkpoint into Pebble, removes
// what follows a torn tail, starts a new file and checkpoints.
func (d *DB) openLog() error {
	l := d.elog
	if err := l.fs.MkdirAll(l.dir, 0o755); err != nil {
		return fmt.Errorf("storage: entry log: %w", err)
	}
	if err := syncDirOf(l.fs, d.opts.Dir); err != nil {
		return fmt.Errorf("storage: entry log: %w", err)
	}
	l.probeDirect()
	if err := l.loadFree(); err != nil {
		return fmt.Errorf("storage: entry log: %w", err)
	}
	v, hasCkpt, err := d.getValue(checkpointKey())
	if err != nil {
		return fmt.Errorf("storage: entry log checkpoint: %w", err)
	}
	var ckpt logPos
	if hasCkpt {
		if ckpt, err = decodePos(v); err != nil {
			return fmt.Errorf("storage: entry log checkpoint: %w", err)
		}
	}
	nums, err := l.files()
	if err != nil {
		return fmt.Errorf("storage: entry log: %w", err)
	}
	if hasCkpt && !slices.Contains(nums, ckpt.file) {
		return fmt.Errorf("%w: the entry log's checkpoint is in file %d, which is missing", errCorrupt, ckpt.file)
	}

	b := d.db.NewBatch()
	defer func() { b.Close() }()
	var (
		torn     *logPos // where a file's records stopped checking
		prev     uint32
		anyLog   bool
		replayed []uint32
	)
	for _, num := range nums {
		if num < ckpt.file {
			continue
		}
		if anyLog && num != prev+1 {
			return fmt.Errorf("%w: entry log file %d is missing (files %d and %d are there)", errCorrupt, prev+1, prev, num)
		}
		if torn != nil {
			// Only an empty file may follow a torn tail: one created at a
			// rollover or at open, before anything was written to it.
			if st, err := l.fs.Stat(l.path(num)); err != nil || st.Size() > 0 {
				return fmt.Errorf("%w: entry log file %d has a bad record at offset %d, and file %d after it has records (%v)", errCorrupt, torn.file, torn.off, num, err)
			}
		}
		prev, anyLog = num, true
		replayed = append(replayed, num)
		start := int64(0)
		if hasCkpt && num == ckpt.file {
			start = ckpt.off
		}
		end, err := l.scanFile(num, start, func(off int64, kind byte, body []byte) error {
			if err := replayRecord(b, num, off, kind, body); err != nil {
				return fmt.Errorf("file %d offset %d: %w", num, off, err)
			}
			if b.Len() >= 16<<20 {
				if err := b.Commit(pebble.NoSync); err != nil {
					return err
				}
				b.Close()
				b = d.db.NewBatch()
			}
			return nil
		})
		switch {
		case errors.Is(err, errTorn):
			torn = &logPos{file: num, off: end}
		case err != nil:
			return fmt.Errorf("storage: entry log replay: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("storage: entry log replay: %w", err)
	}
	// What was replayed may have been read from the page cache only (the
	// process died between a write and its sync): make it durable before
	// the checkpoint below makes the index to it durable (L1).
	for _, num := range replayed {
		if err := syncFile(l.fs, l.path(num)); err != nil {
			return fmt.Errorf("storage: entry log: sync file %d: %w", num, err)
		}
	}
	if torn != nil {
		d.log.Info("entry log ends in a record that does not check: a write not acknowledged when the bookie stopped, or a recycled file's former records", zap.Uint32("file", torn.file), zap.Int64("at", torn.off))
	}

	next := uint32(1)
	if len(nums) > 0 {
		next = nums[len(nums)-1] + 1
	}
	// A new file, not a recycled one: it may follow a torn tail.
	if l.cur, err = l.create(next, false); err != nil {
		return fmt.Errorf("storage: entry log: %w", err)
	}
	start := logPos{file: next}
	if err := d.db.Set(checkpointKey(), encodePos(start), pebble.NoSync); err != nil {
		l.cur.close()
		return fmt.Errorf("storage: entry log: %w", err)
	}
	if err := d.db.Flush(); err != nil {
		l.cur.close()
		return fmt.Errorf("storage: entry log checkpoint: %w", err)
	}
	d.checkpointed, d.mu.applied = start, start
	if err := d.loadFileLedgers(); err != nil {
		l.cur.close()
		return err
	}
	// Files no ledger has entries in go now: the checkpoint is past them.
	nums, err = l.files()
	if err != nil {
		l.cur.close()
		return fmt.Errorf("storage: entry log: %w", err)
	}
	for _, num := range nums {
		if num < next && len(l.fileLedgers[num]) == 0 {
			l.emptiedAt[num] = logPos{}
		}
	}
	for _, num := range nums {
		if st, err := l.fs.Stat(l.path(num)); err == nil {
			d.logBytes.Add(st.Size()) // before collect takes the removed ones off
			if num < next {
				l.fileSizes[num] = st.Size()
			}
		}
	}
	if err := d.collect(); err != nil {
		l.cur.close()
		return err
	}
	return nil
}

func syncFile(fs vfs.FS, path string) error {
	return syncAndClose(fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified))
}

func syncDirOf(fs vfs.FS, dir string) error { return syncAndClose(fs.OpenDir(dir)) }

// syncAndClose syncs a file (or directory) just opened, then closes it.
func syncAndClose(f vfs.File, err error) error {
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// loadFileLedgers reads which ledgers have entries in which log files, and
// how many bytes. The files whose sizes were not recorded (those written
// since the last rollover before a restart) are scanned for them.
func (d *DB) loadFileLedgers() error {
	l := d.elog
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixFileLedger}, UpperBound: []byte{prefixFileLedger + 1}})
	if err != nil {
		return fmt.Errorf("storage: entry log files: %w", err)
	}
	unknown := map[uint32]bool{}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 13 || (len(v) != 0 && len(v) != 8) {
			it.Close()
			return fmt.Errorf("%w: file ledger key of %d bytes, value of %d", errCorrupt, len(k), len(v))
		}
		num, ledger := binary.BigEndian.Uint32(k[1:]), int64(binary.BigEndian.Uint64(k[5:]))
		set := l.fileLedgers[num]
		if set == nil {
			set = make(map[int64]int64)
			l.fileLedgers[num] = set
		}
		if len(v) == 8 {
			set[ledger] = int64(binary.BigEndian.Uint64(v))
		} else {
			set[ledger] = 0
			unknown[num] = true
		}
		l.ledgerFiles[ledger] = append(l.ledgerFiles[ledger], num)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("storage: entry log files: %w", err)
	}
	for num := range unknown {
		set := l.fileLedgers[num]
		sizes := map[int64]int64{}
		_, err := l.scanFile(num, 0, func(_ int64, kind byte, body []byte) error {
			if kind == logKindEntry && len(body) >= entryKeyLen {
				ledger := int64(binary.BigEndian.Uint64(body[1:]))
				sizes[ledger] += int64(logRecordHeaderLen + 1 + len(body))
			}
			return nil
		})
		if err != nil && !errors.Is(err, errTorn) {
			return fmt.Errorf("storage: entry log file %d: %w", num, err)
		}
		for ledger := range set {
			set[ledger] = sizes[ledger]
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], uint64(sizes[ledger]))
			if err := d.db.Set(fileLedgerKey(num, ledger), v[:], pebble.NoSync); err != nil {
				return fmt.Errorf("storage: entry log files: %w", err)
			}
		}
	}
	return nil
}

// checkpointLoop checkpoints when the syncer says one is due (CheckpointBytes
// of log or CheckpointIndexBytes of index written since the last one) and
// every CheckpointInterval, and runs a compaction pass after each and
// whenever the syncer asks (every compactEvery bytes). Stops with Close.
func (d *DB) checkpointLoop() {
	defer d.stopped.Done()
	t := time.NewTicker(d.opts.CheckpointInterval)
	defer t.Stop()
	for {
		due := false
		select {
		case <-d.quit:
			return
		case <-d.ckptKick:
		case <-t.C:
			due = true
		}
		if d.writeErr() != nil {
			continue // nothing more is written; a checkpoint would only fail
		}
		d.mu.Lock()
		due = due || d.checkpointDueLocked()
		d.mu.Unlock()
		if due {
			if err := d.checkpoint(); err != nil {
				d.fail(err)
				continue
			}
		}
		if d.opts.CompactionThreshold > 0 {
			if err := d.compact(d.stopCtx); err != nil && d.stopCtx.Err() == nil && d.writeErr() == nil {
				d.log.Error("entry log compaction", zap.Error(err))
			}
		}
	}
}

// checkpointDueLocked tells whether enough log or index writes were
// applied since the last checkpoint for the next. Called with DB.mu held.
func (d *DB) checkpointDueLocked() bool {
	return d.mu.sinceCheckpoint >= d.opts.CheckpointBytes || d.mu.indexSinceCheckpoint >= d.opts.CheckpointIndexBytes
}

// checkpoint makes everything applied to Pebble so far durable in its
// sstables and records the log position it reaches, then deletes the log
// files it made unneeded. Called by the checkpointer, or by Open and Close
// when it does not run.
func (d *DB) checkpoint() error {
	d.mu.Lock()
	p := d.mu.applied
	d.mu.sinceCheckpoint, d.mu.indexSinceCheckpoint = 0, 0
	d.mu.Unlock()
	if p != d.checkpointed {
		// Every batch that ends at or before p was applied before this
		// Set, so the flush below holds them all.
		if err := d.db.Set(checkpointKey(), encodePos(p), pebble.NoSync); err != nil {
			return fmt.Errorf("storage: checkpoint: %w", err)
		}
		if err := d.db.Flush(); err != nil {
			return fmt.Errorf("storage: checkpoint: %w", err)
		}
		d.checkpointed = p
	}
	return d.collect()
}

// collect deletes (or keeps for reuse) the log files no ledger has
// entries in, once the deletions that emptied them and the files
// themselves are before the checkpoint.
func (d *DB) collect() error {
	l, p := d.elog, d.checkpointed
	var gone []uint32
	counted := map[uint32]int64{} // what logBytes holds for each
	d.mu.Lock()
	for num, at := range l.emptiedAt {
		if num < p.file && !p.less(at) && len(l.fileLedgers[num]) == 0 {
			gone = append(gone, num)
			if n, ok := l.fileSizes[num]; ok {
				counted[num] = n
			} else {
				counted[num] = -1
			}
			delete(l.emptiedAt, num)
			delete(l.fileLedgers, num)
			delete(l.fileSizes, num)
		}
	}
	d.mu.Unlock()
	slices.Sort(gone)
	for _, num := range gone {
		var size int64 // on disk: a recycled file's may exceed what was counted
		if st, err := l.fs.Stat(l.path(num)); err == nil {
			size = st.Size()
		}
		if err := l.release(num, size); err != nil && !oserrorIsNotExist(err) {
			return fmt.Errorf("storage: remove entry log file %d: %w", num, err)
		}
		if n := counted[num]; n >= 0 {
			size = n
		}
		d.logBytes.Add(-size)
	}
	return nil
}

func oserrorIsNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
