package bookie

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// registration is the bookie's entry in bookies/available/, bound to a
// session. Owned by the registration loop.
type registration struct {
	session   *metastore.Session
	lastAdds  int64
	lastBytes int64
	lastAt    time.Time
}

// register opens a session and writes the bookie's registration under it.
func (s *Server) register(ctx context.Context) (*registration, error) {
	sess, err := s.store.NewSession(ctx, s.cfg.SessionTTL)
	if err != nil {
		return nil, fmt.Errorf("bookie: register: %w", err)
	}
	st := s.db.Stats()
	r := &registration{session: sess, lastAdds: st.Adds, lastBytes: st.AddBytes, lastAt: time.Now()}
	if err := s.publish(ctx, r); err != nil {
		sess.Close()
		return nil, err
	}
	s.session.Store(sess)
	return r, nil
}

// publish writes the current load report.
func (s *Server) publish(ctx context.Context, r *registration) error {
	st := s.db.Stats()
	now := time.Now()
	secs := now.Sub(r.lastAt).Seconds()
	info := &metapb.BookieInfo{
		Address:         s.addr,
		LedgerCount:     int64(st.Ledgers),
		UpdatedAtUnixMs: now.UnixMilli(),
		InstanceId:      s.instanceID,
		Version:         Version,
		Rack:            s.cfg.Rack,
		HostLabel:       s.cfg.HostLabel,
		ReadOnlyReasons: s.ReadOnly(),
	}
	info.ReadOnly = len(info.ReadOnlyReasons) > 0
	info.StoredBytes = s.db.DiskSpaceUsage()
	if secs > 0 {
		info.WriteBytesPerSec = float64(st.AddBytes-r.lastBytes) / secs
		info.AddsPerSec = float64(st.Adds-r.lastAdds) / secs
	}
	r.lastAdds, r.lastBytes, r.lastAt = st.Adds, st.AddBytes, now
	if u := s.lastUsage.Load(); u != nil {
		info.FreeDiskBytes = u.Avail
		info.TotalDiskBytes = u.Total
	}
	raw, err := proto.Marshal(info)
	if err != nil {
		return err
	}
	if _, err := s.store.Put(ctx, metastore.BookieAvailableKey(s.id), raw, metastore.WithLease(r.session.Lease())); err != nil {
		return fmt.Errorf("bookie: publish registration: %w", err)
	}
	return nil
}

// registrationLoop refreshes the load report (at once when the read-only
// state changed), registers again after a lost session, and unregisters
// when the storage fails or the server stops. A storage that ran out of
// space has not failed: the bookie stays registered, read-only, and serves
// reads.
func (s *Server) registrationLoop(r *registration) {
	defer s.wg.Done()
	defer func() {
		s.session.Store(nil)
		if r != nil {
			r.session.Close() // revokes the lease: the registration goes at once
		}
	}()
	tick := time.NewTicker(s.cfg.RegistrationInterval)
	defer tick.Stop()
	retry := time.Second
	for {
		var lost <-chan struct{}
		if r != nil {
			lost = r.session.Done()
		}
		select {
		case <-s.stop:
			return
		case <-s.db.Failed():
			s.log.Error("storage failed: unregistering; restart the bookie after fixing the disk", zap.Error(s.db.Err()))
			s.session.Store(nil)
			if r != nil {
				r.session.Close()
				r = nil
			}
			<-s.stop
			return
		case <-lost:
			s.log.Warn("metastore session lost; registering again", zap.Error(r.session.Err()))
			s.session.Store(nil)
			r.session.Close()
			r = nil
			continue
		case <-tick.C:
		case <-s.republish:
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.SessionTTL)
		var err error
		if r == nil {
			r, err = s.register(ctx)
		} else {
			err = s.publish(ctx, r)
		}
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("registration refresh failed", zap.Error(err), zap.Duration("retry", retry))
		}
	}
}
