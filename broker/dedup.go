package broker

import "github.com/magnetar-io/magnetar/broker/internal/mledger"

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
	recent    []seqPosition // ring of recentPositions, allocated on first use
	next      int
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

// stored records that the send with first sequence id seq is at pos.
func (d *dedupState) stored(seq int64, pos mledger.Position) {
	if d.recent == nil {
		d.recent = make([]seqPosition, recentPositions)
	}
	d.recent[d.next] = seqPosition{seq: seq, pos: pos, ok: true}
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
