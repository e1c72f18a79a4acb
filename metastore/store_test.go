package metastore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

func newStore(t *testing.T) (*metastore.Embedded, *metastore.Store) {
	t.Helper()
	e := testutil.StartEtcd(t)
	return e, testutil.OpenStore(t, e.Endpoints(), "/test-"+t.Name())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestGetPutDelete(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)

	if _, err := s.Get(ctx, "a"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("get of absent key: got %v, want ErrNotFound", err)
	}
	rev1, err := s.Put(ctx, "a", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "one" || kv.ModRevision != rev1 || kv.CreateRevision != rev1 || kv.Key != "a" {
		t.Fatalf("got %+v after put at revision %d", kv, rev1)
	}
	rev2, err := s.Put(ctx, "a", []byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	kv, _ = s.Get(ctx, "a")
	if string(kv.Value) != "two" || kv.ModRevision != rev2 || kv.CreateRevision != rev1 || kv.Version != 2 {
		t.Fatalf("got %+v after second put", kv)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatalf("delete of absent key: %v", err)
	}
}

func TestRootsAreIsolated(t *testing.T) {
	e := testutil.StartEtcd(t)
	a := testutil.OpenStore(t, e.Endpoints(), "/cluster-a")
	b := testutil.OpenStore(t, e.Endpoints(), "/cluster-b/")
	ctx := ctxT(t)
	if _, err := a.Put(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("cluster b sees cluster a's key: %v", err)
	}
	kvs, _, err := b.List(ctx, "", metastore.ListOptions{})
	if err != nil || len(kvs) != 0 {
		t.Fatalf("cluster b lists %v, %v", kvs, err)
	}
}

func TestCreateAndCompareAndSwap(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)

	rev, err := s.Create(ctx, "k", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "k", []byte("again")); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("second create: got %v, want ErrBadVersion", err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", []byte("v2"), rev+100); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("CAS with wrong revision: got %v", err)
	}
	rev2, err := s.CompareAndSwap(ctx, "k", []byte("v2"), rev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", []byte("v3"), rev); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("CAS with stale revision: got %v", err)
	}
	if err := s.CompareAndDelete(ctx, "k", rev); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("delete with stale revision: got %v", err)
	}
	if err := s.CompareAndDelete(ctx, "k", rev2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompareAndSwap(ctx, "k", []byte("v4"), rev2); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("CAS on deleted key: got %v", err)
	}
}

// Two writers race to increment one counter with read-modify-CAS: every
// successful CAS is counted exactly once in the final value, and the losers
// see ErrBadVersion.
func TestCASRaceBetweenWriters(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)
	if _, err := s.Create(ctx, "counter", []byte("0")); err != nil {
		t.Fatal(err)
	}
	const writers, increments = 2, 100
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		losses int
	)
	errc := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < increments; {
				kv, err := s.Get(ctx, "counter")
				if err != nil {
					errc <- err
					return
				}
				n, _ := strconv.Atoi(string(kv.Value))
				_, err = s.CompareAndSwap(ctx, "counter", []byte(strconv.Itoa(n+1)), kv.ModRevision)
				switch {
				case err == nil:
					done++
				case errors.Is(err, metastore.ErrBadVersion):
					mu.Lock()
					losses++
					mu.Unlock()
				default:
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(kv.Value); got != strconv.Itoa(writers*increments) {
		t.Fatalf("counter = %s, want %d (lost updates)", got, writers*increments)
	}
	t.Logf("%d CAS attempts lost the race", losses)
}

// A transaction guarded by an ownership token applies while the owner key
// is the one the token came from, and fails with ErrNotOwner once the key
// was deleted or re-created by someone else, even if it has the same value.
func TestGuardedCommit(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)

	token, err := s.Create(ctx, "owners/p0", []byte("broker-1"))
	if err != nil {
		t.Fatal(err)
	}
	g := &metastore.Guard{Key: "owners/p0", Token: token}
	rev, err := s.Commit(ctx, g, metastore.PutOp("ledgers-of/p0", []byte("L1"), metastore.MustNotExist))
	if err != nil {
		t.Fatalf("guarded write by the owner: %v", err)
	}
	// The owner's own value updates do not change the token.
	if _, err := s.Put(ctx, "owners/p0", []byte("broker-1 (updated)")); err != nil {
		t.Fatal(err)
	}
	if rev, err = s.Commit(ctx, g, metastore.PutOp("ledgers-of/p0", []byte("L1,L2"), rev)); err != nil {
		t.Fatalf("guarded write after owner value update: %v", err)
	}
	// Ownership changes hands: delete and re-create with the same value.
	if err := s.Delete(ctx, "owners/p0"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, g, metastore.PutOp("ledgers-of/p0", []byte("stale"), rev)); !errors.Is(err, metastore.ErrNotOwner) {
		t.Fatalf("guarded write with no owner key: got %v, want ErrNotOwner", err)
	}
	newToken, err := s.Create(ctx, "owners/p0", []byte("broker-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, g, metastore.PutOp("ledgers-of/p0", []byte("stale"), rev)); !errors.Is(err, metastore.ErrNotOwner) {
		t.Fatalf("guarded write with old token: got %v, want ErrNotOwner", err)
	}
	kv, err := s.Get(ctx, "ledgers-of/p0")
	if err != nil || string(kv.Value) != "L1,L2" {
		t.Fatalf("deposed owner changed metadata: %q, %v", kv.Value, err)
	}
	// The new owner writes; a wrong revision under a valid guard is a
	// version error, not an ownership error.
	g2 := &metastore.Guard{Key: "owners/p0", Token: newToken}
	if _, err := s.Commit(ctx, g2, metastore.PutOp("ledgers-of/p0", []byte("x"), rev+1000)); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("guarded write with wrong revision: got %v, want ErrBadVersion", err)
	}
	if _, err := s.Commit(ctx, g2,
		metastore.PutOp("ledgers-of/p0", []byte("L3"), rev),
		metastore.DeleteOp("other", metastore.AnyVersion)); err != nil {
		t.Fatalf("new owner's write: %v", err)
	}
}

// A multi-key commit is all or nothing.
func TestCommitIsAtomic(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)
	ra, _ := s.Put(ctx, "a", []byte("a0"))
	if _, err := s.Put(ctx, "b", []byte("b0")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Commit(ctx, nil,
		metastore.PutOp("a", []byte("a1"), ra),
		metastore.PutOp("b", []byte("b1"), 1), // wrong revision
		metastore.PutOp("c", []byte("c1"), metastore.MustNotExist))
	if !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("got %v, want ErrBadVersion", err)
	}
	for k, want := range map[string]string{"a": "a0", "b": "b0"} {
		kv, err := s.Get(ctx, k)
		if err != nil || string(kv.Value) != want {
			t.Fatalf("%s = %q, %v after failed commit; want %q", k, kv.Value, err, want)
		}
	}
	if _, err := s.Get(ctx, "c"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("c written by a failed commit: %v", err)
	}
}

func TestListPaging(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)
	const n = 25
	for i := 0; i < n; i++ {
		if _, err := s.Put(ctx, fmt.Sprintf("items/%03d", i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Keys that share the prefix string but not the folder, and a sibling.
	s.Put(ctx, "items0", []byte("x"))
	s.Put(ctx, "itemz/1", []byte("x"))

	var got []string
	opt := metastore.ListOptions{Limit: 7}
	pages := 0
	for {
		page, more, err := s.List(ctx, "items/", opt)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, kv := range page {
			got = append(got, kv.Key)
		}
		if !more {
			break
		}
		opt.StartAfter = page[len(page)-1].Key
	}
	if len(got) != n || pages != 4 {
		t.Fatalf("listed %d keys in %d pages: %v", len(got), pages, got)
	}
	for i, k := range got {
		if want := fmt.Sprintf("items/%03d", i); k != want {
			t.Fatalf("key %d = %s, want %s", i, k, want)
		}
	}
	count := 0
	if err := s.ListAll(ctx, "items/", metastore.ListOptions{Limit: 4, KeysOnly: true}, func(kv metastore.KV) error {
		if kv.Value != nil {
			return fmt.Errorf("keys-only list returned a value for %s", kv.Key)
		}
		count++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("ListAll saw %d keys, want %d", count, n)
	}
	if _, _, err := s.List(ctx, "items/", metastore.ListOptions{StartAfter: "other/1"}); err == nil {
		t.Fatal("list with a start key outside the prefix succeeded")
	}
}

func TestWatch(t *testing.T) {
	_, s := newStore(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	rev, err := s.Put(ctx, "w/before", []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	// From a past revision: the earlier put is replayed.
	ch := s.Watch(ctx, "w/", rev)
	s.Put(ctx, "w/a", []byte("1"))
	s.Put(ctx, "elsewhere", []byte("x"))
	s.Delete(ctx, "w/a")

	var evs []metastore.Event
	for len(evs) < 3 {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatal("watch closed early")
			}
			if b.Err != nil {
				t.Fatal(b.Err)
			}
			evs = append(evs, b.Events...)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d events", len(evs))
		}
	}
	want := []struct {
		typ metastore.EventType
		key string
	}{{metastore.EventPut, "w/before"}, {metastore.EventPut, "w/a"}, {metastore.EventDelete, "w/a"}}
	for i, w := range want {
		if evs[i].Type != w.typ || evs[i].KV.Key != w.key {
			t.Fatalf("event %d = %+v, want %+v", i, evs[i], w)
		}
	}
	cancel()
	for range ch {
	}
}

func TestNextIDIncreases(t *testing.T) {
	_, s := newStore(t)
	ctx := ctxT(t)
	last := int64(0)
	seen := map[int64]bool{}
	for i := 0; i < 20; i++ {
		name := "ledger"
		if i%3 == 0 {
			name = "other"
		}
		id, err := s.NextID(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if id <= last || seen[id] {
			t.Fatalf("id %d after %d", id, last)
		}
		seen[id] = true
		last = id
	}
}

func TestParseLedgerKey(t *testing.T) {
	for _, id := range []int64{1, 42, 1 << 62} {
		got, err := metastore.ParseLedgerKey(metastore.LedgerKey(id))
		if err != nil || got != id {
			t.Fatalf("round trip of %d: %d, %v", id, got, err)
		}
	}
	for _, bad := range []string{"ledgers/", "ledgers/12", "bookies/00000000000000000001", "ledgers/0000000000000000000x", "ledgers/00000000000000000000"} {
		if _, err := metastore.ParseLedgerKey(bad); err == nil {
			t.Errorf("ParseLedgerKey(%q) succeeded", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg metastore.Config
		ok  bool
	}{
		{metastore.Config{Endpoints: []string{"127.0.0.1:2379"}}, true},
		{metastore.Config{}, false},
		{metastore.Config{Endpoints: []string{" "}}, false},
		{metastore.Config{Endpoints: []string{"x:1"}, Root: "no-slash"}, false},
		{metastore.Config{Endpoints: []string{"x:1"}, DialTimeout: -1}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
	c := metastore.Config{Endpoints: []string{"x:1"}}
	c.Validate()
	if c.Root != metastore.DefaultRoot || c.DialTimeout <= 0 {
		t.Fatalf("defaults not filled: %+v", c)
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx := ctxT(t)
	// A listener that accepts nothing useful: a port with nobody on it.
	_, err := metastore.Open(ctx, metastore.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: 500 * time.Millisecond}, nil)
	if err == nil {
		t.Fatal("open of an unreachable etcd succeeded")
	}
}

func FuzzParseLedgerKey(f *testing.F) {
	f.Add(metastore.LedgerKey(42))
	f.Add("ledgers/-0000000000000000001")
	f.Add("ledgers/+0000000000000000001")
	f.Fuzz(func(t *testing.T, key string) {
		id, err := metastore.ParseLedgerKey(key)
		if err != nil {
			return
		}
		if id <= 0 || metastore.LedgerKey(id) != key {
			t.Fatalf("%q parsed as %d, which is key %q", key, id, metastore.LedgerKey(id))
		}
	})
}

// A CheckOp conditions a transaction on a key it does not write.
func TestCommitCheckOp(t *testing.T) {
	_, s := newStore(t)
	ctx := context.Background()
	rev, err := s.Put(ctx, "meta", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, nil, metastore.CheckOp("meta", rev+100), metastore.PutOp("index", nil, metastore.AnyVersion)); !errors.Is(err, metastore.ErrBadVersion) {
		t.Fatalf("stale check: %v", err)
	}
	if _, err := s.Get(ctx, "index"); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("a failed check wrote: %v", err)
	}
	if _, err := s.Commit(ctx, nil, metastore.CheckOp("meta", rev), metastore.PutOp("index", nil, metastore.AnyVersion)); err != nil {
		t.Fatal(err)
	}
	if kv, err := s.Get(ctx, "meta"); err != nil || kv.ModRevision != rev || string(kv.Value) != "v1" {
		t.Fatalf("the checked key changed: %+v %v", kv, err)
	}
	if _, err := s.Get(ctx, "index"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, nil, metastore.CheckOp("absent", metastore.MustNotExist), metastore.DeleteOp("index", metastore.AnyVersion)); err != nil {
		t.Fatal(err)
	}
}
