package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
)

// copies checks, from outside, what autorecovery promises: every entry of
// every ledger is stored on each bookie of its write set, and those bookies
// are live. It reads the ledger metadata from etcd and each copy straight
// from each bookie (ledger.Client.ReadFrom, which checks the entry id and
// checksum), not through a reader that would be content with one copy.
//
// Checked are the segments whose bookies nobody else may still change: every
// segment of a closed ledger and every segment but the last of one that is
// not closed (the last belongs to its writer, which replaces a dead bookie
// by an ensemble change when an add to it fails; its entries may sit on
// only Qa bookies meanwhile).
type copies struct {
	t     *testing.T
	store *metastore.Store
	lc    *ledger.Client
}

func newCopies(t *testing.T, store *metastore.Store) *copies {
	lc, err := ledger.New(store, ledger.Config{Logger: zap.NewNop(), ReadTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return &copies{t: t, store: store, lc: lc}
}

// ledgers reads the metadata of every ledger (deleted meanwhile: left out).
func (c *copies) ledgers(ctx context.Context) ([]*ledger.Metadata, error) {
	var ids []int64
	if err := c.store.ListAll(ctx, metastore.LedgersPrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		id, err := metastore.ParseLedgerKey(kv.Key)
		if err == nil {
			ids = append(ids, id)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]*ledger.Metadata, 0, len(ids))
	for _, id := range ids {
		m, err := c.lc.Metadata(ctx, id)
		if errors.Is(err, ledger.ErrNoSuchLedger) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// settled returns the indexes of m's segments that are checked.
func settled(m *ledger.Metadata) []int {
	n := len(m.Segments)
	if m.State != ledger.StateClosed {
		n--
	}
	out := make([]int, 0, max(n, 0))
	for i := 0; i < n; i++ {
		out = append(out, i)
	}
	return out
}

// registered lists the bookies registered now.
func registered(ctx context.Context, store *metastore.Store) (map[string]bool, error) {
	out := map[string]bool{}
	err := store.ListAll(ctx, metastore.BookiesAvailablePrefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		out[strings.TrimPrefix(kv.Key, metastore.BookiesAvailablePrefix)] = true
		return nil
	})
	return out, err
}

// problems lists (up to a few examples, and how many) what breaks the
// promise in ms: a settled segment naming a bookie that is not live or
// that must not be named (banned), or a copy that cannot be read back
// intact from its bookie. Copies are read only if the metadata is right
// (readCopies), 16 at a time.
type problems struct {
	count    int
	examples []string
}

func (p *problems) add(format string, args ...any) {
	p.count++
	if len(p.examples) < 10 {
		p.examples = append(p.examples, fmt.Sprintf(format, args...))
	}
}

func (p *problems) String() string {
	return fmt.Sprintf("%d problems, e.g. %s", p.count, strings.Join(p.examples, "; "))
}

// copyStats: what a check looked at, and when the metadata was first
// found right in the round that passed.
type copyStats struct {
	ledgers, segments, copies int
	metadataAt                time.Time
}

func (c *copies) check(ctx context.Context, banned map[string]bool, readCopies bool) (*problems, copyStats, error) {
	var st copyStats
	p := &problems{}
	live, err := registered(ctx, c.store)
	if err != nil {
		return nil, st, err
	}
	ms, err := c.ledgers(ctx)
	if err != nil {
		return nil, st, err
	}
	type copyRef struct {
		m      *ledger.Metadata
		bookie string
		entry  int64
	}
	var refs []copyRef
	for _, m := range ms {
		st.ledgers++
		for _, i := range settled(m) {
			st.segments++
			seg := m.Segments[i]
			for _, b := range seg.Bookies {
				if !live[b] {
					p.add("ledger %d segment %d (%s) names %s, which is not registered", m.ID, i, m.State, b)
				}
				if banned[b] {
					p.add("ledger %d segment %d (%s) names %s", m.ID, i, m.State, b)
				}
			}
			for e := seg.First; e <= m.SegmentEnd(i); e++ {
				for _, pos := range ledger.WriteSet(e, m.Ensemble, m.WriteQuorum) {
					refs = append(refs, copyRef{m, seg.Bookies[pos], e})
				}
			}
		}
	}
	st.copies = len(refs)
	if !readCopies || p.count > 0 {
		return p, st, nil
	}
	var mu sync.Mutex
	work := make(chan copyRef)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := c.lc.ReadFrom(rctx, r.m, r.bookie, r.entry)
				cancel()
				if err != nil {
					mu.Lock()
					p.add("ledger %d entry %d on %s: %v", r.m.ID, r.entry, r.bookie, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, r := range refs {
		work <- r
	}
	close(work)
	wg.Wait()
	return p, st, nil
}

// waitComplete waits until the check finds nothing wrong: first the
// metadata alone (cheap, polled), then every copy read back. It fails the
// test at the deadline with what was still wrong.
func (c *copies) waitComplete(timeout time.Duration, banned map[string]bool) copyStats {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		p, st, err := c.check(ctx, banned, false)
		if err == nil && p.count == 0 {
			at := time.Now()
			p, st, err = c.check(ctx, banned, true)
			if err == nil && p.count == 0 {
				cancel()
				st.metadataAt = at
				return st
			}
		}
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		default:
			last = p.String()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("copies still incomplete after %v: %s", timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// namedBy lists the ledgers whose metadata names bookie in any segment.
func (c *copies) namedBy(ctx context.Context, bookie string) ([]int64, error) {
	ms, err := c.ledgers(ctx)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, m := range ms {
		if slices.Contains(m.Bookies(), bookie) {
			out = append(out, m.ID)
		}
	}
	return out, nil
}
