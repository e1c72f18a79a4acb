package ledger

import (
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"testing"

	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

func TestWriteSetStriping(t *testing.T) {
	for _, tc := range []struct {
		e, qw int
		entry int64
		want  []int
	}{
		{3, 3, 0, []int{0, 1, 2}},
		{3, 3, 4, []int{1, 2, 0}},
		{3, 2, 0, []int{0, 1}},
		{3, 2, 2, []int{2, 0}},
		{5, 2, 7, []int{2, 3}},
		{5, 3, 9, []int{4, 0, 1}},
		{1, 1, 12345, []int{0}},
	} {
		got := writeSet(tc.entry, tc.e, tc.qw)
		if !slices.Equal(got, tc.want) {
			t.Errorf("writeSet(%d, E%d, Qw%d) = %v, want %v", tc.entry, tc.e, tc.qw, got, tc.want)
		}
		for p := 0; p < tc.e; p++ {
			if inWriteSet(tc.entry, p, tc.e, tc.qw) != slices.Contains(tc.want, p) {
				t.Errorf("inWriteSet(%d, %d, E%d, Qw%d) disagrees with writeSet", tc.entry, p, tc.e, tc.qw)
			}
		}
	}
	// Every position stores the same share of entries.
	counts := make([]int, 5)
	for e := int64(0); e < 1000; e++ {
		for _, p := range writeSet(e, 5, 2) {
			counts[p]++
		}
	}
	for p, n := range counts {
		if n != 400 {
			t.Fatalf("position %d stores %d of 1000 entries with E5/Qw2, want 400", p, n)
		}
	}
}

// fencingComplete checked against its definition, for every subset of
// answering bookies of small ensembles: complete iff the old writer can no
// longer collect Qa acks for any entry.
func TestFencingCompleteExhaustive(t *testing.T) {
	for e := 1; e <= 6; e++ {
		for qw := 1; qw <= e; qw++ {
			for qa := 1; qa <= qw; qa++ {
				for mask := 0; mask < 1<<e; mask++ {
					answered := make([]bool, e)
					for p := range answered {
						answered[p] = mask&(1<<p) != 0
					}
					// The old writer can complete entry x if Qa bookies of
					// its write set are not fenced.
					writerCanAck := false
					for x := int64(0); x < int64(e); x++ {
						open := 0
						for _, p := range writeSet(x, e, qw) {
							if !answered[p] {
								open++
							}
						}
						if open >= qa {
							writerCanAck = true
						}
					}
					if got := fencingComplete(answered, qw, qa); got == writerCanAck {
						t.Fatalf("E%d Qw%d Qa%d answered %v: fencingComplete=%v but writer can still ack=%v", e, qw, qa, answered, got, writerCanAck)
					}
				}
			}
		}
	}
}

func TestRecoveryDecision(t *testing.T) {
	for _, tc := range []struct {
		found, noSuch, qw, qa int
		want                  readOutcome
	}{
		{1, 0, 3, 2, entryPresent},
		{1, 2, 3, 2, entryPresent}, // one copy is enough to keep it
		{0, 2, 3, 2, entryAbsent},  // QC = 2
		{0, 1, 3, 2, entryUnknown}, // the two silent ones might have it
		{0, 1, 2, 2, entryAbsent},  // QC = 1: a 2-ack entry needs both
		{0, 1, 3, 3, entryAbsent},  // QC = 1
		{0, 0, 3, 1, entryUnknown}, // Qa1: one silent bookie may hold it
		{0, 2, 3, 1, entryUnknown},
		{0, 3, 3, 1, entryAbsent}, // QC = 3
		{0, 0, 1, 1, entryUnknown},
		{0, 1, 1, 1, entryAbsent},
	} {
		if got := recoveryDecision(tc.found, tc.noSuch, tc.qw, tc.qa); got != tc.want {
			t.Errorf("found %d, no-such %d, Qw%d Qa%d: got %v, want %v", tc.found, tc.noSuch, tc.qw, tc.qa, got, tc.want)
		}
	}
}

// step is a tiny driver for writeState in tests.
type step struct {
	w    *writeState
	done []int64
}

func newStep(e, qw, qa int) *step { return &step{w: newWriteState(e, qw, qa, 0)} }

func (s *step) append(n int) [][]target {
	var all [][]target
	for i := 0; i < n; i++ {
		_, ts := s.w.append([]byte{byte(i)}, nil)
		all = append(all, ts)
	}
	return all
}

func (s *step) ack(id int64, pos int) {
	for _, e := range s.w.ack(id, pos) {
		s.done = append(s.done, e.id)
	}
}

func (s *step) expectDone(t *testing.T, want ...int64) {
	t.Helper()
	if want == nil {
		want = []int64{}
	}
	if s.done == nil {
		s.done = []int64{}
	}
	if !slices.Equal(s.done, want) {
		t.Fatalf("completed %v, want %v", s.done, want)
	}
}

func positions(ts []target) []int {
	var ps []int
	for _, t := range ts {
		ps = append(ps, t.pos)
	}
	return ps
}

func TestWriteStateQuorumAndOrder(t *testing.T) {
	s := newStep(3, 3, 2)
	sends := s.append(3)
	for i, ts := range sends {
		if !slices.Equal(positions(ts), writeSet(int64(i), 3, 3)) {
			t.Fatalf("entry %d sent to %v", i, positions(ts))
		}
	}
	// Entry 1 reaches quorum first: not reported before entry 0.
	s.ack(1, 1)
	s.ack(1, 2)
	s.expectDone(t)
	s.ack(0, 0)
	s.expectDone(t) // one ack of two
	s.ack(0, 0)     // a duplicate ack does not count twice
	s.expectDone(t)
	s.ack(0, 2)
	s.expectDone(t, 0, 1)
	if s.w.lac != 1 {
		t.Fatalf("lac %d", s.w.lac)
	}
	// Acks for completed entries, unknown entries and positions outside the
	// write set are ignored.
	s.ack(0, 1)
	s.ack(99, 0)
	s2 := newStep(3, 2, 2)
	s2.append(1)
	s2.ack(0, 2) // entry 0 goes to positions 0 and 1
	s2.ack(0, 0)
	s2.expectDone(t)
	s2.ack(0, 1)
	s2.expectDone(t, 0)
	s.ack(2, 0)
	s.ack(2, 1)
	s.expectDone(t, 0, 1, 2)
	if s.w.lacLen != 3 {
		t.Fatalf("length through lac %d, want 3", s.w.lacLen)
	}
}

// A bookie fails with entries in flight: completions wait for the ensemble
// change, the failed position's acks stop counting, every pending entry it
// stores is resent to the replacement, and nothing completes out of order.
func TestWriteStateEnsembleChange(t *testing.T) {
	for _, cfg := range []struct{ e, qw, qa int }{{3, 3, 2}, {3, 2, 2}, {5, 3, 2}, {4, 2, 1}} {
		t.Run(fmt.Sprintf("E%dQw%dQa%d", cfg.e, cfg.qw, cfg.qa), func(t *testing.T) {
			s := newStep(cfg.e, cfg.qw, cfg.qa)
			s.append(10)
			// Entries 0..3 complete on their full write sets.
			for id := int64(0); id < 4; id++ {
				for _, p := range writeSet(id, cfg.e, cfg.qw) {
					s.ack(id, p)
				}
			}
			s.expectDone(t, 0, 1, 2, 3)
			// Position 1 acks entries 4.. (with Qa1 that completes some)
			// and then fails.
			for id := int64(4); id < 10; id++ {
				if inWriteSet(id, 1, cfg.e, cfg.qw) {
					s.ack(id, 1)
				}
			}
			if !s.w.fail(1) || s.w.fail(1) {
				t.Fatal("fail should report news once")
			}
			segStart := s.w.hold()
			if want := s.done[len(s.done)-1] + 1; segStart != want {
				t.Fatalf("segment starts at %d, want %d", segStart, want)
			}
			doneBefore := slices.Clone(s.done)
			// During the hold other positions ack everything: nothing
			// completes, and the failed position's acks are ignored.
			for id := segStart; id < 10; id++ {
				for _, p := range writeSet(id, cfg.e, cfg.qw) {
					if p != 1 {
						s.ack(id, p)
					}
				}
			}
			s.ack(9, 1)
			s.expectDone(t, doneBefore...)
			// A new append during the hold is not sent to the failed one.
			_, ts := s.w.append([]byte("x"), nil)
			if slices.Contains(positions(ts), 1) {
				t.Fatalf("entry 10 sent to the failed position: %v", positions(ts))
			}
			resend := s.w.replace([]int{1})
			var ids []int64
			for _, r := range resend {
				if r.pos != 1 {
					t.Fatalf("resend to position %d", r.pos)
				}
				ids = append(ids, r.e.id)
			}
			var want []int64
			for id := segStart; id <= 10; id++ {
				if inWriteSet(id, 1, cfg.e, cfg.qw) {
					want = append(want, id)
				}
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("resent %v, want %v", ids, want)
			}
			for _, e := range s.w.release() {
				s.done = append(s.done, e.id)
			}
			// Entries complete now iff Qa acks without position 1 (entry
			// 10 has none yet).
			wantDone := doneBefore
			for id := segStart; id < 10; id++ {
				others := 0
				for _, p := range writeSet(id, cfg.e, cfg.qw) {
					if p != 1 {
						others++
					}
				}
				if others < cfg.qa {
					break
				}
				wantDone = append(wantDone, id)
			}
			s.expectDone(t, wantDone...)
			// The replacement acks: everything completes, in order.
			for _, r := range resend {
				s.ack(r.e.id, r.pos)
			}
			for _, p := range writeSet(10, cfg.e, cfg.qw) {
				s.ack(10, p)
			}
			s.expectDone(t, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
		})
	}
}

func TestWriteStateAbort(t *testing.T) {
	s := newStep(3, 3, 2)
	s.append(4)
	s.ack(0, 0)
	s.ack(0, 1)
	s.expectDone(t, 0)
	aborted := s.w.abort()
	if len(aborted) != 3 || aborted[0].id != 1 {
		t.Fatalf("aborted %d entries", len(aborted))
	}
	s.ack(1, 0)
	s.ack(1, 1)
	s.expectDone(t, 0)
}

func TestBatchLen(t *testing.T) {
	q := func(sizes ...int) []QueuedAdd {
		var out []QueuedAdd
		for _, s := range sizes {
			out = append(out, QueuedAdd{Req: &bookiepb.AddEntryRequest{Payload: make([]byte, s)}})
		}
		return out
	}
	for _, tc := range []struct {
		q    []QueuedAdd
		want int
	}{
		{nil, 0},
		{q(10, 10, 10), 3},
		{q(5 << 20), 1},             // one large entry always goes
		{q(600<<10, 600<<10, 1), 1}, // the second would pass 1 MiB
		{q(512<<10, 512<<10, 1), 2}, // exactly 1 MiB
		{q(make([]int, maxSendBatch+5)...), maxSendBatch},
	} {
		if got := batchLen(tc.q); got != tc.want {
			t.Errorf("batchLen of %d adds = %d, want %d", len(tc.q), got, tc.want)
		}
	}
}

// The interleaving of the correctness sweep (item 11): an abort lands
// after the ensemble change's CAS committed but before the writer replaced
// the failed position. Entry 0 was acked by the failed position 0 (A) and,
// during the hold, by position 1 (B); the metadata now says [D, B, C], so
// entry 0 is on one bookie of its write set. It must not be reported
// complete: recovery asking D and C ("no such entry" twice, QC = 2) would
// decide it absent and truncate it.
func TestWriteStateAbortDuringEnsembleChange(t *testing.T) {
	s := newStep(3, 3, 2)
	s.append(2)
	s.ack(0, 0) // A has entry 0 ...
	s.w.fail(0) // ... then fails on entry 1
	s.w.hold()
	s.ack(0, 1) // B acks entry 0 during the hold: nothing completes
	s.expectDone(t)
	// The CAS [D, B, C] commits; its reply is lost or late and the writer
	// stops (a fence, a close, the change's deadline) before replace().
	complete, failed := s.w.stop()
	for _, e := range complete {
		t.Errorf("entry %d reported complete with acks %03b: only B of the stored write set [D B C] has it", e.id, e.acked)
	}
	if len(failed) != 2 {
		t.Fatalf("failed %d entries, want 2", len(failed))
	}
	// Entries held with Qa acks from positions that did not fail do
	// complete at stop: those bookies are in the write set either way.
	s = newStep(3, 3, 2)
	s.append(2)
	s.w.fail(0)
	s.w.hold()
	s.ack(0, 1)
	s.ack(0, 2)
	s.ack(1, 1)
	s.expectDone(t)
	complete, failed = s.w.stop()
	if len(complete) != 1 || complete[0].id != 0 || len(failed) != 1 || failed[0].id != 1 {
		t.Fatalf("stop: complete %d, failed %d; want entry 0 complete, entry 1 failed", len(complete), len(failed))
	}
}

// TestWriteStateModel drives writeState with random interleavings of
// appends, acks, bookie failures, ensemble changes (whose metadata CAS
// may commit without the writer hearing of it) and aborts, and checks
// invariant W1 against a model of the stored metadata: every entry
// reported complete is durable on at least Qa bookies of the write set
// that the metadata gives it, whether or not an ensemble change in flight
// when the writer stopped ends up applied.
func TestWriteStateModel(t *testing.T) {
	type segment struct {
		first   int64
		bookies []string
	}
	cfgs := []struct{ e, qw, qa int }{{3, 3, 2}, {3, 2, 2}, {4, 3, 2}, {5, 3, 3}, {3, 3, 1}, {4, 2, 1}, {2, 2, 2}}
	for seed := uint64(0); seed < 3000; seed++ {
		cfg := cfgs[seed%uint64(len(cfgs))]
		rng := mathrand.New(mathrand.NewPCG(seed, 11))
		w := newWriteState(cfg.e, cfg.qw, cfg.qa, 0)
		names := 0
		fresh := func() string { names++; return fmt.Sprintf("b%d", names) }
		at := make([]string, cfg.e) // the writer's view: position -> bookie
		for p := range at {
			at[p] = fresh()
		}
		meta := []segment{{0, slices.Clone(at)}}
		durable := map[int64]map[string]bool{}
		var completed []int64
		record := func(es []*pendingEntry) {
			for _, e := range es {
				if n := len(completed); n > 0 && completed[n-1] >= e.id {
					t.Fatalf("seed %d: entry %d completed after %d", seed, e.id, completed[n-1])
				}
				completed = append(completed, e.id)
			}
		}
		// An ensemble change in flight: the positions it replaces, where
		// its segment starts, the new bookies, and whether its CAS has
		// committed.
		var change *struct {
			positions []int
			start     int64
			next      []string
			applied   bool
		}
		withChange := func(m []segment) []segment {
			m = slices.Clone(m)
			if last := &m[len(m)-1]; last.first == change.start {
				*last = segment{change.start, slices.Clone(change.next)}
			} else {
				m = append(m, segment{change.start, slices.Clone(change.next)})
			}
			return m
		}
		stopped := false
		for step := 0; step < 200 && !stopped; step++ {
			switch r := rng.IntN(100); {
			case r < 20:
				w.append(nil, nil)
			case r < 70:
				if len(w.pending) == 0 {
					continue
				}
				e := w.pending[rng.IntN(len(w.pending))]
				p := writeSet(e.id, cfg.e, cfg.qw)[rng.IntN(cfg.qw)]
				if durable[e.id] == nil {
					durable[e.id] = map[string]bool{}
				}
				durable[e.id][at[p]] = true
				record(w.ack(e.id, p))
			case r < 76:
				w.fail(rng.IntN(cfg.e))
			case r < 84:
				if change != nil || len(w.failedPositions()) == 0 {
					continue
				}
				change = &struct {
					positions []int
					start     int64
					next      []string
					applied   bool
				}{positions: w.failedPositions(), start: w.hold(), next: slices.Clone(at)}
				for _, p := range change.positions {
					change.next[p] = fresh()
				}
			case r < 88:
				if change != nil && !change.applied {
					meta, change.applied = withChange(meta), true
				}
			case r < 93:
				// The writer hears of its CAS (or finds no spare bookie
				// and resends to the same ones), then goes on.
				if change == nil {
					continue
				}
				if change.applied {
					at = slices.Clone(change.next)
				}
				w.replace(change.positions)
				if len(w.failedPositions()) == 0 {
					record(w.release())
				}
				change = nil
			case r < 95:
				complete, failed := w.stop()
				record(complete)
				for _, e := range failed {
					if slices.Contains(completed, e.id) {
						t.Fatalf("seed %d: entry %d both complete and failed", seed, e.id)
					}
				}
				stopped = true
			}
		}
		metas := [][]segment{meta}
		if change != nil && !change.applied {
			metas = append(metas, withChange(meta)) // the CAS may still land
		}
		for _, m := range metas {
			for _, id := range completed {
				seg := m[0]
				for _, s := range m {
					if s.first <= id {
						seg = s
					}
				}
				n := 0
				for _, p := range writeSet(id, cfg.e, cfg.qw) {
					if durable[id][seg.bookies[p]] {
						n++
					}
				}
				if n < cfg.qa {
					t.Fatalf("seed %d E%d/Qw%d/Qa%d: entry %d reported complete but durable on %d bookies of its stored write set %v (segment from %d)",
						seed, cfg.e, cfg.qw, cfg.qa, id, n, seg.bookies, seg.first)
				}
			}
		}
	}
}
