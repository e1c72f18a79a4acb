package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/proto/topicname"
)

func topicLoads(msgs ...int64) []topicLoad {
	var out []topicLoad
	for i, m := range msgs {
		n, _ := topicname.Parse(fmt.Sprintf("public/default/t-%d", i))
		out = append(out, topicLoad{name: n, msgs: m})
	}
	return out
}

func TestToUnload(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mine   []topicLoad
		rate   float64
		others []brokerInfo
		want   []int
		reason string
	}{
		{name: "balanced", mine: topicLoads(1, 1, 1), rate: 100,
			others: []brokerInfo{{Topics: 3, MsgRateIn: 100}, {Topics: 3, MsgRateIn: 100}}},
		{name: "a new broker gets its share of partitions", mine: topicLoads(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
			others: []brokerInfo{{Topics: 0}}, want: []int{0, 1, 2, 3, 4}, reason: "partition count"},
		{name: "a few more partitions than the mean stay", mine: topicLoads(0, 0, 0, 0),
			others: []brokerInfo{{Topics: 3}, {Topics: 2}}},
		{name: "the busiest partitions leave a hot broker", mine: topicLoads(10, 500, 100, 400), rate: 10000,
			others: []brokerInfo{{Topics: 4, MsgRateIn: 500}, {Topics: 4, MsgRateOut: 500}},
			want:   []int{1, 3}, reason: "message rate"},
		{name: "little traffic is not balanced", mine: topicLoads(10, 500, 100, 400), rate: 900,
			others: []brokerInfo{{Topics: 4}, {Topics: 4}}},
		{name: "one hot partition stays (moving it moves the hot spot)", mine: topicLoads(1000, 1, 1), rate: 10000,
			others: []brokerInfo{{Topics: 3}}, want: []int{}, reason: "message rate"},
		{name: "no broker below the mean", mine: topicLoads(10, 500, 100, 400), rate: 10000,
			others: []brokerInfo{{Topics: 4, MsgRateIn: 10000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := toUnload(tc.mine, tc.rate, tc.others)
			if !slices.Equal(got, tc.want) || (len(got) > 0 && reason != tc.reason) {
				t.Fatalf("toUnload = %v (%q), want %v (%q)", got, reason, tc.want, tc.reason)
			}
		})
	}
}

func TestLoadMeter(t *testing.T) {
	var c traffic
	var m loadMeter
	t0 := time.Unix(1000, 0)
	if r, _ := m.sample(&c, t0); r != (rates{}) {
		t.Fatalf("first sample: %+v, want zero rates", r)
	}
	c.published(200, 20000)
	c.dispatched(400)
	r, cpu := m.sample(&c, t0.Add(2*time.Second))
	if r.MsgIn != 100 || r.BytesIn != 10000 || r.MsgOut != 200 {
		t.Fatalf("rates over 2s: %+v", r)
	}
	if cpu < 0 {
		t.Fatalf("cpu %v", cpu)
	}
	c.published(1000, 1000)
	if r2, _ := m.sample(&c, t0.Add(2500*time.Millisecond)); r2 != r {
		t.Fatalf("a sample within a second of the last changed the rates: %+v", r2)
	}
}
