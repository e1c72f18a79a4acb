package autorecovery

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// remarkInterval: how often the auditor marks again the ledgers of lost
// and draining bookies (ledgers created on them meanwhile, marks a failed
// worker dropped).
const remarkInterval = 30 * time.Second

// audit runs the auditor until ctx ends or a metastore error: it watches
// the registry, marks the ledgers of lost, wiped and draining bookies,
// finishes drains and runs the periodic check.
func (s *Service) audit(ctx context.Context) error {
	st := newAuditState(s.cfg.LostBookieDelay)
	// The index build and the periodic check can take long: they run
	// beside the audit, which goes on declaring bookies lost meanwhile
	// (marks made from an index still being built are made again every
	// remarkInterval).
	checkDone := make(chan error, 1)
	checking := false
	startCheck := func(what string, entries bool, after func(context.Context) error) {
		checking = true
		go func() {
			err := s.check(ctx, entries)
			if err == nil && after != nil {
				err = after(ctx)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn("autorecovery: "+what+" failed; it runs again later", zap.Error(err))
			}
			checkDone <- err
		}()
	}
	defer func() {
		if checking {
			<-checkDone
		}
	}()
	if _, err := s.store.Get(ctx, metastore.IndexBuiltKey); errors.Is(err, metastore.ErrNotFound) {
		// Ledgers written before the index existed: build it once.
		s.log.Info("autorecovery: building the bookie -> ledgers index")
		startCheck("index build", false, func(ctx context.Context) error {
			_, err := s.store.Put(ctx, metastore.IndexBuiltKey, nil)
			return err
		})
	} else if err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for b := range s.store.Watch(wctx, metastore.BookiesAvailablePrefix, 0) {
			if b.Err != nil {
				return // the ticker still drives the audit
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	tick := time.NewTicker(s.cfg.AuditInterval)
	defer tick.Stop()
	lastRemark := time.Now()
	drainSeen := map[string]int64{} // drain record revisions whose ledgers were marked this term
	lastCheck := time.Now()
	var lastRebalance time.Time
	for {
		if err := s.step("audit", 0); err != nil {
			return err
		}
		registered, err := s.registry(ctx)
		if err != nil {
			return err
		}
		known, err := s.knownBookies(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		lost, wiped := st.observe(now, instances(registered), known)
		if err := s.forgetReturned(ctx, registered); err != nil {
			return err
		}
		for _, b := range lost {
			s.log.Warn("autorecovery: bookie lost; re-replicating its ledgers", zap.String("bookie", b), zap.Duration("gone-for", s.cfg.LostBookieDelay))
			if _, err := s.store.Put(ctx, metastore.BookieLostKey(b), nil); err != nil {
				return err
			}
			if err := s.markAll(ctx, b, metapb.UnderReplicated_REASON_LOST); err != nil {
				return err
			}
		}
		for _, b := range wiped {
			s.log.Warn("autorecovery: bookie came back with a new instance; copying its ledgers back", zap.String("bookie", b))
			if err := s.markAll(ctx, b, metapb.UnderReplicated_REASON_MISSING); err != nil {
				return err
			}
		}
		remark := now.Sub(lastRemark) >= remarkInterval
		if remark {
			lastRemark = now
			for _, b := range st.lostBookies() {
				if err := s.markAll(ctx, b, metapb.UnderReplicated_REASON_LOST); err != nil {
					return err
				}
			}
		}
		if err := s.drains(ctx, remark, drainSeen); err != nil {
			return err
		}
		auto := s.cfg.AutoRebalance && now.Sub(lastRebalance) >= s.cfg.RebalanceInterval
		if auto {
			lastRebalance = now
		}
		if err := s.rebalanceRound(ctx, auto); err != nil {
			return err
		}
		if s.cfg.CheckInterval > 0 && now.Sub(lastCheck) >= s.cfg.CheckInterval && !checking {
			lastCheck = now
			startCheck("periodic check", true, nil)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-wake:
		case <-checkDone:
			checking = false
		}
	}
}

// lostBookies reads the bookies the auditor declared lost.
func (s *Service) lostBookies(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	err := s.store.ListAll(ctx, metastore.BookieLostPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		out[strings.TrimPrefix(kv.Key, metastore.BookieLostPrefix)] = true
		return nil
	})
	return out, err
}

// forgetReturned drops the lost record of bookies registered again.
func (s *Service) forgetReturned(ctx context.Context, registered map[string]*metapb.BookieInfo) error {
	lost, err := s.lostBookies(ctx)
	if err != nil {
		return err
	}
	for b := range lost {
		if _, ok := registered[b]; ok {
			s.log.Info("autorecovery: a bookie declared lost is back", zap.String("bookie", b))
			if err := s.store.Delete(ctx, metastore.BookieLostKey(b)); err != nil {
				return err
			}
		}
	}
	return nil
}

// registry reads the registered bookies.
func (s *Service) registry(ctx context.Context) (map[string]*metapb.BookieInfo, error) {
	out := map[string]*metapb.BookieInfo{}
	err := s.store.ListAll(ctx, metastore.BookiesAvailablePrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var info metapb.BookieInfo
		if proto.Unmarshal(kv.Value, &info) == nil {
			out[strings.TrimPrefix(kv.Key, metastore.BookiesAvailablePrefix)] = &info
		}
		return nil
	})
	return out, err
}

func instances(reg map[string]*metapb.BookieInfo) map[string]string {
	out := make(map[string]string, len(reg))
	for id, info := range reg {
		out[id] = info.InstanceId
	}
	return out
}

// knownBookies lists every bookie that ever registered (its cookie),
// except those decommissioned.
func (s *Service) knownBookies(ctx context.Context) ([]string, error) {
	drains, err := s.drainStates(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	err = s.store.ListAll(ctx, metastore.BookieCookiesPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		id := strings.TrimPrefix(kv.Key, metastore.BookieCookiesPrefix)
		if d, ok := drains[id]; !ok || !d.Done {
			out = append(out, id)
		}
		return nil
	})
	return out, err
}

// drainStates reads the decommission records.
func (s *Service) drainStates(ctx context.Context) (map[string]*metapb.BookieDrain, error) {
	out := map[string]*metapb.BookieDrain{}
	err := s.store.ListAll(ctx, metastore.BookieDrainPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var d metapb.BookieDrain
		if proto.Unmarshal(kv.Value, &d) == nil {
			out[strings.TrimPrefix(kv.Key, metastore.BookieDrainPrefix)] = &d
		}
		return nil
	})
	return out, err
}

// drains marks the ledgers of draining bookies (once per term and on
// remark) and records a drain done once the bookie holds no ledger.
func (s *Service) drains(ctx context.Context, remark bool, seen map[string]int64) error {
	var errs []error
	err := s.store.ListAll(ctx, metastore.BookieDrainPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var d metapb.BookieDrain
		if proto.Unmarshal(kv.Value, &d) != nil || d.Done {
			return nil
		}
		id := strings.TrimPrefix(kv.Key, metastore.BookieDrainPrefix)
		n, err := countKeys(ctx, s.store, metastore.BookieLedgersOf(id))
		if err != nil {
			return err
		}
		if n == 0 {
			d.Done, d.DoneAtUnixMs = true, time.Now().UnixMilli()
			raw, _ := proto.Marshal(&d)
			if _, err := s.store.CompareAndSwap(ctx, kv.Key, raw, kv.ModRevision); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
				return err
			}
			s.log.Info("autorecovery: bookie decommissioned: it holds no ledger", zap.String("bookie", id))
			return nil
		}
		if remark || kv.ModRevision != seen[id] {
			seen[id] = kv.ModRevision
			errs = append(errs, s.markAll(ctx, id, metapb.UnderReplicated_REASON_DRAINING))
		}
		return nil
	})
	return errors.Join(err, errors.Join(errs...))
}

// markAll marks every ledger the bookie holds copies of (by the index).
// A mark already there is kept, except that LOST and DRAINING replace
// MISSING.
func (s *Service) markAll(ctx context.Context, bookie string, reason metapb.UnderReplicated_Reason) error {
	var ids []int64
	err := s.store.ListAll(ctx, metastore.BookieLedgersOf(bookie), metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		if _, id, err := metastore.ParseBookieLedgerKey(kv.Key); err == nil {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return err
	}
	n := 0
	for _, id := range ids {
		if err := s.step("mark", id); err != nil {
			return err
		}
		made, err := s.mark(ctx, id, bookie, reason, "auditor")
		if err != nil {
			return err
		}
		if made {
			n++
		}
	}
	if n > 0 {
		s.log.Info("autorecovery: ledgers marked under-replicated", zap.String("bookie", bookie), zap.Stringer("reason", reason), zap.Int("ledgers", n))
	}
	return nil
}

// mark puts one mark; it reports whether it wrote one.
func (s *Service) mark(ctx context.Context, id int64, bookie string, reason metapb.UnderReplicated_Reason, by string) (bool, error) {
	key := metastore.UnderReplicatedKey(id, bookie)
	raw, _ := proto.Marshal(&metapb.UnderReplicated{Reason: reason, MarkedAtUnixMs: time.Now().UnixMilli(), MarkedBy: by})
	_, err := s.store.Create(ctx, key, raw)
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, metastore.ErrBadVersion) {
		return false, err
	}
	kv, err := s.store.Get(ctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		return s.mark(ctx, id, bookie, reason, by) // repaired meanwhile: mark again
	}
	if err != nil {
		return false, err
	}
	var cur metapb.UnderReplicated
	if proto.Unmarshal(kv.Value, &cur) == nil && (cur.Reason == reason || reason == metapb.UnderReplicated_REASON_MISSING) {
		return false, nil
	}
	if _, err := s.store.CompareAndSwap(ctx, key, raw, kv.ModRevision); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
		return false, err
	}
	return true, nil
}

// countKeys counts the keys under prefix.
func countKeys(ctx context.Context, store *metastore.Store, prefix string) (int, error) {
	n := 0
	err := store.ListAll(ctx, prefix, metastore.ListOptions{KeysOnly: true}, func(metastore.KV) error {
		n++
		return nil
	})
	return n, err
}
