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

// maxPlacementSteps bounds the search for a placement that keeps the host
// rule; it is only reached with many bookies on few hosts, and then the
// pick fails rather than spin.
const maxPlacementSteps = 5000

// pickBookies fills the empty ("") positions of ensemble with live,
// writable bookies that are neither in exclude nor already in the
// ensemble, and returns the whole ensemble. It is pure: the same inputs
// and rng state give the same answer.
//
// Rules, for every write set (the writeQuorum consecutive positions, with
// wrap-around, that store an entry; see writeSet):
//
//   - Hard: no two bookies with the same non-empty host label. If no
//     placement meets it, the pick fails with ErrNotEnoughBookies. Kept
//     positions are only checked against the positions being filled.
//   - Soft: as few pairs of bookies with the same non-empty rack as
//     possible. Positions are filled in order and each takes a bookie
//     that adds the fewest such pairs with the positions it shares write
//     sets with, so with enough racks the ensemble comes out in rack
//     round-robin order; with too few racks, racks repeat.
//   - Among equally good bookies, weighted random sampling without
//     replacement: weight is free disk divided by (1 + write rate /
//     50 MB/s), so data spreads over the cluster, biased to free space
//     and low load.
//
// Positions are filled depth first, backtracking when the host rule leaves
// a later position without a bookie.
func pickBookies(cands []BookieInfo, ensemble []string, writeQuorum int, exclude []string, rng *rand.Rand) ([]string, error) {
	e := len(ensemble)
	if writeQuorum < 1 || writeQuorum > e {
		return nil, fmt.Errorf("%w: write quorum %d for an ensemble of %d", ErrInvalidArgument, writeQuorum, e)
	}
	byID := make(map[string]*metapb.BookieInfo, len(cands))
	for _, c := range cands {
		byID[c.ID] = c.Info
	}
	s := &placer{
		out:   slices.Clone(ensemble),
		hosts: make([]string, e),
		racks: make([]string, e),
		steps: maxPlacementSteps,
	}
	for p, id := range s.out {
		if id == "" {
			s.fill = append(s.fill, p)
		} else if info := byID[id]; info != nil {
			s.hosts[p], s.racks[p] = info.HostLabel, info.Rack
		}
	}
	for _, c := range cands {
		if c.Info.ReadOnly || slices.Contains(exclude, c.ID) || slices.Contains(ensemble, c.ID) {
			continue
		}
		// An exponential draw of rate w: sorting by it is weighted
		// sampling without replacement.
		s.pool = append(s.pool, candidate{id: c.ID, host: c.Info.HostLabel, rack: c.Info.Rack, key: rng.ExpFloat64() / weight(c.Info)})
	}
	n := len(s.fill)
	if len(s.pool) < n {
		return nil, fmt.Errorf("%w: need %d, %d available (%d registered, %d excluded, read-only or already in the ensemble)",
			ErrNotEnoughBookies, n, len(s.pool), len(cands), len(cands)-len(s.pool))
	}
	if n == 0 {
		return s.out, nil
	}
	hostErr := func(why string) error {
		hosts := map[string]bool{}
		unlabeled := 0
		for _, c := range s.pool {
			if c.host == "" {
				unlabeled++
			} else {
				hosts[c.host] = true
			}
		}
		return fmt.Errorf("%w: cannot place %d of %d bookies with no two on one host in a write quorum of %d: %d usable bookies on %d host labels, %d without one%s",
			ErrNotEnoughBookies, n, e, writeQuorum, len(s.pool), len(hosts), unlabeled, why)
	}
	if n == e && !s.hostsCanFill(e/writeQuorum) {
		return nil, hostErr("")
	}
	// shared[i][q]: how many write sets position fill[i] shares with q.
	s.shared = make([][]int, n)
	for i, p := range s.fill {
		s.shared[i] = make([]int, e)
		for start := 0; start < e; start++ {
			if !inWriteSet(int64(start), p, e, writeQuorum) {
				continue
			}
			for q := 0; q < e; q++ {
				if q != p && inWriteSet(int64(start), q, e, writeQuorum) {
					s.shared[i][q]++
				}
			}
		}
	}
	s.used = make([]bool, len(s.pool))
	if !s.place(0) {
		if s.steps <= 0 {
			return nil, hostErr(" (gave up searching)")
		}
		return nil, hostErr("")
	}
	return s.out, nil
}

type candidate struct {
	id, host, rack string
	key            float64 // lower is preferred
}

// placer is the state of one pickBookies search.
type placer struct {
	out          []string // the ensemble being filled
	hosts, racks []string // labels of out's bookies ("" if none or unknown)
	fill         []int    // positions to fill, in order
	shared       [][]int  // shared[i][q]: write sets fill[i] shares with position q
	pool         []candidate
	used         []bool // pool[c] is placed
	steps        int    // search budget left
}

// hostsCanFill reports whether the pool can fill a whole ensemble when
// each host may take at most perHost positions (bookies of one host must
// share no write set, which leaves room for E/Qw of them).
func (s *placer) hostsCanFill(perHost int) bool {
	count := map[string]int{}
	total := 0
	for _, c := range s.pool {
		if c.host == "" {
			total++
		} else if count[c.host] < perHost {
			count[c.host]++
			total++
		}
	}
	return total >= len(s.fill)
}

// place fills s.fill[i:], reporting whether it could.
func (s *placer) place(i int) bool {
	if i == len(s.fill) {
		return true
	}
	if s.steps--; s.steps < 0 {
		return false
	}
	p := s.fill[i]
	type option struct {
		c     int
		score int // rack pairs it would add
	}
	var opts []option
	for c, cand := range s.pool {
		if s.used[c] {
			continue
		}
		ok, score := true, 0
		for q, n := range s.shared[i] {
			if n == 0 || s.out[q] == "" {
				continue
			}
			if cand.host != "" && s.hosts[q] == cand.host {
				ok = false
				break
			}
			if cand.rack != "" && s.racks[q] == cand.rack {
				score += n
			}
		}
		if ok {
			opts = append(opts, option{c, score})
		}
	}
	slices.SortFunc(opts, func(a, b option) int {
		if a.score != b.score {
			return a.score - b.score
		}
		ka, kb := s.pool[a.c].key, s.pool[b.c].key
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	// What the rest can become depends only on which hosts are left, so
	// after a bookie of a host failed here, the others of that host (or
	// of no host) would fail too.
	failed := map[string]bool{}
	for _, o := range opts {
		c := s.pool[o.c]
		if failed[c.host] {
			continue
		}
		s.used[o.c] = true
		s.out[p], s.hosts[p], s.racks[p] = c.id, c.host, c.rack
		if s.place(i + 1) {
			return true
		}
		s.used[o.c] = false
		s.out[p], s.hosts[p], s.racks[p] = "", "", ""
		if s.steps < 0 {
			return false
		}
		failed[c.host] = true
	}
	return false
}
