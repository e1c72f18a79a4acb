package metastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is an etcd lease kept alive in the background. Keys put with
// WithLease(s.Lease()) live as long as the session. Done is closed when the
// lease is lost (expired or revoked elsewhere: Err returns ErrSessionLost)
// or when the owner calls Close (Err returns ErrClosed).
type Session struct {
	store  *Store
	lease  clientv3.LeaseID
	ttl    time.Duration
	cancel context.CancelFunc
	done   chan struct{} // closed by the keepalive goroutine when it ends

	mu struct {
		sync.Mutex
		closed bool // Close was called
	}
}

// NewSession grants a lease of the given TTL (rounded up to whole seconds,
// at least one; etcd may raise it to its minimum) and keeps it alive until
// Close or until it is lost.
func (s *Store) NewSession(ctx context.Context, ttl time.Duration) (*Session, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	grant, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("metastore: grant lease: %w", err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := s.cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		cancel()
		s.revoke(context.Background(), grant.ID)
		return nil, fmt.Errorf("metastore: keep lease alive: %w", err)
	}
	sess := &Session{
		store:  s,
		lease:  grant.ID,
		ttl:    time.Duration(grant.TTL) * time.Second,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go func() {
		defer close(sess.done)
		// The channel closes when the lease expires without a successful
		// keepalive, when it is revoked, or when kctx is cancelled.
		for range ch {
		}
	}()
	return sess, nil
}

// Lease is the session's etcd lease id.
func (s *Session) Lease() clientv3.LeaseID { return s.lease }

// TTL is the lease's time to live as granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session ends, lost or closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session is alive, ErrClosed after Close and
// ErrSessionLost when the lease was lost.
func (s *Session) Err() error {
	select {
	case <-s.done:
	default:
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	return ErrSessionLost
}

// Close stops the keepalive and revokes the lease, so that the session's
// keys disappear at once rather than after the TTL.
func (s *Session) Close() error {
	return s.CloseContext(context.Background())
}

// CloseContext is Close with the lease's revocation bounded by ctx too.
func (s *Session) CloseContext(ctx context.Context) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	lost := false
	select {
	case <-s.done:
		lost = true
	default:
	}
	s.mu.closed = !lost
	s.mu.Unlock()
	s.cancel()
	<-s.done
	if lost {
		return nil
	}
	return s.store.revoke(ctx, s.lease)
}

func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, id); err != nil {
		return fmt.Errorf("metastore: revoke lease %x: %w", int64(id), err)
	}
	return nil
}

// LeaseAlive says whether a lease (a Session's, possibly another
// process's) still exists.
func (s *Store) LeaseAlive(ctx context.Context, id clientv3.LeaseID) (bool, error) {
	resp, err := s.cli.TimeToLive(ctx, id)
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("metastore: lease %x: %w", int64(id), err)
	}
	// -1: expired or revoked. 0 may be a live lease in its last second.
	return resp.TTL >= 0, nil
}

// CheckHeld reports whether key exists under sess's lease: the check
// behind a process's readiness ("registered"). It fails when sess is nil
// or ended, when the key is missing (ErrNotFound) and when another lease
// holds it.
func (s *Store) CheckHeld(ctx context.Context, key string, sess *Session) error {
	if sess == nil {
		return errors.New("no metastore session")
	}
	if err := sess.Err(); err != nil {
		return err
	}
	kv, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	if kv.Lease != int64(sess.Lease()) {
		return fmt.Errorf("metastore: %s is held by lease %x, not by this process's %x", key, kv.Lease, int64(sess.Lease()))
	}
	return nil
}
