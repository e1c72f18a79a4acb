package broker

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// take never hands out more messages than the consumer granted, except
// for an entry larger than its whole receive queue, which goes when every
// permit of the queue is there (else it could never go), and leaves the
// consumer owing the rest.
func TestConsumerTakeNeverExceedsPermits(t *testing.T) {
	for _, tc := range []struct {
		name             string
		queue, permits   int
		n                int
		ok               bool
		permitsAfterward int
	}{
		{"exactly enough", 100, 10, 10, true, 0},
		{"more than enough", 100, 15, 10, true, 5},
		{"one short", 100, 9, 10, false, 9},
		{"one permit for a batch", 100, 1, 10, false, 1},
		{"none", 100, 0, 1, false, 0},
		{"single message", 100, 1, 1, true, 0},
		{"batch larger than the queue, queue's permits all there", 5, 5, 10, true, 0}, // 5 owed
		{"batch larger than the queue, one permit missing", 5, 4, 10, false, 4},
		// Disconnected: push would drop it (and a non-persistent topic's
		// entry would be lost uncounted).
		{"disconnected", 100, 10, 1, false, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &consumer{queueSize: tc.queue, gone: make(chan struct{})}
			c.mu.permits = tc.permits
			if tc.name == "disconnected" {
				c.disconnect(errors.New("gone"))
			}
			if got := c.take(tc.n); got != tc.ok {
				t.Fatalf("take(%d) with %d permits, queue %d: %v, want %v", tc.n, tc.permits, tc.queue, got, tc.ok)
			}
			if tc.name == "disconnected" {
				// take refuses it, and available agrees (the dispatchers
				// wait rather than read for it).
				if got := c.available(); got != 0 {
					t.Fatalf("a disconnected consumer has %d available", got)
				}
				return
			}
			if got := c.available(); got != tc.permitsAfterward {
				t.Fatalf("%d permits left, want %d", got, tc.permitsAfterward)
			}
			want := int64(0)
			if tc.ok {
				want = int64(tc.n)
			}
			if c.mu.delivered != want {
				t.Fatalf("delivered %d, want %d", c.mu.delivered, want)
			}
		})
	}
}

// What an entry larger than the queue takes beyond the permits is owed:
// nothing more goes until the consumer has granted it back, as a client
// that grants permits as its application consumes does. (Forgiven, it let
// an entry go per permit granted while the client worked through the big
// one.)
func TestConsumerOwesPermitsOfALargeEntry(t *testing.T) {
	c := &consumer{queueSize: 1} // a Pulsar client's consumer
	c.addPermits(2)
	if !c.take(10) {
		t.Fatal("an entry of 10 refused with permits there")
	}
	if got := c.mu.permits; got != -8 {
		t.Fatalf("permits after an entry of 10 on 2: %d, want -8 (owed)", got)
	}
	for i := 0; i < 4; i++ { // the client's application consumes 8, two at a time
		c.addPermits(2)
		if got := c.available(); got != 0 {
			t.Fatalf("available while owing: %d", got)
		}
		if c.take(1) || c.take(10) {
			t.Fatalf("an entry taken while %d permits are owed", -c.mu.permits)
		}
	}
	c.addPermits(2)
	if !c.take(10) {
		t.Fatal("an entry refused once the debt was repaid and permits granted")
	}
	if c.mu.delivered != 20 {
		t.Fatalf("delivered %d, want 20", c.mu.delivered)
	}
}

// The active consumer of an exclusive or failover subscription: Pulsar's
// rule, the partition index modulo the consumer count for failover.
func TestActiveIndex(t *testing.T) {
	for _, tc := range []struct {
		typ          brokerpb.SubscriptionType
		partition, n int
		want         int
	}{
		{brokerpb.SubscriptionType_EXCLUSIVE, 3, 1, 0},
		{brokerpb.SubscriptionType_EXCLUSIVE, -1, 1, 0},
		{brokerpb.SubscriptionType_FAILOVER, -1, 3, 0}, // not partitioned
		{brokerpb.SubscriptionType_FAILOVER, 0, 3, 0},
		{brokerpb.SubscriptionType_FAILOVER, 1, 3, 1},
		{brokerpb.SubscriptionType_FAILOVER, 2, 3, 2},
		{brokerpb.SubscriptionType_FAILOVER, 3, 3, 0},
		{brokerpb.SubscriptionType_FAILOVER, 7, 2, 1},
		{brokerpb.SubscriptionType_FAILOVER, 5, 1, 0},
	} {
		if got := activeIndex(tc.typ, tc.partition, tc.n); got != tc.want {
			t.Errorf("%v, partition %d, %d consumers: active %d, want %d", tc.typ, tc.partition, tc.n, got, tc.want)
		}
	}
}

// With maxOutstanding, what is pushed and not yet sent bounds what take
// hands out, whatever the permits: a client that grants many permits and
// does not read stops the dispatch; once the sender reports the bytes
// sent, take hands out again.
func TestConsumerMaxOutstanding(t *testing.T) {
	c := newConsumer(&brokerpb.Subscribe{Type: brokerpb.SubscriptionType_SHARED}, 1)
	c.maxOutstanding = 100
	c.addPermits(1 << 20)
	msg := func(size int) *brokerpb.Message { return &brokerpb.Message{Entry: make([]byte, size)} }
	a, b := msg(60), msg(60)
	for i, m := range []*brokerpb.Message{a, b} {
		if !c.take(1) {
			t.Fatalf("take %d refused with %d bytes outstanding", i, c.mu.outstanding)
		}
		c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Message{Message: m}})
	}
	if c.take(1) {
		t.Fatalf("take handed out with %d bytes outstanding, over the bound of 100", c.mu.outstanding)
	}
	if _, err := c.next(); err != nil { // the sender takes the queue: still outstanding until sent
		t.Fatal(err)
	}
	if c.take(1) {
		t.Fatal("take handed out once the queue was taken but nothing was sent")
	}
	c.sent(a)
	if !c.take(1) {
		t.Fatalf("take refused with %d bytes outstanding, under the bound", c.mu.outstanding)
	}
	// Without the bound (the gRPC path), only permits count.
	u := newConsumer(&brokerpb.Subscribe{}, 1)
	u.addPermits(10)
	for range 10 {
		if !u.take(1) {
			t.Fatal("take refused without a bound while permits remained")
		}
		u.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Message{Message: msg(1000)}})
	}
}

// Entries a consumer drops unread are all counted, and logged one line
// per discardLogEvery per subscription (a consumer dropping a backlog
// acknowledges entry by entry), the next line telling how many went
// unnamed.
func TestDiscardedEntriesLoggedSparingly(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s := &subscription{t: &topic{s: &Server{metrics: newBrokerMetrics(prometheus.NewRegistry(), "c")}}, log: zap.New(core)}
	id := func(e int64) []*brokerpb.MessageId { return []*brokerpb.MessageId{{LedgerId: 7, EntryId: e}} }
	for e := int64(0); e < 100; e++ {
		s.discarded("c1", id(e), "decryption_error")
	}
	var m dto.Metric
	if err := s.t.s.metrics.discarded.WithLabelValues("decryption_error").Write(&m); err != nil || m.GetCounter().GetValue() != 100 {
		t.Errorf("counted %v (%v), want 100", m.GetCounter().GetValue(), err)
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d lines for 100 entries within %v, want 1", n, discardLogEvery)
	}
	s.discardLog.Lock()
	s.discardLog.at = s.discardLog.at.Add(-discardLogEvery) // as if that long ago
	s.discardLog.Unlock()
	s.discarded("c1", id(100), "decryption_error")
	lines := logs.All()
	if len(lines) != 2 || lines[1].ContextMap()["dropped-since-last-line"] != int64(99) {
		t.Fatalf("lines %+v, want a second one telling of the 99 unnamed", lines)
	}
}
