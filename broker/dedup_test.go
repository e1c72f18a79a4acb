package broker

import (
	"testing"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
)

func TestDedupStateFindsInflightAndRecent(t *testing.T) {
	d := newDedupState()
	d.pushed = 19
	d.inflight[10] = &dedupWaiters{highest: 14} // a batch of 10..14
	d.inflight[15] = &dedupWaiters{highest: 15}
	for seq, want := range map[int64]*dedupWaiters{10: d.inflight[10], 12: d.inflight[10], 15: d.inflight[15], 16: nil, 9: nil, 25: nil} {
		if got := d.inflightCovering(seq); got != want {
			t.Errorf("inflightCovering(%d) = %p, want %p", seq, got, want)
		}
	}
	for i := int64(0); i < recentPositions+10; i++ {
		d.stored(i, mledger.Position{Ledger: 1, Entry: i})
	}
	if _, ok := d.position(5); ok {
		t.Fatal("position 5 kept beyond the ring's size")
	}
	if p, ok := d.position(recentPositions + 5); !ok || p.Entry != recentPositions+5 {
		t.Fatalf("recent position: %v %v", p, ok)
	}
}
