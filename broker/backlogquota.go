package broker

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
)

// Backlog quota types and policies, Pulsar's names, as the admin API
// takes them.
const (
	quotaStorage   = admin.QuotaStorage
	quotaAge       = admin.QuotaAge
	quotaException = admin.QuotaException
	quotaEviction  = admin.QuotaEviction
)

// Backlog quotas (Pulsar's): a namespace limits the backlog of every
// durable subscription of its topics, by size (quotaStorage: the bytes
// of the entries after the subscription's mark-delete position, estimated
// from the ledgers' sizes as Pulsar does) or by age (quotaAge: the age of
// the first unacknowledged message). Checked with the retention, every
// --retention-check-interval. When a subscription is over a quota:
//   - consumer_backlog_eviction: its oldest messages are acknowledged
//     until it is within the quota;
//   - producer_request_hold: new messages and producers are refused with
//     ErrBacklogQuotaHeld (retriable: the SDK resends until its send
//     timeout) until the next check finds the backlog within the quota;
//   - producer_exception: the same with ErrBacklogQuotaExceeded, which is
//     not retriable.
//
// Messages already stored are never lost to a producer-blocking quota;
// eviction acknowledges them for the slow subscription only.

// backlogQuota is one quota: limit bytes or seconds, and its policy.
type backlogQuota struct {
	limit  int64
	policy string
}

// blocksProducers reports whether a quota refuses producers when over.
func (set settings) blocksProducers() bool {
	for _, q := range set.quotas {
		if q.policy != quotaEviction {
			return true
		}
	}
	return false
}

// enforceBacklogQuotas checks the durable subscriptions against the
// namespace's backlog quotas, evicts, and sets or clears the producers'
// block.
func (t *topic) enforceBacklogQuotas(ctx context.Context, subs []*subscription) {
	t.mu.Lock()
	quotas := t.mu.set.quotas
	t.mu.Unlock()
	var block error
	for typ, q := range quotas {
		for _, s := range subs {
			if !s.durable {
				continue
			}
			over, err := t.overQuota(ctx, s, typ, q.limit)
			if err != nil {
				t.log.Warn("backlog quota check failed", zap.String("subscription", s.name), zap.Error(err))
				continue
			}
			if !over {
				continue
			}
			switch q.policy {
			case quotaEviction:
				if err := t.evict(ctx, s, typ, q.limit); err != nil {
					t.log.Warn("backlog eviction failed", zap.String("subscription", s.name), zap.Error(err))
				}
			case quotaException:
				block = errorf(ErrBacklogQuotaExceeded, "subscription %s of %s is over the %s quota (%d): consume or clear its backlog", s.name, t.name, typ, q.limit)
			default: // admin.QuotaHold
				if block == nil {
					block = errorf(ErrBacklogQuotaHeld, "subscription %s of %s is over the %s quota (%d): consume or clear its backlog", s.name, t.name, typ, q.limit)
				}
			}
		}
	}
	t.mu.Lock()
	was := t.mu.quotaBlock
	t.mu.quotaBlock = block
	t.mu.Unlock()
	switch {
	case was == nil && block != nil:
		t.log.Info("producers blocked by a backlog quota", zap.Error(block))
	case was != nil && block == nil:
		t.log.Info("backlog within its quotas: producers unblocked")
	}
}

// overQuota reports whether a subscription's backlog is over a limit.
func (t *topic) overQuota(ctx context.Context, s *subscription, typ string, limit int64) (bool, error) {
	md := s.cur.MarkDelete()
	if typ == quotaStorage {
		return t.backlogBytes(md) > limit, nil
	}
	first := t.ml.Next(md)
	if t.ml.LastConfirmed().Before(first) {
		return false, nil // no backlog
	}
	pt, ok, err := t.publishTime(ctx, first)
	if err != nil || !ok {
		return false, err
	}
	return time.Now().UnixMilli()-pt > limit*1000, nil
}

// backlogBytes estimates the bytes stored after a mark-delete position:
// whole ledgers after its own, and the share of its own ledger's bytes
// that its entries after it make.
func (t *topic) backlogBytes(md mledger.Position) int64 {
	var n int64
	for _, ref := range t.ml.Ledgers() {
		switch {
		case ref.LedgerId < md.Ledger:
		case ref.LedgerId == md.Ledger:
			if left := ref.Entries - (md.Entry + 1); ref.Entries > 0 && left > 0 {
				n += ref.Size * left / ref.Entries
			}
		default:
			n += ref.Size
		}
	}
	return n
}

// evict acknowledges a subscription's oldest messages until its backlog
// is within the limit.
func (t *topic) evict(ctx context.Context, s *subscription, typ string, limit int64) error {
	if typ == quotaAge {
		return s.expireAll(ctx, time.Now().UnixMilli()-limit*1000)
	}
	// The newest entries that fit in limit bytes stay: walk the ledgers
	// from the newest.
	refs := t.ml.Ledgers()
	var kept int64
	for i := len(refs) - 1; i >= 0; i-- {
		ref := refs[i]
		if ref.Entries == 0 {
			continue
		}
		if kept+ref.Size <= limit {
			kept += ref.Size
			continue
		}
		// Keep the last k entries of this ledger; everything before
		// them goes.
		k := (limit - kept) * ref.Entries / ref.Size
		upTo := mledger.Position{Ledger: ref.LedgerId, Entry: ref.Entries - k - 1}
		if s.cur.MarkDelete().Before(upTo) {
			s.cur.AckCumulative(upTo)
			s.mu.Lock()
			s.refreshPendingLocked()
			s.rewindLocked()
			s.mu.Unlock()
			t.log.Info("backlog evicted over its size quota", zap.String("subscription", s.name), zap.Stringer("up-to", upTo))
		}
		return nil
	}
	return nil
}
