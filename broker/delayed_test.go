package broker

import (
	"math"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
)

func TestDelayedIndexKeepsTheEarliestAndRemembersSpills(t *testing.T) {
	d := newDelayedIndex(3)
	pos := func(e int64) mledger.Position { return mledger.Position{Ledger: 1, Entry: e} }
	// Entries 0..5 due at 60, 50, 40, 30, 20, 10: the index keeps the three
	// earliest (entries 3, 4, 5); the others spill from entry 0 on.
	for e := int64(0); e < 6; e++ {
		d.add(delayedItem{at: 60 - 10*e, pos: pos(e), hash: -1})
	}
	if d.len() != 3 || !d.spilled || d.spillFrom != pos(0) || d.spillMinAt != 40 {
		t.Fatalf("len %d spilled %v from %v min %d", d.len(), d.spilled, d.spillFrom, d.spillMinAt)
	}
	if d.next() != 10 {
		t.Fatalf("next %d, want 10", d.next())
	}
	// Not due yet, and room enough: no scan.
	if d.wantScan(15) {
		t.Fatal("scan wanted with the index full and nothing spilled due")
	}
	if got := d.due(20); len(got) != 2 || got[0].pos != pos(5) || got[1].pos != pos(4) {
		t.Fatalf("due at 20: %v", got)
	}
	// One left, under half: scan from the first spilled entry.
	if !d.wantScan(20) {
		t.Fatal("no scan with room in the index")
	}
	d.startScan()
	if !d.scanning || d.scanAt != pos(0) || d.spilled {
		t.Fatalf("scan state %+v", d)
	}
	// The scan finds entries 0..2 again; entry 0 (latest) spills once more,
	// behind the scan: the next scan starts there.
	for e := int64(0); e < 3; e++ {
		d.scanned(pos(e + 1))
		d.add(delayedItem{at: 60 - 10*e, pos: pos(e), hash: -1})
	}
	d.endScan()
	if d.len() != 3 || !d.spilled || d.spillFrom != pos(0) || d.scanning {
		t.Fatalf("after the scan: len %d spilled %v from %v scanning %v", d.len(), d.spilled, d.spillFrom, d.scanning)
	}
	if !d.has(pos(1)) || !d.has(pos(2)) || !d.has(pos(3)) || d.has(pos(0)) {
		t.Fatal("wrong entries indexed after the scan")
	}
}

// A deliver_at_time of at (whole ms, as a Pulsar client truncates the time
// it means) is due only once that millisecond is over, and the timer set
// for dueAt finds it due: never early, at most 1 ms late.
func TestDueByAndDueAtAgree(t *testing.T) {
	const at = int64(1_700_000_000_000)
	for _, tc := range []struct {
		now time.Time
		due bool
	}{
		{time.UnixMilli(at - 1), false},
		{time.UnixMilli(at), false},
		{time.UnixMilli(at).Add(999_999 * time.Nanosecond), false},
		{time.UnixMilli(at + 1), true},
		{time.UnixMilli(at + 1).Add(time.Nanosecond), true},
		{time.UnixMilli(at + 7), true},
	} {
		if got := at <= dueBy(tc.now); got != tc.due {
			t.Errorf("at %d, now %v: due %v, want %v", at, tc.now.UnixNano(), got, tc.due)
		}
		if got := !tc.now.Before(dueAt(at)); got != tc.due {
			t.Errorf("at %d, now %v: dueAt says due %v, want %v", at, tc.now.UnixNano(), got, tc.due)
		}
	}
	// The largest deliver_at_time is never due, and its timer is not in
	// the past (at+1 would wrap: the dispatcher would spin).
	if far := int64(math.MaxInt64); far <= dueBy(time.Now()) || !dueAt(far).After(time.Now()) {
		t.Fatalf("deliver_at_time %d: due by now %v, due at %v", far, far <= dueBy(time.Now()), dueAt(far))
	}
	// The index hands an entry out by the same rule.
	d := newDelayedIndex(4)
	d.add(delayedItem{at: at, pos: mledger.Position{Ledger: 1, Entry: 0}, hash: -1})
	if got := d.due(dueBy(time.UnixMilli(at).Add(500 * time.Microsecond))); len(got) != 0 {
		t.Fatalf("due within its millisecond: %v", got)
	}
	if got := d.due(dueBy(dueAt(at))); len(got) != 1 {
		t.Fatalf("not due at dueAt: %v", got)
	}
}
