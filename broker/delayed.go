package broker

import (
	"time"

	"github.com/google/btree"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
)

// delayedIndex holds the delayed entries of a Shared or Key_Shared
// subscription (deliver_at_time in the future) until they are due, when
// they go to replay. Guarded by subscription.mu.
//
// It is bounded: it keeps at most max entries, the earliest due. The
// others are spilled: nothing about them is kept but the position from
// which the partition must be scanned again to find them, since the
// entries themselves are stored in the partition and stay unacknowledged.
// Invariant: every delayed entry that is unacknowledged, before the read
// position, and neither pending, in replay nor indexed, lies at or after
// spillFrom (then spilled is true), or at or after scanAt while a scan is
// on (then it is found by the scan or recorded in nextSpill).
//
// Nothing is persisted: after a restart the cursor starts again from its
// mark-delete position, which lies before every delayed entry (they are
// unacknowledged), and the entries are indexed again as they are read.
type delayedIndex struct {
	max    int
	byTime *btree.BTreeG[delayedItem]
	at     map[mledger.Position]int64 // indexed entries: their due time

	spilled    bool
	spillFrom  mledger.Position
	spillMinAt int64 // earliest due time spilled since the last scan began

	scanning  bool
	scanAt    mledger.Position // the next position the scan reads
	nextSpill *mledger.Position
}

// dueBy is the latest deliver_at_time (unix ms) that is due at now: a
// message is due once the millisecond its deliver_at_time names is over,
// not when it begins. Pulsar's clients (and Magnetar's) send the time
// they mean truncated to whole milliseconds (pulsar-client-go:
// now+DeliverAfter), so at the millisecond's start the time meant may
// still be up to 1 ms away; their own tests check that no message arrives
// before it. So a message is never early, and at most 1 ms late.
//
// Invariant (TestDueByAndDueAtAgree): at <= dueBy(now) exactly when now is
// not before dueAt(at), so the timer set for dueAt finds the entry due.
func dueBy(now time.Time) int64 { return now.UnixMilli() - 1 }

// dueAt is when an entry with deliver_at_time at becomes due (no
// overflow: time.Time holds UnixMilli(math.MaxInt64) plus 1 ms).
func dueAt(at int64) time.Time { return time.UnixMilli(at).Add(time.Millisecond) }

type delayedItem struct {
	at   int64 // unix ms
	pos  mledger.Position
	hash int32
}

func delayedLess(a, b delayedItem) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.pos.Before(b.pos)
}

func newDelayedIndex(max int) *delayedIndex {
	return &delayedIndex{max: max, byTime: btree.NewG(32, delayedLess), at: map[mledger.Position]int64{}}
}

func (d *delayedIndex) len() int { return d.byTime.Len() }

func (d *delayedIndex) has(p mledger.Position) bool {
	_, ok := d.at[p]
	return ok
}

// add indexes a delayed entry, spilling the latest due one if full.
func (d *delayedIndex) add(it delayedItem) {
	if _, ok := d.at[it.pos]; ok {
		return
	}
	if d.byTime.Len() >= d.max {
		last, _ := d.byTime.Max()
		if !delayedLess(it, last) {
			d.spill(it)
			return
		}
		d.byTime.Delete(last)
		delete(d.at, last.pos)
		d.spill(last)
	}
	d.byTime.ReplaceOrInsert(it)
	d.at[it.pos] = it.at
}

func (d *delayedIndex) spill(it delayedItem) {
	switch {
	case d.scanning && it.pos.Before(d.scanAt):
		if d.nextSpill == nil || it.pos.Before(*d.nextSpill) {
			p := it.pos
			d.nextSpill = &p
		}
	case d.scanning:
		// The scan reaches it.
	case !d.spilled || it.pos.Before(d.spillFrom):
		d.spilled, d.spillFrom = true, it.pos
	}
	if d.spillMinAt == 0 || it.at < d.spillMinAt {
		d.spillMinAt = it.at
	}
}

// due removes and returns the entries due by cutoff (dueBy of the time).
func (d *delayedIndex) due(cutoff int64) []delayedItem {
	var out []delayedItem
	for {
		first, ok := d.byTime.Min()
		if !ok || first.at > cutoff {
			return out
		}
		d.byTime.DeleteMin()
		delete(d.at, first.pos)
		out = append(out, first)
	}
}

// next is when the dispatcher must look again: the earliest due time, or
// the earliest spilled one if a scan is needed for it (0: never).
func (d *delayedIndex) next() int64 {
	var n int64
	if first, ok := d.byTime.Min(); ok {
		n = first.at
	}
	if (d.spilled || d.scanning) && d.spillMinAt > 0 && (n == 0 || d.spillMinAt < n) {
		n = d.spillMinAt
	}
	return n
}

// wantScan reports whether spilled entries should be looked for now:
// there is room for them, or one of them is due by cutoff (dueBy).
func (d *delayedIndex) wantScan(cutoff int64) bool {
	if d.scanning {
		return true
	}
	return d.spilled && (2*d.byTime.Len() < d.max || d.spillMinAt <= cutoff)
}

// startScan begins a scan at the earliest spilled position.
func (d *delayedIndex) startScan() {
	if d.scanning {
		return
	}
	d.scanning, d.scanAt = true, d.spillFrom
	d.spilled, d.nextSpill, d.spillMinAt = false, nil, 0
}

// scanned moves the scan past p.
func (d *delayedIndex) scanned(next mledger.Position) { d.scanAt = next }

// endScan ends a scan that reached the read position.
func (d *delayedIndex) endScan() {
	d.scanning = false
	if d.nextSpill != nil {
		d.spilled, d.spillFrom = true, *d.nextSpill
		d.nextSpill = nil
	}
}
