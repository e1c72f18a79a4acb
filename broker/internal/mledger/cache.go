package mledger

import (
	"container/list"
	"sync"
)

// Cache keeps recently written entries of every managed ledger of a broker,
// up to a byte budget, so that tailing consumers are served from memory
// rather than from bookies. The oldest entries are evicted first.
type Cache struct {
	max int64

	mu struct {
		sync.Mutex
		size  int64
		order *list.List // of cacheKey, oldest first
		items map[cacheKey]cacheItem
	}
	hits, misses int64
}

type cacheKey struct {
	ml  string
	pos Position
}

type cacheItem struct {
	data []byte
	el   *list.Element
}

// NewCache returns a cache of at most max bytes (0: cache nothing).
func NewCache(max int64) *Cache {
	c := &Cache{max: max}
	c.mu.order = list.New()
	c.mu.items = make(map[cacheKey]cacheItem)
	return c
}

// Put adds an entry; data must not be modified afterwards.
func (c *Cache) Put(ml string, pos Position, data []byte) {
	if int64(len(data)) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{ml, pos}
	if _, ok := c.mu.items[k]; ok {
		return
	}
	c.mu.items[k] = cacheItem{data: data, el: c.mu.order.PushBack(k)}
	c.mu.size += int64(len(data))
	for c.mu.size > c.max {
		oldest := c.mu.order.Front()
		ok := oldest.Value.(cacheKey)
		c.mu.size -= int64(len(c.mu.items[ok].data))
		delete(c.mu.items, ok)
		c.mu.order.Remove(oldest)
	}
}

// Get returns a cached entry.
func (c *Cache) Get(ml string, pos Position) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.mu.items[cacheKey{ml, pos}]
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return it.data, ok
}

// Has reports whether an entry is cached, without counting a hit or miss.
func (c *Cache) Has(ml string, pos Position) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mu.items[cacheKey{ml, pos}]
	return ok
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
	for e := c.mu.order.Front(); e != nil; {
		next := e.Next()
		if k := e.Value.(cacheKey); k.ml == ml {
			c.mu.size -= int64(len(c.mu.items[k].data))
			delete(c.mu.items, k)
			c.mu.order.Remove(e)
		}
		e = next
	}
}
