package bookie

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/metastore"
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
		n, err := s.collectGarbage(ctx)
		cancel()
		if err != nil {
			s.log.Warn("ledger garbage collection failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("deleted ledgers no longer in metadata", zap.Int("ledgers", n))
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
