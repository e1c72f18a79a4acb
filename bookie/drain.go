package bookie

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
)

// ReadOnlyDraining: the bookie is being (or was) decommissioned
// (bookies/drain/<id> exists): it takes no new writes while autorecovery
// moves its copies away. Cleared by recommission.
const ReadOnlyDraining = ledger.DrainingReason

// drainState reads the bookie's decommission record and sets the
// read-only reason to match.
func (s *Server) drainState(ctx context.Context) error {
	_, err := s.store.Get(ctx, metastore.BookieDrainKey(s.id))
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		s.SetReadOnly(ReadOnlyDraining, false)
		return nil
	case err != nil:
		return err
	}
	s.SetReadOnly(ReadOnlyDraining, true)
	return nil
}

// drainLoop follows the decommission record: a drain started by
// `magnetar admin bookies decommission` turns the bookie read-only, a
// recommission writable again.
func (s *Server) drainLoop() {
	defer s.wg.Done()
	for {
		if err := s.drainState(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("cannot read the decommission record; retrying", zap.Error(err))
		}
		// Watch from now: a change between the read and the watch is
		// caught by the read that follows any event or failure.
		for b := range s.store.Watch(s.ctx, metastore.BookieDrainKey(s.id), 0) {
			if b.Err != nil {
				break
			}
			if err := s.drainState(s.ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn("cannot read the decommission record", zap.Error(err))
			}
		}
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}
