package autorecovery

import (
	"context"
	"errors"
	"slices"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// check compares every ledger's metadata with what each live bookie it
// names holds, and marks a bookie MISSING for a ledger when it lacks any
// entry of its fragments (a wiped disk that came back with a new
// instance, an entry written with fewer than Qw copies). It also repairs
// the bookie -> ledgers index: a key for every bookie each ledger names,
// none for ledgers that no longer exist. The last segment of a ledger
// that is not closed is left to its writer.
//
// Without entries it only repairs the index (the first auditor's build).
func (s *Service) check(ctx context.Context, entries bool) error {
	indexed := map[string]bool{} // index keys
	err := s.store.ListAll(ctx, metastore.BookieLedgersPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		indexed[kv.Key] = true
		return nil
	})
	if err != nil {
		return err
	}
	reg, err := s.registry(ctx)
	if err != nil {
		return err
	}
	var ids []int64
	if err := s.lc.List(ctx, func(id int64) error { ids = append(ids, id); return nil }); err != nil {
		return err
	}
	marked, checked := 0, 0
	for _, id := range ids {
		if err := s.step("check", id); err != nil {
			return err
		}
		m, err := s.lc.Metadata(ctx, id)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			continue // deleted meanwhile
		}
		if err != nil {
			s.log.Warn("autorecovery: check: unreadable ledger metadata", zap.Int64("ledger", id), zap.Error(err))
			continue
		}
		for _, b := range m.Bookies() {
			key := metastore.BookieLedgerKey(b, id)
			if indexed[key] {
				delete(indexed, key)
				continue
			}
			// Only if the metadata is still what was read: an ensemble
			// change since moved the index itself.
			_, err := s.store.Commit(ctx, nil, metastore.CheckOp(metastore.LedgerKey(id), m.Revision()), metastore.PutOp(key, nil, metastore.AnyVersion))
			if err != nil && !errors.Is(err, metastore.ErrBadVersion) {
				return err
			}
		}
		for _, b := range m.Bookies() {
			if _, live := reg[b]; !live || !entries {
				continue // the auditor handles bookies that are gone
			}
			lacks, err := s.lacks(ctx, m, b)
			if err != nil {
				s.log.Warn("autorecovery: check: cannot list a bookie's entries", zap.Int64("ledger", id), zap.String("bookie", b), zap.Error(err))
				continue
			}
			checked++
			if lacks > 0 {
				s.log.Warn("autorecovery: check: bookie lacks entries; marking", zap.Int64("ledger", id), zap.String("bookie", b), zap.Int("entries", lacks))
				if _, err := s.mark(ctx, id, b, metapb.UnderReplicated_REASON_MISSING, "check"); err != nil {
					return err
				}
				marked++
			}
		}
	}
	// Index keys left over name ledgers that were deleted (index keys go
	// in the same transaction as the metadata, so a ledger that exists
	// when read again keeps its keys).
	for key := range indexed {
		b, id, err := metastore.ParseBookieLedgerKey(key)
		if err != nil {
			continue
		}
		m, err := s.lc.Metadata(ctx, id)
		switch {
		case errors.Is(err, ledger.ErrNoSuchLedger):
			if err := s.store.Delete(ctx, key); err != nil {
				return err
			}
		case err == nil && !slices.Contains(m.Bookies(), b):
			// Written before the index was kept with the metadata, or by a
			// check that raced an ensemble change: drop it if the
			// metadata still does not name the bookie.
			_, err := s.store.Commit(ctx, nil, metastore.CheckOp(metastore.LedgerKey(id), m.Revision()), metastore.DeleteOp(key, metastore.AnyVersion))
			if err != nil && !errors.Is(err, metastore.ErrBadVersion) {
				return err
			}
		}
	}
	s.log.Info("autorecovery: check done", zap.Int("ledgers", len(ids)), zap.Int("copies-checked", checked), zap.Int("marked", marked))
	if entries {
		return s.step("checked", 0)
	}
	return nil
}

// lacks counts the entries of b's fragments in m that b does not hold.
func (s *Service) lacks(ctx context.Context, m *ledger.Metadata, b string) (int, error) {
	held := map[int64]bool{}
	if err := s.lc.ListEntries(ctx, b, m.ID, func(ids []int64) error {
		for _, e := range ids {
			held[e] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	n := 0
	for i, seg := range m.Segments {
		if m.State != ledger.StateClosed && i == len(m.Segments)-1 {
			break
		}
		for pos, sb := range seg.Bookies {
			if sb != b {
				continue
			}
			f := fragment{Segment: i, Pos: pos, Bookie: b, First: seg.First, Last: m.SegmentEnd(i)}
			for _, e := range f.entries(m) {
				if !held[e] {
					n++
				}
			}
		}
	}
	return n, nil
}
