package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/metastore"
)

// WaitKey waits until cond holds for a key's value (found is false while
// the key does not exist) and returns that value. It waits on an etcd
// watch, not by polling: each read is followed by a watch from the
// revision after it, so no change is missed. It fails the test after
// timeout.
func WaitKey(t testing.TB, s *metastore.Store, key string, timeout time.Duration, what string, cond func(kv metastore.KV, found bool) bool) metastore.KV {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		resp, err := s.Client().Get(ctx, s.Root()+key)
		if err != nil {
			t.Fatalf("waiting for %s: read %s: %v", what, key, err)
		}
		var kv metastore.KV
		found := len(resp.Kvs) > 0
		if found {
			k := resp.Kvs[0]
			kv = metastore.KV{Key: key, Value: k.Value, CreateRevision: k.CreateRevision, ModRevision: k.ModRevision, Version: k.Version, Lease: k.Lease}
		}
		if cond(kv, found) {
			return kv
		}
		changed := false
		wctx, wcancel := context.WithCancel(ctx)
		for b := range s.Watch(wctx, key, resp.Header.Revision+1) {
			if b.Err != nil {
				t.Fatalf("waiting for %s: %v", what, b.Err)
			}
			if len(b.Events) > 0 {
				changed = true
				break
			}
		}
		wcancel()
		if !changed {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}
