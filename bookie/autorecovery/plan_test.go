package autorecovery

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

const (
	lost     = metapb.UnderReplicated_REASON_LOST
	missing  = metapb.UnderReplicated_REASON_MISSING
	draining = metapb.UnderReplicated_REASON_DRAINING
)

func meta(state ledger.State, last int64, segs ...ledger.Segment) *ledger.Metadata {
	return &ledger.Metadata{ID: 7, Ensemble: 3, WriteQuorum: 3, AckQuorum: 2, State: state, LastEntry: last, Segments: segs, MasterKey: []byte("k")}
}

func seg(first int64, bookies ...string) ledger.Segment {
	return ledger.Segment{First: first, Bookies: bookies}
}

func TestPlanRepair(t *testing.T) {
	live := func(ids ...string) func(string) bookieView {
		return func(b string) bookieView { return bookieView{live: slices.Contains(ids, b)} }
	}
	for _, tc := range []struct {
		name     string
		m        *ledger.Metadata
		marks    map[string]mark
		view     func(string) bookieView
		skipLast bool
		want     plan
	}{
		{
			name:  "lost bookie of a closed ledger: every fragment moves",
			m:     meta(ledger.StateClosed, 20, seg(0, "a", "b", "c"), seg(10, "d", "b", "c")),
			marks: map[string]mark{"b": {reason: lost}},
			view:  live("a", "c", "d"),
			want: plan{
				replaces: []fragment{{Segment: 0, Pos: 1, Bookie: "b", First: 0, Last: 9}, {Segment: 1, Pos: 1, Bookie: "b", First: 10, Last: 20}},
				clear:    []string{"b"},
			},
		},
		{
			name:  "open ledger: the writer's last segment is left, the mark kept",
			m:     meta(ledger.StateOpen, -1, seg(0, "a", "b", "c"), seg(10, "d", "b", "c")),
			marks: map[string]mark{"b": {reason: lost}},
			view:  live("a", "c", "d"),
			want: plan{
				replaces: []fragment{{Segment: 0, Pos: 1, Bookie: "b", First: 0, Last: 9}},
				keep:     []string{"b"},
			},
		},
		{
			name:  "missing on a live bookie: copied back to it",
			m:     meta(ledger.StateClosed, 5, seg(0, "a", "b", "c")),
			marks: map[string]mark{"c": {reason: missing}},
			view:  live("a", "b", "c"),
			want:  plan{fills: []fragment{{Segment: 0, Pos: 2, Bookie: "c", First: 0, Last: 5}}, clear: []string{"c"}},
		},
		{
			name:  "missing on a gone bookie not yet lost: waits",
			m:     meta(ledger.StateClosed, 5, seg(0, "a", "b", "c")),
			marks: map[string]mark{"c": {reason: missing}},
			view:  live("a", "b"),
			want:  plan{keep: []string{"c"}},
		},
		{
			name:  "lost mark of a bookie that came back: copied back to it",
			m:     meta(ledger.StateClosed, 5, seg(0, "a", "b", "c")),
			marks: map[string]mark{"a": {reason: lost}},
			view:  live("a", "b", "c"),
			want:  plan{fills: []fragment{{Segment: 0, Pos: 0, Bookie: "a", First: 0, Last: 5}}, clear: []string{"a"}},
		},
		{
			name:  "draining bookie, live: moves",
			m:     meta(ledger.StateClosed, 5, seg(0, "a", "b", "c")),
			marks: map[string]mark{"a": {reason: draining}},
			view: func(b string) bookieView {
				return bookieView{live: true, draining: b == "a"}
			},
			want: plan{replaces: []fragment{{Segment: 0, Pos: 0, Bookie: "a", First: 0, Last: 5}}, clear: []string{"a"}},
		},
		{
			name:  "bookie no longer in the metadata: mark cleared, nothing to do",
			m:     meta(ledger.StateClosed, 5, seg(0, "a", "b", "c")),
			marks: map[string]mark{"z": {reason: lost}},
			view:  live("a", "b", "c"),
			want:  plan{clear: []string{"z"}},
		},
		{
			name:     "skipLast leaves the last segment, even of a closed ledger",
			m:        meta(ledger.StateClosed, 3, seg(0, "a", "b", "c")),
			marks:    map[string]mark{"b": {reason: lost}},
			view:     live("a", "c"),
			skipLast: true,
			want:     plan{keep: []string{"b"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planRepair(tc.m, tc.marks, tc.view, tc.skipLast)
			if !slices.Equal(got.fills, tc.want.fills) || !slices.Equal(got.replaces, tc.want.replaces) ||
				!slices.Equal(got.clear, tc.want.clear) || !slices.Equal(got.keep, tc.want.keep) {
				t.Fatalf("plan:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestPlanInvariants checks the plan's invariants on random ledgers,
// marks and bookie states.
func TestPlanInvariants(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for seed := uint64(0); seed < 5000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		e := 1 + rng.IntN(4)
		qw := 1 + rng.IntN(e)
		m := &ledger.Metadata{ID: 1, Ensemble: e, WriteQuorum: qw, AckQuorum: 1, State: ledger.State(1 + rng.IntN(3)), MasterKey: []byte("k")}
		first := int64(0)
		for n := 1 + rng.IntN(4); n > 0; n-- {
			perm := rng.Perm(len(ids))
			var bs []string
			for _, i := range perm[:e] {
				bs = append(bs, ids[i])
			}
			m.Segments = append(m.Segments, ledger.Segment{First: first, Bookies: bs})
			first += 1 + int64(rng.IntN(20))
		}
		m.LastEntry = first - 1 + int64(rng.IntN(10)) - 5
		marks := map[string]mark{}
		views := map[string]bookieView{}
		for _, b := range ids {
			if rng.IntN(2) == 0 {
				marks[b] = mark{reason: metapb.UnderReplicated_Reason(1 + rng.IntN(3))}
			}
			views[b] = bookieView{live: rng.IntN(3) > 0, draining: rng.IntN(5) == 0}
		}
		p := planRepair(m, marks, func(b string) bookieView { return views[b] }, rng.IntN(2) == 0)
		last := len(m.Segments) - 1
		planned := map[string]bool{}
		for _, f := range append(slices.Clone(p.fills), p.replaces...) {
			if m.State != ledger.StateClosed && f.Segment == last {
				t.Fatalf("seed %d: planned the writer's segment of an open ledger: %+v", seed, f)
			}
			if m.Segments[f.Segment].Bookies[f.Pos] != f.Bookie {
				t.Fatalf("seed %d: fragment %+v does not match the metadata", seed, f)
			}
			if _, ok := marks[f.Bookie]; !ok {
				t.Fatalf("seed %d: planned an unmarked bookie %s", seed, f.Bookie)
			}
			planned[f.Bookie] = true
		}
		for _, f := range p.fills {
			if !views[f.Bookie].live || views[f.Bookie].draining {
				t.Fatalf("seed %d: fill to a bookie that is gone or draining: %+v", seed, f)
			}
		}
		for _, b := range p.clear {
			// Every fragment of a cleared bookie is planned.
			for i, s := range m.Segments {
				if pos := slices.Index(s.Bookies, b); pos >= 0 && !planned[b] {
					t.Fatalf("seed %d: mark of %s cleared with its fragment in segment %d unplanned", seed, b, i)
				}
			}
			if slices.Contains(p.keep, b) {
				t.Fatalf("seed %d: %s both cleared and kept", seed, b)
			}
		}
		if len(p.clear)+len(p.keep) != len(marks) {
			t.Fatalf("seed %d: %d marks, %d cleared + %d kept", seed, len(marks), len(p.clear), len(p.keep))
		}
	}
}

func TestFragmentEntries(t *testing.T) {
	m := &ledger.Metadata{Ensemble: 3, WriteQuorum: 2, State: ledger.StateClosed, LastEntry: 8,
		Segments: []ledger.Segment{{First: 0, Bookies: []string{"a", "b", "c"}}, {First: 5, Bookies: []string{"a", "d", "c"}}}}
	// Entry e goes to positions e%3 and (e+1)%3.
	for _, tc := range []struct {
		f    fragment
		want []int64
	}{
		{fragment{Segment: 0, Pos: 1, First: 0, Last: 4}, []int64{0, 1, 3, 4}},
		{fragment{Segment: 1, Pos: 1, First: 5, Last: 8}, []int64{6, 7}},
		{fragment{Segment: 1, Pos: 0, First: 5, Last: 4}, nil},
	} {
		if got := tc.f.entries(m); !slices.Equal(got, tc.want) {
			t.Errorf("%+v: entries %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestAuditState(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAuditState(30 * time.Second)
	reg := map[string]string{"a": "i1", "b": "i2", "c": "i3"}
	known := []string{"a", "b", "c"}
	step := func(at time.Duration, reg map[string]string, wantLost, wantWiped []string) {
		t.Helper()
		lost, wiped := a.observe(t0.Add(at), reg, known)
		if !slices.Equal(lost, wantLost) || !slices.Equal(wiped, wantWiped) {
			t.Fatalf("at %v: lost %v wiped %v, want %v %v", at, lost, wiped, wantLost, wantWiped)
		}
	}
	step(0, reg, nil, nil)
	without := func(m map[string]string, k string) map[string]string {
		c := map[string]string{}
		for a, b := range m {
			if a != k {
				c[a] = b
			}
		}
		return c
	}
	// b restarts within the delay: never lost.
	step(time.Second, without(reg, "b"), nil, nil)
	step(29*time.Second, without(reg, "b"), nil, nil)
	step(30*time.Second, reg, nil, nil)
	// b goes for good: lost once, exactly when the delay has passed.
	step(40*time.Second, without(reg, "b"), nil, nil)
	step(69*time.Second, without(reg, "b"), nil, nil)
	step(70*time.Second, without(reg, "b"), []string{"b"}, nil)
	step(200*time.Second, without(reg, "b"), nil, nil)
	if got := a.lostBookies(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("lost bookies %v", got)
	}
	// b comes back with a new instance (wiped): reported at once; then
	// goes again: the delay starts over.
	reg2 := map[string]string{"a": "i1", "b": "i9", "c": "i3"}
	step(201*time.Second, reg2, nil, []string{"b"})
	step(202*time.Second, without(reg2, "b"), nil, nil)
	step(231*time.Second, without(reg2, "b"), nil, nil)
	step(232*time.Second, without(reg2, "b"), []string{"b"}, nil)

	// Delay 0: lost at the first snapshot without it.
	z := newAuditState(0)
	if lost, _ := z.observe(t0, map[string]string{"a": "x"}, []string{"a", "b"}); !slices.Equal(lost, []string{"b"}) {
		t.Fatalf("delay 0: lost %v", lost)
	}
}

func TestPlanMoves(t *testing.T) {
	const gb = 1 << 30
	loads := []bookieLoad{
		{id: "a", held: 12, capacity: 100},
		{id: "b", held: 12, capacity: 100},
		{id: "c", held: 12, capacity: 100},
		{id: "d", held: 0, capacity: 100},
		{id: "e", held: 0, capacity: 100},
	}
	held := map[string][]heldLedger{}
	for i := int64(1); i <= 12; i++ {
		l := heldLedger{id: i, size: 1, bookies: []string{"a", "b", "c"}}
		for _, b := range l.bookies {
			held[b] = append(held[b], l)
		}
	}
	moves, spread := planMoves(loads, held, 0.3, 100)
	if spread > 0.3 {
		t.Fatalf("spread after the plan %v", spread)
	}
	after := map[string]float64{"a": 12, "b": 12, "c": 12}
	seen := map[int64][]string{}
	for _, m := range moves {
		if m.from == m.to || (m.to != "d" && m.to != "e") {
			t.Fatalf("move %+v", m)
		}
		for _, b := range seen[m.ledger] {
			if b == m.to {
				t.Fatalf("ledger %d moved twice to %s", m.ledger, m.to)
			}
		}
		seen[m.ledger] = append(seen[m.ledger], m.to)
		after[m.from] -= m.size
		after[m.to] += m.size
	}
	for b, h := range after {
		if h < 6 || h > 9 {
			t.Errorf("bookie %s holds %v after the plan (mean 7.2): %v", b, h, after)
		}
	}
	// Bounded by maxMoves.
	if m, _ := planMoves(loads, held, 0.3, 2); len(m) != 2 {
		t.Fatalf("maxMoves 2: %d moves", len(m))
	}
	// Within the target already: nothing.
	if m, s := planMoves([]bookieLoad{{id: "a", held: 10, capacity: 100}, {id: "b", held: 9, capacity: 100}}, held, 0.2, 10); len(m) != 0 || s > 0.2 {
		t.Fatalf("balanced: %v %v", m, s)
	}
	// A ledger too large to move without overshooting stays.
	big := map[string][]heldLedger{"a": {{id: 1, size: 10 * gb, bookies: []string{"a"}}}}
	if m, _ := planMoves([]bookieLoad{{id: "a", held: 10 * gb, capacity: 100 * gb}, {id: "b", held: 6 * gb, capacity: 100 * gb}}, big, 0.1, 10); len(m) != 0 {
		t.Fatalf("overshooting move planned: %v", m)
	}
	// Capacity counts: the same bytes fill a small disk more.
	uneven := []bookieLoad{{id: "small", held: 10, capacity: 20}, {id: "large", held: 10, capacity: 200}}
	h2 := map[string][]heldLedger{"small": {{id: 1, size: 4, bookies: []string{"small"}}, {id: 2, size: 4, bookies: []string{"small"}}}}
	m, _ := planMoves(uneven, h2, 0.5, 10)
	if len(m) == 0 || m[0].from != "small" {
		t.Fatalf("uneven capacities: %v", m)
	}
}
