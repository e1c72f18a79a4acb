// Package bufpool is gRPC's buffer pool for Magnetar's processes:
// buffers in power-of-two size classes, handed out without being zeroed.
// gRPC's default pool clears every buffer it hands out; on the add path
// (the proto codec's marshal and unmarshal buffers on the broker and the
// bookies) that clearing took 8% of a standalone's CPU. gRPC writes
// whole messages and frames into the buffers it gets, so nothing stale
// is ever read (gRPC's own internal pools skip the clearing too).
//
// Install makes it gRPC's default pool, the only way to reach the proto
// codec's buffers (and the clients'); the magnetar binary calls it at
// initialization. Servers read the default when the grpc package
// initializes, before any Install can run: they are given the pool with
// experimental.BufferPool.
package bufpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

const (
	minShift = 8  // 256 B
	maxShift = 24 // 16 MiB; larger buffers are not pooled
)

// Pool is a mem.BufferPool that does not zero the buffers it hands out.
type Pool struct {
	classes [maxShift - minShift + 1]sync.Pool
	// boxes holds spare *[]byte for GetBytes and PutBytes: the classes
	// hold pointers (mem.BufferPool's contract), and a caller that keeps
	// only the slice would otherwise allocate one at every PutBytes.
	boxes sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// New returns an empty pool.
func New() *Pool { return &Pool{} }

// shared is the pool of the process's servers and clients.
var shared = New()

// Shared returns the process's pool.
func Shared() *Pool { return shared }

// Install makes the shared pool gRPC's default buffer pool: the proto
// codec's and the clients' (servers take theirs at the grpc package's
// initialization: pass experimental.BufferPool(Shared()) to them). gRPC
// requires it be called at initialization (an init function).
func Install() { experimental.SetDefaultBufferPool(shared) }

// class is the index of the smallest class holding n bytes, or -1 when n
// is over the largest.
func class(n int) int {
	shift := max(bits.Len(uint(n-1)), minShift)
	if n <= 0 {
		shift = minShift
	}
	if shift > maxShift {
		return -1
	}
	return shift - minShift
}

// Get returns a buffer of length n; its bytes are not cleared.
func (p *Pool) Get(n int) *[]byte {
	c := class(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(c+minShift))
	return &b
}

// Put returns a buffer that Get handed out (or a prefix of one); buffers
// of other capacities are dropped.
func (p *Pool) Put(b *[]byte) {
	if c := putClass(cap(*b)); c >= 0 {
		p.classes[c].Put(b)
	}
}

// putClass is the class a buffer of capacity size goes back to, or -1 for
// a capacity Get does not hand out.
func putClass(size int) int {
	if size < 1<<minShift || size > 1<<maxShift || size&(size-1) != 0 {
		return -1
	}
	return bits.Len(uint(size)) - 1 - minShift
}

// GetBytes is Get for a caller that keeps the slice and not the pointer
// (a decoded payload): with PutBytes, a buffer's round trip allocates
// nothing once the pool is warm.
func (p *Pool) GetBytes(n int) []byte {
	bp := p.Get(n)
	b := *bp
	*bp = nil
	p.boxes.Put(bp)
	return b
}

// PutBytes is Put for a buffer GetBytes (or Get) handed out, given as the
// slice (or a prefix of it).
func (p *Pool) PutBytes(b []byte) {
	c := putClass(cap(b))
	if c < 0 {
		return
	}
	bp, _ := p.boxes.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = b
	p.classes[c].Put(bp)
}
