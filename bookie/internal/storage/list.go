package storage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"

	"github.com/magnetar-io/magnetar/bookie/wire"
)

// MaxListEntries caps one ListEntries answer.
const MaxListEntries = 65536

// ListEntries returns the ids of the ledger's stored entries from start on,
// in increasing order, at most limit of them (capped at MaxListEntries), and
// whether more follow. A ledger this bookie never stored is
// wire.ErrNoSuchLedger. It reads keys only.
func (d *DB) ListEntries(ledger, start int64, limit int) ([]int64, bool, error) {
	d.mu.Lock()
	err := d.mu.err
	st := d.mu.ledgers[ledger]
	d.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	if st == nil {
		return nil, false, fmt.Errorf("%w: ledger %d", wire.ErrNoSuchLedger, ledger)
	}
	if limit <= 0 || limit > MaxListEntries {
		limit = MaxListEntries
	}
	upper := entryKey(ledger, math.MaxInt64)
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: entryKey(ledger, max(start, 0)), UpperBound: upper})
	if err != nil {
		return nil, false, fmt.Errorf("%w: list ledger %d: %v", wire.ErrStorage, ledger, err)
	}
	defer it.Close()
	var ids []int64
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != entryKeyLen {
			continue
		}
		if len(ids) == limit {
			return ids, true, nil
		}
		ids = append(ids, int64(binary.BigEndian.Uint64(k[9:])))
	}
	if err := it.Error(); err != nil {
		return nil, false, fmt.Errorf("%w: list ledger %d: %v", wire.ErrStorage, ledger, err)
	}
	return ids, false, nil
}

// DiskSpaceUsage is the bytes the storage takes on disk, the entry log's
// files kept for reuse included.
func (d *DB) DiskSpaceUsage() uint64 {
	n := max(d.logBytes.Load(), 0)
	if d.elog != nil {
		n += d.elog.freeBytes.Load()
	}
	return d.db.Metrics().DiskSpaceUsage() + uint64(n)
}
