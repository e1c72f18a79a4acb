package ledger

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

func TestPickBookies(t *testing.T) {
	cands := []BookieInfo{
		{ID: "roomy", Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 40}},
		{ID: "full", Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 30}},
		{ID: "busy", Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 40, WriteBytesPerSec: 1 << 30}},
		{ID: "idle", Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 40}},
		{ID: "readonly", Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 42, ReadOnly: true}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for i := 0; i < 10000; i++ {
		got, err := pickBookies(cands, 2, []string{"idle"}, rng)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0] == got[1] {
			t.Fatalf("picked %v", got)
		}
		for _, id := range got {
			counts[id]++
		}
	}
	if counts["readonly"] != 0 || counts["idle"] != 0 {
		t.Fatalf("picked an excluded or read-only bookie: %v", counts)
	}
	// With one slot left after "roomy", the rest split by weight: free
	// disk and low load win.
	if !(counts["roomy"] > counts["busy"] && counts["roomy"] > counts["full"]) {
		t.Fatalf("placement does not favour free disk and low load: %v", counts)
	}
	if counts["full"] == 0 || counts["busy"] == 0 {
		t.Fatalf("placement never uses some bookies at all: %v", counts)
	}
	_, err := pickBookies(cands, 4, []string{"idle"}, rng)
	if !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("4 of 3 usable bookies: %v", err)
	}
	got, err := pickBookies(cands, 4, nil, rng)
	if err != nil || len(got) != 4 || slices.Contains(got, "readonly") {
		t.Fatalf("pick all usable: %v %v", got, err)
	}
}
