package ledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

// bk is a writable bookie with 1 TiB free, on a host and a rack ("" for
// none).
func bk(id, host, rack string) BookieInfo {
	return BookieInfo{ID: id, Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 40, HostLabel: host, Rack: rack}}
}

func withFree(b BookieInfo, free uint64) BookieInfo {
	b.Info.FreeDiskBytes = free
	return b
}

// sharesWriteSet reports whether positions p and q store a common entry.
func sharesWriteSet(p, q, e, qw int) bool {
	for s := 0; s < e; s++ {
		if inWriteSet(int64(s), p, e, qw) && inWriteSet(int64(s), q, e, qw) {
			return true
		}
	}
	return false
}

// checkPlacement checks what every placement must be: the kept positions
// kept, distinct bookies, none read-only or excluded (unless kept), and
// the host rule between every filled position and its write set peers.
func checkPlacement(t *testing.T, cands []BookieInfo, ensemble []string, qw int, exclude, got []string) {
	t.Helper()
	if len(got) != len(ensemble) {
		t.Fatalf("got %v for %d positions", got, len(ensemble))
	}
	info := map[string]*metapb.BookieInfo{}
	for _, c := range cands {
		info[c.ID] = c.Info
	}
	for p, id := range got {
		if ensemble[p] != "" {
			if id != ensemble[p] {
				t.Fatalf("kept position %d changed: %v -> %v", p, ensemble, got)
			}
			continue
		}
		if id == "" || info[id] == nil {
			t.Fatalf("position %d not filled with a candidate: %v", p, got)
		}
		if info[id].ReadOnly || slices.Contains(exclude, id) {
			t.Fatalf("picked read-only or excluded %s: %v", id, got)
		}
		for q, other := range got {
			if q == p {
				continue
			}
			if other == id {
				t.Fatalf("%s twice in %v", id, got)
			}
			if oi := info[other]; oi != nil && oi.HostLabel != "" && oi.HostLabel == info[id].HostLabel && sharesWriteSet(p, q, len(got), qw) {
				t.Fatalf("positions %d and %d share a write set and host %s: %v", p, q, oi.HostLabel, got)
			}
		}
	}
}

// distinctRacks counts the racks of bookies named <rack letter><n>.
func distinctRacks(ids []string) int {
	seen := map[byte]bool{}
	for _, id := range ids {
		seen[id[0]] = true
	}
	return len(seen)
}

// racksPerWriteSet returns, for each write set, how many distinct racks it
// spans.
func racksPerWriteSet(cands []BookieInfo, got []string, qw int) []int {
	rack := map[string]string{}
	for _, c := range cands {
		rack[c.ID] = c.Info.Rack
	}
	var out []int
	for s := range got {
		seen := map[string]bool{}
		for _, p := range writeSet(int64(s), len(got), qw) {
			seen[rack[got[p]]] = true
		}
		out = append(out, len(seen))
	}
	return out
}

func TestPickBookiesRules(t *testing.T) {
	ro := bk("ro", "", "")
	ro.Info.ReadOnly = true
	for _, tc := range []struct {
		name     string
		cands    []BookieInfo
		ensemble []string // nil: a new ensemble of e
		e, qw    int
		exclude  []string
		wantErr  string // part of the error; "" if the pick must succeed
		// check is called on every successful pick, besides checkPlacement.
		check func(t *testing.T, got []string)
	}{
		{
			name:  "no labels",
			cands: []BookieInfo{bk("a", "", ""), bk("b", "", ""), bk("c", "", ""), bk("d", "", ""), ro},
			e:     3, qw: 2, exclude: []string{"d"},
			check: func(t *testing.T, got []string) {
				if slices.Sort(got); !slices.Equal(got, []string{"a", "b", "c"}) {
					t.Fatalf("got %v, want a, b, c: d is excluded, ro read-only", got)
				}
			},
		},
		{
			name:  "read-only and excluded leave too few",
			cands: []BookieInfo{bk("a", "", ""), bk("b", "", ""), bk("d", "", ""), ro},
			e:     3, qw: 3, exclude: []string{"d"},
			wantErr: "need 3, 2 available",
		},
		{
			name:  "two per host, E2 Qw2: never two of a host",
			cands: []BookieInfo{bk("a1", "h1", ""), bk("a2", "h1", ""), bk("b1", "h2", ""), bk("b2", "h2", "")},
			e:     2, qw: 2,
		},
		{
			name:  "two per host, E4 Qw2: hosts alternate",
			cands: []BookieInfo{bk("a1", "h1", ""), bk("a2", "h1", ""), bk("b1", "h2", ""), bk("b2", "h2", "")},
			e:     4, qw: 2,
		},
		{
			name:  "two hosts cannot hold a write quorum of 3",
			cands: []BookieInfo{bk("a1", "h1", ""), bk("a2", "h1", ""), bk("b1", "h2", ""), bk("b2", "h2", "")},
			e:     3, qw: 3,
			wantErr: "no two on one host in a write quorum of 3: 4 usable bookies on 2 host labels",
		},
		{
			name:  "E3 Qw2: every pair shares a write set, so 3 hosts are needed",
			cands: []BookieInfo{bk("a1", "h1", ""), bk("a2", "h1", ""), bk("b1", "h2", ""), bk("b2", "h2", "")},
			e:     3, qw: 2,
			wantErr: "no two on one host",
		},
		{
			// c and d weigh so much that they come first; then a and b,
			// on one host, would be neighbours: the search must go back.
			name: "backtracking out of a dead end",
			cands: []BookieInfo{bk("a", "h1", ""), bk("b", "h1", ""),
				withFree(bk("c", "h2", ""), 1<<60), withFree(bk("d", "h3", ""), 1<<60)},
			e: 4, qw: 2,
		},
		{
			name:  "bookies without a host label never conflict",
			cands: []BookieInfo{bk("a", "h1", ""), bk("b", "", ""), bk("c", "", ""), bk("d", "", "")},
			e:     4, qw: 4,
		},
		{
			name: "three racks: a write quorum of 3 spans them all",
			cands: []BookieInfo{bk("a1", "", "r1"), bk("a2", "", "r1"), bk("b1", "", "r2"), bk("b2", "", "r2"),
				bk("c1", "", "r3"), bk("c2", "", "r3")},
			e: 3, qw: 3,
			check: func(t *testing.T, got []string) {
				if racks := distinctRacks(got); racks != 3 {
					t.Fatalf("%v spans %d racks, want 3", got, racks)
				}
			},
		},
		{
			name: "two racks, E4 Qw2: racks alternate",
			cands: []BookieInfo{bk("a1", "", "r1"), bk("a2", "", "r1"), bk("a3", "", "r1"),
				bk("b1", "", "r2"), bk("b2", "", "r2"), bk("b3", "", "r2")},
			e: 4, qw: 2,
			check: func(t *testing.T, got []string) {
				for p := range got {
					if got[p][0] == got[(p+1)%4][0] {
						t.Fatalf("%v: neighbours %d and %d on one rack", got, p, (p+1)%4)
					}
				}
			},
		},
		{
			name:  "too few racks: falls back",
			cands: []BookieInfo{bk("a1", "", "r1"), bk("a2", "", "r1"), bk("b1", "", "r2")},
			e:     3, qw: 3,
			check: func(t *testing.T, got []string) {
				if racks := distinctRacks(got); racks != 2 {
					t.Fatalf("%v spans %d racks, want 2", got, racks)
				}
			},
		},
		{
			name:     "replacement keeps the host rule with the rest of the segment",
			cands:    []BookieInfo{bk("a", "h1", ""), bk("b", "h2", ""), bk("c", "h3", ""), bk("d", "h1", ""), bk("f", "h4", ""), bk("g", "h3", "")},
			ensemble: []string{"a", "", "c"}, qw: 3, exclude: []string{"a", "b", "c"},
			check: func(t *testing.T, got []string) {
				if got[1] != "f" {
					t.Fatalf("got %v, want f at position 1: d and g share a host with a and c", got)
				}
			},
		},
		{
			name:     "replacement may share a host with a position it shares no write set with",
			cands:    []BookieInfo{bk("a", "h1", ""), bk("b", "h2", ""), bk("d", "h4", ""), bk("x", "h1", "")},
			ensemble: []string{"a", "b", "", "d"}, qw: 2, exclude: []string{"a", "b", "c", "d"},
			check: func(t *testing.T, got []string) {
				if got[2] != "x" {
					t.Fatalf("got %v", got)
				}
			},
		},
		{
			name:     "replacement fails when only peers' hosts are left",
			cands:    []BookieInfo{bk("a", "h1", ""), bk("c", "h2", ""), bk("x", "h1", ""), bk("y", "h2", "")},
			ensemble: []string{"a", "", "c"}, qw: 3, exclude: []string{"a", "b", "c"},
			wantErr: "cannot place 1 of 3 bookies with no two on one host",
		},
		{
			name: "replacement prefers a rack the write sets lack, whatever the weights",
			cands: []BookieInfo{bk("a", "", "r1"), bk("c", "", "r2"),
				withFree(bk("x", "", "r1"), 1<<60), withFree(bk("y", "", "r3"), 1<<20)},
			ensemble: []string{"a", "", "c"}, qw: 3, exclude: []string{"a", "b", "c"},
			check: func(t *testing.T, got []string) {
				if got[1] != "y" {
					t.Fatalf("got %v, want y (rack r3)", got)
				}
			},
		},
		{
			name:     "a kept bookie no longer registered imposes nothing",
			cands:    []BookieInfo{bk("c", "h2", ""), bk("x", "h1", "")},
			ensemble: []string{"gone", "", "c"}, qw: 3, exclude: []string{"gone", "b", "c"},
			check: func(t *testing.T, got []string) {
				if got[1] != "x" {
					t.Fatalf("got %v", got)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ensemble := tc.ensemble
			if ensemble == nil {
				ensemble = make([]string, tc.e)
			}
			for seed := uint64(0); seed < 200; seed++ {
				rng := rand.New(rand.NewPCG(seed, 7))
				got, err := pickBookies(tc.cands, ensemble, tc.qw, tc.exclude, rng)
				if tc.wantErr != "" {
					if !errors.Is(err, ErrNotEnoughBookies) || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("seed %d: got %v %v, want ErrNotEnoughBookies with %q", seed, got, err, tc.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				checkPlacement(t, tc.cands, ensemble, tc.qw, tc.exclude, got)
				if tc.check != nil {
					tc.check(t, slices.Clone(got))
				}
			}
		})
	}
}

// With enough racks every write set spans as many racks as it has
// bookies; with fewer racks than the write quorum, as many racks as
// there are.
func TestPickBookiesSpreadsRacks(t *testing.T) {
	var cands []BookieInfo
	for r := 0; r < 4; r++ {
		for i := 0; i < 3; i++ {
			cands = append(cands, bk(fmt.Sprintf("r%d-%d", r, i), "", fmt.Sprintf("r%d", r)))
		}
	}
	for _, tc := range []struct {
		racks, e, qw int
	}{
		{4, 3, 3}, {4, 4, 2}, {4, 4, 3}, {4, 4, 4}, {4, 5, 2}, {4, 6, 3}, {4, 8, 4}, {3, 6, 3}, {2, 4, 2}, {2, 6, 2},
		{2, 3, 3}, {3, 5, 5}, // fewer racks than the write quorum
	} {
		pool := cands[:3*tc.racks]
		want := min(tc.racks, tc.qw)
		for seed := uint64(0); seed < 100; seed++ {
			got, err := pickBookies(pool, make([]string, tc.e), tc.qw, nil, rand.New(rand.NewPCG(seed, 1)))
			if err != nil {
				t.Fatalf("%d racks E%d Qw%d: %v", tc.racks, tc.e, tc.qw, err)
			}
			for s, n := range racksPerWriteSet(pool, got, tc.qw) {
				if n != want {
					t.Fatalf("%d racks E%d Qw%d seed %d: write set %d of %v spans %d racks, want %d", tc.racks, tc.e, tc.qw, seed, s, got, n, want)
				}
			}
		}
	}
}

// Among equally good bookies the weights decide: free disk and low load
// win, but every bookie gets some share. Racks come first: within the
// rack a write set needs, weights decide.
func TestPickBookiesWeights(t *testing.T) {
	ro := bk("readonly", "", "")
	ro.Info.FreeDiskBytes, ro.Info.ReadOnly = 1<<42, true
	cands := []BookieInfo{
		bk("roomy", "", ""),
		withFree(bk("full", "", ""), 1<<30),
		{ID: "busy", Info: &metapb.BookieInfo{FreeDiskBytes: 1 << 40, WriteBytesPerSec: 1 << 30}},
		bk("idle", "", ""),
		ro,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for i := 0; i < 10000; i++ {
		got, err := pickBookies(cands, make([]string, 2), 2, []string{"idle"}, rng)
		if err != nil {
			t.Fatal(err)
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

	racked := []BookieInfo{
		bk("r1-big", "", "r1"),
		withFree(bk("r1-small", "", "r1"), 1<<34),
		withFree(bk("r2-only", "", "r2"), 1<<30),
	}
	counts = map[string]int{}
	for i := 0; i < 10000; i++ {
		got, err := pickBookies(racked, make([]string, 2), 2, nil, rng)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			counts[id]++
		}
	}
	if counts["r2-only"] != 10000 {
		t.Fatalf("the only bookie of rack r2 is not in every ensemble of 2: %v", counts)
	}
	if !(counts["r1-big"] > 20*counts["r1-small"] && counts["r1-small"] > 0) {
		t.Fatalf("within rack r1 the weights do not decide: %v", counts)
	}
}

// The same seed gives the same placements.
func TestPickBookiesDeterministic(t *testing.T) {
	var cands []BookieInfo
	for i := 0; i < 12; i++ {
		cands = append(cands, withFree(bk(fmt.Sprintf("b%d", i), fmt.Sprintf("h%d", i%5), fmt.Sprintf("r%d", i%3)), uint64(i+1)<<30))
	}
	run := func() [][]string {
		rng := rand.New(rand.NewPCG(42, 42))
		var out [][]string
		for i := 0; i < 50; i++ {
			got, err := pickBookies(cands, make([]string, 5), 3, nil, rng)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got)
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Fatalf("pick %d: %v, then %v", i, a[i], b[i])
		}
	}
}

func TestPickBookiesBadQuorum(t *testing.T) {
	if _, err := pickBookies([]BookieInfo{bk("a", "", "")}, make([]string, 1), 2, nil, rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("write quorum above the ensemble: %v", err)
	}
}

// On random small clusters and ensembles (new, or with positions to
// replace), the pick succeeds exactly when some placement meets the host
// rule (found by brute force), and what it returns meets it.
func TestPickBookiesFindsAPlacementWheneverOneExists(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	hosts := []string{"", "h1", "h2", "h3"}
	racks := []string{"", "r1", "r2"}
	for iter := 0; iter < 3000; iter++ {
		e := 1 + rng.IntN(5)
		qw := 1 + rng.IntN(e)
		var cands []BookieInfo
		for i, n := 0, rng.IntN(8); i < n; i++ {
			b := withFree(bk(fmt.Sprintf("b%d", i), hosts[rng.IntN(len(hosts))], racks[rng.IntN(len(racks))]), 1+rng.Uint64N(1<<40))
			b.Info.ReadOnly = rng.IntN(8) == 0
			cands = append(cands, b)
		}
		ensemble := make([]string, e)
		var exclude []string
		if rng.IntN(2) == 0 { // a replacement: keep some positions
			for p := range ensemble {
				if len(cands) > 0 && rng.IntN(2) == 0 {
					id := cands[rng.IntN(len(cands))].ID
					if !slices.Contains(ensemble, id) {
						ensemble[p] = id
					}
				}
			}
			exclude = slices.Clone(ensemble)
		}
		got, err := pickBookies(cands, ensemble, qw, exclude, rng)
		want := bruteForcePlacement(cands, ensemble, qw, exclude)
		switch {
		case err != nil && !errors.Is(err, ErrNotEnoughBookies):
			t.Fatalf("iter %d: %v", iter, err)
		case err != nil && want:
			t.Fatalf("iter %d: E%d Qw%d ensemble %q, %v: pick failed (%v) though a placement exists", iter, e, qw, ensemble, describe(cands), err)
		case err == nil && !want:
			t.Fatalf("iter %d: pick returned %v though brute force finds no placement", iter, got)
		case err == nil:
			checkPlacement(t, cands, ensemble, qw, exclude, got)
		}
	}
}

func describe(cands []BookieInfo) []string {
	var out []string
	for _, c := range cands {
		out = append(out, fmt.Sprintf("%s(h=%s r=%s ro=%v)", c.ID, c.Info.HostLabel, c.Info.Rack, c.Info.ReadOnly))
	}
	return out
}

// bruteForcePlacement reports whether the empty positions can be filled
// with distinct usable bookies keeping the host rule.
func bruteForcePlacement(cands []BookieInfo, ensemble []string, qw int, exclude []string) bool {
	host := map[string]string{}
	var pool []string
	for _, c := range cands {
		host[c.ID] = c.Info.HostLabel
		if !c.Info.ReadOnly && !slices.Contains(exclude, c.ID) && !slices.Contains(ensemble, c.ID) {
			pool = append(pool, c.ID)
		}
	}
	out := slices.Clone(ensemble)
	used := make([]bool, len(pool))
	var try func(p int) bool
	try = func(p int) bool {
		if p == len(out) {
			return true
		}
		if out[p] != "" {
			return try(p + 1)
		}
		for i, id := range pool {
			if used[i] {
				continue
			}
			ok := true
			for q, other := range out {
				if q != p && other != "" && host[id] != "" && host[other] == host[id] && sharesWriteSet(p, q, len(out), qw) {
					ok = false
				}
			}
			if !ok {
				continue
			}
			used[i], out[p] = true, id
			if try(p + 1) {
				return true
			}
			used[i], out[p] = false, ""
		}
		return false
	}
	return try(0)
}
