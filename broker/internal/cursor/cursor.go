package cursor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Deps are what a cursor works with.
type Deps struct {
	Store   *metastore.Store
	Ledgers *ledger.Client
	// Guard is the partition's ownership token; metadata writes are
	// guarded by it.
	Guard *metastore.Guard
	Log   *zap.Logger
	// Replication of cursor ledgers.
	Ensemble, WriteQuorum, AckQuorum int
}

// Limits of the cursor ledger.
const (
	// chunkSize bounds one cursor ledger entry.
	chunkSize = 1 << 20
	// maxCursorLedgerBytes: past it, the next snapshot goes to a new
	// cursor ledger and the old one is deleted.
	maxCursorLedgerBytes = 64 << 20
	// maxSnapshotBytes bounds a decompressed snapshot.
	maxSnapshotBytes = 256 << 20
)

// ErrFenced: the partition is owned elsewhere.
var ErrFenced = errors.New("cursor: fenced: the partition is owned elsewhere")

// ErrClosed is returned by Persist after Close or Delete.
var ErrClosed = errors.New("cursor: closed")

// Cursor is a durable subscription's state, persisted by Persist. Safe for
// concurrent use.
type Cursor struct {
	topic string
	name  string
	ml    *mledger.ManagedLedger
	d     Deps
	log   *zap.Logger

	// persistMu serializes snapshot writes and guards the fields below it;
	// it is held across I/O. Taken before mu.
	persistMu sync.Mutex
	writer    *ledger.Writer // the cursor ledger
	closed    bool           // by Close or Delete: nothing is written any more
	infoRev   int64          // revision of the cursor's metastore key
	snapSeq   int64
	written   int64 // bytes written to the cursor ledger
	// withoutLedger, if set, is the mark-delete position the metadata
	// holds with no cursor ledger (none could be created: not enough
	// bookies); nil while the metadata names a cursor ledger.
	withoutLedger *Position

	ephemeral bool // a reader's cursor: never persisted

	mu struct {
		sync.Mutex
		st      *State
		dirty   bool // acks since the last snapshot
		readPos Position
	}
}

// NewEphemeral returns a cursor that lives in memory only (a reader's):
// Persist, Close and Delete do nothing.
func NewEphemeral(ml *mledger.ManagedLedger, name string, markDelete Position) *Cursor {
	c := &Cursor{topic: ml.Name(), name: name, ml: ml, log: zap.NewNop(), ephemeral: true}
	c.mu.st = NewState(markDelete, ml.Next)
	c.mu.readPos = ml.Next(markDelete)
	return c
}

// Open loads the subscription's cursor, or creates it with everything up
// to initial acknowledged. A loaded cursor gets a new cursor ledger (the
// previous owner's is recovered, read and deleted). created reports
// whether the subscription is new.
func Open(ctx context.Context, ml *mledger.ManagedLedger, name string, initial Position, d Deps) (c *Cursor, created bool, err error) {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	c = &Cursor{topic: ml.Name(), name: name, ml: ml, d: d, log: d.Log.With(zap.String("topic", ml.Name()), zap.String("subscription", name))}
	key := metastore.CursorKey(c.topic, name)
	kv, err := d.Store.Get(ctx, key)
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		c.mu.st = NewState(initial, ml.Next)
		c.infoRev = metastore.MustNotExist
		created = true
	case err != nil:
		return nil, false, err
	default:
		var info metapb.CursorInfo
		if err := proto.Unmarshal(kv.Value, &info); err != nil {
			return nil, false, fmt.Errorf("cursor %s/%s: corrupt metadata: %w", c.topic, name, err)
		}
		c.infoRev = kv.ModRevision
		st, err := c.load(ctx, &info)
		if err != nil {
			return nil, false, err
		}
		c.mu.st = st
		if info.CursorLedgerId == 0 {
			md := Position{Ledger: info.MarkDeleteLedger, Entry: info.MarkDeleteEntry}
			c.withoutLedger = &md
		}
	}
	c.mu.readPos = ml.Next(c.mu.st.MarkDelete())
	c.mu.dirty = true
	// Start a cursor ledger of our own with the current state in it.
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	err = c.newLedgerLocked(ctx)
	if errors.Is(err, ledger.ErrNotEnoughBookies) {
		// Too few bookies are writable for a cursor ledger: the cursor
		// goes on without one, so that its subscription can read.
		if created {
			c.mu.Lock()
			snap := c.mu.st.Snapshot()
			c.mu.dirty = false
			c.mu.Unlock()
			err = c.persistWithoutLedgerLocked(ctx, snap, err)
		} else {
			// What is stored (the metadata and the previous cursor
			// ledger it names) is this state: kept until it changes.
			c.log.Warn("no cursor ledger can be created; the stored state is kept until it changes", zap.Error(err))
			c.mu.Lock()
			c.mu.dirty = false
			c.mu.Unlock()
			err = nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	return c, created, nil
}

// load reads the last complete snapshot of the cursor ledger; without one,
// the mark-delete position of the metadata.
func (c *Cursor) load(ctx context.Context, info *metapb.CursorInfo) (*State, error) {
	fallback := func() (*State, error) {
		return NewState(Position{Ledger: info.MarkDeleteLedger, Entry: info.MarkDeleteEntry}, c.ml.Next), nil
	}
	if info.CursorLedgerId == 0 {
		return fallback()
	}
	r, err := c.d.Ledgers.OpenRecover(ctx, info.CursorLedgerId)
	if errors.Is(err, ledger.ErrNoSuchLedger) {
		c.log.Warn("cursor ledger is gone; using the mark-delete position of the metadata", zap.Int64("ledger", info.CursorLedgerId))
		return fallback()
	}
	if err != nil {
		return nil, fmt.Errorf("cursor %s/%s: recover cursor ledger %d: %w", c.topic, c.name, info.CursorLedgerId, err)
	}
	last := r.LastAddConfirmed()
	for last >= 0 {
		tail, err := r.Read(ctx, last, last)
		if err != nil {
			return nil, err
		}
		var ch metapb.CursorChunk
		if err := proto.Unmarshal(tail[0].Payload, &ch); err != nil {
			return nil, fmt.Errorf("cursor %s/%s: corrupt chunk: %w", c.topic, c.name, err)
		}
		if ch.Count < 1 || ch.Index < 0 || ch.Index >= ch.Count || int64(ch.Index) > last {
			return nil, fmt.Errorf("cursor %s/%s: corrupt chunk %d of %d", c.topic, c.name, ch.Index, ch.Count)
		}
		if ch.Index != ch.Count-1 {
			// An incomplete snapshot at the end (a crash while writing it):
			// use the one before.
			last -= int64(ch.Index) + 1
			continue
		}
		first := last - int64(ch.Count) + 1
		if first < 0 {
			return nil, fmt.Errorf("cursor %s/%s: snapshot of %d chunks in %d entries", c.topic, c.name, ch.Count, last+1)
		}
		entries, err := r.Read(ctx, first, last)
		if err != nil {
			return nil, err
		}
		var data []byte
		for i, e := range entries {
			var part metapb.CursorChunk
			if err := proto.Unmarshal(e.Payload, &part); err != nil || part.Snapshot != ch.Snapshot || int(part.Index) != i {
				return nil, fmt.Errorf("cursor %s/%s: chunk %d of snapshot %d is missing", c.topic, c.name, i, ch.Snapshot)
			}
			data = append(data, part.Data...)
		}
		snap, err := decodeSnapshot(data)
		if err != nil {
			return nil, fmt.Errorf("cursor %s/%s: %w", c.topic, c.name, err)
		}
		c.snapSeq = ch.Snapshot
		return LoadState(snap, c.ml.Next)
	}
	return fallback()
}

var (
	codecOnce sync.Once
	zEnc      *zstd.Encoder
	zDec      *zstd.Decoder
)

func codecs() (*zstd.Encoder, *zstd.Decoder) {
	codecOnce.Do(func() {
		zEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		zDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxSnapshotBytes))
	})
	return zEnc, zDec
}

func encodeSnapshot(snap *metapb.CursorSnapshot) ([]byte, error) {
	raw, err := proto.Marshal(snap)
	if err != nil {
		return nil, err
	}
	if len(raw) > maxSnapshotBytes {
		return nil, fmt.Errorf("cursor: snapshot of %d bytes exceeds %d", len(raw), maxSnapshotBytes)
	}
	enc, _ := codecs()
	return enc.EncodeAll(raw, nil), nil
}

func decodeSnapshot(data []byte) (*metapb.CursorSnapshot, error) {
	_, dec := codecs()
	raw, err := dec.DecodeAll(data, nil)
	if err != nil {
		return nil, fmt.Errorf("corrupt snapshot: %w", err)
	}
	var snap metapb.CursorSnapshot
	if err := proto.Unmarshal(raw, &snap); err != nil {
		return nil, fmt.Errorf("corrupt snapshot: %w", err)
	}
	return &snap, nil
}

// Name is the subscription name.
func (c *Cursor) Name() string { return c.name }

// MarkDelete is the position up to which everything is acknowledged.
func (c *Cursor) MarkDelete() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.st.MarkDelete()
}

// Acked is the mark-delete position and the count of entries acknowledged
// individually after it, read together. Unlike Stats it does not wait for
// a persist in progress.
func (c *Cursor) Acked() (markDelete Position, after int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.st.MarkDelete(), c.mu.st.AckedAfterMarkDelete()
}

// ReadPosition is the next position to dispatch.
func (c *Cursor) ReadPosition() Position {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.readPos
}

// SetReadPosition moves the dispatch position.
func (c *Cursor) SetReadPosition(p Position) {
	c.mu.Lock()
	c.mu.readPos = p
	c.mu.Unlock()
}

// IsAcked reports whether the entry at p is acknowledged as a whole.
func (c *Cursor) IsAcked(p Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.st.IsAcked(p)
}

// BatchAcked reports whether message i of the batch at p is acknowledged.
func (c *Cursor) BatchAcked(p Position, i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.st.BatchAcked(p, i)
}

// AckedBatchIndexes lists the acknowledged messages of a partially
// acknowledged batch entry.
func (c *Cursor) AckedBatchIndexes(p Position) []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.st.AckedBatchIndexes(p)
}

// Ack acknowledges entries.
func (c *Cursor) Ack(ps ...Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		if c.mu.st.Ack(p) {
			c.mu.dirty = true
		}
	}
}

// AckCumulative acknowledges everything up to p.
func (c *Cursor) AckCumulative(p Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.st.AckCumulative(p) {
		c.mu.dirty = true
	}
}

// AckBatchIndex acknowledges one message of a batch entry.
func (c *Cursor) AckBatchIndex(p Position, i, size int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed, err := c.mu.st.AckBatchIndex(p, i, size)
	if changed {
		c.mu.dirty = true
	}
	return err
}

// Reset forgets all acknowledgements: delivery restarts after p.
func (c *Cursor) Reset(p Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.st.Reset(p)
	c.mu.readPos = c.ml.Next(p)
	c.mu.dirty = true
}

// Stats of a cursor.
type Stats struct {
	MarkDelete Position
	ReadPos    Position
	// Holes counts the unacknowledged runs before the last individually
	// acknowledged entry; AckedAfterMarkDelete the entries acknowledged
	// individually after the mark-delete position.
	Holes                int
	AckedAfterMarkDelete int64
	CursorLedger         int64
}

// Stats returns the cursor's figures.
func (c *Cursor) Stats() Stats {
	c.persistMu.Lock()
	var cl int64
	if c.writer != nil {
		cl = c.writer.ID()
	}
	c.persistMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		MarkDelete: c.mu.st.MarkDelete(), ReadPos: c.mu.readPos,
		Holes: c.mu.st.Holes(), AckedAfterMarkDelete: c.mu.st.AckedAfterMarkDelete(), CursorLedger: cl,
	}
}

// DeletedRanges is State.DeletedRanges of the cursor's state.
func (c *Cursor) DeletedRanges(max int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.st.DeletedRanges(max)
}

// Persist writes a snapshot if anything changed since the last one. It
// moves to a new cursor ledger when the current one is full or failed.
func (c *Cursor) Persist(ctx context.Context) error {
	if c.ephemeral {
		return nil
	}
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.mu.Lock()
	if !c.mu.dirty {
		c.mu.Unlock()
		return nil
	}
	snap := c.mu.st.Snapshot()
	c.mu.dirty = false
	c.mu.Unlock()
	var err error
	if c.writer != nil {
		err = c.writeSnapshotLocked(ctx, snap)
		if err == nil && c.written < maxCursorLedgerBytes {
			return nil
		}
		if err != nil {
			c.log.Warn("cursor snapshot failed; moving to a new cursor ledger", zap.Error(err))
		}
	}
	nerr := c.newLedgerLocked(ctx)
	switch {
	case nerr == nil:
		return nil
	case !errors.Is(nerr, ledger.ErrNotEnoughBookies):
		c.markDirty()
		return nerr
	case c.writer != nil && err == nil:
		// The snapshot is in the full cursor ledger, which takes the next
		// ones until a new ledger can be created.
		return nil
	}
	return c.persistWithoutLedgerLocked(ctx, snap, nerr)
}

func (c *Cursor) markDirty() {
	c.mu.Lock()
	c.mu.dirty = true
	c.mu.Unlock()
}

// persistWithoutLedgerLocked persists snap while no cursor ledger can be
// created (cause: fewer bookies are writable than its ensemble), as
// Pulsar does when its cursor ledger cannot be written: the metadata
// records the mark-delete position and no cursor ledger, and the cursor
// ledger it named before (if any) is dropped. Acknowledgements after the
// mark-delete position are not persisted meanwhile: a broker that loads
// the cursor before a cursor ledger is written again delivers those
// messages again. While there are any, every Persist tries again to
// create a cursor ledger.
func (c *Cursor) persistWithoutLedgerLocked(ctx context.Context, snap *metapb.CursorSnapshot, cause error) error {
	md := Position{Ledger: snap.MarkDeleteLedger, Entry: snap.MarkDeleteEntry}
	if c.withoutLedger == nil || *c.withoutLedger != md {
		info := &metapb.CursorInfo{MarkDeleteLedger: md.Ledger, MarkDeleteEntry: md.Entry, CreatedAtUnixMs: time.Now().UnixMilli()}
		raw, _ := proto.Marshal(info)
		rev, err := c.d.Store.Commit(ctx, c.d.Guard, metastore.PutOp(metastore.CursorKey(c.topic, c.name), raw, c.infoRev))
		if err != nil {
			c.markDirty()
			if errors.Is(err, metastore.ErrNotOwner) {
				return fmt.Errorf("%w: %v", ErrFenced, err)
			}
			return fmt.Errorf("cursor %s/%s: store cursor metadata: %w", c.topic, c.name, err)
		}
		if c.withoutLedger == nil {
			c.log.Warn("no cursor ledger can be created; persisting the mark-delete position alone", zap.Error(cause))
		}
		c.infoRev = rev
		c.withoutLedger = &md
		if old := c.writer; old != nil {
			c.writer, c.written = nil, 0
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			old.Close(cctx)
			if err := c.d.Ledgers.Delete(cctx, old.ID()); err != nil {
				c.log.Warn("old cursor ledger not deleted; the sweeper will", zap.Int64("ledger", old.ID()), zap.Error(err))
			}
			cancel()
		}
	}
	if len(snap.Acked) > 0 || len(snap.BatchAcks) > 0 {
		c.markDirty() // not all persisted: try a cursor ledger again next time
	}
	return nil
}

// writeSnapshotLocked appends snap, in chunks, to the cursor ledger.
func (c *Cursor) writeSnapshotLocked(ctx context.Context, snap *metapb.CursorSnapshot) error {
	if c.writer == nil {
		return fmt.Errorf("cursor %s/%s: no cursor ledger", c.topic, c.name)
	}
	data, err := encodeSnapshot(snap)
	if err != nil {
		return err
	}
	c.snapSeq++
	n := max(1, (len(data)+chunkSize-1)/chunkSize)
	for i := 0; i < n; i++ {
		part := data[min(i*chunkSize, len(data)):min((i+1)*chunkSize, len(data))]
		raw, err := proto.Marshal(&metapb.CursorChunk{Snapshot: c.snapSeq, Index: int32(i), Count: int32(n), Data: part})
		if err != nil {
			return err
		}
		if _, err := c.writer.Append(ctx, raw); err != nil {
			return fmt.Errorf("cursor %s/%s: write snapshot: %w", c.topic, c.name, err)
		}
		c.written += int64(len(raw))
	}
	return nil
}

// newLedgerLocked starts a new cursor ledger holding the current state,
// points the metadata at it and deletes the previous one.
func (c *Cursor) newLedgerLocked(ctx context.Context) error {
	w, err := c.d.Ledgers.Create(ctx, ledger.CreateOptions{
		Ensemble: c.d.Ensemble, WriteQuorum: c.d.WriteQuorum, AckQuorum: c.d.AckQuorum,
		Custom: map[string][]byte{"topic": []byte(c.topic), "cursor": []byte(c.name)},
	})
	if err != nil {
		return fmt.Errorf("cursor %s/%s: create cursor ledger: %w", c.topic, c.name, err)
	}
	old, oldWritten := c.writer, c.written
	c.writer, c.written = w, 0
	c.mu.Lock()
	snap := c.mu.st.Snapshot()
	md := c.mu.st.MarkDelete()
	c.mu.dirty = false
	c.mu.Unlock()
	undo := func(err error) error {
		c.writer, c.written = old, oldWritten
		c.mu.Lock()
		c.mu.dirty = true
		c.mu.Unlock()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w.Close(cctx)
		c.d.Ledgers.Delete(cctx, w.ID())
		cancel()
		return err
	}
	if err := c.writeSnapshotLocked(ctx, snap); err != nil {
		return undo(err)
	}
	info := &metapb.CursorInfo{CursorLedgerId: w.ID(), MarkDeleteLedger: md.Ledger, MarkDeleteEntry: md.Entry, CreatedAtUnixMs: time.Now().UnixMilli()}
	raw, _ := proto.Marshal(info)
	rev, err := c.d.Store.Commit(ctx, c.d.Guard, metastore.PutOp(metastore.CursorKey(c.topic, c.name), raw, c.infoRev))
	if errors.Is(err, metastore.ErrNotOwner) {
		return undo(fmt.Errorf("%w: %v", ErrFenced, err))
	}
	if err != nil {
		return undo(fmt.Errorf("cursor %s/%s: store cursor metadata: %w", c.topic, c.name, err))
	}
	c.infoRev = rev
	if c.withoutLedger != nil {
		c.log.Info("cursor ledger created again", zap.Int64("ledger", w.ID()))
		c.withoutLedger = nil
	}
	if old != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		old.Close(cctx)
		if err := c.d.Ledgers.Delete(cctx, old.ID()); err != nil {
			c.log.Warn("old cursor ledger not deleted; the sweeper will", zap.Int64("ledger", old.ID()), zap.Error(err))
		}
		cancel()
	}
	return nil
}

// Close persists the state and closes the cursor ledger.
func (c *Cursor) Close(ctx context.Context) error {
	err := c.Persist(ctx)
	if errors.Is(err, ErrClosed) {
		return nil
	}
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.closed = true
	if c.writer != nil {
		err = errors.Join(err, c.writer.Close(ctx))
		c.writer = nil
	}
	return err
}

// Delete removes the subscription: its metadata, then its cursor ledger.
func (c *Cursor) Delete(ctx context.Context) error {
	if c.ephemeral {
		return nil
	}
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	_, err := c.d.Store.Commit(ctx, c.d.Guard, metastore.DeleteOp(metastore.CursorKey(c.topic, c.name), metastore.AnyVersion))
	if errors.Is(err, metastore.ErrNotOwner) {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	if err != nil {
		return err
	}
	c.closed = true
	if c.writer != nil {
		c.writer.Close(ctx)
		if err := c.d.Ledgers.Delete(ctx, c.writer.ID()); err != nil {
			c.log.Warn("cursor ledger not deleted; the sweeper will", zap.Int64("ledger", c.writer.ID()), zap.Error(err))
		}
		c.writer = nil
	}
	return nil
}
