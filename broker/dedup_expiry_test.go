package broker_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// dedupSnapshot reads a topic's deduplication snapshot from etcd ("" if
// there is none yet) as its position and sequence ids.
func dedupSnapshot(t *testing.T, e *env, path string) (string, []byte) {
	t.Helper()
	kv, err := e.c.Store.Get(ctxT(t), metastore.DedupKey(path))
	if err != nil {
		return "", nil
	}
	var snap metapb.DedupSnapshot
	if err := proto.Unmarshal(kv.Value, &snap); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d %v", snap.LedgerId, snap.EntryId, snap.Sequences), kv.Value
}

// waitDedupSequences waits until the stored snapshot has these sequence
// ids (as fmt prints the map).
func waitDedupSequences(t *testing.T, e *env, path, want string) {
	t.Helper()
	var got string
	defer func() {
		if t.Failed() {
			t.Logf("last snapshot seen: %s", got)
		}
	}()
	testutil.Eventually(t, 10*time.Second, "deduplication snapshot "+want, func() bool {
		got, _ = dedupSnapshot(t, e, path)
		return len(got) >= len(want) && got[len(got)-len(want):] == want
	})
}

func sendSeq(t *testing.T, p client.Producer, seq int64, payload string) client.MessageID {
	t.Helper()
	id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(payload), SequenceID: &seq})
	if err != nil {
		t.Fatalf("send %d: %v", seq, err)
	}
	return id
}

// A producer disconnected and idle past --dedup-producer-inactivity-timeout
// is forgotten: the next snapshot no longer names it. A connected
// producer, however idle, is kept. The purged name, when it comes back, is
// a new producer: its sequence ids start from what it sends.
func TestDedupInactiveProducerIsPurged(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Deduplication = true })
	cl := e.client()
	const topic, path = "persistent://public/default/dedup-purge", "public/default/dedup-purge"
	stays, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "stays", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer stays.Close()
	clock := testutil.NewClock(time.Now())
	if !e.b.SetDedupClock(topic, clock.Now) {
		t.Fatal("topic not loaded")
	}
	sendSeq(t, stays, 1, "stays-1")
	gone, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "gone", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	sendSeq(t, gone, 1, "gone-1")
	sendSeq(t, gone, 2, "gone-2")
	gone.Close()
	testutil.Eventually(t, 10*time.Second, "the broker to see gone disconnect", func() bool {
		return !e.b.ProducerConnected(topic, "gone")
	})
	// The snapshot interval passes: a snapshot names both.
	clock.Advance(broker.DefaultConfig().DedupSnapshotInterval)
	waitDedupSequences(t, e, path, "map[gone:2 stays:1]")
	// Just short of the timeout nothing is forgotten; past it, the
	// disconnected producer is.
	clock.Advance(e.cfg.DedupProducerInactivityTimeout - broker.DefaultConfig().DedupSnapshotInterval - time.Minute)
	if got := fmt.Sprint(e.b.DedupProducers(topic)); got != "[gone stays]" {
		t.Fatalf("state before the timeout: %s", got)
	}
	clock.Advance(2 * time.Minute)
	waitDedupSequences(t, e, path, "map[stays:1]")
	if got := fmt.Sprint(e.b.DedupProducers(topic)); got != "[stays]" {
		t.Fatalf("state after the purge: %s", got)
	}

	gone, err = cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "gone", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	if last := gone.LastSequenceID(); last != -1 {
		t.Fatalf("a purged producer back: last sequence id %d, want -1", last)
	}
	if id := sendSeq(t, gone, 1, "gone-1 again"); id.LedgerID() < 0 {
		t.Fatalf("a purged producer's sequence id 1 taken as a duplicate: %v", id)
	}
	if got := fmt.Sprint(readPayloads(t, cl, topic)); got != "[stays-1 gone-1 gone-2 gone-1 again]" {
		t.Fatalf("stored %s", got)
	}
}

// Snapshots are written less often than the persist cadence, so a broker
// that stops without a final snapshot (a crash) leaves an older one: the
// load replays the entries after it, and re-sends of them are still not
// stored twice.
func TestDedupRestartFromAnOlderSnapshot(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) {
		c.Deduplication = true
		c.DedupSnapshotEntries = 3
	})
	cl := e.client()
	const topic, path = "persistent://public/default/dedup-old-snapshot", "public/default/dedup-old-snapshot"
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "p1", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]string{}
	for s := int64(1); s <= 3; s++ {
		ids[s] = sendSeq(t, p, s, fmt.Sprint("v", s)).String()
	}
	waitDedupSequences(t, e, path, "map[p1:3]")
	_, old := dedupSnapshot(t, e, path)
	for s := int64(4); s <= 5; s++ {
		ids[s] = sendSeq(t, p, s, fmt.Sprint("v", s)).String()
	}
	p.Close()
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	// As if the broker had crashed before snapshotting 4 and 5.
	if _, err := e.c.Store.Put(ctxT(t), metastore.DedupKey(path), old); err != nil {
		t.Fatal(err)
	}
	e.start()
	p, err = cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "p1", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if last := p.LastSequenceID(); last != 5 {
		t.Fatalf("last sequence id after the restart: %d, want 5", last)
	}
	for _, s := range []int64{2, 4, 5} {
		if id := sendSeq(t, p, s, "again"); s >= 4 && id.String() != ids[s] {
			t.Fatalf("re-send of %d: %v, want the original's id %s", s, id, ids[s])
		}
	}
	if got := fmt.Sprint(readPayloads(t, cl, topic)); got != "[v1 v2 v3 v4 v5]" {
		t.Fatalf("stored %s", got)
	}
}

// Retention keeps the entries the stored deduplication snapshot does not
// cover (a load replays them), and trims them once a snapshot covers them.
func TestDedupRetentionKeepsEntriesAfterTheSnapshot(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) {
		c.Deduplication = true
		c.MaxEntriesPerLedger, c.MinLedgerRollover = 2, 0
		c.RetentionCheckInterval = time.Hour // retention runs when the test says
	})
	cl := e.client()
	const topic, path = "persistent://public/default/dedup-retention", "public/default/dedup-retention"
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "p1", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	clock := testutil.NewClock(time.Now())
	if !e.b.SetDedupClock(topic, clock.Now) {
		t.Fatal("topic not loaded")
	}
	var ids []client.MessageID
	for s := int64(1); s <= 5; s++ { // ledgers of 2, 2 and 1 entries
		ids = append(ids, sendSeq(t, p, s, fmt.Sprint("v", s)))
	}
	first := fmt.Sprintf("%d:0", ids[0].LedgerID())
	if got := e.b.FirstEntry(topic); got != first {
		t.Fatalf("first entry %s, want %s", got, first)
	}
	// Nobody subscribes and nothing is retained: every full ledger may go,
	// but no snapshot covers them yet.
	if !e.b.RetainNow(topic) {
		t.Fatal("topic not loaded")
	}
	if got := e.b.FirstEntry(topic); got != first {
		t.Fatalf("first entry %s after retention, want %s kept: no snapshot covers it", got, first)
	}
	clock.Advance(broker.DefaultConfig().DedupSnapshotInterval)
	waitDedupSequences(t, e, path, "map[p1:5]")
	want := fmt.Sprintf("%d:0", ids[4].LedgerID())
	testutil.Eventually(t, 10*time.Second, "the covered ledgers trimmed", func() bool {
		e.b.RetainNow(topic)
		return e.b.FirstEntry(topic) == want
	})
}
