package mledger

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// cacheModel is the cache's contract written plainly: one list of every
// entry in the order put, the oldest evicted first.
type cacheModel struct {
	max, size int64
	order     []cacheModelEntry
}

type cacheModelEntry struct {
	ml   string
	pos  Position
	data []byte
}

func (m *cacheModel) find(ml string, pos Position) int {
	return slices.IndexFunc(m.order, func(e cacheModelEntry) bool { return e.ml == ml && e.pos == pos })
}

func (m *cacheModel) put(ml string, pos Position, data []byte) {
	if int64(len(data)) > m.max || m.find(ml, pos) >= 0 {
		return
	}
	m.order = append(m.order, cacheModelEntry{ml, pos, data})
	m.size += int64(len(data))
	for m.size > m.max {
		m.size -= int64(len(m.order[0].data))
		m.order = m.order[1:]
	}
}

func (m *cacheModel) drop(ml string) {
	m.order = slices.DeleteFunc(m.order, func(e cacheModelEntry) bool {
		if e.ml == ml {
			m.size -= int64(len(e.data))
			return true
		}
		return false
	})
}

// TestCacheMatchesModel puts, drops and looks up at random, each managed
// ledger putting its entries in position order as managed ledgers do (with
// rollovers to new ledgers), and checks every answer and the size against
// the model.
func TestCacheMatchesModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			max := int64(1 + rng.IntN(4000))
			c, m := NewCache(max), &cacheModel{max: max}
			names := []string{"a", "b", "c", "d"}
			next := map[string]Position{}
			var put []cacheModelEntry // every entry put, to look up
			for op := range 3000 {
				ml := names[rng.IntN(len(names))]
				switch r := rng.IntN(100); {
				case r < 60:
					p := next[ml]
					if rng.IntN(20) == 0 {
						p = Position{p.Ledger + 1, 0} // a rollover
					}
					next[ml] = Position{p.Ledger, p.Entry + 1}
					data := bytes.Repeat([]byte{byte(op)}, rng.IntN(300))
					c.Put(ml, p, data)
					m.put(ml, p, data)
					put = append(put, cacheModelEntry{ml, p, data})
				case r < 62:
					c.Drop(ml)
					m.drop(ml)
				default:
					if len(put) == 0 {
						continue
					}
					e := put[rng.IntN(len(put))]
					got, ok := c.Get(e.ml, e.pos)
					i := m.find(e.ml, e.pos)
					if ok != (i >= 0) || c.Has(e.ml, e.pos) != ok {
						t.Fatalf("op %d: %s %v cached: Get %v, Has %v, model %v", op, e.ml, e.pos, ok, c.Has(e.ml, e.pos), i >= 0)
					}
					if ok && !bytes.Equal(got, m.order[i].data) {
						t.Fatalf("op %d: %s %v: got %d bytes, model %d", op, e.ml, e.pos, len(got), len(m.order[i].data))
					}
				}
				if size, _, _ := c.Stats(); size != m.size || size > max {
					t.Fatalf("op %d: size %d, model %d, max %d", op, size, m.size, max)
				}
			}
		})
	}
}

// TestCacheOutOfOrderPut: an entry put before a later one of its ledger
// is kept and found, a second put of a position is ignored, and the bytes
// stay counted exactly through the evictions that follow.
func TestCacheOutOfOrderPut(t *testing.T) {
	c := NewCache(30)
	c.Put("a", Position{1, 5}, make([]byte, 10))
	c.Put("a", Position{1, 3}, make([]byte, 10))
	c.Put("a", Position{1, 3}, make([]byte, 7)) // a duplicate: ignored
	for _, e := range []int64{3, 5} {
		if !c.Has("a", Position{1, e}) {
			t.Fatalf("entry 1:%d not cached", e)
		}
	}
	if size, _, _ := c.Stats(); size != 20 {
		t.Fatalf("size %d, want 20", size)
	}
	c.Put("b", Position{1, 0}, make([]byte, 10))
	c.Put("b", Position{1, 1}, make([]byte, 10)) // evicts one of a's
	if size, _, _ := c.Stats(); size != 30 {
		t.Fatalf("size %d, want 30", size)
	}
	if c.Has("a", Position{1, 3}) == c.Has("a", Position{1, 5}) {
		t.Fatalf("want exactly one of a's entries evicted: 1:3 %v, 1:5 %v", c.Has("a", Position{1, 3}), c.Has("a", Position{1, 5}))
	}
	c.Drop("b")
	if size, _, _ := c.Stats(); size != 10 {
		t.Fatalf("size after drop %d, want 10", size)
	}
}

// TestCacheDropsDoNotPileUp: topics opened and closed over and over, in a
// cache never full, leave no tokens behind beyond a bound: Drop removes
// them once they are half of the queue.
func TestCacheDropsDoNotPileUp(t *testing.T) {
	c := NewCache(1 << 30)
	c.Put("live", Position{1, 0}, []byte("x"))
	for i := range 10000 {
		name := fmt.Sprint("t", i)
		for e := range int64(5) {
			c.Put(name, Position{1, e}, []byte("y"))
		}
		c.Drop(name)
	}
	c.mu.Lock()
	queue, stale, mls := c.mu.queue.len(), c.mu.stale, len(c.mu.mls)
	c.mu.Unlock()
	if queue > 20 || stale > queue/2 || mls != 1 {
		t.Fatalf("after 10,000 dropped topics: queue %d tokens (%d stale), %d ledgers; want at most 20, half stale, 1", queue, stale, mls)
	}
	if !c.Has("live", Position{1, 0}) {
		t.Fatal("the live entry is gone")
	}
	if size, _, _ := c.Stats(); size != 1 {
		t.Fatalf("size %d, want 1", size)
	}
}

// TestCacheEvictionKeepsNoArray: a ledger's slice and the queue reuse
// their arrays: a long stream of entries through a small cache keeps them
// within a small multiple of what is held.
func TestCacheEvictionKeepsNoArray(t *testing.T) {
	c := NewCache(100 * 10)
	for e := range int64(100000) {
		c.Put("a", Position{1, e}, make([]byte, 10))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.mu.mls["a"]
	if l.entries.len() != 100 || cap(l.entries.s) > 400 || cap(c.mu.queue.s) > 400 {
		t.Fatalf("holding %d entries in arrays of %d and %d", l.entries.len(), cap(l.entries.s), cap(c.mu.queue.s))
	}
}

// TestCacheShrinksAfterABurst: a topic that wrote a burst and then trickles
// while others fill the cache gives up the array the burst grew.
func TestCacheShrinksAfterABurst(t *testing.T) {
	const n = 100000
	c := NewCache(n * 10)
	for e := range int64(n) {
		c.Put("a", Position{1, e}, make([]byte, 10))
	}
	for e := range int64(n) {
		c.Put("b", Position{1, e}, make([]byte, 10))
		if e%1000 == 0 {
			c.Put("a", Position{1, n + e}, make([]byte, 10)) // a trickles on
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.mu.mls["a"]
	if a == nil || a.entries.len() == 0 {
		t.Fatal("a's trickle was evicted: the test needs it kept")
	}
	if got := cap(a.entries.s); got > 4*a.entries.len()+minShrink {
		t.Fatalf("a holds %d entries in an array of %d", a.entries.len(), got)
	}
}
