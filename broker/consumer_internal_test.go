package broker

import (
	"testing"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// take never hands out more messages than the consumer granted, except
// for an entry larger than its whole receive queue, which goes when every
// permit of the queue is there (else it could never go).
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
		{"batch larger than the queue, queue's permits all there", 5, 5, 10, true, 0},
		{"batch larger than the queue, one permit missing", 5, 4, 10, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &consumer{queueSize: tc.queue}
			c.mu.permits = tc.permits
			if got := c.take(tc.n); got != tc.ok {
				t.Fatalf("take(%d) with %d permits, queue %d: %v, want %v", tc.n, tc.permits, tc.queue, got, tc.ok)
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
