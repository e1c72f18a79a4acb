package client

import (
	"math/bits"
	"sync"
)

// Batch payload buffers are reused: a producer at 70,000 msg/s of 1 KiB
// otherwise allocates (and zeroes, and collects) 70 MB/s of them. A
// buffer comes from the pool of the smallest power of two that holds the
// requested size, from 4 KiB (smaller ones are allocated as needed) to
// 16 MiB (larger ones are not pooled).
const (
	minBatchBufShift = 12
	maxBatchBufShift = 24
)

var batchBufs [maxBatchBufShift - minBatchBufShift + 1]sync.Pool

// poisonReleased, set by tests, overwrites buffers as they are given
// back: a buffer still in use after its release then sends garbage,
// which the tests check for.
var poisonReleased bool

// getBatchBuf returns an empty buffer with room for size bytes.
func getBatchBuf(size int) []byte {
	shift := max(bits.Len(uint(max(size, 1)-1)), minBatchBufShift)
	if shift > maxBatchBufShift {
		return make([]byte, 0, size)
	}
	if p, ok := batchBufs[shift-minBatchBufShift].Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 1<<shift)
}

// putBatchBuf gives b back, to the pool of its capacity if that is one of
// the pooled sizes (an append may have grown it to another).
func putBatchBuf(b []byte) {
	c := cap(b)
	if c < 1<<minBatchBufShift || c > 1<<maxBatchBufShift || c&(c-1) != 0 {
		return
	}
	if poisonReleased {
		b = b[:c]
		for i := range b {
			b[i] = 0xdb
		}
	}
	b = b[:0]
	batchBufs[bits.Len(uint(c))-1-minBatchBufShift].Put(&b)
}
