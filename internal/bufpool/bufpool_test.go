package bufpool

import "testing"

func TestSizes(t *testing.T) {
	p := New()
	for _, tc := range []struct{ n, cap int }{
		{0, 256}, {1, 256}, {256, 256}, {257, 512}, {1024, 1024}, {1025, 2048},
		{16 << 10, 16 << 10}, {16<<20 - 1, 16 << 20}, {16 << 20, 16 << 20},
		{16<<20 + 1, 16<<20 + 1}, // not pooled: exactly what was asked
	} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.cap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.cap)
		}
		p.Put(b)
	}
}

// A buffer put back is handed out again, at the length asked, with its
// old bytes (no clearing); buffers the pool did not make are dropped.
func TestReuse(t *testing.T) {
	p := New()
	b := p.Get(1000)
	(*b)[0] = 7
	p.Put(b)
	var again *[]byte
	for i := 0; i < 100 && again != b; i++ { // sync.Pool may drop items
		again = p.Get(600)
		if again != b {
			p.Put(b)
		}
	}
	if again == b && (len(*again) != 600 || (*again)[0] != 7) {
		t.Fatalf("reused buffer: len %d, first byte %d", len(*again), (*again)[0])
	}

	odd := make([]byte, 1000)
	p.Put(&odd) // capacity 1000: not one of the classes
	for i := 0; i < 100; i++ {
		if got := p.Get(1000); got == &odd {
			t.Fatal("a buffer of a foreign capacity was pooled")
		}
	}
}

// GetBytes and PutBytes hand the same buffers as Get and Put, and their
// round trip allocates nothing once the pool is warm: a decoded payload's
// release used to allocate its pointer every time.
func TestBytesRoundTrip(t *testing.T) {
	p := New()
	b := p.GetBytes(1000)
	if len(b) != 1000 || cap(b) != 1024 {
		t.Fatalf("GetBytes(1000): len %d cap %d", len(b), cap(b))
	}
	b[0] = 7
	p.PutBytes(b[:10]) // a prefix goes back whole
	found := false
	for i := 0; i < 100 && !found; i++ { // the race detector's sync.Pool drops items
		again := p.GetBytes(600)
		if found = &again[:1][0] == &b[0]; found && (len(again) != 600 || again[0] != 7) {
			t.Fatalf("reused buffer: len %d, first byte %d", len(again), again[0])
		}
		p.PutBytes(b)
	}
	if !found && !raceEnabled {
		t.Fatal("PutBytes's buffer not handed out again")
	}
	p.PutBytes(make([]byte, 1000)) // a foreign capacity: dropped, as by Put
	if raceEnabled {
		return // sync.Pool drops items at random under the race detector
	}
	if n := testing.AllocsPerRun(100, func() { p.PutBytes(p.GetBytes(1000)) }); n != 0 {
		t.Fatalf("%v allocations per GetBytes and PutBytes, want 0", n)
	}
}
