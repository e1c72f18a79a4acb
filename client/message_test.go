package client

import (
	"testing"
	"time"
)

// A delayed message's time is sent as the millisecond it falls in, as
// Pulsar's clients send it (the broker waits for that millisecond to end),
// whatever its range (UnixNano would wrap after 2262).
func TestDeliverAtTruncates(t *testing.T) {
	now := time.UnixMilli(1000).Add(300 * time.Microsecond)
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		m    ProducerMessage
		want int64
	}{
		{ProducerMessage{}, 0},
		{ProducerMessage{DeliverAfter: 300 * time.Millisecond}, 1300},
		{ProducerMessage{DeliverAt: time.UnixMilli(5000)}, 5000},
		{ProducerMessage{DeliverAt: time.UnixMilli(5000).Add(999 * time.Microsecond)}, 5000},
		{ProducerMessage{DeliverAt: far}, far.UnixMilli()},
	}
	for _, c := range cases {
		if got := c.m.deliverAt(now); got != c.want {
			t.Errorf("%+v: deliverAt %d, want %d", c.m, got, c.want)
		}
	}
}
