package cursor

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Ledger 1 is closed with 10 entries, ledger 2 is empty and closed,
// ledger 3 is open.
func next(p Position) Position {
	switch {
	case p.Ledger < 1:
		return pos(1, 0)
	case p.Ledger == 1 && p.Entry+1 >= 10:
		return pos(3, 0)
	case p.Ledger == 2:
		return pos(3, 0)
	}
	return pos(p.Ledger, p.Entry+1)
}

func pos(l, e int64) Position { return Position{Ledger: l, Entry: e} }

func TestAckAdvancesMarkDelete(t *testing.T) {
	s := NewState(pos(1, -1), next)
	s.Ack(pos(1, 2))
	s.Ack(pos(1, 4))
	if s.MarkDelete() != pos(1, -1) || s.Holes() != 2 {
		t.Fatalf("mark-delete %v, holes %d", s.MarkDelete(), s.Holes())
	}
	s.Ack(pos(1, 3)) // merges 2..4
	if s.Holes() != 1 || s.AckedAfterMarkDelete() != 3 {
		t.Fatalf("holes %d acked %d", s.Holes(), s.AckedAfterMarkDelete())
	}
	s.Ack(pos(1, 0))
	s.Ack(pos(1, 1)) // 0..4 contiguous: mark-delete moves to 4
	if s.MarkDelete() != pos(1, 4) || s.Holes() != 0 || s.AckedAfterMarkDelete() != 0 {
		t.Fatalf("mark-delete %v holes %d", s.MarkDelete(), s.Holes())
	}
	// Crossing to the next non-empty ledger.
	for e := int64(5); e < 10; e++ {
		s.Ack(pos(1, e))
	}
	s.Ack(pos(3, 0))
	if s.MarkDelete() != pos(3, 0) {
		t.Fatalf("mark-delete %v, want 3:0", s.MarkDelete())
	}
	if s.Ack(pos(1, 3)) || s.Ack(pos(3, 0)) {
		t.Fatal("acking an acknowledged entry changed something")
	}
	for _, p := range []Position{pos(1, 0), pos(1, 9), pos(3, 0)} {
		if !s.IsAcked(p) {
			t.Fatalf("%v not acked", p)
		}
	}
	if s.IsAcked(pos(3, 1)) {
		t.Fatal("3:1 acked")
	}
}

func TestAckCumulative(t *testing.T) {
	s := NewState(pos(1, -1), next)
	s.Ack(pos(1, 5))
	s.Ack(pos(1, 6))
	s.Ack(pos(1, 8))
	s.AckCumulative(pos(1, 5)) // 6 follows: mark-delete goes on to 6
	if s.MarkDelete() != pos(1, 6) || s.Holes() != 1 {
		t.Fatalf("mark-delete %v holes %d", s.MarkDelete(), s.Holes())
	}
	if s.AckCumulative(pos(1, 2)) {
		t.Fatal("cumulative ack behind the mark-delete position changed something")
	}
	s.AckCumulative(pos(3, 7))
	if s.MarkDelete() != pos(3, 7) || s.Holes() != 0 || s.AckedAfterMarkDelete() != 0 {
		t.Fatalf("mark-delete %v holes %d", s.MarkDelete(), s.Holes())
	}
}

func TestBatchIndexAcks(t *testing.T) {
	s := NewState(pos(1, -1), next)
	for i := 0; i < 3; i++ {
		if _, err := s.AckBatchIndex(pos(1, 0), i, 4); err != nil {
			t.Fatal(err)
		}
	}
	if s.IsAcked(pos(1, 0)) || !s.BatchAcked(pos(1, 0), 2) || s.BatchAcked(pos(1, 0), 3) {
		t.Fatal("partial batch ack wrong")
	}
	if _, err := s.AckBatchIndex(pos(1, 0), 1, 5); err == nil {
		t.Fatal("batch size changed without an error")
	}
	for _, bad := range [][2]int{{-1, 4}, {4, 4}, {0, 0}} {
		if _, err := s.AckBatchIndex(pos(1, 1), bad[0], bad[1]); err == nil {
			t.Fatalf("batch index %v accepted", bad)
		}
	}
	// The snapshot keeps the partial batch.
	s2, err := LoadState(s.Snapshot(), next)
	if err != nil || !s2.BatchAcked(pos(1, 0), 1) || s2.BatchAcked(pos(1, 0), 3) {
		t.Fatalf("partial batch lost in the snapshot: %v", err)
	}
	s.AckBatchIndex(pos(1, 0), 3, 4)
	if !s.IsAcked(pos(1, 0)) || s.MarkDelete() != pos(1, 0) {
		t.Fatalf("full batch not acked: mark-delete %v", s.MarkDelete())
	}
}

func TestResetForgets(t *testing.T) {
	s := NewState(pos(1, 3), next)
	s.Ack(pos(1, 6))
	s.AckBatchIndex(pos(1, 8), 0, 2)
	s.Reset(pos(1, 0))
	if s.MarkDelete() != pos(1, 0) || s.Holes() != 0 || s.IsAcked(pos(1, 6)) || s.BatchAcked(pos(1, 8), 0) {
		t.Fatal("reset kept state")
	}
}

// Random acks, individually and cumulatively, against a model: the state
// and its snapshot round trip agree with a plain set.
func TestStateAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seqNext := func(p Position) Position { return pos(1, p.Entry+1) }
	for round := 0; round < 50; round++ {
		s := NewState(pos(1, -1), seqNext)
		model := map[int64]bool{}
		md := int64(-1)
		for op := 0; op < 300; op++ {
			e := rng.Int64N(200)
			if rng.IntN(10) == 0 {
				s.AckCumulative(pos(1, e))
				for i := int64(0); i <= e; i++ {
					model[i] = true
				}
			} else {
				s.Ack(pos(1, e))
				model[e] = true
			}
			for model[md+1] {
				md++
			}
			if s.MarkDelete() != pos(1, md) {
				t.Fatalf("round %d op %d: mark-delete %v, model %d", round, op, s.MarkDelete(), md)
			}
		}
		snap := s.Snapshot()
		raw, _ := proto.Marshal(snap)
		var back metapb.CursorSnapshot
		proto.Unmarshal(raw, &back)
		s2, err := LoadState(&back, seqNext)
		if err != nil {
			t.Fatal(err)
		}
		for e := int64(0); e < 210; e++ {
			if s.IsAcked(pos(1, e)) != model[e] || s2.IsAcked(pos(1, e)) != model[e] {
				t.Fatalf("round %d entry %d: state %v, loaded %v, model %v", round, e, s.IsAcked(pos(1, e)), s2.IsAcked(pos(1, e)), model[e])
			}
		}
		if s2.Holes() != s.Holes() || s2.AckedAfterMarkDelete() != s.AckedAfterMarkDelete() {
			t.Fatalf("loaded state differs: holes %d/%d", s2.Holes(), s.Holes())
		}
	}
}

func TestLoadRejectsCorruptSnapshots(t *testing.T) {
	for name, snap := range map[string]*metapb.CursorSnapshot{
		"odd deltas":      {MarkDeleteLedger: 1, MarkDeleteEntry: -1, Acked: []*metapb.AckedRanges{{LedgerId: 1, Deltas: []uint64{1}}}},
		"touching spans":  {MarkDeleteLedger: 1, MarkDeleteEntry: -1, Acked: []*metapb.AckedRanges{{LedgerId: 1, Deltas: []uint64{2, 0, 1, 0}}}},
		"span before md":  {MarkDeleteLedger: 1, MarkDeleteEntry: 5, Acked: []*metapb.AckedRanges{{LedgerId: 1, Deltas: []uint64{3, 0}}}},
		"overflow":        {MarkDeleteLedger: 1, MarkDeleteEntry: -1, Acked: []*metapb.AckedRanges{{LedgerId: 1, Deltas: []uint64{1 << 63, 1 << 63}}}},
		"bad batch size":  {MarkDeleteLedger: 1, BatchAcks: []*metapb.BatchAck{{LedgerId: 1, EntryId: 3, BatchSize: 0}}},
		"batch bits long": {MarkDeleteLedger: 1, BatchAcks: []*metapb.BatchAck{{LedgerId: 1, EntryId: 3, BatchSize: 2, Acked: make([]byte, 16)}}},
		"batch extra bit": {MarkDeleteLedger: 1, BatchAcks: []*metapb.BatchAck{{LedgerId: 1, EntryId: 3, BatchSize: 2, Acked: []byte{4, 0, 0, 0, 0, 0, 0, 0}}}},
	} {
		if _, err := LoadState(snap, next); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzLoadState(f *testing.F) {
	s := NewState(pos(1, -1), next)
	s.Ack(pos(1, 3))
	s.AckBatchIndex(pos(1, 5), 1, 3)
	raw, _ := proto.Marshal(s.Snapshot())
	f.Add(raw)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var snap metapb.CursorSnapshot
		if proto.Unmarshal(raw, &snap) != nil {
			return
		}
		if len(snap.Acked) > 100 || len(snap.BatchAcks) > 100 {
			return
		}
		total := 0
		for _, r := range snap.Acked {
			total += len(r.Deltas)
		}
		if total > 10000 {
			return
		}
		st, err := LoadState(&snap, next)
		if err != nil {
			return
		}
		// A loaded state snapshots to something that loads to the same.
		again, err := LoadState(st.Snapshot(), next)
		if err != nil || again.MarkDelete() != st.MarkDelete() || again.Holes() != st.Holes() {
			t.Fatalf("re-load differs: %v", err)
		}
	})
}

// DeletedRanges writes the acknowledged entries after the mark-delete
// position as Pulsar's open-closed ranges, bounded in count.
func TestDeletedRanges(t *testing.T) {
	for _, tc := range []struct {
		acks []Position
		max  int
		want string
	}{
		{nil, 10, "[]"},
		{[]Position{pos(1, 0)}, 10, "[]"}, // moved the mark-delete position
		{[]Position{pos(1, 2)}, 10, "[(1:1..1:2]]"},
		{[]Position{pos(1, 2), pos(1, 3), pos(1, 5)}, 10, "[(1:1..1:3],(1:4..1:5]]"},
		{[]Position{pos(1, 2), pos(1, 5), pos(1, 7)}, 2, "[(1:1..1:2],(1:4..1:5],...]"},
	} {
		s := NewState(pos(1, -1), next)
		for _, p := range tc.acks {
			s.Ack(p)
		}
		if got := s.DeletedRanges(tc.max); got != tc.want {
			t.Errorf("acks %v, max %d: %s, want %s", tc.acks, tc.max, got, tc.want)
		}
	}
}
