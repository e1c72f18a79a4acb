package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// maxRepairAttempts bounds the restarts of one ledger's repair after lost
// metadata races (a writer's ensemble change, a new mark).
const maxRepairAttempts = 5

// errPostponed: part of the ledger could not be repaired yet (a live
// writer's fragment, a bookie not yet lost); its marks stay.
var errPostponed = errors.New("autorecovery: repair postponed")

// work is the re-replication worker: it repairs the marked ledgers one at
// a time, each under its lock, and waits for new marks.
func (s *Service) work(ctx context.Context, sess *metastore.Session) {
	wake := make(chan struct{}, 1)
	go func() {
		for b := range s.store.Watch(ctx, metastore.UnderReplicatedPrefix, 0) {
			if b.Err != nil {
				return // the poll still drives the worker
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	notBefore := map[int64]time.Time{} // ledgers backing off after a failure
	failures := map[int64]int{}
	postponed := map[int64]int{}
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for ctx.Err() == nil {
		ids, err := s.markedLedgers(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("autorecovery: list marks failed", zap.Error(err))
		}
		now := time.Now()
		if err == nil {
			// Forget ledgers no longer marked.
			for id := range notBefore {
				if _, found := slices.BinarySearch(ids, id); !found {
					delete(notBefore, id)
					delete(failures, id)
					delete(postponed, id)
				}
			}
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return
			}
			if now.Before(notBefore[id]) {
				continue
			}
			err := s.repairLedger(ctx, sess, id)
			switch {
			case err == nil:
				delete(notBefore, id)
				delete(failures, id)
				delete(postponed, id)
			case errors.Is(err, errPostponed):
				// Waiting for a writer to close its ledger, or for a bookie
				// to be declared lost: look again, less and less often.
				postponed[id]++
				wait := min(s.cfg.PollInterval<<min(postponed[id]-1, 4), max(s.cfg.PollInterval, 30*time.Second))
				notBefore[id] = time.Now().Add(wait)
			case ctx.Err() == nil:
				failures[id]++
				wait := min(time.Duration(1<<min(failures[id], 8))*100*time.Millisecond, time.Minute)
				notBefore[id] = time.Now().Add(wait)
				s.log.Warn("autorecovery: repair failed; retrying later", zap.Int64("ledger", id), zap.Error(err), zap.Duration("retry-in", wait))
			}
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		case <-wake:
		}
	}
}

// markedLedgers lists the ledgers with marks, in increasing order.
func (s *Service) markedLedgers(ctx context.Context) ([]int64, error) {
	var ids []int64
	err := s.store.ListAll(ctx, metastore.UnderReplicatedPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		id, _, err := metastore.ParseUnderReplicatedKey(kv.Key)
		if err == nil && (len(ids) == 0 || ids[len(ids)-1] != id) {
			ids = append(ids, id)
		}
		return nil
	})
	return ids, err
}

// ledgerMarks reads one ledger's marks.
func (s *Service) ledgerMarks(ctx context.Context, id int64) (map[string]mark, error) {
	out := map[string]mark{}
	err := s.store.ListAll(ctx, metastore.UnderReplicatedOf(id), metastore.ListOptions{}, func(kv metastore.KV) error {
		_, b, err := metastore.ParseUnderReplicatedKey(kv.Key)
		if err != nil {
			return nil
		}
		var u metapb.UnderReplicated
		proto.Unmarshal(kv.Value, &u) // a corrupt mark counts as MISSING: checked, never trusted
		out[b] = mark{reason: u.Reason, target: u.Target, rev: kv.ModRevision}
		return nil
	})
	return out, err
}

// repairLedger repairs one ledger under its lock. It returns nil when its
// marks were all cleared, errPostponed when some must wait.
func (s *Service) repairLedger(ctx context.Context, sess *metastore.Session, id int64) error {
	lockRev, err := s.store.Create(ctx, metastore.LedgerLockKey(id), []byte(s.cfg.ID), metastore.WithLease(sess.Lease()))
	if errors.Is(err, metastore.ErrBadVersion) {
		// Ours already (a create whose answer was lost, an unlock that
		// failed)? Take it back rather than wait for the session to end.
		if kv, gerr := s.store.Get(ctx, metastore.LedgerLockKey(id)); gerr == nil && kv.Lease == int64(sess.Lease()) {
			lockRev, err = kv.ModRevision, nil
		}
	}
	if errors.Is(err, metastore.ErrBadVersion) {
		s.step("locked-out", id)
		return errPostponed // another worker has it
	}
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.store.CompareAndDelete(dctx, metastore.LedgerLockKey(id), lockRev)
		cancel()
	}()
	guard := &metastore.Guard{Key: metastore.LedgerLockKey(id), Token: lockRev}
	var lastErr error
	for attempt := 0; attempt < maxRepairAttempts; attempt++ {
		err := s.repairOnce(ctx, guard, id)
		if !errors.Is(err, metastore.ErrBadVersion) {
			return err
		}
		lastErr = err // the metadata or a mark moved: plan again
	}
	return fmt.Errorf("autorecovery: ledger %d kept changing: %w", id, lastErr)
}

// repairOnce reads, plans and carries out one repair of ledger id.
func (s *Service) repairOnce(ctx context.Context, guard *metastore.Guard, id int64) error {
	log := s.log.With(zap.Int64("ledger", id))
	marks, err := s.ledgerMarks(ctx, id)
	if err != nil || len(marks) == 0 {
		return err
	}
	m, err := s.lc.Metadata(ctx, id)
	if errors.Is(err, ledger.ErrNoSuchLedger) {
		return s.clearMarks(ctx, guard, id, nil, marks, sortedKeys(marks)) // deleted: nothing to repair
	}
	if err != nil {
		return err
	}
	skipLast := false
	if m.State != ledger.StateClosed {
		alive := true
		if m.WriterLease != 0 {
			alive, err = s.store.LeaseAlive(ctx, clientv3.LeaseID(m.WriterLease))
			if err != nil {
				return err
			}
		}
		if !alive {
			// The writer is gone and nobody recovered the ledger yet:
			// close it (fencing its last ensemble) so that its last
			// segment can be repaired too.
			log.Info("autorecovery: writer gone; recovering the ledger first")
			if err := s.step("recover", id); err != nil {
				return err
			}
			if _, err := s.lc.OpenRecover(ctx, id); err == nil {
				return metastore.ErrBadVersion // read it again, closed
			} else {
				// Not recoverable now (too few bookies answer the
				// fence): repair the earlier segments meanwhile.
				log.Warn("autorecovery: cannot recover the ledger of a gone writer yet; repairing its earlier segments", zap.Error(err))
			}
		}
		skipLast = true
	}
	reg, err := s.registry(ctx)
	if err != nil {
		return err
	}
	drains, err := s.drainStates(ctx)
	if err != nil {
		return err
	}
	lostSet, err := s.lostBookies(ctx)
	if err != nil {
		return err
	}
	view := func(b string) bookieView {
		info, live := reg[b]
		_, draining := drains[b]
		// A bookie out of space takes no copies back: move them.
		full := live && slices.Contains(info.ReadOnlyReasons, "no-space")
		return bookieView{live: live, draining: draining || full, lost: lostSet[b]}
	}
	p := planRepair(m, marks, view, skipLast)
	if err := s.step("planned", id); err != nil {
		return err
	}
	for _, f := range p.fills {
		if err := s.fill(ctx, m, f); err != nil {
			return err
		}
	}
	if err := s.step("filled", id); err != nil {
		return err
	}
	var nm *ledger.Metadata
	if len(p.replaces) > 0 {
		nm = m.Clone()
		for _, f := range p.replaces {
			seg := &nm.Segments[f.Segment]
			dest := f.Target
			if dest == "" || !s.canTake(reg, nm, f.Segment, dest) {
				dest, err = s.lc.PickReplacement(ctx, nm, f.Segment, f.Pos)
				if err != nil {
					return fmt.Errorf("replace bookie %s in ledger %d: %w", f.Bookie, id, err)
				}
			}
			// Read from the segment as it stands now (bookies already
			// copied to in this repair serve too), and last from the
			// bookie being replaced if it is still up (draining, moving):
			// it may hold the only copy left.
			var last string
			if _, live := reg[f.Bookie]; live {
				last = f.Bookie
			}
			if err := s.copyFragment(ctx, m, nm.Segments[f.Segment].Bookies, f, dest, nil, last); err != nil {
				return err
			}
			seg.Bookies[f.Pos] = dest
			log.Info("autorecovery: fragment re-replicated", zap.String("from", f.Bookie), zap.String("to", dest),
				zap.Int("segment", f.Segment), zap.Int64("first", f.First), zap.Int64("last", f.Last))
		}
		if err := s.step("copied", id); err != nil {
			return err
		}
	}
	// A bookie the metadata no longer names keeps no index key (one left
	// by an old check would hold its drain open forever).
	var extra []metastore.Op
	if nm == nil {
		extra = append(extra, metastore.CheckOp(metastore.LedgerKey(id), m.Revision()))
	}
	for _, b := range p.clear {
		if !slices.Contains(m.Bookies(), b) {
			extra = append(extra, metastore.DeleteOp(metastore.BookieLedgerKey(b, id), metastore.AnyVersion))
		}
	}
	if err := s.clearMarks(ctx, guard, id, nm, marks, p.clear, extra...); err != nil {
		return err
	}
	if err := s.step("swapped", id); err != nil {
		return err
	}
	if len(p.clear) > 0 {
		s.repaired.Add(1)
	}
	if len(p.keep) > 0 {
		return errPostponed
	}
	return nil
}

// clearMarks deletes the cleared marks (each only if unchanged since it
// was read) and, when nm is not nil, swaps in the new metadata in the
// same guarded transaction.
func (s *Service) clearMarks(ctx context.Context, guard *metastore.Guard, id int64, nm *ledger.Metadata, marks map[string]mark, clear []string, extra ...metastore.Op) error {
	ops := extra
	for _, b := range clear {
		ops = append(ops, metastore.DeleteOp(metastore.UnderReplicatedKey(id, b), marks[b].rev))
	}
	if nm != nil {
		return s.lc.UpdateMetadata(ctx, nm, guard, ops...)
	}
	if len(ops) == len(extra) && len(clear) == 0 {
		return nil
	}
	_, err := s.store.Commit(ctx, guard, ops...)
	return err
}

// canTake says whether bookie b may take a position of segment seg of m
// as a rebalancing target: live, writable, not in the segment already and
// not on a host (by host label) the segment uses.
func (s *Service) canTake(reg map[string]*metapb.BookieInfo, m *ledger.Metadata, seg int, b string) bool {
	info, ok := reg[b]
	if !ok || info.ReadOnly || slices.Contains(m.Segments[seg].Bookies, b) {
		return false
	}
	if info.HostLabel == "" {
		return true
	}
	for _, o := range m.Segments[seg].Bookies {
		if oi, ok := reg[o]; ok && oi.HostLabel == info.HostLabel {
			return false
		}
	}
	return true
}

// fill copies back to f.Bookie the entries of f it lacks.
func (s *Service) fill(ctx context.Context, m *ledger.Metadata, f fragment) error {
	held := map[int64]bool{}
	if err := s.lc.ListEntries(ctx, f.Bookie, m.ID, func(ids []int64) error {
		for _, e := range ids {
			if e >= f.First && e <= f.Last {
				held[e] = true
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("list ledger %d on %s: %w", m.ID, f.Bookie, err)
	}
	return s.copyFragment(ctx, m, m.Segments[f.Segment].Bookies, f, f.Bookie, held, "")
}

// copyFragment copies f's entries (except those in skip) to dest, each
// read from another bookie of its write set in segment (the segment's
// bookies by position), then from last if set, CopyConcurrency at a time.
func (s *Service) copyFragment(ctx context.Context, m *ledger.Metadata, segment []string, f fragment, dest string, skip map[int64]bool, last string) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.CopyConcurrency)
	for _, e := range f.entries(m) {
		if skip[e] {
			continue
		}
		var src []string
		for _, p := range ledger.WriteSet(e, m.Ensemble, m.WriteQuorum) {
			if b := segment[p]; p != f.Pos && b != dest && b != "" {
				src = append(src, b)
			}
		}
		if last != "" && last != dest {
			src = append(src, last)
		}
		g.Go(func() error {
			n, err := s.lc.CopyEntry(gctx, m, e, src, dest)
			if err != nil {
				return err
			}
			s.copiedEntries.Add(1)
			s.copiedBytes.Add(int64(n))
			if s.limit != nil {
				return s.limit.WaitN(gctx, min(n, s.limit.Burst()))
			}
			return nil
		})
	}
	return g.Wait()
}
