package client

import (
	"testing"
	"time"
)

// A delayed message's time is rounded up to the millisecond: it is never
// delivered before the time asked for.
func TestDeliverAtRoundsUp(t *testing.T) {
	now := time.UnixMilli(1000).Add(300 * time.Microsecond)
	cases := []struct {
		m    ProducerMessage
		want int64
	}{
		{ProducerMessage{}, 0},
		{ProducerMessage{DeliverAfter: 300 * time.Millisecond}, 1301},
		{ProducerMessage{DeliverAt: time.UnixMilli(5000)}, 5000},
		{ProducerMessage{DeliverAt: time.UnixMilli(5000).Add(time.Nanosecond)}, 5001},
	}
	for _, c := range cases {
		if got := c.m.deliverAt(now); got != c.want {
			t.Errorf("%+v: deliverAt %d, want %d", c.m, got, c.want)
		}
	}
}
