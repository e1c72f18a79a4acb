package mledger

import (
	"context"
	"time"

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
// list is stored first (by the list protocol, see listState), then the
// ledgers are deleted; a crash in between leaves orphan ledgers for the
// broker's sweeper. It returns the ids deleted; none, and no error, while
// a rollover or close runs.
func (ml *ManagedLedger) Trim(ctx context.Context, firstUnconsumed Position, r Retention) ([]int64, error) {
	ml.mu.Lock()
	if ml.mu.err != nil || ml.mu.trimWait != nil {
		ml.mu.Unlock()
		return nil, nil // try again later
	}
	ledgers := ml.mu.st.stored
	if len(ledgers) == 0 { // opened without a ledger on a new partition
		ml.mu.Unlock()
		return nil, nil
	}
	now := time.Now()
	// The consumed prefix: closed ledgers entirely before firstUnconsumed.
	n := 0
	var consumedSize int64
	for _, ref := range ledgers[:len(ledgers)-1] {
		if !ref.Closed || !consumed(ref, firstUnconsumed) {
			break
		}
		n++
		consumedSize += ref.Size
	}
	drop := 0
	for _, ref := range ledgers[:n] {
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
	acts, ok := ml.mu.st.trim(drop)
	if !ok {
		ml.mu.Unlock()
		return nil, nil // a rollover or close runs: try again later
	}
	ch := make(chan trimResult, 1)
	ml.mu.trimWait = ch
	ml.feedLocked(acts)
	ml.mu.Unlock()
	select {
	case res := <-ch:
		return res.ids, res.err
	case <-ctx.Done():
		return nil, ctx.Err() // the list protocol goes on
	}
}

// consumed: every entry of ref is before p.
func consumed(ref *metapb.LedgerRef, p Position) bool {
	return ref.LedgerId < p.Ledger || ref.LedgerId == p.Ledger && ref.Entries <= p.Entry
}
