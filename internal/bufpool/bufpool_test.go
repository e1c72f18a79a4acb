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

// GetBytes and PutBytes hand the same buffers as Get and Put: a buffer
// put back is handed out again, at the length asked, with its old bytes;
// one of a foreign capacity is dropped.
func TestBytesRoundTrip(t *testing.T) {
	p := New()
	if b := p.GetBytes(1000); len(b) != 1000 || cap(b) != 1024 {
		t.Fatalf("GetBytes(1000): len %d cap %d", len(b), cap(b))
	}
	found := false
	// Retried: the race detector's sync.Pool drops items, and a goroutine
	// may move to another processor between a Put and a Get.
	for i := 0; i < 100 && !found; i++ {
		b := p.GetBytes(1000)
		b[0] = byte(i)
		p.PutBytes(b[:10]) // a prefix goes back whole
		again := p.GetBytes(600)
		if found = &again[:1][0] == &b[0]; found && (len(again) != 600 || again[0] != byte(i)) {
			t.Fatalf("reused buffer: len %d, first byte %d", len(again), again[0])
		}
		p.PutBytes(again)
	}
	if !found {
		t.Fatal("PutBytes's buffer not handed out again")
	}
	odd := make([]byte, 1000)
	p.PutBytes(odd)
	for i := 0; i < 100; i++ {
		if got := p.GetBytes(1000); &got[:1][0] == &odd[0] {
			t.Fatal("a buffer of a foreign capacity was pooled")
		}
	}
}

// GetBytes keeps the pointer it took from the pool, emptied, and
// PutBytes uses it for the next buffer instead of allocating one: a
// decoded payload's release used to allocate its pointer every time.
func TestBytesReuseBoxes(t *testing.T) {
	p := New()
	c := class(1000)
	for i := 0; i < 200; i++ {
		b := p.GetBytes(1000)
		box, _ := p.boxes.Get().(*[]byte)
		if box == nil {
			continue // dropped by the race detector's sync.Pool
		}
		if *box != nil {
			t.Fatal("a spare pointer still points to a buffer handed out")
		}
		p.boxes.Put(box)
		p.PutBytes(b)
		if got, _ := p.classes[c].Get().(*[]byte); got == box {
			if &(*got)[:1][0] != &b[0] {
				t.Fatal("the spare pointer holds another buffer")
			}
			if !raceEnabled { // sync.Pool drops items at random under it
				if n := testing.AllocsPerRun(100, func() { p.PutBytes(p.GetBytes(1000)) }); n != 0 {
					t.Fatalf("%v allocations per GetBytes and PutBytes, want 0", n)
				}
			}
			return
		}
	}
	t.Fatal("PutBytes never took the spare pointer")
}
