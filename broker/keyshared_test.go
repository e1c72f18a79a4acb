package broker

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// Key hashes are Pulsar's (murmur3_32, seed 0, made non-negative, modulo
// 65536), so that sticky ranges mean the same to Pulsar clients later.
func TestStickyKeyHashIsPulsars(t *testing.T) {
	// murmur3_32("hello", 0) = 0x248bfa47; "" hashes to 0.
	for key, want := range map[string]int32{"hello": 0xfa47, "": 0} {
		if got := stickyKeyHash([]byte(key)); got != want {
			t.Errorf("hash of %q = %d, want %d", key, got, want)
		}
	}
}

func TestRingSelectorRangesCoverTheSpaceOnce(t *testing.T) {
	s := &ringSelector{}
	var cs []*consumer
	for _, name := range []string{"a", "b", "a", "c"} { // a duplicate name too
		c := &consumer{name: name, keyShared: &brokerpb.KeySharedMeta{}}
		if err := s.add(c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	owner := make([]*consumer, hashRangeSize)
	for _, c := range cs {
		for _, r := range s.ranges(c) {
			for h := r.start; h <= r.end; h++ {
				if owner[h] != nil {
					t.Fatalf("hash %d given to %s and %s", h, owner[h].name, c.name)
				}
				owner[h] = c
			}
		}
	}
	for h, c := range owner {
		if c == nil {
			t.Fatalf("hash %d given to nobody", h)
		}
		if p := s.pick(int32(h)); p != c {
			t.Fatalf("hash %d: ranges say %s, pick says %s", h, c.name, p.name)
		}
	}
	// Removing a consumer moves only its hashes.
	s.remove(cs[1])
	for h, c := range owner {
		if c != cs[1] && s.pick(int32(h)) != c {
			t.Fatalf("hash %d moved from %s though its consumer stayed", h, c.name)
		}
	}
}

// Every selector's pick at the first and last hash of every range it
// gives, and at the hashes just outside: a boundary off by one holds the
// keys of that hash for ever (sticky) or sends them to another consumer
// than the one told about them.
func TestKeySelectorPickAtRangeEdges(t *testing.T) {
	sticky := func(rs ...[2]int32) *brokerpb.KeySharedMeta {
		m := &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_STICKY}
		for _, r := range rs {
			m.HashRanges = append(m.HashRanges, &brokerpb.HashRange{Start: r[0], End: r[1]})
		}
		return m
	}
	const last = hashRangeSize - 1
	for _, tc := range []struct {
		name      string
		mode      brokerpb.KeySharedMode
		consumers []*brokerpb.KeySharedMeta // nil: auto-split
		selector  string                    // --key-shared-selector; default consistent hashing
	}{
		{"sticky one hash each", brokerpb.KeySharedMode_STICKY, []*brokerpb.KeySharedMeta{sticky([2]int32{0, 0}), sticky([2]int32{1, 1}), sticky([2]int32{last, last})}, ""},
		{"sticky adjacent", brokerpb.KeySharedMode_STICKY, []*brokerpb.KeySharedMeta{sticky([2]int32{0, 32767}), sticky([2]int32{32768, last})}, ""},
		{"sticky with gaps", brokerpb.KeySharedMode_STICKY, []*brokerpb.KeySharedMeta{sticky([2]int32{10, 19}, [2]int32{40, 49}), sticky([2]int32{20, 29}), sticky([2]int32{50, last - 1})}, ""},
		{"sticky whole space", brokerpb.KeySharedMode_STICKY, []*brokerpb.KeySharedMeta{sticky([2]int32{0, last})}, ""},
		{"auto-split one", brokerpb.KeySharedMode_AUTO_SPLIT, make([]*brokerpb.KeySharedMeta, 1), ""},
		{"auto-split three", brokerpb.KeySharedMode_AUTO_SPLIT, make([]*brokerpb.KeySharedMeta, 3), ""},
		{"auto-split ten", brokerpb.KeySharedMode_AUTO_SPLIT, make([]*brokerpb.KeySharedMeta, 10), ""},
		{"split one", brokerpb.KeySharedMode_AUTO_SPLIT, make([]*brokerpb.KeySharedMeta, 1), KeySharedAutoSplit},
		{"split three", brokerpb.KeySharedMode_AUTO_SPLIT, make([]*brokerpb.KeySharedMeta, 3), KeySharedAutoSplit},
		{"split ten", brokerpb.KeySharedMode_AUTO_SPLIT, make([]*brokerpb.KeySharedMeta, 10), KeySharedAutoSplit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newKeySelector(tc.mode, tc.selector)
			var cs []*consumer
			for i, m := range tc.consumers {
				if m == nil {
					m = &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_AUTO_SPLIT}
				}
				c := &consumer{name: fmt.Sprint("c", i), keyShared: m}
				if err := s.add(c); err != nil {
					t.Fatal(err)
				}
				cs = append(cs, c)
			}
			owner := func(h int32) *consumer { // by the ranges each consumer is told
				for _, c := range cs {
					for _, r := range s.ranges(c) {
						if r.start <= h && h <= r.end {
							return c
						}
					}
				}
				return nil
			}
			name := func(c *consumer) string {
				if c == nil {
					return "nobody"
				}
				return c.name
			}
			edges := 0
			for _, c := range cs {
				rs := s.ranges(c)
				if len(rs) == 0 {
					t.Fatalf("%s has no range", c.name)
				}
				for _, r := range rs {
					for _, h := range []int32{r.start - 1, r.start, r.end, r.end + 1} {
						if h < 0 || h > last {
							continue
						}
						want := owner(h)
						if (h == r.start || h == r.end) && want != c {
							t.Fatalf("hash %d, an edge of %s's range %v, is owned by %s", h, c.name, r, name(want))
						}
						if got := s.pick(h); got != want {
							t.Errorf("pick(%d) at an edge of %s's range %v = %s; want %s", h, c.name, r, name(got), name(want))
						}
						edges++
					}
				}
			}
			if edges == 0 {
				t.Fatal("no edge checked")
			}
		})
	}
}

// The auto-split selector assigns as Pulsar's
// HashRangeAutoSplitStickyKeyConsumerSelector does (the example of its
// documentation, then on): a joining consumer takes the lower half of the
// largest range, the first of equal ones; a leaving one's range goes to
// the range above, or the top range to the consumer below.
func TestSplitSelectorAssignsAsPulsar(t *testing.T) {
	s := newKeySelector(brokerpb.KeySharedMode_AUTO_SPLIT, KeySharedAutoSplit)
	cs := map[string]*consumer{}
	add := func(name string) {
		t.Helper()
		c := &consumer{name: name, keyShared: &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_AUTO_SPLIT}}
		if err := s.add(c); err != nil {
			t.Fatal(err)
		}
		cs[name] = c
	}
	// want lists each consumer's range, checked by ranges and by pick at
	// every hash.
	want := func(step string, rs map[string]hashRange) {
		t.Helper()
		for h := int32(0); h < hashRangeSize; h++ {
			var owner string
			for name, r := range rs {
				if r.start <= h && h <= r.end {
					owner = name
				}
			}
			if got := s.pick(h); got == nil || got.name != owner {
				t.Fatalf("%s: pick(%d) = %v, want %s", step, h, got, owner)
			}
		}
		for name, r := range rs {
			if got := s.ranges(cs[name]); len(got) != 1 || got[0] != r {
				t.Fatalf("%s: ranges of %s = %v, want %v", step, name, got, r)
			}
		}
	}
	add("c1")
	want("c1", map[string]hashRange{"c1": {0, 65535}})
	add("c2") // Pulsar: 0 -> 32768 (c2) -> 65536 (c1)
	want("c2 joins", map[string]hashRange{"c2": {0, 32768}, "c1": {32769, 65535}})
	add("c3") // the first of the two equal ranges is split: 16384 (c3)
	want("c3 joins", map[string]hashRange{"c3": {0, 16384}, "c2": {16385, 32768}, "c1": {32769, 65535}})
	add("c4") // c1's is the largest now: 49152 (c4)
	want("c4 joins", map[string]hashRange{"c3": {0, 16384}, "c2": {16385, 32768}, "c4": {32769, 49152}, "c1": {49153, 65535}})
	s.remove(cs["c2"]) // to the range above: c4
	want("c2 leaves", map[string]hashRange{"c3": {0, 16384}, "c4": {16385, 49152}, "c1": {49153, 65535}})
	s.remove(cs["c1"]) // the top range goes to the consumer below: c4
	want("c1 leaves", map[string]hashRange{"c3": {0, 16384}, "c4": {16385, 65535}})
	s.remove(cs["c3"])
	want("c3 leaves", map[string]hashRange{"c4": {0, 65535}})
	s.remove(cs["c4"])
	if got := s.pick(7); got != nil {
		t.Fatalf("no consumer left, pick = %s", got.name)
	}
	// A sticky consumer cannot join an auto-split subscription.
	if err := s.add(&consumer{name: "x", keyShared: &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_STICKY}}); err == nil {
		t.Fatal("a sticky consumer joined auto-split ones")
	}
}

// When every range is one hash wide, another consumer is refused (as
// Pulsar's ConsumerAssignException).
func TestSplitSelectorRunsOutOfRanges(t *testing.T) {
	s := &splitSelector{}
	auto := &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_AUTO_SPLIT}
	// Consumers joined until no range is wider than one hash: keys
	// 1..hashRangeSize (the first range, 0..1, measures 1 as Pulsar
	// measures it).
	for k := int32(1); k <= hashRangeSize; k++ {
		s.bounds = append(s.bounds, splitBound{k, &consumer{name: fmt.Sprint(k), keyShared: auto}})
	}
	err := s.add(&consumer{name: "one more", keyShared: auto})
	if !errors.Is(err, ErrConsumerBusy) {
		t.Fatalf("a consumer with no range to split: %v, want ErrConsumerBusy", err)
	}
	// One consumer fewer: the top range measures two and is split; the
	// new consumer takes its lower half, hash 65535 (the top key, 65536,
	// is past the last hash, as in Pulsar).
	s.bounds = slices.Delete(s.bounds, len(s.bounds)-2, len(s.bounds)-1)
	if err := s.add(&consumer{name: "fits", keyShared: auto}); err != nil {
		t.Fatal(err)
	}
	if got := s.pick(hashRangeSize - 1); got == nil || got.name != "fits" {
		t.Fatalf("hash %d: %v, want the new consumer", hashRangeSize-1, got)
	}
}
