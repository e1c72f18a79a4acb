package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// BookieInfo is a live bookie as registered in the metastore.
type BookieInfo struct {
	ID   string
	Info *metapb.BookieInfo
}

// liveBookies lists the registered bookies.
func liveBookies(ctx context.Context, store *metastore.Store) ([]BookieInfo, error) {
	var out []BookieInfo
	err := store.ListAll(ctx, metastore.BookiesAvailablePrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		var info metapb.BookieInfo
		if err := proto.Unmarshal(kv.Value, &info); err != nil {
			return nil // a corrupt registration is skipped, not fatal
		}
		out = append(out, BookieInfo{ID: kv.Key[len(metastore.BookiesAvailablePrefix):], Info: &info})
		return nil
	})
	return out, err
}

// Load above this many bytes per second halves a bookie's weight.
const loadHalfWeight = 50 << 20

// weight favours free disk and low write load.
func weight(b *metapb.BookieInfo) float64 {
	free := float64(b.FreeDiskBytes)
	if free <= 0 {
		free = 1 << 20 // unknown: still usable, strongly disfavoured
	}
	return free / (1 + b.WriteBytesPerSec/loadHalfWeight)
}

// pickBookies chooses n distinct bookies not in exclude by weighted random
// sampling without replacement: spread over the cluster, biased to free
// disk and low load.
func pickBookies(cands []BookieInfo, n int, exclude []string, rng *rand.Rand) ([]string, error) {
	var pool []BookieInfo
	for _, c := range cands {
		if c.Info.ReadOnly || slices.Contains(exclude, c.ID) {
			continue
		}
		pool = append(pool, c)
	}
	if len(pool) < n {
		return nil, fmt.Errorf("%w: need %d, %d available (%d registered, %d excluded or read-only)",
			ErrNotEnoughBookies, n, len(pool), len(cands), len(cands)-len(pool))
	}
	out := make([]string, 0, n)
	for len(out) < n {
		total := 0.0
		for _, c := range pool {
			total += weight(c.Info)
		}
		x := rng.Float64() * total
		i := 0
		for ; i < len(pool)-1; i++ {
			x -= weight(pool[i].Info)
			if x < 0 {
				break
			}
		}
		out = append(out, pool[i].ID)
		pool = slices.Delete(pool, i, i+1)
	}
	return out, nil
}
