package broker

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// sweepGrace: a ledger younger than this is never an orphan (it may be
// about to be added to its topic's list).
const sweepGrace = 10 * time.Minute

// SweepOrphans deletes orphan ledgers now (the broker also does it every
// so often); grace spares ledgers younger than it.
func (s *Server) SweepOrphans(ctx context.Context, grace time.Duration) ([]int64, error) {
	return s.sweep(ctx, grace)
}

// sweep deletes orphan ledgers: ledgers created for a topic (or a cursor)
// that its metadata does not reference, left by a crash between creating a
// ledger and recording it, or between removing it from a list and deleting
// it (Pulsar issue 13238). A broker sweeps the topics it owns, and the
// ledgers of topics that no longer exist. It returns the ledgers deleted.
func (s *Server) sweep(ctx context.Context, grace time.Duration) ([]int64, error) {
	var ids []int64
	if err := s.ledgers.List(ctx, func(id int64) error { ids = append(ids, id); return nil }); err != nil {
		return nil, err
	}
	var deleted []int64
	for _, id := range ids {
		m, err := s.ledgers.Metadata(ctx, id)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			continue
		}
		if err != nil {
			return deleted, err
		}
		path := string(m.Custom["topic"])
		if path == "" || time.Since(m.CreatedAt) < grace {
			continue
		}
		orphan, err := s.isOrphan(ctx, id, path, string(m.Custom["cursor"]))
		if err != nil {
			return deleted, err
		}
		if !orphan {
			continue
		}
		if err := s.ledgers.Delete(ctx, id); err != nil {
			return deleted, err
		}
		s.log.Info("deleted orphan ledger", zap.Int64("ledger", id), zap.String("topic", path))
		deleted = append(deleted, id)
	}
	return deleted, nil
}

// isOrphan decides for one ledger of a topic; false when this broker
// cannot tell (the topic is owned elsewhere).
func (s *Server) isOrphan(ctx context.Context, id int64, path, cursor string) (bool, error) {
	n, err := topicname.ParsePath(path)
	if err != nil || !n.Persistent() {
		return false, nil // not a ledger's topic
	}
	exists, err := s.md.topicExists(ctx, n)
	if err != nil {
		return false, err
	}
	if !exists {
		return true, nil // the topic was deleted
	}
	t := s.lookupTopic(n)
	if t == nil || t.isClosed() {
		return false, nil // not ours to judge
	}
	if cursor != "" {
		var info metapb.CursorInfo
		if _, err := getProto(ctx, s.store, metastore.CursorKey(path, cursor), &info); errors.Is(err, metastore.ErrNotFound) {
			return true, nil // the subscription is gone
		} else if err != nil {
			return false, err
		}
		if sub, err := t.subscription(cursor); err == nil && sub.cur.Stats().CursorLedger == id {
			return false, nil
		}
		return info.CursorLedgerId != id, nil
	}
	return !t.ml.Owns(id), nil
}

// sweepLoop runs sweep every so often.
func (s *Server) sweepLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(max(10*s.cfg.RetentionCheckInterval, time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Minute)
		if _, err := s.sweep(ctx, sweepGrace); err != nil {
			s.log.Warn("orphan ledger sweep failed", zap.Error(err))
		}
		cancel()
	}
}
