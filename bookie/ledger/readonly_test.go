package ledger_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// disks is the disk usage of each bookie of a test cluster, by data
// directory, in per mille; 10% unless set.
type disks struct {
	mu   sync.Mutex
	used map[string]uint64
}

func (d *disks) set(dir string, perMille uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.used[dir] = perMille
}

func (d *disks) usage(dir string) (bookie.DiskUsage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	u, ok := d.used[dir]
	if !ok {
		u = 100
	}
	return bookie.DiskUsage{Total: 1000 << 30, Used: u << 30, Avail: (1000 - u) << 30}, nil
}

// A bookie whose disk fills up while a ledger writes to it: it turns
// read-only and refuses the writer's adds, the writer replaces it with the
// spare bookie, and no append fails; every acknowledged entry stays
// readable, and new ledgers leave the read-only bookie out.
func TestReadOnlyBookieIsReplaced(t *testing.T) {
	d := &disks{used: map[string]uint64{}}
	c := testcluster.Start(t, 4, testcluster.Options{
		Configure:     func(cfg *bookie.Config) { cfg.DiskCheckInterval = 10 * time.Millisecond },
		BookieOptions: []bookie.Option{bookie.WithDiskUsage(d.usage)},
	})
	cl := c.Client(ledger.Config{})
	ctx := ctxT(t)
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	full := w.Metadata().Segments[0].Bookies[1]
	a := newAppender(w)
	const total = 3000
	for n := int64(0); n < total; n++ {
		if n == total/3 {
			// The disk fills up while entries are in flight.
			testutil.Eventually(t, time.Minute, "some acks", func() bool { return a.ackedCount() > 200 })
			d.set(c.Bookie(full).Dir, 950)
			testutil.WaitKey(t, c.Store, metastore.BookieAvailableKey(full), 30*time.Second, "a read-only registration", func(kv metastore.KV, found bool) bool {
				var info metapb.BookieInfo
				return found && proto.Unmarshal(kv.Value, &info) == nil && info.ReadOnly
			})
		}
		if err := a.append(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	a.wg.Wait()
	if len(a.failed) > 0 {
		t.Fatalf("%d appends failed, first: %v", len(a.failed), a.failed[0])
	}
	a.checkInOrder(t)
	if a.ackedCount() != total {
		t.Fatalf("%d of %d appends acknowledged", a.ackedCount(), total)
	}
	// Appends went on to the read-only bookie after it refused them, so
	// an ensemble change is bound to follow (entries may complete on the
	// other two before it commits).
	testutil.WaitKey(t, c.Store, metastore.LedgerKey(w.ID()), 30*time.Second, "a segment without the read-only bookie", func(kv metastore.KV, found bool) bool {
		var m metapb.LedgerMetadata
		if !found || proto.Unmarshal(kv.Value, &m) != nil {
			return false
		}
		last := m.Segments[len(m.Segments)-1]
		return len(m.Segments) > 1 && !slices.Contains(last.Bookies, full)
	})
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := cl.Metadata(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if last := m.Segments[len(m.Segments)-1]; slices.Contains(last.Bookies, full) || m.LastEntry != total-1 {
		t.Fatalf("closed ledger: last entry %d, segments %+v", m.LastEntry, m.Segments)
	}
	r, err := cl.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, r, a.sent)

	for i := 0; i < 10; i++ {
		w2, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		if ens := w2.Metadata().Segments[0].Bookies; slices.Contains(ens, full) {
			t.Fatalf("new ledger placed on the read-only bookie: %v", ens)
		}
		if err := w2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// An idle writer (no append in flight) whose ensemble holds a bookie being
// decommissioned or declared lost replaces it by itself: otherwise the
// last segment of an idle open ledger would name that bookie for ever, and
// autorecovery, which leaves that segment to its writer, could never end
// the decommission or the repair. The entries written before stay
// readable; the writer goes on appending. With no spare bookie nothing
// changes and the writer keeps working.
func TestIdleWriterReplacesRetiredBookies(t *testing.T) {
	for _, retire := range []struct {
		name string
		key  func(string) string
	}{{"draining", metastore.BookieDrainKey}, {"lost", metastore.BookieLostKey}} {
		t.Run(retire.name, func(t *testing.T) {
			// No autorecovery: its auditor would take back the "lost" record
			// of a bookie that is in fact registered.
			c := testcluster.Start(t, 4, testcluster.Options{Configure: func(cfg *bookie.Config) { cfg.Autorecovery = false }})
			cl := c.Client(ledger.Config{ExplicitLACInterval: 50 * time.Millisecond})
			ctx := ctxT(t)
			w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
			if err != nil {
				t.Fatal(err)
			}
			sent := map[int64][]byte{}
			for i := 0; i < 5; i++ {
				p := []byte{byte(i)}
				id, err := w.Append(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				sent[id] = p
			}
			victim := w.Metadata().Segments[0].Bookies[1]
			if _, err := c.Store.Put(ctx, retire.key(victim), nil); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 30*time.Second, "the idle writer to replace "+victim, func() bool {
				segs := w.Metadata().Segments
				return len(segs) == 2 && !slices.Contains(segs[1].Bookies, victim) && segs[1].First == 5
			})
			for i := 5; i < 10; i++ {
				p := []byte{byte(i)}
				id, err := w.Append(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				sent[id] = p
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			r, err := cl.Open(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, r, sent)
		})
	}
	t.Run("no-spare", func(t *testing.T) {
		c := testcluster.Start(t, 3, testcluster.Options{Configure: func(cfg *bookie.Config) { cfg.Autorecovery = false }})
		cl := c.Client(ledger.Config{ExplicitLACInterval: 50 * time.Millisecond, EnsembleChangeTimeout: 200 * time.Millisecond})
		ctx := ctxT(t)
		w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(ctx, []byte("a")); err != nil {
			t.Fatal(err)
		}
		victim := w.Metadata().Segments[0].Bookies[0]
		if _, err := c.Store.Put(ctx, metastore.BookieLostKey(victim), nil); err != nil {
			t.Fatal(err)
		}
		// Several ticks, and longer than EnsembleChangeTimeout.
		time.Sleep(time.Second)
		if segs := w.Metadata().Segments; len(segs) != 1 {
			t.Fatalf("segments %+v: an ensemble change without a spare bookie", segs)
		}
		if _, err := w.Append(ctx, []byte("b")); err != nil {
			t.Fatalf("the writer stopped working: %v", err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
