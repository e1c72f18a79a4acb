package broker

import (
	"cmp"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Deduplication state of one producer on one topic partition (guarded by
// topic.mu). A send whose sequence id is at most pushed is a re-send:
//   - if its first append is still in flight, it waits for that append and
//     gets the same outcome (so a re-send is never acknowledged before
//     the original is stored, nor stored twice);
//   - if it was stored, it is acknowledged as a duplicate with the
//     position it was stored at, when that is among the last
//     recentPositions stored (else with -1:-1, as Pulsar does);
//   - if its append failed, it is stored now.
type dedupState struct {
	pushed    int64 // highest sequence id handed to storage
	persisted int64 // highest sequence id stored
	inflight  map[int64]*dedupWaiters
	recent    []seqPosition // ring of up to recentPositions, grown as used
	next      int
	// lastActive: when the producer last connected, disconnected or had
	// an append stored (the load time for a state rebuilt on load).
	lastActive time.Time
}

// recentPositions is how many stored positions a producer's state keeps
// to answer re-sends with: the SDK re-sends at most its pending messages
// (1,000 by default).
const recentPositions = 1024

type seqPosition struct {
	seq int64
	pos mledger.Position
	ok  bool
}

// dedupWaiters are re-sends waiting for an append in flight.
type dedupWaiters struct {
	highest int64 // the append's highest sequence id (a batch has several)
	cbs     []func(pos mledger.Position, duplicate bool, err error)
}

// inflightCovering returns the append in flight whose sequence ids include
// seq, if any. Only re-sends (seq <= pushed) can have one.
func (d *dedupState) inflightCovering(seq int64) *dedupWaiters {
	if seq > d.pushed {
		return nil
	}
	if w := d.inflight[seq]; w != nil {
		return w
	}
	for first, w := range d.inflight {
		if first <= seq && seq <= w.highest {
			return w
		}
	}
	return nil
}

func newDedupState() *dedupState {
	return &dedupState{pushed: -1, persisted: -1, inflight: map[int64]*dedupWaiters{}}
}

// stored records that the send with first sequence id seq is at pos. The
// ring grows with use: most producers of a partition with many (short-lived
// ones) store a few messages each.
func (d *dedupState) stored(seq int64, pos mledger.Position) {
	r := seqPosition{seq: seq, pos: pos, ok: true}
	if len(d.recent) < recentPositions {
		d.recent = append(d.recent, r)
		return
	}
	d.recent[d.next] = r
	d.next = (d.next + 1) % recentPositions
}

// position returns where the send with first sequence id seq was stored,
// if it is among the recent ones.
func (d *dedupState) position(seq int64) (mledger.Position, bool) {
	for _, r := range d.recent {
		if r.ok && r.seq == seq {
			return r.pos, true
		}
	}
	return mledger.Position{}, false
}

// ---- a partition's table and its snapshots ----

// maxDedupSnapshotBytes bounds a deduplication snapshot (one etcd value),
// well below etcd's request limit (--max-request-bytes, 1.5 MiB by
// default): 10,000 producer names of 40 bytes take about 500 KB.
const maxDedupSnapshotBytes = 512 << 10

// dedupPurgeEvery is how often idle producers are looked for (more often
// when the inactivity timeout is shorter).
const dedupPurgeEvery = time.Minute

// dedupLimits bound a partition's deduplication state and say when it is
// snapshotted (see Config).
type dedupLimits struct {
	inactivity       time.Duration // a disconnected producer idle this long is forgotten
	maxProducers     int           // producer names in a snapshot, at most
	maxBytes         int           // bytes of a snapshot, at most
	snapshotEntries  int           // a snapshot once this many entries were stored since the last,
	snapshotInterval time.Duration // or once this long has passed since it, if any was
}

func (c *Config) dedupLimits() dedupLimits {
	return dedupLimits{
		inactivity:       c.DedupProducerInactivityTimeout,
		maxProducers:     c.DedupMaxProducers,
		maxBytes:         maxDedupSnapshotBytes,
		snapshotEntries:  c.DedupSnapshotEntries,
		snapshotInterval: c.DedupSnapshotInterval,
	}
}

// dedupTable is a partition's deduplication state: the state of each
// producer name, what the stored snapshot covers, and the policy of
// forgetting producers and of writing snapshots. It does no I/O and reads
// no clock: the topic feeds it events with the time, under topic.mu, and
// stores the snapshots it hands out.
//
// Invariants: a snapshot names at most lim.maxProducers producers and
// marshals to at most lim.maxBytes; the state it covers is the state at
// its position, so that loading it and replaying the entries after it
// rebuilds every producer it did not drop.
type dedupTable struct {
	lim       dedupLimits
	producers map[string]*dedupState // by producer name
	// pos: every entry up to it has its sequence id in producers (what a
	// snapshot may claim to cover). Kept here rather than read from the
	// managed ledger, whose lock append callbacks may hold.
	pos mledger.Position
	// Counts since the table was made: entries stored (or replayed on
	// load) and producers forgotten. A snapshot is due when they moved.
	stores, removals uint64
	// snap is what the stored snapshot covers.
	snap      dedupMark
	lastPurge time.Time
	// Producers forgotten because of the limits and not yet logged, and
	// connected producers the last snapshot left out.
	evicted, omitted int
	lastReport       time.Time
}

// dedupMark identifies a snapshot: the position it covers, the counts it
// includes and when it was taken.
type dedupMark struct {
	pos              mledger.Position
	stores, removals uint64
	at               time.Time
}

func newDedupTable(lim dedupLimits, now time.Time) *dedupTable {
	none := mledger.Position{Ledger: -1, Entry: -1}
	return &dedupTable{lim: lim, producers: map[string]*dedupState{}, pos: none,
		snap: dedupMark{pos: none, at: now}, lastPurge: now}
}

// get returns a producer's state, creating it.
func (tb *dedupTable) get(name string) *dedupState {
	d := tb.producers[name]
	if d == nil {
		d = newDedupState()
		tb.producers[name] = d
	}
	return d
}

// connect records that a producer of this name connected.
func (tb *dedupTable) connect(name string, now time.Time) *dedupState {
	d := tb.get(name)
	d.lastActive = now
	return d
}

// disconnect records that the producer of this name disconnected. One
// that never stored anything leaves no state behind (anonymous producers
// get a new name on every connection).
func (tb *dedupTable) disconnect(name string, now time.Time) {
	d := tb.producers[name]
	if d == nil {
		return
	}
	if d.persisted < 0 && len(d.inflight) == 0 {
		delete(tb.producers, name)
		return
	}
	d.lastActive = now
}

// appended records that the append of sequence ids seq..highest of d is
// stored at pos.
func (tb *dedupTable) appended(d *dedupState, seq, highest int64, pos mledger.Position, now time.Time) {
	d.persisted = max(d.persisted, highest)
	d.stored(seq, pos)
	d.lastActive = now
	tb.stores++
	if tb.pos.Before(pos) {
		tb.pos = pos
	}
}

// loaded records that the state was rebuilt from the snapshot at snapPos
// plus the replayed entries after it, up to last.
func (tb *dedupTable) loaded(snapPos, last mledger.Position, replayed int, now time.Time) {
	for _, d := range tb.producers {
		d.pushed = d.persisted
		d.lastActive = now
	}
	tb.pos = snapPos
	if snapPos.Before(last) {
		tb.pos = last
	}
	// A snapshot is due once the entries replayed would be worth writing.
	tb.snap = dedupMark{pos: snapPos, stores: tb.stores, removals: tb.removals, at: now}
	tb.stores += uint64(replayed)
}

// purge forgets the producers that are not connected, have no append in
// flight and were last active lim.inactivity ago or more (Pulsar's
// purgeInactiveProducers: only disconnected producers). It looks at most
// every dedupPurgeEvery and returns how many it forgot. A producer of that
// name that comes back is a new producer: its sequence ids start from
// what it sends.
func (tb *dedupTable) purge(now time.Time, connected func(name string) bool) int {
	if now.Sub(tb.lastPurge) < min(dedupPurgeEvery, tb.lim.inactivity) {
		return 0
	}
	tb.lastPurge = now
	n := 0
	for name, d := range tb.producers {
		if len(d.inflight) == 0 && now.Sub(d.lastActive) >= tb.lim.inactivity && !connected(name) {
			delete(tb.producers, name)
			n++
		}
	}
	if n > 0 {
		tb.removals++
	}
	return n
}

// due reports whether a snapshot should be written: producers were
// forgotten (their names leave etcd), or entries were stored since the
// last snapshot and there are lim.snapshotEntries of them, or
// lim.snapshotInterval has passed, or the partition is closing (final).
// Nothing changed: nothing to write. The cadence does not weaken
// deduplication: a load replays every entry after the stored snapshot.
func (tb *dedupTable) due(now time.Time, final bool) bool {
	stored := tb.stores - tb.snap.stores
	switch {
	case tb.removals != tb.snap.removals:
		return true
	case stored == 0:
		return false
	case final || stored >= uint64(tb.lim.snapshotEntries):
		return true
	}
	return now.Sub(tb.snap.at) >= tb.lim.snapshotInterval
}

// take builds the snapshot of the current state, within the limits:
// past lim.maxProducers names or lim.maxBytes, the producers that are
// not connected and have no append in flight are forgotten, least
// recently active first, until the rest fits; if the connected ones alone
// do not fit, the snapshot names the most recently active of them that
// do and the others stay in memory only (a restart forgets them). The
// caller writes the snapshot, then reports it with written.
func (tb *dedupTable) take(now time.Time, connected func(name string) bool) (*metapb.DedupSnapshot, dedupMark) {
	snap := &metapb.DedupSnapshot{LedgerId: tb.pos.Ledger, EntryId: tb.pos.Entry, Sequences: map[string]int64{}}
	type named struct {
		name string
		d    *dedupState
		size int
	}
	var all []named
	omitted := 0
	size := proto.Size(snap)
	for name, d := range tb.producers {
		if d.persisted >= 0 {
			n := named{name, d, dedupEntrySize(name, d.persisted)}
			all = append(all, n)
			size += n.size
		}
	}
	over := func() bool { return len(all) > tb.lim.maxProducers || size > tb.lim.maxBytes }
	if over() {
		slices.SortFunc(all, func(a, b named) int {
			return cmp.Or(a.d.lastActive.Compare(b.d.lastActive), cmp.Compare(a.name, b.name))
		})
		evicted := 0
		kept := all[:0]
		for i, n := range all {
			if len(all)-evicted > tb.lim.maxProducers || size > tb.lim.maxBytes {
				if len(n.d.inflight) == 0 && !connected(n.name) {
					delete(tb.producers, n.name)
					size -= n.size
					evicted++
					continue
				}
			}
			kept = append(kept, all[i])
		}
		all = kept
		if evicted > 0 {
			tb.removals++
			tb.evicted += evicted
		}
		for over() {
			size -= all[0].size
			all = all[1:]
			omitted++
		}
	}
	tb.omitted = omitted
	for _, n := range all {
		snap.Sequences[n.name] = n.d.persisted
	}
	return snap, dedupMark{pos: tb.pos, stores: tb.stores, removals: tb.removals, at: now}
}

// written records that the snapshot of m is stored.
func (tb *dedupTable) written(m dedupMark) { tb.snap = m }

// keepAfter is the position after which retention must keep every
// entry, so that a load replays all the stored snapshot does not cover;
// false when it covers every entry stored.
func (tb *dedupTable) keepAfter() (mledger.Position, bool) {
	return tb.snap.pos, tb.stores != tb.snap.stores
}

// overflow returns the producers forgotten because of the limits since it
// last reported and the connected ones the last snapshot left out, at
// most once a minute (for a warning).
func (tb *dedupTable) overflow(now time.Time) (evicted, omitted int, ok bool) {
	if tb.evicted+tb.omitted == 0 || now.Sub(tb.lastReport) < time.Minute {
		return 0, 0, false
	}
	evicted, omitted = tb.evicted, tb.omitted
	tb.evicted, tb.lastReport = 0, now
	return evicted, omitted, true
}

// dedupEntrySize is what one producer adds to a marshalled
// DedupSnapshot: a map entry (field 3) of key (1) and value (2).
func dedupEntrySize(name string, seq int64) int {
	inner := protowire.SizeTag(1) + protowire.SizeBytes(len(name)) + protowire.SizeTag(2) + protowire.SizeVarint(uint64(seq))
	return protowire.SizeTag(3) + protowire.SizeBytes(inner)
}
