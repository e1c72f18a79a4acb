package bookie

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// gcLoop deletes, every GCInterval, the ledgers this bookie holds that the
// metadata no longer lists.
func (s *Server) gcLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.GCInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.GCInterval)
		// The drain watch's safety net: a change it missed is seen here.
		if err := s.drainState(ctx); err != nil {
			s.log.Warn("cannot read the decommission record", zap.Error(err))
		}
		n, err := s.collectGarbage(ctx)
		if err != nil {
			s.log.Warn("ledger garbage collection failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("deleted ledgers no longer in metadata", zap.Int("ledgers", n))
		}
		n, err = s.collectMoved(ctx)
		cancel()
		if err != nil {
			s.log.Warn("garbage collection of moved copies failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("deleted copies of ledgers whose metadata no longer names this bookie", zap.Int("ledgers", n))
		}
	}
}

// collectGarbage makes one pass and returns how many ledgers it deleted.
//
// The local ledger list is taken before the metadata is read. Ledger ids are
// never reused and a ledger's metadata is written before its first entry, so
// a ledger held locally and absent from metadata read afterwards has been
// deleted for good. (A late add by a writer that missed the deletion brings
// it back; the next pass removes it again.)
func (s *Server) collectGarbage(ctx context.Context) (int, error) {
	local := s.db.Ledgers()
	if len(local) == 0 {
		return 0, nil
	}
	live := make(map[int64]bool, len(local))
	err := s.store.ListAll(ctx, metastore.LedgersPrefix, metastore.ListOptions{KeysOnly: true, Limit: 10000}, func(kv metastore.KV) error {
		id, err := metastore.ParseLedgerKey(kv.Key)
		if err != nil {
			s.log.Warn("unexpected key under ledgers/", zap.String("key", kv.Key))
			return nil
		}
		live[id] = true
		return nil
	})
	if err != nil {
		return 0, err
	}
	var dead []int64
	for _, id := range local {
		if !live[id] {
			dead = append(dead, id)
		}
	}
	const chunk = 1000
	for i := 0; i < len(dead); i += chunk {
		if err := s.db.DeleteLedgers(ctx, dead[i:min(i+chunk, len(dead))]); err != nil {
			return i, err
		}
	}
	return len(dead), nil
}

// maxMovedPerPass bounds the ledgers collectMoved examines in one pass.
const maxMovedPerPass = 1000

// collectMoved deletes the local copies of closed ledgers whose metadata
// no longer names this bookie: moved away by a decommission or a
// rebalance, or left by a re-replication that stopped before its swap. It
// returns how many ledgers it deleted.
//
// Candidates are the local ledgers missing from this bookie's index
// (bookies/ledgers/<id>/). Each is decided under the ledger's autorecovery
// lock, on metadata read after taking it: a worker copies to a bookie only
// under that lock and swaps it into the metadata before releasing it, and
// writers and recoveries write only to bookies their metadata names or
// (a recovery) of ledgers not closed yet, so a copy deleted here is one no
// metadata will ever name.
func (s *Server) collectMoved(ctx context.Context) (int, error) {
	local := s.db.Ledgers()
	if len(local) == 0 {
		return 0, nil
	}
	mine := map[int64]bool{}
	if err := s.store.ListAll(ctx, metastore.BookieLedgersOf(s.id), metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		if _, id, err := metastore.ParseBookieLedgerKey(kv.Key); err == nil {
			mine[id] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	// Resume after the last ledger examined, so that ledgers that cannot
	// be collected yet do not hold every pass's slots.
	var cands []int64
	start, _ := slices.BinarySearch(local, s.gcMovedFrom+1)
	for i := 0; i < len(local) && len(cands) < maxMovedPerPass; i++ {
		id := local[(start+i)%len(local)]
		if mine[id] {
			continue
		}
		if held, _, err := s.db.ListEntries(id, 0, 1); err != nil || len(held) == 0 {
			continue // dropped already (its fenced record stays), or empty
		}
		cands = append(cands, id)
	}
	if len(cands) == 0 {
		return 0, nil
	}
	s.gcMovedFrom = cands[len(cands)-1]
	sess, err := s.store.NewSession(ctx, s.cfg.SessionTTL)
	if err != nil {
		return 0, err
	}
	defer sess.Close()
	n := 0
	for _, id := range cands {
		deleted, err := s.collectMovedOne(ctx, sess, id)
		if err != nil {
			return n, err
		}
		if deleted {
			n++
		}
	}
	return n, nil
}

func (s *Server) collectMovedOne(ctx context.Context, sess *metastore.Session, id int64) (bool, error) {
	lockRev, err := s.store.Create(ctx, metastore.LedgerLockKey(id), []byte("gc "+s.id), metastore.WithLease(sess.Lease()))
	if errors.Is(err, metastore.ErrBadVersion) {
		return false, nil // a worker holds it: next pass
	}
	if err != nil {
		return false, err
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		s.store.CompareAndDelete(uctx, metastore.LedgerLockKey(id), lockRev)
		cancel()
	}()
	kv, err := s.store.Get(ctx, metastore.LedgerKey(id))
	if errors.Is(err, metastore.ErrNotFound) {
		return false, nil // deleted: collectGarbage's business
	}
	if err != nil {
		return false, err
	}
	var m metapb.LedgerMetadata
	if err := proto.Unmarshal(kv.Value, &m); err != nil || m.State != metapb.LedgerState_LEDGER_STATE_CLOSED {
		return false, nil
	}
	for _, sg := range m.Segments {
		if slices.Contains(sg.Bookies, s.id) {
			return false, nil
		}
	}
	// Still holding the lock? A pause longer than the lease could have let
	// a worker take it and copy here meanwhile.
	select {
	case <-sess.Done():
		return false, nil
	default:
	}
	if lk, err := s.store.Get(ctx, metastore.LedgerLockKey(id)); err != nil || lk.ModRevision != lockRev {
		return false, err
	}
	if err := s.db.DropEntries(ctx, []int64{id}); err != nil {
		return false, err
	}
	return true, nil
}
