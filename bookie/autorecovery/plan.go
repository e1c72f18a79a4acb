package autorecovery

import (
	"slices"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// mark is one under-replication mark of the ledger being repaired.
type mark struct {
	reason metapb.UnderReplicated_Reason
	target string // REASON_MOVE: where to
	rev    int64  // mod revision: the mark is deleted only if unchanged
}

// bookieView is what the worker knows of a bookie when it plans.
type bookieView struct {
	live     bool // registered
	draining bool // being (or done being) decommissioned
	lost     bool // declared lost by the auditor (gone longer than the delay)
}

// fragment is the part of one segment stored at one ensemble position:
// entries First..Last (Last < First: none) whose write set holds Pos.
type fragment struct {
	Segment, Pos int
	Bookie       string
	First, Last  int64
	Target       string // a replace's preferred new bookie (rebalancing)
}

// plan is what a worker does for one ledger. It is computed from the
// metadata, the ledger's marks and the bookies' state, without I/O, and
// carried out in order: fills, then the copies of replaces, then one
// compare-and-swap of the metadata with every replacement, then the
// marks in clear are deleted.
//
// Invariants (checked by the model test):
//   - The metadata is changed only by replaces, and only after every entry
//     of the fragment is durable on the new bookie: metadata never names
//     a bookie that lacks its data.
//   - The last segment of a ledger that is not closed is never planned:
//     it belongs to its writer.
//   - A mark is cleared only when every fragment of its bookie in the
//     ledger is planned (or there is none): a postponed fragment keeps it.
type plan struct {
	fills    []fragment // copy what the bookie lacks back to it
	replaces []fragment // copy everything to a new bookie, then swap it in
	clear    []string   // marks deleted once the plan succeeded
	keep     []string   // marks left for later (a writer's fragment, or a bookie not yet lost)
}

// planRepair decides what to do for a ledger's marks. skipLast leaves the
// last segment out (an open ledger whose writer is alive); a ledger that
// is not closed always skips it.
func planRepair(m *ledger.Metadata, marks map[string]mark, view func(string) bookieView, skipLast bool) plan {
	var p plan
	if m.State != ledger.StateClosed {
		skipLast = true
	}
	for _, b := range sortedKeys(marks) {
		mk := marks[b]
		v := view(b)
		var act func(fragment)
		switch {
		case v.draining:
			act = func(f fragment) { p.replaces = append(p.replaces, f) }
		case mk.reason == metapb.UnderReplicated_REASON_MOVE:
			act = func(f fragment) { f.Target = mk.target; p.replaces = append(p.replaces, f) }
		case v.live:
			act = func(f fragment) { p.fills = append(p.fills, f) }
		case v.lost || mk.reason == metapb.UnderReplicated_REASON_LOST:
			act = func(f fragment) { p.replaces = append(p.replaces, f) }
		default:
			// Gone, but not for longer than the lost-bookie delay: it may
			// come back with its data. The auditor marks it lost later.
			p.keep = append(p.keep, b)
			continue
		}
		postponed := false
		for i, seg := range m.Segments {
			for pos, sb := range seg.Bookies {
				if sb != b {
					continue
				}
				if skipLast && i == len(m.Segments)-1 {
					postponed = true
					continue
				}
				act(fragment{Segment: i, Pos: pos, Bookie: b, First: seg.First, Last: m.SegmentEnd(i)})
			}
		}
		if postponed {
			p.keep = append(p.keep, b)
		} else {
			p.clear = append(p.clear, b)
		}
	}
	return p
}

// entries returns the ids of f's entries (those whose write set holds
// f.Pos), in increasing order.
func (f fragment) entries(m *ledger.Metadata) []int64 {
	var out []int64
	for e := f.First; e <= f.Last; e++ {
		if slices.Contains(ledger.WriteSet(e, m.Ensemble, m.WriteQuorum), f.Pos) {
			out = append(out, e)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
