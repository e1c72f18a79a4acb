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
		// Watch first, then read: a change after the read is an event.
		wctx, cancel := context.WithCancel(s.ctx)
		ch := s.store.Watch(wctx, metastore.BookieDrainKey(s.id), 0)
		if err := s.drainState(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("cannot read the decommission record; retrying", zap.Error(err))
		}
		for b := range ch {
			if b.Err != nil {
				break
			}
			if err := s.drainState(s.ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn("cannot read the decommission record", zap.Error(err))
			}
		}
		cancel()
		select {
		case <-s.stop:
			return
		case <-time.After(time.Second):
		}
	}
}
