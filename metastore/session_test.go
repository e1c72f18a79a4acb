package metastore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

func TestSessionKeysLiveWithTheSession(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)
	sess, err := s.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "reg/b1", []byte("x"), metastore.WithLease(sess.Lease())); err != nil {
		t.Fatal(err)
	}
	if sess.Err() != nil {
		t.Fatalf("live session reports %v", sess.Err())
	}
	if err := sess.Close(); err != nil {
		t.Fatal(err)
	}
	<-sess.Done()
	if !errors.Is(sess.Err(), metastore.ErrClosed) {
		t.Fatalf("closed session reports %v", sess.Err())
	}
	// Close revokes the lease: the key is gone at once, not after the TTL.
	if _, err := s.Get(ctx, "reg/b1"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("key of a closed session: %v", err)
	}
}

// A client cut off from etcd loses its lease when the TTL passes: Done is
// closed, Err says the session was lost, the session's keys are gone, and a
// write guarded by an owner key bound to that lease fails.
func TestSessionLostOnLeaseExpiry(t *testing.T) {
	e, observer := newStore(t)
	proxy := testutil.StartProxy(t, e.Endpoints()[0])
	s := testutil.OpenStore(t, []string{proxy.Addr()}, observer.Root())
	ctx := ctxT(t)

	sess, err := s.NewSession(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	token, err := s.Create(ctx, "owners/p", []byte("me"), metastore.WithLease(sess.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	guard := &metastore.Guard{Key: "owners/p", Token: token}

	proxy.Pause() // partition: keepalives no longer reach etcd
	select {
	case <-sess.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("session not lost 30s after the partition")
	}
	if !errors.Is(sess.Err(), metastore.ErrSessionLost) {
		t.Fatalf("Err() = %v, want ErrSessionLost", sess.Err())
	}
	// The server expired the lease too: the owner key is gone.
	testutil.Eventually(t, 20*time.Second, "owner key to expire", func() bool {
		_, err := observer.Get(ctx, "owners/p")
		return errors.Is(err, metastore.ErrNotFound)
	})
	// Someone else takes over; the partitioned owner's write, once its
	// network heals, fails on the guard.
	if _, err := observer.Create(ctx, "owners/p", []byte("other")); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := s.Commit(wctx, guard, metastore.PutOp("data", []byte("stale"), metastore.AnyVersion)); !errors.Is(err, metastore.ErrNotOwner) {
		t.Fatalf("write of a deposed owner: got %v, want ErrNotOwner", err)
	}
}

// Revoking the lease from elsewhere (an operator, or etcd losing it) is a
// lost session too.
func TestSessionLostOnRevoke(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)
	sess, err := s.NewSession(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := s.Client().Revoke(ctx, sess.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("session not lost after its lease was revoked")
	}
	if !errors.Is(sess.Err(), metastore.ErrSessionLost) {
		t.Fatalf("Err() = %v, want ErrSessionLost", sess.Err())
	}
}
