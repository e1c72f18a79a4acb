package bookie

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// A group commit's batch is exported under BookKeeper's journal names:
// the wait for the syncer per batch, hand-over to durable once per add,
// the write and the sync only for the batch whose turn made them, each
// with its own outcome (a sync that worked before the batch's index
// commit failed is a sync that worked).
func TestSyncedMetrics(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.enqueue, m.journalAdd, m.flush, m.sync)
	ms := time.Millisecond
	failed := errors.New("failed")
	for _, st := range []storage.SyncStats{
		{Requests: 4, Adds: 3, Queued: 1 * ms, Took: 9 * ms, Wrote: true, Write: 2 * ms, Synced: true, Sync: 5 * ms},
		{Requests: 2, Adds: 2, Queued: 1 * ms, Took: 6 * ms}, // covered by the write before
		{Requests: 1, Adds: 1, Queued: 1 * ms, Took: 9 * ms, Wrote: true, Write: 2 * ms, Synced: true, Sync: 5 * ms, SyncErr: failed, Err: failed},
		{Requests: 1, Adds: 1, Queued: 1 * ms, Took: 3 * ms, Wrote: true, Write: 2 * ms, WriteErr: failed, Err: failed},
		{Requests: 1, Adds: 1, Queued: 1 * ms, Took: 9 * ms, Wrote: true, Write: 2 * ms, Synced: true, Sync: 5 * ms, Err: failed}, // the index commit failed
		{Requests: 1, Queued: 1 * ms, Took: 9 * ms},                                                                               // a fence: no add
	} {
		m.synced(st)
	}
	g := testutil.Gather(t, reg)
	for _, c := range []struct {
		name    string
		ok, bad uint64
		okSumMs float64
	}{
		{"bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE", 3, 3, 3},
		{"bookie_journal_JOURNAL_ADD_ENTRY", 5, 3, 3*9 + 2*6},
		{"bookie_journal_JOURNAL_FLUSH_LATENCY", 3, 1, 6},
		{"bookie_journal_JOURNAL_SYNC", 2, 1, 10},
	} {
		ok, bad := g.Summary(t, c.name, "success", "true"), g.Summary(t, c.name, "success", "false")
		if ok.GetSampleCount() != c.ok || bad.GetSampleCount() != c.bad || ok.GetSampleSum() != c.okSumMs {
			t.Errorf("%s: %d ok (sum %v ms), %d failed; want %d (sum %v ms), %d", c.name,
				ok.GetSampleCount(), ok.GetSampleSum(), bad.GetSampleCount(), c.ok, c.okSumMs, c.bad)
		}
	}
}
