package testutil

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/metastore"
)

// StartEtcd starts an embedded etcd on a free 127.0.0.1 port, in a temporary
// directory, stopped when the test ends.
func StartEtcd(t testing.TB) *metastore.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := metastore.StartEmbedded(ctx, metastore.EmbeddedConfig{
		Dir:        t.TempDir(),
		ClientAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

// OpenStore connects a Store to the given endpoints under root, closed when
// the test ends.
func OpenStore(t testing.TB, endpoints []string, root string) *metastore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := metastore.Open(ctx, metastore.Config{Endpoints: endpoints, Root: root}, zaptest.NewLogger(t).Named("metastore"))
	if err != nil {
		t.Fatalf("open metastore: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Eventually calls cond until it returns true or the timeout passes, polling
// every few milliseconds; for conditions that have no event to wait on.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
