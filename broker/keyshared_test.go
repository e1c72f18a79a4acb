package broker

import (
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
