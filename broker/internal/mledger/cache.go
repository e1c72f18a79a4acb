package mledger

import (
	"slices"
	"sync"
)

// Cache keeps recently written entries of every managed ledger of a broker,
// up to a byte budget, so that tailing consumers are served from memory
// rather than from bookies. The oldest entries are evicted first.
//
// Each managed ledger's entries are kept in a slice in position order, and
// one queue of tokens, one per entry in the order they were put, tells
// which ledger holds the oldest: a managed ledger puts its entries in
// position order, so the oldest of a ledger is the first of its slice. A
// put costs one lookup in a map of the ledgers (not of the entries), an
// append, and for each eviction a pop at both fronts: no allocation per
// entry once the slices have grown.
type Cache struct {
	max int64

	mu struct {
		sync.Mutex
		size int64 // bytes of the entries held, <= max after each Put
		mls  map[string]*cachedLedger
		// queue holds one token per entry put and not yet evicted, oldest
		// first: the entry's ledger. A ledger dropped (Drop) leaves its
		// tokens behind, counted in stale, skipped when they come out,
		// and removed all at once when they are over half of the queue.
		queue fifo[*cachedLedger]
		stale int
	}
	hits, misses int64
}

// cachedLedger is the cached tail of one managed ledger. Guarded by
// Cache.mu.
type cachedLedger struct {
	name    string
	entries fifo[cachedEntry] // in position order
	dropped bool              // removed by Drop: its tokens in the queue are stale
}

type cachedEntry struct {
	pos  Position
	data []byte
}

// NewCache returns a cache of at most max bytes (0: cache nothing).
func NewCache(max int64) *Cache {
	c := &Cache{max: max}
	c.mu.mls = make(map[string]*cachedLedger)
	return c
}

// Put adds an entry; data must not be modified afterwards.
func (c *Cache) Put(ml string, pos Position, data []byte) {
	if int64(len(data)) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.mu.mls[ml]
	if l == nil {
		l = &cachedLedger{name: ml}
		c.mu.mls[ml] = l
	}
	e := cachedEntry{pos: pos, data: data}
	if n := l.entries.len(); n == 0 || l.entries.at(n-1).pos.Before(pos) {
		l.entries.push(e)
	} else {
		// Out of order (not done by a managed ledger): kept in order. The
		// token still makes this ledger give up its first entry, so the
		// byte count stays exact; only the order of eviction within the
		// ledger differs.
		i, found := l.search(pos)
		if found {
			return
		}
		l.entries.insert(i, e)
	}
	c.mu.queue.push(l)
	c.mu.size += int64(len(data))
	for c.mu.size > c.max {
		c.evictLocked()
	}
}

// evictLocked removes the oldest entry.
func (c *Cache) evictLocked() {
	for {
		l := c.mu.queue.pop()
		if l.dropped {
			c.mu.stale--
			continue
		}
		e := l.entries.pop()
		c.mu.size -= int64(len(e.data))
		if l.entries.len() == 0 {
			// No token of l is left: a later Put makes a new one.
			delete(c.mu.mls, l.name)
		}
		return
	}
}

// Get returns a cached entry.
func (c *Cache) Get(ml string, pos Position) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	data, ok := c.findLocked(ml, pos)
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return data, ok
}

// Has reports whether an entry is cached, without counting a hit or miss.
func (c *Cache) Has(ml string, pos Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.findLocked(ml, pos)
	return ok
}

func (c *Cache) findLocked(ml string, pos Position) ([]byte, bool) {
	l := c.mu.mls[ml]
	if l == nil {
		return nil, false
	}
	i, ok := l.search(pos)
	if !ok {
		return nil, false
	}
	return l.entries.at(i).data, true
}

// Stats returns the bytes held and the hit and miss counts.
func (c *Cache) Stats() (size, hits, misses int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.size, c.hits, c.misses
}

// Drop removes every entry of a managed ledger (when it is closed or
// deleted).
func (c *Cache) Drop(ml string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.mu.mls[ml]
	if l == nil {
		return
	}
	delete(c.mu.mls, ml)
	l.dropped = true
	for i := range l.entries.len() {
		c.mu.size -= int64(len(l.entries.at(i).data))
	}
	c.mu.stale += l.entries.len()
	l.entries = fifo[cachedEntry]{}
	if c.mu.stale > c.mu.queue.len()/2 {
		c.mu.queue.filter(func(l *cachedLedger) bool { return !l.dropped })
		c.mu.stale = 0
	}
}

// fifo is a queue in a slice: pushed at the back, popped at the front,
// its array reused once the popped part is half of it.
type fifo[T any] struct {
	s    []T
	head int // s[:head] are popped (zeroed, for the collector)
}

func (q *fifo[T]) len() int    { return len(q.s) - q.head }
func (q *fifo[T]) at(i int) *T { return &q.s[q.head+i] }
func (q *fifo[T]) push(v T)    { q.compact(); q.s = append(q.s, v) }
func (q *fifo[T]) insert(i int, v T) {
	q.s = slices.Insert(q.s, q.head+i, v)
}

// pop removes and returns the first element; the queue must not be empty.
// A large array a quarter full is given up for one twice the elements: a
// topic that wrote a burst keeps no array of its size while it trickles.
func (q *fifo[T]) pop() T {
	var zero T
	v := q.s[q.head]
	q.s[q.head] = zero
	q.head++
	switch n := q.len(); {
	case n == 0:
		q.s, q.head = q.s[:0], 0
	case cap(q.s) > minShrink && n < cap(q.s)/4:
		s := make([]T, n, 2*n)
		copy(s, q.s[q.head:])
		q.s, q.head = s, 0
	}
	return v
}

// minShrink is the least capacity pop gives up.
const minShrink = 1024

// compact moves the elements to the front of the array when the popped
// part is at least half of it, before an append would grow it.
func (q *fifo[T]) compact() {
	if q.head == 0 || len(q.s) < cap(q.s) || q.head < len(q.s)/2 {
		return
	}
	n := copy(q.s, q.s[q.head:])
	clear(q.s[n:])
	q.s, q.head = q.s[:n], 0
}

// filter keeps the elements keep returns true for, in order.
func (q *fifo[T]) filter(keep func(T) bool) {
	kept := slices.DeleteFunc(q.s[q.head:], func(v T) bool { return !keep(v) })
	n := copy(q.s, kept)
	clear(q.s[n:])
	q.s, q.head = q.s[:n], 0
}

// search finds pos among the ledger's entries: its index, or where it
// would go.
func (l *cachedLedger) search(pos Position) (int, bool) {
	return slices.BinarySearchFunc(l.entries.s[l.entries.head:], pos, func(e cachedEntry, pos Position) int {
		switch {
		case e.pos.Before(pos):
			return -1
		case pos.Before(e.pos):
			return 1
		}
		return 0
	})
}
