package broker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

func TestDedupStateFindsInflightAndRecent(t *testing.T) {
	d := newDedupState()
	d.pushed = 19
	d.inflight[10] = &dedupWaiters{highest: 14} // a batch of 10..14
	d.inflight[15] = &dedupWaiters{highest: 15}
	d.inflight[19] = &dedupWaiters{highest: 19} // the last pushed
	for seq, want := range map[int64]*dedupWaiters{10: d.inflight[10], 12: d.inflight[10], 15: d.inflight[15], 19: d.inflight[19], 16: nil, 9: nil, 20: nil, 25: nil} {
		if got := d.inflightCovering(seq); got != want {
			t.Errorf("inflightCovering(%d) = %p, want %p", seq, got, want)
		}
	}
	for i := int64(0); i < recentPositions+10; i++ {
		d.stored(i, mledger.Position{Ledger: 1, Entry: i})
	}
	if _, ok := d.position(5); ok {
		t.Fatal("position 5 kept beyond the ring's size")
	}
	if p, ok := d.position(recentPositions + 5); !ok || p.Entry != recentPositions+5 {
		t.Fatalf("recent position: %v %v", p, ok)
	}
}

// A producer's ring of recent positions grows with use: a partition with
// many short-lived producers does not hold 1,024 positions for each.
func TestDedupStateRecentGrowsWithUse(t *testing.T) {
	d := newDedupState()
	d.stored(1, mledger.Position{Ledger: 1, Entry: 1})
	if cap(d.recent) > 8 {
		t.Fatalf("one stored send holds room for %d positions", cap(d.recent))
	}
}

var testLimits = dedupLimits{
	inactivity:       6 * time.Hour,
	maxProducers:     10000,
	maxBytes:         maxDedupSnapshotBytes,
	snapshotEntries:  1000,
	snapshotInterval: 2 * time.Minute,
}

// storeOne has producer name store one message at the next position.
func storeOne(tb *dedupTable, name string, now time.Time) {
	d := tb.get(name)
	seq := d.persisted + 1
	tb.appended(d, seq, seq, mledger.Position{Ledger: 1, Entry: tb.pos.Entry + 1}, now)
}

func names(snap *metapb.DedupSnapshot) string {
	return fmt.Sprint(slices.Sorted(maps.Keys(snap.Sequences)))
}

// Producers disconnected and idle past the timeout are purged (the next
// snapshot is due at once and names them no more); a connected producer
// is kept however idle, and so is one disconnected for less than the
// timeout or with an append in flight. A purged name that comes back is a
// new producer.
func TestDedupTablePurgesIdleDisconnectedProducers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tb := newDedupTable(testLimits, t0)
	conn := map[string]bool{}
	connected := func(n string) bool { return conn[n] }
	for _, n := range []string{"gone", "connected", "recent", "inflight"} {
		tb.connect(n, t0)
		conn[n] = true
		storeOne(tb, n, t0)
		storeOne(tb, n, t0)
	}
	tb.get("inflight").inflight[2] = &dedupWaiters{highest: 2}
	for _, n := range []string{"gone", "inflight"} {
		tb.disconnect(n, t0)
		delete(conn, n)
	}
	snap, mark := tb.take(t0, connected)
	tb.written(mark)
	if got := names(snap); got != "[connected gone inflight recent]" {
		t.Fatalf("snapshot before the timeout: %s", got)
	}
	tb.disconnect("recent", t0.Add(time.Hour))
	delete(conn, "recent")

	t1 := t0.Add(testLimits.inactivity)
	if tb.due(t1.Add(-time.Second), false) {
		t.Fatal("snapshot due with nothing changed")
	}
	if n := tb.purge(t1.Add(-dedupPurgeEvery), connected); n != 0 {
		t.Fatalf("%d purged before the timeout", n)
	}
	if n := tb.purge(t1, connected); n != 1 {
		t.Fatalf("%d purged at the timeout, want 1 (gone)", n)
	}
	if !tb.due(t1, false) {
		t.Fatal("no snapshot due after a purge")
	}
	snap, mark = tb.take(t1, connected)
	tb.written(mark)
	if got := names(snap); got != "[connected inflight recent]" {
		t.Fatalf("snapshot after the purge: %s", got)
	}
	if tb.due(t1, false) {
		t.Fatal("snapshot due again after it was written")
	}
	if d := tb.connect("gone", t1); d.persisted != -1 || d.pushed != -1 {
		t.Fatalf("a purged producer that comes back: persisted %d pushed %d, want a fresh state", d.persisted, d.pushed)
	}
}

// Snapshots are written when something changed and enough entries were
// stored or enough time passed since the last, or on unload; a failed
// write (written not called) stays due.
func TestDedupTableSnapshotCadence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	none := func(string) bool { return false }
	tb := newDedupTable(testLimits, t0)
	if tb.due(t0.Add(time.Hour), true) {
		t.Fatal("snapshot due with nothing stored")
	}
	storeOne(tb, "p", t0)
	if tb.due(t0.Add(testLimits.snapshotInterval-time.Second), false) {
		t.Fatal("due after one entry, before the interval")
	}
	if !tb.due(t0, true) {
		t.Fatal("not due on unload with an entry stored")
	}
	if !tb.due(t0.Add(testLimits.snapshotInterval), false) {
		t.Fatal("not due after the interval")
	}
	_, mark := tb.take(t0, none)
	tb.written(mark)
	for i := 1; i < testLimits.snapshotEntries; i++ {
		storeOne(tb, "p", t0)
	}
	if tb.due(t0, false) {
		t.Fatal("due one entry before the entries interval")
	}
	storeOne(tb, "p", t0)
	if !tb.due(t0, false) {
		t.Fatal("not due at the entries interval")
	}
	tb.take(t0, none) // the write fails: written is not called
	if !tb.due(t0, false) {
		t.Fatal("not due after a failed write")
	}
	if after, keep := tb.keepAfter(); !keep || after.Entry != 0 {
		t.Fatalf("retention may drop entries the stored snapshot does not cover: keep after %v %v", after, keep)
	}
	_, mark = tb.take(t0, none)
	tb.written(mark)
	if _, keep := tb.keepAfter(); keep {
		t.Fatal("retention held back with every entry covered")
	}
}

// With more producers than the snapshot may name (10,000 by default, or
// 512 KiB), the least recently active disconnected producers are
// forgotten, down to the limit; connected producers are not, and when they
// alone do not fit, the snapshot names the most recently active of them
// and stays within the bounds.
func TestDedupTableCapsTheSnapshot(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	anon := func(i int) string { return fmt.Sprintf("10.20.30.40:6650-%012x", i) } // as addProducer names them
	check := func(snap *metapb.DedupSnapshot, lim dedupLimits) {
		t.Helper()
		if n, size := len(snap.Sequences), proto.Size(snap); n > lim.maxProducers || size > lim.maxBytes {
			t.Fatalf("snapshot of %d producers, %d bytes: over %d, %d", n, size, lim.maxProducers, lim.maxBytes)
		}
	}

	t.Run("count", func(t *testing.T) {
		tb := newDedupTable(testLimits, t0)
		conn := map[string]bool{"connected-0": true}
		connected := func(n string) bool { return conn[n] }
		storeOne(tb, "connected-0", t0) // the least recently active: kept
		const extra = 2000
		for i := 0; i < testLimits.maxProducers+extra; i++ {
			storeOne(tb, anon(i), t0.Add(time.Duration(i)*time.Millisecond))
			tb.disconnect(anon(i), t0.Add(time.Duration(i)*time.Millisecond))
		}
		snap, _ := tb.take(t0.Add(time.Hour), connected)
		check(snap, testLimits)
		if len(snap.Sequences) != testLimits.maxProducers || len(tb.producers) != testLimits.maxProducers {
			t.Fatalf("%d in the snapshot, %d kept, want %d", len(snap.Sequences), len(tb.producers), testLimits.maxProducers)
		}
		if _, ok := snap.Sequences["connected-0"]; !ok {
			t.Fatal("a connected producer was forgotten")
		}
		if _, ok := snap.Sequences[anon(extra)]; ok {
			t.Fatalf("%s kept: not among the least recently active", anon(extra))
		}
		if _, ok := snap.Sequences[anon(extra+1)]; !ok {
			t.Fatalf("%s forgotten: one more than needed", anon(extra+1))
		}
		if ev, om, ok := tb.overflow(t0.Add(time.Hour)); !ok || ev != extra+1 || om != 0 {
			t.Fatalf("overflow reported %d forgotten, %d omitted, %v", ev, om, ok)
		}
	})

	t.Run("bytes", func(t *testing.T) {
		tb := newDedupTable(testLimits, t0)
		long := strings.Repeat("n", maxNameLength-6)
		for i := 0; i < testLimits.maxProducers; i++ {
			name := fmt.Sprintf("%s%06d", long, i)
			storeOne(tb, name, t0)
			tb.disconnect(name, t0)
		}
		snap, _ := tb.take(t0, func(string) bool { return false })
		check(snap, testLimits)
		if n := len(snap.Sequences); n != len(tb.producers) || n < testLimits.maxBytes/(maxNameLength+16) {
			t.Fatalf("%d producers in the snapshot, %d kept", n, len(tb.producers))
		}
		var sum int
		for name, seq := range snap.Sequences {
			sum += dedupEntrySize(name, seq)
		}
		if want := proto.Size(snap) - proto.Size(&metapb.DedupSnapshot{LedgerId: snap.LedgerId, EntryId: snap.EntryId}); sum != want {
			t.Fatalf("sizes estimated %d, marshalled %d", sum, want)
		}
	})

	t.Run("connected", func(t *testing.T) {
		lim := testLimits
		lim.maxProducers = 100
		tb := newDedupTable(lim, t0)
		for i := 0; i < 150; i++ {
			storeOne(tb, anon(i), t0.Add(time.Duration(i)*time.Second))
		}
		snap, _ := tb.take(t0, func(string) bool { return true })
		check(snap, lim)
		if len(tb.producers) != 150 {
			t.Fatalf("connected producers forgotten: %d left", len(tb.producers))
		}
		if _, ok := snap.Sequences[anon(149)]; !ok {
			t.Fatal("the most recently active producer left out")
		}
		if _, ok := snap.Sequences[anon(49)]; ok {
			t.Fatal("a least recently active producer snapshotted")
		}
		if _, om, ok := tb.overflow(t0); !ok || om != 50 {
			t.Fatalf("overflow reported %d omitted, %v", om, ok)
		}
	})
}
