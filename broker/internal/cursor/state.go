// Package cursor is a durable subscription's position in a managed ledger:
// the mark-delete position (every entry up to it is acknowledged), the
// entries acknowledged individually after it (the gaps between them are
// the "ack holes"), and the messages acknowledged inside batch entries.
//
// State is the pure part, tested step by step; Cursor persists it as
// snapshots in a cursor ledger of its own, with a pointer in the
// metastore, so that its size is not limited by etcd's request size.
package cursor

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/google/btree"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Position is a managed ledger position.
type Position = mledger.Position

// span is a run of acknowledged entries of one ledger, From..To inclusive.
type span struct{ Ledger, From, To int64 }

func spanLess(a, b span) bool {
	return a.Ledger < b.Ledger || a.Ledger == b.Ledger && a.From < b.From
}

// State is a cursor's acknowledgement state. Not safe for concurrent use.
//
// Invariants: every span lies after the mark-delete position and spans do
// not touch (adjacent ones are merged); the entry after the mark-delete
// position is not acknowledged (else the mark-delete position would have
// moved over it); partially acknowledged batches are after the mark-delete
// position and not inside a span.
type State struct {
	markDelete Position
	acked      *btree.BTreeG[span]
	count      int64 // entries in spans
	batches    map[Position]*batchAck
	next       func(Position) Position
}

type batchAck struct {
	size  int
	bits  []uint64
	acked int
}

// NewState starts with everything up to markDelete acknowledged. next
// returns the position after a position (the managed ledger's Next), so
// that the mark-delete position can cross ledger boundaries.
func NewState(markDelete Position, next func(Position) Position) *State {
	return &State{markDelete: markDelete, acked: btree.NewG(32, spanLess), batches: map[Position]*batchAck{}, next: next}
}

// MarkDelete is the position up to which everything is acknowledged.
func (s *State) MarkDelete() Position { return s.markDelete }

// Holes counts the unacknowledged runs between the mark-delete position
// and the last individually acknowledged entry.
func (s *State) Holes() int { return s.acked.Len() }

// AckedAfterMarkDelete counts the entries acknowledged individually.
func (s *State) AckedAfterMarkDelete() int64 { return s.count }

// DeletedRanges writes the individually acknowledged entries as Pulsar's
// individuallyDeletedMessages: open-closed ranges of positions,
// "[(3:4..3:7],(5:-1..5:2]]" for entries 3:5..3:7 and 5:0..5:2, at most
// max of them (then "...").
func (s *State) DeletedRanges(max int) string {
	var b strings.Builder
	b.WriteByte('[')
	n := 0
	s.acked.Ascend(func(sp span) bool {
		if n == max {
			b.WriteString(",...")
			return false
		}
		if n > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(%d:%d..%d:%d]", sp.Ledger, sp.From-1, sp.Ledger, sp.To)
		n++
		return true
	})
	b.WriteByte(']')
	return b.String()
}

// IsAcked reports whether the entry at p is acknowledged as a whole.
func (s *State) IsAcked(p Position) bool {
	if !s.markDelete.Before(p) {
		return true
	}
	_, ok := s.find(p)
	return ok
}

// find returns the span holding p.
func (s *State) find(p Position) (span, bool) {
	var found span
	ok := false
	s.acked.DescendLessOrEqual(span{Ledger: p.Ledger, From: p.Entry}, func(sp span) bool {
		if sp.Ledger == p.Ledger && sp.To >= p.Entry {
			found, ok = sp, true
		}
		return false
	})
	return found, ok
}

// Ack acknowledges the entry at p (all of its messages); it reports
// whether anything changed.
func (s *State) Ack(p Position) bool {
	if s.IsAcked(p) {
		return false
	}
	delete(s.batches, p)
	sp := span{Ledger: p.Ledger, From: p.Entry, To: p.Entry}
	// Merge with the span ending just before p and the one starting just
	// after it.
	s.acked.DescendLessOrEqual(span{Ledger: p.Ledger, From: p.Entry}, func(prev span) bool {
		if prev.Ledger == p.Ledger && prev.To == p.Entry-1 {
			s.acked.Delete(prev)
			sp.From = prev.From
		}
		return false
	})
	if nxt, ok := s.acked.Get(span{Ledger: p.Ledger, From: p.Entry + 1}); ok {
		s.acked.Delete(nxt)
		sp.To = nxt.To
	}
	s.acked.ReplaceOrInsert(sp)
	s.count++
	s.advance()
	return true
}

// advance moves the mark-delete position over the acknowledged entries
// that follow it.
func (s *State) advance() {
	for {
		first, ok := s.acked.Min()
		if !ok {
			return
		}
		n := s.next(s.markDelete)
		if first.Ledger != n.Ledger || first.From != n.Entry {
			return
		}
		s.acked.Delete(first)
		s.count -= first.To - first.From + 1
		s.markDelete = Position{Ledger: first.Ledger, Entry: first.To}
	}
}

// AckCumulative acknowledges everything up to and including p.
func (s *State) AckCumulative(p Position) bool {
	if !s.markDelete.Before(p) {
		return false
	}
	s.markDelete = p
	for {
		first, ok := s.acked.Min()
		if !ok || p.Before(Position{Ledger: first.Ledger, Entry: first.From}) {
			break
		}
		s.acked.Delete(first)
		s.count -= first.To - first.From + 1
		if first.Ledger == p.Ledger && first.To > p.Entry {
			rest := span{Ledger: first.Ledger, From: p.Entry + 1, To: first.To}
			s.acked.ReplaceOrInsert(rest)
			s.count += rest.To - rest.From + 1
			break
		}
	}
	for bp := range s.batches {
		if !p.Before(bp) {
			delete(s.batches, bp)
		}
	}
	s.advance()
	return true
}

// AckBatchIndex acknowledges message i of the batch entry at p, of size
// messages; when all are acknowledged the entry is.
func (s *State) AckBatchIndex(p Position, i, size int) (bool, error) {
	if size < 1 || i < 0 || i >= size || size > MaxBatchSize {
		return false, fmt.Errorf("cursor: batch index %d of a batch of %d", i, size)
	}
	if s.IsAcked(p) {
		return false, nil
	}
	b := s.batches[p]
	if b == nil {
		b = &batchAck{size: size, bits: make([]uint64, (size+63)/64)}
		s.batches[p] = b
	}
	if b.size != size {
		return false, fmt.Errorf("cursor: entry %v is a batch of %d, not %d", p, b.size, size)
	}
	if b.bits[i/64]&(1<<(i%64)) != 0 {
		return false, nil
	}
	b.bits[i/64] |= 1 << (i % 64)
	b.acked++
	if b.acked == b.size {
		s.Ack(p)
	}
	return true, nil
}

// MaxBatchSize bounds the messages of a batch the cursor tracks.
const MaxBatchSize = 1 << 20

// BatchAcked reports whether message i of the batch at p is acknowledged.
func (s *State) BatchAcked(p Position, i int) bool {
	if s.IsAcked(p) {
		return true
	}
	b := s.batches[p]
	return b != nil && i < b.size && b.bits[i/64]&(1<<(i%64)) != 0
}

// AckedBatchIndexes lists the acknowledged messages of a partially
// acknowledged batch at p (none otherwise).
func (s *State) AckedBatchIndexes(p Position) []int32 {
	b := s.batches[p]
	if b == nil {
		return nil
	}
	out := make([]int32, 0, b.acked)
	for i := 0; i < b.size; i++ {
		if b.bits[i/64]&(1<<(i%64)) != 0 {
			out = append(out, int32(i))
		}
	}
	return out
}

// Reset forgets every acknowledgement and puts the mark-delete position at
// p: the next entry delivered is the one after p.
func (s *State) Reset(p Position) {
	s.markDelete = p
	s.acked.Clear(false)
	s.count = 0
	s.batches = map[Position]*batchAck{}
}

// Snapshot returns the state as stored.
func (s *State) Snapshot() *metapb.CursorSnapshot {
	snap := &metapb.CursorSnapshot{MarkDeleteLedger: s.markDelete.Ledger, MarkDeleteEntry: s.markDelete.Entry}
	var cur *metapb.AckedRanges
	var prevEnd int64
	s.acked.Ascend(func(sp span) bool {
		if cur == nil || cur.LedgerId != sp.Ledger {
			cur = &metapb.AckedRanges{LedgerId: sp.Ledger}
			snap.Acked = append(snap.Acked, cur)
			prevEnd = 0
		}
		cur.Deltas = append(cur.Deltas, uint64(sp.From-prevEnd), uint64(sp.To-sp.From))
		prevEnd = sp.To
		return true
	})
	for p, b := range s.batches {
		raw := make([]byte, 8*len(b.bits))
		for i, w := range b.bits {
			for j := 0; j < 8; j++ {
				raw[8*i+j] = byte(w >> (8 * j))
			}
		}
		snap.BatchAcks = append(snap.BatchAcks, &metapb.BatchAck{LedgerId: p.Ledger, EntryId: p.Entry, BatchSize: int32(b.size), Acked: raw})
	}
	return snap
}

// LoadState rebuilds a state from a snapshot, checking it.
func LoadState(snap *metapb.CursorSnapshot, next func(Position) Position) (*State, error) {
	s := NewState(Position{Ledger: snap.MarkDeleteLedger, Entry: snap.MarkDeleteEntry}, next)
	last := s.markDelete
	for _, r := range snap.Acked {
		if len(r.Deltas)%2 != 0 {
			return nil, fmt.Errorf("cursor: corrupt snapshot: odd range list for ledger %d", r.LedgerId)
		}
		var prevEnd int64
		for i := 0; i < len(r.Deltas); i += 2 {
			from := prevEnd + int64(r.Deltas[i])
			to := from + int64(r.Deltas[i+1])
			// Spans never touch (they would have been merged) and deltas
			// must not overflow.
			if from < prevEnd || to < from || (i > 0 && from < prevEnd+2) {
				return nil, fmt.Errorf("cursor: corrupt snapshot: range %d..%d of ledger %d", from, to, r.LedgerId)
			}
			sp := span{Ledger: r.LedgerId, From: from, To: to}
			if !last.Before(Position{Ledger: sp.Ledger, Entry: sp.From}) {
				return nil, fmt.Errorf("cursor: corrupt snapshot: range %d:%d..%d not after %v", sp.Ledger, sp.From, sp.To, last)
			}
			s.acked.ReplaceOrInsert(sp)
			s.count += to - from + 1
			last = Position{Ledger: sp.Ledger, Entry: sp.To}
			prevEnd = to
		}
	}
	for _, b := range snap.BatchAcks {
		size := int(b.BatchSize)
		if size < 1 || size > MaxBatchSize || len(b.Acked) != 8*((size+63)/64) {
			return nil, fmt.Errorf("cursor: corrupt snapshot: batch ack of %d:%d", b.LedgerId, b.EntryId)
		}
		p := Position{Ledger: b.LedgerId, Entry: b.EntryId}
		ba := &batchAck{size: size, bits: make([]uint64, (size+63)/64)}
		for i := range ba.bits {
			for j := 0; j < 8; j++ {
				ba.bits[i] |= uint64(b.Acked[8*i+j]) << (8 * j)
			}
			ba.acked += bits.OnesCount64(ba.bits[i])
		}
		if extra := len(ba.bits)*64 - size; extra > 0 && ba.bits[len(ba.bits)-1]>>(64-extra) != 0 || ba.acked == 0 {
			return nil, fmt.Errorf("cursor: corrupt snapshot: batch ack of %d:%d", b.LedgerId, b.EntryId)
		}
		if !s.IsAcked(p) {
			s.batches[p] = ba
		}
	}
	s.advance()
	return s, nil
}
