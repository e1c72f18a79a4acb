package mledger

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Retention says how long consumed data is kept. Negative values mean no
// limit; Pulsar's default (0, 0) deletes consumed ledgers at once.
type Retention struct {
	// Time a consumed ledger is kept after it was closed.
	Time time.Duration
	// Size: consumed ledgers beyond this many bytes go, oldest first.
	Size int64
}

// Trim deletes the oldest ledgers that hold only entries before
// firstUnconsumed (the slowest subscription's first unacknowledged entry,
// or the end of the partition when nobody subscribes) and that retention
// no longer asks to keep. The current ledger is never deleted. The ledger
// list is stored first, then the ledgers are deleted; a crash in between
// leaves orphan ledgers for the broker's sweeper. It returns the ids
// deleted.
func (ml *ManagedLedger) Trim(ctx context.Context, firstUnconsumed Position, r Retention) ([]int64, error) {
	ml.metaMu.Lock()
	defer ml.metaMu.Unlock()
	ml.mu.Lock()
	if ml.mu.err != nil || ml.mu.rolling {
		ml.mu.Unlock()
		return nil, nil // try again later
	}
	now := time.Now()
	// The consumed prefix: closed ledgers entirely before firstUnconsumed.
	n := 0
	var consumedSize int64
	for _, ref := range ml.mu.ledgers[:len(ml.mu.ledgers)-1] {
		if !ref.Closed || !consumed(ref, firstUnconsumed) {
			break
		}
		n++
		consumedSize += ref.Size
	}
	drop := 0
	for _, ref := range ml.mu.ledgers[:n] {
		expired := r.Time >= 0 && now.Sub(time.UnixMilli(ref.ClosedAtUnixMs)) >= r.Time
		overSize := r.Size >= 0 && consumedSize > r.Size
		if !expired && !overSize {
			break
		}
		drop++
		consumedSize -= ref.Size
	}
	if drop == 0 {
		ml.mu.Unlock()
		return nil, nil
	}
	gone := make([]int64, 0, drop)
	for _, ref := range ml.mu.ledgers[:drop] {
		gone = append(gone, ref.LedgerId)
	}
	kept := slices.Clone(ml.mu.ledgers[drop:])
	rev := ml.mu.modRev
	ml.mu.Unlock()

	newRev, err := ml.store(ctx, kept, rev)
	if err != nil {
		return nil, err
	}
	ml.mu.Lock()
	ml.mu.ledgers = kept // unchanged meanwhile: metaMu is held
	ml.mu.modRev = newRev
	for _, id := range gone {
		delete(ml.mu.readers, id)
	}
	ml.mu.Unlock()
	for _, id := range gone {
		if err := ml.d.Ledgers.Delete(ctx, id); err != nil {
			ml.log.Warn("trimmed ledger not deleted; the sweeper will", zap.Int64("ledger", id), zap.Error(err))
		}
	}
	ml.log.Info("trimmed consumed ledgers", zap.Int64s("ledgers", gone))
	return gone, nil
}

// consumed: every entry of ref is before p.
func consumed(ref *metapb.LedgerRef, p Position) bool {
	return ref.LedgerId < p.Ledger || ref.LedgerId == p.Ledger && ref.Entries <= p.Entry
}
