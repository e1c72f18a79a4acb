package broker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// Batches, with each compression, come back message by message; batch
// index acknowledgements survive a broker restart (acknowledged messages of
// a half-acknowledged batch are not delivered again).
func TestBatchingCompressionAndBatchAcks(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	for _, ct := range []client.CompressionType{client.NoCompression, client.LZ4, client.ZLib, client.ZSTD, client.Snappy} {
		topic := fmt.Sprintf("batch-%d", ct)
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, CompressionType: ct, BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		ids := produce(t, p, 0, 30)
		if ids[0].BatchSize() != 10 || ids[3].BatchIdx() != 3 || ids[0].EntryID() == ids[10].EntryID() {
			t.Fatalf("%v: ids not batched by 10: %v %v %v", ct, ids[0], ids[3], ids[10])
		}
		msgs := receiveN(t, cons, 30)
		for i, m := range msgs {
			if string(m.Payload()) != fmt.Sprintf("m-%05d", i) || m.ID().BatchIdx() != int32(i%10) {
				t.Fatalf("%v message %d: %q at %v", ct, i, m.Payload(), m.ID())
			}
		}
		// Acknowledge the first 5 of the first batch only.
		for _, m := range msgs[:5] {
			cons.Ack(m)
		}
		p.Close()
		cons.Close()
	}
	e.restart()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "batch-3", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	msgs := receiveN(t, cons, 25)
	if string(msgs[0].Payload()) != "m-00005" || string(msgs[24].Payload()) != "m-00029" {
		t.Fatalf("after restart: %q..%q", msgs[0].Payload(), msgs[24].Payload())
	}
}

// A 4-partition topic: keyed messages go to one partition per key, in
// order; one consumer reads every partition.
func TestPartitionedTopic(t *testing.T) {
	e := newEnv(t, nil)
	if code, body, err := adminDo(e, http.MethodPut, "/admin/v2/persistent/public/default/parts/partitions", 4); err != nil || code != http.StatusNoContent {
		t.Fatalf("create partitioned topic: %d %s %v", code, body, err)
	}
	cl := e.client()
	parts, err := cl.TopicPartitions("parts")
	if err != nil || len(parts) != 4 {
		t.Fatalf("partitions: %v %v", parts, err)
	}
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "parts", SubscriptionName: "all", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "parts"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := produce(t, p, 0, 400)
	keyPart := map[string]int32{}
	for i, id := range ids {
		k := fmt.Sprint("k", i%7)
		if prev, ok := keyPart[k]; ok && prev != id.PartitionIdx() {
			t.Fatalf("key %s went to partitions %d and %d", k, prev, id.PartitionIdx())
		}
		keyPart[k] = id.PartitionIdx()
	}
	msgs := receiveN(t, cons, 400)
	lastOfKey := map[string]string{}
	used := map[int32]bool{}
	for _, m := range msgs {
		if prev := lastOfKey[m.Key()]; prev != "" && string(m.Payload()) < prev {
			t.Fatalf("key %s out of order: %s after %s", m.Key(), m.Payload(), prev)
		}
		lastOfKey[m.Key()] = string(m.Payload())
		used[m.ID().PartitionIdx()] = true
	}
	if len(used) < 2 {
		t.Fatalf("7 keys all in one partition: %v", used)
	}
	// A partitioned topic's base name cannot be used directly as a
	// partition.
	if _, err := cl.CreateReader(client.ReaderOptions{Topic: "parts", StartMessageID: client.EarliestMessageID()}); err == nil {
		t.Fatal("reader on a partitioned topic accepted")
	}
}

// Failover: two consumers; the active one leaves after acknowledging some
// messages; the other takes over from the first unacknowledged one.
func TestFailover(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	opts := func(name string) client.ConsumerOptions {
		return client.ConsumerOptions{Topic: "fo", SubscriptionName: "f", Type: client.Failover, Name: name,
			SubscriptionInitialPosition: client.SubscriptionPositionEarliest, ReceiverQueueSize: 10}
	}
	a, err := cl.Subscribe(opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := cl.Subscribe(opts("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "fo", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 0, 50)
	// "a" sorts first: it is active and gets the messages.
	got := receiveN(t, a, 20)
	for _, m := range got {
		a.Ack(m)
	}
	// Wait until the broker has the acks: the backlog shows it.
	deadline := time.Now().Add(30 * time.Second)
	for statsBacklog(t, e, "fo", "f") != 30 {
		if time.Now().After(deadline) {
			t.Fatal("acks did not reach the broker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.Close()
	rest := receiveN(t, b, 30)
	if string(rest[0].Payload()) != "m-00020" || string(rest[29].Payload()) != "m-00049" {
		t.Fatalf("takeover delivered %q..%q", rest[0].Payload(), rest[29].Payload())
	}
	// Exclusive subscriptions refuse a second consumer.
	if _, err := cl.Subscribe(client.ConsumerOptions{Topic: "fo", SubscriptionName: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Subscribe(client.ConsumerOptions{Topic: "fo", SubscriptionName: "x"}); err == nil {
		t.Fatal("a second consumer on an exclusive subscription was accepted")
	}
}

// Seek by message id and by publish time; readers from the earliest
// message and from a given id.
func TestSeekAndReaders(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "seek", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := produce(t, p, 0, 20)
	mid := time.Now()
	time.Sleep(5 * time.Millisecond) // publish times are in milliseconds: a later batch
	produce(t, p, 20, 20)

	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "seek", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	receiveN(t, cons, 40)
	if err := cons.Seek(ids[10]); err != nil {
		t.Fatal(err)
	}
	if m := receiveN(t, cons, 1)[0]; string(m.Payload()) != "m-00010" {
		t.Fatalf("after seek by id: %q", m.Payload())
	}
	if err := cons.SeekByTime(mid); err != nil {
		t.Fatal(err)
	}
	if m := receiveN(t, cons, 1)[0]; string(m.Payload()) != "m-00020" {
		t.Fatalf("after seek by time: %q", m.Payload())
	}

	r, err := cl.CreateReader(client.ReaderOptions{Topic: "seek", StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 40; i++ {
		m, err := r.Next(ctxT(t))
		if err != nil || string(m.Payload()) != fmt.Sprintf("m-%05d", i) {
			t.Fatalf("reader message %d: %v %v", i, m, err)
		}
	}
	if r.HasNext() {
		t.Fatal("HasNext at the end")
	}
	r2, err := cl.CreateReader(client.ReaderOptions{Topic: "seek", StartMessageID: ids[5]})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if m, err := r2.Next(ctxT(t)); err != nil || string(m.Payload()) != "m-00006" {
		t.Fatalf("reader after id 5: %v %v", m, err)
	}
	r3, err := cl.CreateReader(client.ReaderOptions{Topic: "seek", StartMessageID: ids[5], StartMessageIDInclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if m, err := r3.Next(ctxT(t)); err != nil || string(m.Payload()) != "m-00005" {
		t.Fatalf("reader from id 5 inclusive: %v %v", m, err)
	}
}

// A seek's answer (SeekDone) is queued before any message from the seek's
// target: the client drops what it received before SeekDone, so a message
// dispatched from the target ahead of it would never be delivered. The
// hook holds the stream's handler after each seek until the dispatcher
// has queued a message, which is where SeekDone used to be queued from.
func TestSeekAnswerPrecedesMessagesFromTheTarget(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "seek-order", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := produce(t, p, 0, 20)
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "seek-order", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	receiveN(t, cons, 20)
	defer broker.SetTestHookAfterSeek(nil)
	for _, from := range []int{5, 12, 0, 19} {
		// Everything dispatched so far was received: the next message
		// queued is one the seek sends.
		waited := make(chan bool, 1)
		broker.SetTestHookAfterSeek(func(queued <-chan struct{}) {
			select {
			case <-queued:
				waited <- true
			case <-time.After(10 * time.Second):
				waited <- false
			}
		})
		if err := cons.Seek(ids[from]); err != nil {
			t.Fatal(err)
		}
		if !<-waited {
			t.Fatalf("seek to %d: nothing was dispatched after it", from)
		}
		for i, m := range receiveN(t, cons, 20-from) {
			if want := fmt.Sprintf("m-%05d", from+i); string(m.Payload()) != want {
				t.Fatalf("seek to %d: message %d is %q, want %q", from, i, m.Payload(), want)
			}
		}
	}
}

// Deduplication: a message re-sent with a sequence id already stored is
// acknowledged but not stored again, also after a broker restart.
func TestDeduplication(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Deduplication = true })
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "dedup", Name: "p1", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	seq := func(n int64) *int64 { return &n }
	ids := map[int64]client.MessageID{}
	for _, s := range []int64{1, 2, 3} {
		id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(fmt.Sprint("v", s)), SequenceID: seq(s)})
		if err != nil {
			t.Fatal(err)
		}
		ids[s] = id
	}
	// A re-send is acknowledged with the position of the stored original.
	id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("v2 again"), SequenceID: seq(2)})
	if err != nil || id.String() != ids[2].String() {
		t.Fatalf("re-send of 2: %v, %v; want the original's id %v", id, err, ids[2])
	}
	p.Close()
	e.restart()
	p, err = cl.CreateProducer(client.ProducerOptions{Topic: "dedup", Name: "p1", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if last := p.LastSequenceID(); last != 3 {
		t.Fatalf("last sequence id after restart: %d", last)
	}
	// Re-send 2 (a duplicate; the producer moves its sequence on, so force
	// it) and a new one.
	if id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("v2 again"), SequenceID: seq(2)}); err != nil {
		t.Fatalf("duplicate send: %v (%v)", err, id)
	}
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("v4"), SequenceID: seq(4)}); err != nil {
		t.Fatal(err)
	}
	got := readPayloads(t, cl, "dedup")
	sort.Strings(got)
	if fmt.Sprint(got) != "[v1 v2 v3 v4]" {
		t.Fatalf("stored %v", got)
	}
}

// Deduplication at the edges: a re-send of the last stored sequence id
// (the one the check's "at most the highest stored" must include), of
// the first, and of the oldest still among the recent positions is
// acknowledged with the original's position; one older than those with
// -1:-1, as Pulsar does. None is stored again, also for the last one
// after a restart, when the state comes back from storage.
func TestDeduplicationResendAtTheEdges(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Deduplication = true })
	cl := e.client()
	const topic = "dedup-edges"
	newProducer := func() client.Producer {
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, Name: "p1", DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newProducer()
	const n = broker.RecentPositions + 2 // sequence ids 1..n
	ids := make([]client.MessageID, n+1)
	errs := make(chan error, n)
	for s := int64(1); s <= n; s++ {
		p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte(fmt.Sprintf("v%05d", s)), SequenceID: &s},
			func(id client.MessageID, _ *client.ProducerMessage, err error) {
				ids[s] = id
				errs <- err
			})
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	resend := func(p client.Producer, s int64) client.MessageID {
		t.Helper()
		id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(fmt.Sprintf("again %d", s)), SequenceID: &s})
		if err != nil {
			t.Fatalf("re-send of %d: %v", s, err)
		}
		return id
	}
	oldest := int64(n - broker.RecentPositions + 1) // the oldest of the recent positions
	for _, s := range []int64{n, n - 1, oldest, oldest + 1} {
		if id := resend(p, s); id.String() != ids[s].String() {
			t.Errorf("re-send of %d: %v; want the original's %v", s, id, ids[s])
		}
	}
	for _, s := range []int64{oldest - 1, 1} {
		if id := resend(p, s); id.LedgerID() != -1 || id.EntryID() != -1 {
			t.Errorf("re-send of %d, out of the recent positions: %v; want -1:-1", s, id)
		}
	}
	p.Close()
	e.restart()
	p = newProducer()
	defer p.Close()
	if last := p.LastSequenceID(); last != n {
		t.Fatalf("last sequence id after restart: %d, want %d", last, n)
	}
	resend(p, n)
	got := readPayloads(t, cl, topic)
	if len(got) != n {
		t.Fatalf("%d messages stored, want %d (first %q, last %q)", len(got), n, got[0], got[len(got)-1])
	}
	for i, v := range got {
		if want := fmt.Sprintf("v%05d", i+1); v != want {
			t.Fatalf("message %d is %q, want %q", i, v, want)
		}
	}
}

// A batch as large as the consumer's whole receive queue arrives after a
// smaller one: the consumer gives back the permits it used when it runs
// idle, so the broker can send the big batch (it never sends more than
// the permits granted). Found by the kill -9 test: it used to stall.
func TestBatchAsLargeAsTheQueue(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "big-batches", SubscriptionName: "s", ReceiverQueueSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	small, err := cl.CreateProducer(client.ProducerOptions{Topic: "big-batches", BatchingMaxMessages: 475, BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	produce(t, small, 0, 475)
	receiveN(t, cons, 475)
	big, err := cl.CreateProducer(client.ProducerOptions{Topic: "big-batches", BatchingMaxMessages: 1000, BatchingMaxPublishDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	produce(t, big, 475, 1000)
	msgs := receiveN(t, cons, 1000)
	if msgs[999].ID().BatchSize() != 1000 {
		t.Fatalf("not one batch of 1000: %v", msgs[999].ID())
	}
}

// Orphan ledgers (created for a topic but never recorded, or of a topic
// that was deleted) are swept; the ledgers a topic and its cursors use are
// not.
func TestSweepOrphans(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "swept"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "swept", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	produce(t, p, 0, 10)
	lc := e.c.Client(ledger.Config{})
	ctx := ctxT(t)
	orphan := func(topic string) int64 {
		w, err := lc.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1, Custom: map[string][]byte{"topic": []byte(topic)}})
		if err != nil {
			t.Fatal(err)
		}
		w.Close(ctx)
		return w.ID()
	}
	lost := orphan("public/default/swept")
	gone := orphan("public/default/deleted-topic")
	var before []int64
	lc.List(ctx, func(id int64) error { before = append(before, id); return nil })
	deleted, err := e.b.SweepOrphans(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(deleted, func(i, j int) bool { return deleted[i] < deleted[j] })
	if fmt.Sprint(deleted) != fmt.Sprint([]int64{lost, gone}) {
		t.Fatalf("swept %v, want %v (ledgers were %v)", deleted, []int64{lost, gone}, before)
	}
	// The topic still works: its ledgers and cursor were spared.
	produce(t, p, 10, 5)
	receiveN(t, cons, 5)
	if deleted, err := e.b.SweepOrphans(ctx, 0); err != nil || len(deleted) != 0 {
		t.Fatalf("second sweep: %v %v", deleted, err)
	}
}

type internalStats struct {
	Ledgers []struct {
		LedgerID int64 `json:"ledgerId"`
		Entries  int64 `json:"entries"`
	} `json:"ledgers"`
}

// Consumed ledgers are deleted (zero retention) once every subscription is
// past them, never before; the message TTL acknowledges what nobody reads.
func TestRetentionAndTTL(t *testing.T) {
	bookieGC := testcluster.Options{Configure: func(c *bookie.Config) { c.GCInterval = 50 * time.Millisecond }}
	e := newEnvWith(t, bookieGC, func(c *broker.Config) {
		c.MaxEntriesPerLedger, c.MinLedgerRollover = 10, 0
		c.RetentionCheckInterval = 50 * time.Millisecond
	})
	cl := e.client()
	fast, err := cl.Subscribe(client.ConsumerOptions{Topic: "ret", SubscriptionName: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := cl.Subscribe(client.ConsumerOptions{Topic: "ret", SubscriptionName: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "ret", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 0, 45)
	for _, m := range receiveN(t, fast, 45) {
		fast.Ack(m)
	}
	ledgers := func() []int64 {
		st, err := adminGetJSON[internalStats](e, "/admin/v2/persistent/public/default/ret/internalStats")
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, l := range st.Ledgers {
			ids = append(ids, l.LedgerID)
		}
		return ids
	}
	first := ledgers()
	if len(first) < 5 {
		t.Fatalf("45 entries in ledgers of 10 make %d ledgers", len(first))
	}
	// "slow" still needs everything: a few retention checks later, nothing
	// is gone.
	time.Sleep(300 * time.Millisecond) // several checks; nothing to wait for
	if got := ledgers(); len(got) != len(first) {
		t.Fatalf("ledgers trimmed while a subscription still needs them: %v -> %v", first, got)
	}
	for _, m := range receiveN(t, slow, 45) {
		slow.Ack(m)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(ledgers()) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("consumed ledgers not trimmed: %v", ledgers())
		}
		time.Sleep(20 * time.Millisecond)
	}
	lc := e.c.Client(ledger.Config{})
	bk := dialBookie(t, e.c.Bookies()[0].ID)
	for _, id := range first[:len(first)-1] {
		// The list is stored first, then the ledgers are deleted.
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("trimmed ledger %d gone from the metadata", id), func() bool {
			_, err := lc.Metadata(ctxT(t), id)
			return errors.Is(err, ledger.ErrNoSuchLedger)
		})
		// The bookie's garbage collection removes its entries.
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("ledger %d gone from the bookie", id), func() bool {
			_, err := bk.ReadLAC(ctxT(t), &bookiepb.ReadLACRequest{LedgerId: id})
			return status.Code(err) == codes.NotFound
		})
	}
	// The current ledger is never trimmed; its entries stay.
	if _, err := bk.ReadLAC(ctxT(t), &bookiepb.ReadLACRequest{LedgerId: first[len(first)-1]}); status.Code(err) == codes.NotFound {
		t.Fatalf("ledger %d, never trimmed, is gone from the bookie", first[len(first)-1])
	}
	slow.Close()

	// TTL: messages nobody reads are acknowledged after it.
	if code, body, err := adminDo(e, http.MethodPost, "/admin/v2/namespaces/public/default/messageTTL", 1); err != nil || code != http.StatusNoContent {
		t.Fatalf("set TTL: %d %s %v", code, body, err)
	}
	produce(t, p, 45, 20)
	deadline = time.Now().Add(30 * time.Second)
	for statsBacklog(t, e, "ret", "slow") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d after the TTL", statsBacklog(t, e, "ret", "slow"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Admin calls with bad input get 4xx and a JSON reason; nothing changes.
func TestAdminBadInput(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		method, path string
		body         any
		code         int
	}{
		{"GET", "/admin/v2/persistent/public/default/nosuch/stats", nil, 404},
		{"DELETE", "/admin/v2/persistent/public/default/nosuch", nil, 404},
		{"GET", "/admin/v2/namespaces/nosuch", nil, 404},
		{"PUT", "/admin/v2/namespaces/nosuch/ns", nil, 404},
		{"PUT", "/admin/v2/tenants/bad%20name", nil, 400},
		{"PUT", "/admin/v2/tenants/public", nil, 409},
		{"PUT", "/admin/v2/persistent/public/default/p/partitions", 0, 400},
		{"PUT", "/admin/v2/persistent/public/default/p/partitions", "four", 400},
		{"PUT", "/admin/v2/persistent/public/default/p/partitions", nil, 400},
		{"POST", "/admin/v2/namespaces/public/default/messageTTL", -5, 400},
		{"POST", "/admin/v2/namespaces/public/default/persistence", map[string]int{"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1}, 400},
		{"POST", "/admin/v2/namespaces/public/default/retention", map[string]int{"retentionTimeInMinutes": -7}, 400},
		{"DELETE", "/admin/v2/tenants/public", nil, 409},
		{"GET", "/admin/v2/nothing/here", nil, 404},
	} {
		code, body, err := adminDo(e, tc.method, tc.path, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		var reason struct {
			Reason string `json:"reason"`
		}
		if code != tc.code || json.Unmarshal(body, &reason) != nil || reason.Reason == "" {
			t.Errorf("%s %s: %d %s, want %d with a JSON reason", tc.method, tc.path, code, body, tc.code)
		}
	}
	// Subscriptions of an existing topic: unknown ones are 404.
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "adm"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, path := range []string{"/admin/v2/persistent/public/default/adm/subscription/nosuch/skip/1", "/admin/v2/persistent/public/default/adm/subscription/nosuch/resetcursor/0"} {
		if code, body, _ := adminDo(e, "POST", path, nil); code != 404 {
			t.Errorf("POST %s: %d %s", path, code, body)
		}
	}
	if code, body, _ := adminDo(e, "DELETE", "/admin/v2/persistent/public/default/adm/subscription/nosuch", nil); code != 404 {
		t.Errorf("delete unknown subscription: %d %s", code, body)
	}
	// A body over the limit is refused before it is read whole.
	big := make([]byte, 2<<20)
	req, _ := http.NewRequest("PUT", "http://"+e.b.HTTPAddr()+"/admin/v2/tenants/t2", bytes.NewReader(big))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("2 MiB body: %d", resp.StatusCode)
	}
}

func dialBookie(t *testing.T, addr string) bookiepb.BookieClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return bookiepb.NewBookieClient(cc)
}

// Acknowledgements given before Close reach the broker even when the
// client is closed right after (as the CLI does): the consumer sends its
// grouped acks and waits for the broker to end the stream.
func TestAcksBeforeCloseAreKept(t *testing.T) {
	e := newEnv(t, nil)
	for round := 0; round < 5; round++ {
		cl := e.client()
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: "acked", DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "acked", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		produce(t, p, round*3, 3)
		for _, m := range receiveN(t, cons, 3) {
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
		cons.Close()
		cl.Close()
		if n := statsBacklog(t, e, "acked", "s"); n != 0 {
			t.Fatalf("round %d: backlog %d after acknowledging everything and closing", round, n)
		}
	}
}

// A consumer at the tail is served from the broker's cache: no entry is
// read from the bookies. One catching up after a restart (empty cache)
// reads them from the bookies.
func TestTailReadsComeFromTheCache(t *testing.T) {
	e := newEnv(t, nil)
	type cacheStats struct {
		FromBookies int64 `json:"entriesReadFromBookies"`
		Hits        int64 `json:"hits"`
	}
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "tail", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "tail", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ { // one by one: the consumer is at the tail
		produce(t, p, i, 1)
		cons.Ack(receiveN(t, cons, 1)[0])
	}
	st, err := adminGetJSON[cacheStats](e, "/admin/v2/broker-stats/cache")
	if err != nil {
		t.Fatal(err)
	}
	if st.FromBookies != 0 || st.Hits < 200 {
		t.Fatalf("tail reads: %d entries from the bookies, %d cache hits", st.FromBookies, st.Hits)
	}
	p.Close()
	cons.Close()
	e.restart()
	cons, err = cl.Subscribe(client.ConsumerOptions{Topic: "tail", SubscriptionName: "late", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	receiveN(t, cons, 200)
	if st, err = adminGetJSON[cacheStats](e, "/admin/v2/broker-stats/cache"); err != nil || st.FromBookies < 200 {
		t.Fatalf("catching up after a restart: %d entries from the bookies (%v)", st.FromBookies, err)
	}
}

// Publish times never decrease along a partition, however many producers
// publish at once: seek by time relies on it. The hook holds the first
// publish between taking its time and storing its entry until a second
// publish has taken its time too (or 200 ms pass, which is what happens
// when publishing is one step).
func TestPublishTimesIncreaseAlongThePartition(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	var calls atomic.Int32
	var firstTimed atomic.Int64 // the clock in ms when the first publish held
	second := make(chan struct{})
	broker.SetTestHookPublishTimed(func() {
		switch calls.Add(1) {
		case 1:
			firstTimed.Store(time.Now().UnixMilli())
			select {
			case <-second:
			case <-time.After(200 * time.Millisecond):
			}
		case 2:
			close(second)
		}
	})
	t.Cleanup(func() { broker.SetTestHookPublishTimed(nil) })

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: "times", DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w == 1 {
				// The second producer sends once the first send is held
				// and the clock has moved past its publish time.
				for firstTimed.Load() == 0 || time.Now().UnixMilli() <= firstTimed.Load() {
					runtime.Gosched()
				}
			}
			_, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte{byte(w)}})
			errs <- err
		}()
	}
	wg.Wait()
	for w := 0; w < 2; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	r, err := cl.CreateReader(client.ReaderOptions{Topic: "times", StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var last time.Time
	for i := 0; i < 2; i++ {
		m, err := r.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.PublishTime().Before(last) {
			t.Fatalf("message %d (%v) published at %v, before the previous one (%v)", i, m.ID(), m.PublishTime(), last)
		}
		last = m.PublishTime()
	}
}

// A re-send that arrives while the original's append is still in flight
// waits for it and gets its outcome and position: it is neither
// acknowledged before the original is stored nor stored twice.
func TestDeduplicationResendWaitsForAppendInFlight(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Deduplication = true })
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "dedup-inflight", Name: "p1", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	release := make(chan struct{})
	var releaseOnce sync.Once
	var held atomic.Bool
	broker.SetTestHookAppendDone(func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	})
	// Registered after newEnv's cleanups, so it runs before the broker stops.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }); broker.SetTestHookAppendDone(nil) })
	seven := int64(7)
	type result struct {
		id  client.MessageID
		err error
	}
	results := make(chan result, 2)
	send := func(payload string) {
		p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte(payload), SequenceID: &seven}, func(id client.MessageID, _ *client.ProducerMessage, err error) {
			results <- result{id, err}
		})
	}
	send("original")
	testutil.Eventually(t, 10*time.Second, "the original's append to complete", held.Load)
	send("re-send")
	testutil.Eventually(t, 10*time.Second, "the re-send to wait", func() bool {
		return e.b.DedupWaiting("persistent://public/default/dedup-inflight", "p1") == 1
	})
	select {
	case r := <-results:
		t.Fatalf("answered before the original was stored: %v %v", r.id, r.err)
	default:
	}
	releaseOnce.Do(func() { close(release) })
	a, b := <-results, <-results
	if a.err != nil || b.err != nil || a.id.String() != b.id.String() || a.id.LedgerID() < 0 {
		t.Fatalf("original %v %v, re-send %v %v: want both at the same position", a.id, a.err, b.id, b.err)
	}
	if got := readPayloads(t, cl, "dedup-inflight"); fmt.Sprint(got) != "[original]" {
		t.Fatalf("stored %v", got)
	}
}

// readPayloads reads a topic from its first message to its last with a
// reader and returns the payloads.
func readPayloads(t *testing.T, cl client.Client, topic string) []string {
	t.Helper()
	r, err := cl.CreateReader(client.ReaderOptions{Topic: topic, StartMessageID: client.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []string
	for r.HasNext() {
		m, err := r.Next(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Payload()))
	}
	return got
}
