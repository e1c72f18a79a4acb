package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Rebalancing goes beyond BookKeeper and Pulsar, which leave old data where
// it was written: the auditor moves closed ledgers' copies from the
// fullest writable bookies to the emptiest, by the same copy, then
// compare-and-swap steps as re-replication (marks with REASON_MOVE), and
// the source bookies delete what no metadata names any more in their
// garbage collection. A bookie's usage is what the metadata says it holds
// (the closed ledgers naming it, each counted at length * Qw / E), over
// that plus its free disk: exact at once, where disk usage would lag
// behind compactions.

// maxMovesPerRound bounds the moves one round orders; the next round
// waits until they are done.
const maxMovesPerRound = 32

// DefaultRebalanceSpread is the default target: the fullest and the
// emptiest bookie within 20% of the mean usage.
const DefaultRebalanceSpread = 0.2

// bookieLoad is a writable bookie's usage.
type bookieLoad struct {
	id       string
	held     float64 // bytes the metadata says it holds
	capacity float64 // held + free disk
}

func (l bookieLoad) usage() float64 {
	if l.capacity <= 0 {
		return 0
	}
	return l.held / l.capacity
}

// heldLedger is a closed ledger with a copy on a bookie.
type heldLedger struct {
	id      int64
	size    float64  // bytes on one bookie (estimated)
	bookies []string // every bookie the ledger names
}

// move is one ledger's copies moving from one bookie to another.
type move struct {
	ledger   int64
	from, to string
	size     float64
}

// spreadOf is (max - min) / mean usage; 0 for fewer than 2 bookies.
func spreadOf(loads []bookieLoad) float64 {
	if len(loads) < 2 {
		return 0
	}
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	for _, l := range loads {
		u := l.usage()
		lo, hi, sum = min(lo, u), max(hi, u), sum+u
	}
	mean := sum / float64(len(loads))
	if mean == 0 {
		return 0
	}
	return (hi - lo) / mean
}

// planMoves orders moves from the fullest to the emptiest bookie, one at
// a time with the loads updated, until the spread is within target, no
// move narrows it, or maxMoves. It is pure: the auditor feeds it the
// loads and the ledgers each bookie holds.
func planMoves(loads []bookieLoad, held map[string][]heldLedger, target float64, maxMoves int) ([]move, float64) {
	loads = slices.Clone(loads)
	moved := map[int64]bool{}
	var out []move
	for len(out) < maxMoves {
		spread := spreadOf(loads)
		if spread <= target {
			return out, spread
		}
		src, dst := 0, 0
		for i, l := range loads {
			if l.usage() > loads[src].usage() {
				src = i
			}
			if l.usage() < loads[dst].usage() {
				dst = i
			}
		}
		// The largest ledger that does not overshoot: after the move the
		// source must stay at least as full as the destination.
		room := (loads[src].usage() - loads[dst].usage()) / (1/loads[src].capacity + 1/loads[dst].capacity)
		best := -1
		cands := held[loads[src].id]
		for i, h := range cands {
			if moved[h.id] || slices.Contains(h.bookies, loads[dst].id) || h.size <= 0 || h.size > room {
				continue
			}
			if best < 0 || h.size > cands[best].size {
				best = i
			}
		}
		if best < 0 {
			return out, spread
		}
		h := cands[best]
		moved[h.id] = true
		loads[src].held -= h.size
		loads[dst].held += h.size
		out = append(out, move{ledger: h.id, from: loads[src].id, to: loads[dst].id, size: h.size})
	}
	return out, spreadOf(loads)
}

// rebalanceRound runs one round if a rebalance is requested (or auto is
// on) and the previous round's moves are done: it measures the loads,
// plans moves and marks them. A request whose target is met is removed.
func (s *Service) rebalanceRound(ctx context.Context, auto bool) error {
	kv, err := s.store.Get(ctx, metastore.RebalanceKey)
	requested := err == nil
	if err != nil && !errors.Is(err, metastore.ErrNotFound) {
		return err
	}
	if !requested && !auto {
		return nil
	}
	req := &metapb.Rebalance{TargetSpread: s.cfg.RebalanceSpread}
	if requested {
		if proto.Unmarshal(kv.Value, req) != nil || req.TargetSpread <= 0 {
			req.TargetSpread = s.cfg.RebalanceSpread
		}
	}
	pending, err := s.pendingMoves(ctx)
	if err != nil || pending > 0 {
		return err
	}
	loads, held, err := s.measure(ctx)
	if err != nil {
		return err
	}
	moves, spread := planMoves(loads, held, req.TargetSpread, maxMovesPerRound)
	var bytes float64
	for _, m := range moves {
		raw, _ := proto.Marshal(&metapb.UnderReplicated{Reason: metapb.UnderReplicated_REASON_MOVE, MarkedAtUnixMs: time.Now().UnixMilli(), MarkedBy: "rebalance", Target: m.to})
		if _, err := s.store.Create(ctx, metastore.UnderReplicatedKey(m.ledger, m.from), raw); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
			return err
		}
		bytes += m.size
	}
	if len(moves) > 0 {
		s.log.Info("autorecovery: rebalancing", zap.Int("moves", len(moves)), zap.Float64("bytes", bytes), zap.Float64("spread-after", spread), zap.Float64("target", req.TargetSpread))
	}
	if !requested {
		return nil
	}
	req.Moves += int64(len(moves))
	req.MovedBytes += int64(bytes)
	req.Spread = spreadOf(loads)
	if len(moves) == 0 {
		// Within the target, or nothing can narrow it: done.
		s.log.Info("autorecovery: rebalance done", zap.Float64("spread", req.Spread), zap.Int64("moves", req.Moves))
		return s.store.CompareAndDelete(ctx, metastore.RebalanceKey, kv.ModRevision)
	}
	raw, _ := proto.Marshal(req)
	if _, err := s.store.CompareAndSwap(ctx, metastore.RebalanceKey, raw, kv.ModRevision); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
		return err
	}
	return nil
}

// pendingMoves counts the MOVE marks not yet carried out.
func (s *Service) pendingMoves(ctx context.Context) (int, error) {
	n := 0
	err := s.store.ListAll(ctx, metastore.UnderReplicatedPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var u metapb.UnderReplicated
		if proto.Unmarshal(kv.Value, &u) == nil && u.Reason == metapb.UnderReplicated_REASON_MOVE {
			n++
		}
		return nil
	})
	return n, err
}

// measure reads the writable bookies' loads and the closed ledgers each
// holds.
func (s *Service) measure(ctx context.Context) ([]bookieLoad, map[string][]heldLedger, error) {
	reg, err := s.registry(ctx)
	if err != nil {
		return nil, nil, err
	}
	byID := map[string]*bookieLoad{}
	for id, info := range reg {
		if !info.ReadOnly {
			byID[id] = &bookieLoad{id: id, capacity: float64(info.FreeDiskBytes)}
		}
	}
	held := map[string][]heldLedger{}
	err = s.store.ListAll(ctx, metastore.LedgersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		id, err := metastore.ParseLedgerKey(kv.Key)
		if err != nil {
			return nil
		}
		var p metapb.LedgerMetadata
		if proto.Unmarshal(kv.Value, &p) != nil || p.State != metapb.LedgerState_LEDGER_STATE_CLOSED || p.EnsembleSize == 0 {
			return nil
		}
		size := float64(p.Length) * float64(p.WriteQuorum) / float64(p.EnsembleSize)
		var bookies []string
		for _, sg := range p.Segments {
			bookies = append(bookies, sg.Bookies...)
		}
		slices.Sort(bookies)
		bookies = slices.Compact(bookies)
		for _, b := range bookies {
			if l, ok := byID[b]; ok {
				l.held += size
				l.capacity += size
				held[b] = append(held[b], heldLedger{id: id, size: size, bookies: bookies})
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var loads []bookieLoad
	for _, id := range sortedKeys(byID) {
		loads = append(loads, *byID[id])
	}
	return loads, held, nil
}

// RebalanceStatus is the state of a rebalancing request.
type RebalanceStatus struct {
	Active       bool    `json:"active"`
	TargetSpread float64 `json:"targetSpread,omitempty"`
	Spread       float64 `json:"spread"`
	Moves        int64   `json:"moves"`
	MovedBytes   int64   `json:"movedBytes"`
	PendingMoves int     `json:"pendingMoves"`
}

// RequestRebalance asks the auditor to rebalance until the spread is
// within target (<= 0: the default).
func RequestRebalance(ctx context.Context, store *metastore.Store, target float64) error {
	if target <= 0 {
		target = DefaultRebalanceSpread
	}
	if math.IsNaN(target) || target > 10 {
		return fmt.Errorf("%w: target spread %v must be in (0, 10]", ErrInvalidArgument, target)
	}
	raw, _ := proto.Marshal(&metapb.Rebalance{TargetSpread: target, RequestedAtUnixMs: time.Now().UnixMilli()})
	_, err := store.Put(ctx, metastore.RebalanceKey, raw)
	return err
}

// GetRebalance reports the current request (Active false once done).
func GetRebalance(ctx context.Context, store *metastore.Store) (RebalanceStatus, error) {
	var st RebalanceStatus
	kv, err := store.Get(ctx, metastore.RebalanceKey)
	if err == nil {
		var r metapb.Rebalance
		if proto.Unmarshal(kv.Value, &r) == nil {
			st = RebalanceStatus{Active: true, TargetSpread: r.TargetSpread, Spread: r.Spread, Moves: r.Moves, MovedBytes: r.MovedBytes}
		}
	} else if !errors.Is(err, metastore.ErrNotFound) {
		return st, err
	}
	err = store.ListAll(ctx, metastore.UnderReplicatedPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var u metapb.UnderReplicated
		if proto.Unmarshal(kv.Value, &u) == nil && u.Reason == metapb.UnderReplicated_REASON_MOVE {
			st.PendingMoves++
		}
		return nil
	})
	return st, err
}
