package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"testing"
)

const sec = int64(1e9)

func at(p int32, e int64) *MsgID { return &MsgID{Partition: p, Ledger: 1, Entry: e} }

// send is a send of value by producer at seq with result; ok sends are
// acknowledged at (p, e).
func send(producer string, seq int64, value, result string, p int32, e int64) Event {
	s := Event{Type: TypeSend, Producer: producer, Seq: seq, Result: result, Key: "k-" + value, Value: value,
		Start: seq * sec, End: seq*sec + sec/10}
	if result == ResultOK {
		s.ID = at(p, e)
	}
	return s
}

func recv(sub, subType, consumer, value string, p int32, e int64) Event {
	return Event{Type: TypeRecv, Sub: sub, SubType: subType, Consumer: consumer, Key: "k-" + value, Value: value, ID: at(p, e)}
}

// clean is a history without anomalies: four ok sends over two
// partitions, read in order by an exclusive subscription and out of order
// by a shared one.
func clean() *History {
	h := &History{
		Meta: Meta{Scenario: "test", Partitions: 2, Subscriptions: []string{"ex", "sh"}},
		Sends: []Event{
			send("a", 1, "v1", ResultOK, 0, 1),
			send("a", 2, "v2", ResultOK, 0, 2),
			send("a", 3, "v3", ResultOK, 1, 1),
			send("a", 4, "v4", ResultOK, 1, 2),
		},
	}
	for _, s := range h.Sends {
		h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", s.Value, s.ID.Partition, s.ID.Entry))
	}
	for _, i := range []int{3, 1, 2, 0} {
		s := h.Sends[i]
		h.Recvs = append(h.Recvs, recv("sh", SubShared, fmt.Sprintf("sh-%d", i%2), s.Value, s.ID.Partition, s.ID.Entry))
	}
	return h
}

// counts returns the report's non-zero anomaly counts by kind.
func counts(r *Report) map[string]int {
	m := map[string]int{}
	for k, n := range map[string]int{
		"lost":          r.Lost.Count,
		"unexpected":    r.Unexpected.Count,
		"duplicated":    r.Duplicated.Count,
		"redelivered":   r.Redelivered.Count,
		"conflicting":   r.Conflicting.Count,
		"reordered":     r.Reordered.Count,
		"producerOrder": r.ProducerOrder.Count,
		"failedRead":    r.FailedRead.Count,
	} {
		if n != 0 {
			m[k] = n
		}
	}
	return m
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(h *History)
		want   map[string]int // non-zero counts; every other kind must be 0
		pass   bool
		detail func(t *testing.T, r *Report)
	}{
		{name: "clean", edit: func(h *History) {}, want: map[string]int{}, pass: true},
		{
			name: "lost",
			edit: func(h *History) { h.Recvs = h.Recvs[:3] }, // ex never reads v4; sh reads nothing
			want: map[string]int{"lost": 5},
			detail: func(t *testing.T, r *Report) {
				if want := map[string]int{"ex": 1, "sh": 4}; !maps.Equal(r.Lost.BySub, want) {
					t.Errorf("lost by sub = %v, want %v", r.Lost.BySub, want)
				}
			},
		},
		{
			name: "subscription not in meta may miss values",
			edit: func(h *History) { h.Recvs = append(h.Recvs, recv("late", SubExclusive, "late-1", "v4", 1, 2)) },
			want: map[string]int{}, pass: true,
		},
		{
			name: "unknown and failed sends need not be read",
			edit: func(h *History) {
				h.Sends = append(h.Sends, send("a", 5, "u5", ResultUnknown, 0, 0), send("a", 6, "f6", ResultFailed, 0, 0))
			},
			want: map[string]int{}, pass: true,
		},
		{
			name: "unknown send read",
			edit: func(h *History) {
				h.Sends = append(h.Sends, send("a", 5, "u5", ResultUnknown, 0, 0))
				h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "u5", 0, 3), recv("sh", SubShared, "sh-0", "u5", 0, 3))
			},
			want: map[string]int{}, pass: true,
		},
		{
			name: "unexpected",
			edit: func(h *History) { h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "zzz", 1, 3)) },
			want: map[string]int{"unexpected": 1},
		},
		{
			name: "duplicate of unknown send, dedup off",
			edit: func(h *History) {
				h.Sends = append(h.Sends, send("a", 5, "u5", ResultUnknown, 0, 0))
				h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "u5", 1, 3), recv("ex", SubExclusive, "ex-1", "u5", 1, 4))
			},
			want: map[string]int{"duplicated": 1}, pass: true,
			detail: func(t *testing.T, r *Report) {
				if r.Duplicated.OfUnacked != 1 || r.Duplicated.OfOK != 0 {
					t.Errorf("duplicates: %d of unacked, %d of ok; want 1, 0", r.Duplicated.OfUnacked, r.Duplicated.OfOK)
				}
			},
		},
		{
			name: "duplicate of ok send, dedup off",
			edit: func(h *History) { h.Recvs = append(h.Recvs, recv("sh", SubShared, "sh-1", "v1", 0, 3)) },
			want: map[string]int{"duplicated": 1}, pass: true,
			detail: func(t *testing.T, r *Report) {
				if r.Duplicated.OfOK != 1 || r.Duplicated.OfUnacked != 0 {
					t.Errorf("duplicates: %d of ok, %d of unacked; want 1, 0", r.Duplicated.OfOK, r.Duplicated.OfUnacked)
				}
			},
		},
		{
			name: "duplicate with dedup on",
			edit: func(h *History) {
				h.Meta.Dedup = true
				h.Recvs = append(h.Recvs, recv("sh", SubShared, "sh-1", "v1", 0, 3))
			},
			want: map[string]int{"duplicated": 1},
		},
		{
			name: "redelivery",
			edit: func(h *History) { h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "v1", 0, 1)) },
			want: map[string]int{"redelivered": 1}, pass: true,
		},
		{
			name: "rewind after reconnect",
			edit: func(h *History) {
				// ex-1 reads v1 v2 v3 v4, reconnects, and gets v1 v2 again.
				h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "v1", 0, 1), recv("ex", SubExclusive, "ex-1", "v2", 0, 2))
			},
			want: map[string]int{"redelivered": 2}, pass: true,
		},
		{
			// ex-1 reads v1..v4 and leaves; its acknowledgements are lost
			// with its broker, and ex-2 gets v2, then v1 again: what the
			// subscription had is a redelivery, even below ex-2's highest
			// position.
			name: "failover to a consumer after lost acknowledgements",
			edit: func(h *History) {
				h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-2", "v2", 0, 2), recv("ex", SubExclusive, "ex-2", "v1", 0, 1))
			},
			want: map[string]int{"redelivered": 2}, pass: true,
		},
		{
			name: "restarted consumer reads from the start",
			edit: func(h *History) {
				for _, s := range h.Sends {
					h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-2", s.Value, s.ID.Partition, s.ID.Entry))
				}
			},
			want: map[string]int{"redelivered": 4}, pass: true,
		},
		{
			name: "one position, two values",
			edit: func(h *History) {
				h.Sends = append(h.Sends, send("a", 5, "u5", ResultUnknown, 0, 0), send("a", 6, "u6", ResultUnknown, 0, 0))
				h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "u5", 1, 9), recv("dr", SubDrain, "dr-1", "u6", 1, 9))
			},
			want: map[string]int{"conflicting": 1},
		},
		{
			name: "acknowledged where not read",
			edit: func(h *History) { h.Sends[3].ID = at(1, 8) },
			want: map[string]int{"conflicting": 1},
		},
		{
			name: "producer order",
			edit: func(h *History) {
				// v1 and v2 acknowledged, and read, in the opposite order.
				h.Sends[0].ID, h.Sends[1].ID = at(0, 2), at(0, 1)
				h.Recvs[0], h.Recvs[1] = recv("ex", SubExclusive, "ex-1", "v2", 0, 1), recv("ex", SubExclusive, "ex-1", "v1", 0, 2)
				h.Recvs[5].ID, h.Recvs[7].ID = at(0, 1), at(0, 2)
			},
			want: map[string]int{"producerOrder": 1},
		},
		{
			name: "producer order of a key-ordered producer, across keys",
			edit: func(h *History) {
				// As above, but v1 and v2 have different keys and the
				// producer orders per key only (key-based batching).
				h.Meta.KeyOrdered = []string{"a"}
				h.Sends[0].ID, h.Sends[1].ID = at(0, 2), at(0, 1)
				h.Recvs[0], h.Recvs[1] = recv("ex", SubExclusive, "ex-1", "v2", 0, 1), recv("ex", SubExclusive, "ex-1", "v1", 0, 2)
				h.Recvs[5].ID, h.Recvs[7].ID = at(0, 1), at(0, 2)
			},
			want: map[string]int{}, pass: true,
		},
		{
			name: "producer order of a key-ordered producer, within a key",
			edit: func(h *History) {
				h.Meta.KeyOrdered = []string{"a"}
				h.Sends[0].ID, h.Sends[1].ID = at(0, 2), at(0, 1)
				h.Sends[0].Key, h.Sends[1].Key = "same", "same"
				h.Recvs[0], h.Recvs[1] = recv("ex", SubExclusive, "ex-1", "v2", 0, 1), recv("ex", SubExclusive, "ex-1", "v1", 0, 2)
				h.Recvs[5].ID, h.Recvs[7].ID = at(0, 1), at(0, 2)
			},
			want: map[string]int{"producerOrder": 1},
		},
		{
			name: "failed send read",
			edit: func(h *History) {
				h.Sends = append(h.Sends, send("a", 5, "f5", ResultFailed, 0, 0))
				h.Recvs = append(h.Recvs, recv("ex", SubExclusive, "ex-1", "f5", 1, 3))
			},
			want: map[string]int{"failedRead": 1}, pass: true,
		},
		{
			name: "exclusive reorder",
			edit: func(h *History) { h.Recvs[0], h.Recvs[1] = h.Recvs[1], h.Recvs[0] },
			want: map[string]int{"reordered": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.edit(h)
			r := Check(h)
			if got := counts(r); !maps.Equal(got, tc.want) {
				t.Errorf("counts = %v, want %v\n%s", got, tc.want, r.Text())
			}
			if r.Pass() != tc.pass {
				t.Errorf("Pass() = %v, want %v; failures %q", r.Pass(), tc.pass, r.Failures())
			}
			if tc.detail != nil {
				tc.detail(t, r)
			}
		})
	}
}

// TestOrder checks the order rule for each subscription type on one
// consumer's reads.
func TestOrder(t *testing.T) {
	type read struct {
		key  string
		p    int32
		e    int64
		redo bool // a redelivery of a position read before
	}
	tests := []struct {
		name      string
		subType   string
		reads     []read
		reordered int
	}{
		{"exclusive in order", SubExclusive, []read{{"a", 0, 1, false}, {"b", 0, 2, false}, {"a", 1, 1, false}}, 0},
		{"exclusive gap filled", SubExclusive, []read{{"a", 0, 1, false}, {"b", 0, 3, false}, {"a", 0, 2, false}}, 1},
		{"exclusive partitions interleave", SubExclusive, []read{{"a", 1, 5, false}, {"b", 0, 1, false}, {"a", 1, 6, false}}, 0},
		{"exclusive rewind", SubExclusive, []read{{"a", 0, 1, false}, {"b", 0, 2, false}, {"a", 0, 1, true}, {"b", 0, 2, true}, {"c", 0, 3, false}}, 0},
		{"failover gap filled", SubFailover, []read{{"a", 0, 2, false}, {"b", 0, 1, false}}, 1},
		{"drain gap filled", SubDrain, []read{{"a", 0, 2, false}, {"b", 0, 1, false}}, 1},
		{"shared any order", SubShared, []read{{"a", 0, 2, false}, {"b", 0, 1, false}}, 0},
		{"key_shared keys interleave", SubKeyShared, []read{{"a", 0, 2, false}, {"b", 0, 1, false}}, 0},
		{"key_shared one key", SubKeyShared, []read{{"a", 0, 2, false}, {"a", 0, 1, false}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &History{Meta: Meta{Partitions: 2, Subscriptions: []string{"s"}}}
			redelivered := 0
			for i, rd := range tc.reads {
				v := fmt.Sprintf("v%d.%d", rd.p, rd.e)
				if rd.redo {
					redelivered++
				} else {
					h.Sends = append(h.Sends, Event{Type: TypeSend, Producer: v, Seq: 1, Result: ResultOK, Value: v, ID: at(rd.p, rd.e)})
				}
				h.Recvs = append(h.Recvs, Event{Type: TypeRecv, Sub: "s", SubType: tc.subType, Consumer: "c", Time: int64(i),
					Key: rd.key, Value: v, ID: at(rd.p, rd.e)})
			}
			r := Check(h)
			want := map[string]int{}
			if tc.reordered > 0 {
				want["reordered"] = tc.reordered
			}
			if redelivered > 0 {
				want["redelivered"] = redelivered
			}
			if got := counts(r); !maps.Equal(got, want) {
				t.Errorf("counts = %v, want %v\n%s", got, want, r.Text())
			}
		})
	}
}

func TestAvailability(t *testing.T) {
	const t0 = 1_700_000_000 * sec
	ok := func(p int32, e int64, start, end float64) Event {
		return Event{Type: TypeSend, Producer: "a", Seq: e, Result: ResultOK, Value: fmt.Sprint(p, e),
			Start: t0 + int64(start*float64(sec)), End: t0 + int64(end*float64(sec)), ID: at(p, e)}
	}
	h := &History{
		Meta: Meta{Partitions: 2, Started: t0},
		Sends: []Event{
			ok(0, 1, 9, 11),    // started before the fault
			ok(0, 2, 10, 14),   // started at the fault, but ends after the next
			ok(0, 3, 11, 12),   // first to complete: 2s
			ok(1, 1, 12, 13.5), // 3.5s
			ok(0, 4, 21, 22),   // second fault: partition 0 after 2s, partition 1 never
			{Type: TypeSend, Producer: "a", Seq: 9, Result: ResultUnknown, Value: "u", Start: t0 + 21*sec, End: t0 + 23*sec},
		},
		Faults: []Event{
			{Type: TypeFault, Name: "pause-broker", Target: "broker-2", Start: t0 + 20*sec},
			{Type: TypeFault, Name: "kill-broker", Target: "broker-1", Start: t0 + 10*sec, End: t0 + 15*sec},
		},
	}
	r := Check(h)
	want := []Availability{
		// Gaps: until the next fault at 20s, partition 1 has nothing after
		// 13.5s (6.5s); after it, until the last write at 22s, each has 2s.
		{Name: "kill-broker", Target: "broker-1", StartSec: 10, HealedSec: 15, MaxSec: 3.5, MaxPartition: 1, MeanSec: 2.75,
			Partitions: map[int32]float64{0: 2, 1: 3.5}, MaxGapSec: 6.5, GapPartition: 1},
		{Name: "pause-broker", Target: "broker-2", StartSec: 20, HealedSec: -1, MaxSec: -1, MaxPartition: 1, MeanSec: -1,
			Partitions: map[int32]float64{0: 2, 1: -1}, MaxGapSec: 2, GapPartition: 0},
	}
	if !reflect.DeepEqual(r.Availability, want) {
		t.Errorf("availability =\n%+v\nwant\n%+v", r.Availability, want)
	}
	if !r.Pass() {
		t.Errorf("availability must never fail: %q", r.Failures())
	}
	if r.Totals.DurationSec != 23 {
		t.Errorf("duration = %v, want 23", r.Totals.DurationSec)
	}
}

func TestTotalsAndText(t *testing.T) {
	h := clean()
	h.Sends = append(h.Sends, send("a", 5, "u5", ResultUnknown, 0, 0))
	for i := range 30 {
		h.Sends = append(h.Sends, send("b", int64(i+1), fmt.Sprintf("w%02d", i), ResultOK, 1, int64(10+i)))
	}
	r := Check(h)
	if want := map[string]int{"ok": 34, "unknown": 1}; !maps.Equal(r.Totals.Sends, want) {
		t.Errorf("sends = %v, want %v", r.Totals.Sends, want)
	}
	if want := map[string]int{"ex": 4, "sh": 4}; !maps.Equal(r.Totals.RecvsBySub, want) || r.Totals.Recvs != 8 {
		t.Errorf("recvs = %d %v, want 8 %v", r.Totals.Recvs, r.Totals.RecvsBySub, want)
	}
	if r.Totals.ValuesRead != 4 {
		t.Errorf("values read = %d, want 4", r.Totals.ValuesRead)
	}
	if r.Lost.Count != 60 || len(r.Lost.Examples) != 60 || r.Lost.Examples[0] != `ex: value "w00" (b seq 1, acknowledged at 1:1:10:0)` {
		t.Errorf("lost = %d, examples %q", r.Lost.Count, r.Lost.Examples)
	}
	if f := r.Failures(); len(f) != 1 || !strings.HasPrefix(f[0], "lost: 60 (") {
		t.Errorf("failures = %q", f)
	}
	text := r.Text()
	for _, s := range []string{"result: FAIL", "sends: 35 (ok 34, unknown 1, failed 0)", "lost: 60 (ex 30, sh 30)", "  ... 40 more", "reordered: 0"} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if Check(h).Text() != text {
		t.Error("text differs between two checks of one history")
	}
}

func TestRoundTrip(t *testing.T) {
	h := clean()
	h.Meta.Started, h.Meta.Dedup = 42, true
	h.Sends = append(h.Sends, Event{Type: TypeSend, Producer: "b", Seq: 1, Result: ResultUnknown, Error: "timeout <&>", Start: 5, End: 6, Value: "u"})
	h.Recvs[0].Redelivery, h.Recvs[0].Time = 2, 77
	h.Faults = []Event{{Type: TypeFault, Name: "kill-broker", Target: "broker-1", Start: 3, End: 9}}

	var buf bytes.Buffer
	w, err := NewWriter(&buf, h.Meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h.Sends {
		e.Type = "" // the writer sets it
		mustNil(t, w.Send(e))
	}
	for _, e := range h.Recvs {
		mustNil(t, w.Recv(e))
	}
	for _, e := range h.Faults {
		mustNil(t, w.Fault(e))
	}
	mustNil(t, w.Close())
	if err := w.Send(h.Sends[0]); err == nil {
		t.Error("Send after Close succeeded")
	}
	got, err := ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, h)
	}
}

func TestWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Meta{Scenario: "c"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				v := fmt.Sprintf("g%d-%d", g, i)
				mustNil(t, w.Send(Event{Producer: "p", Seq: int64(i), Result: ResultOK, Value: v, ID: at(int32(g), int64(i))}))
				mustNil(t, w.Recv(Event{Sub: "s", Value: v, ID: at(int32(g), int64(i))}))
			}
		})
	}
	wg.Wait()
	mustNil(t, w.Close())
	h, err := ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Sends) != 800 || len(h.Recvs) != 800 {
		t.Errorf("read %d sends, %d recvs; want 800 each", len(h.Sends), len(h.Recvs))
	}
}

func TestReadHistoryErrors(t *testing.T) {
	meta := `{"type":"meta","meta":{"scenario":"x","partitions":1}}` + "\n"
	recv := `{"type":"recv","sub":"s","value":"v","id":{"p":0,"l":1,"e":1,"b":0}}` + "\n"
	tests := []struct {
		name, in, want string // want: "" for no error, else a substring of it
	}{
		{"ok", meta + "\n" + recv + recv, ""},
		{"ok without final newline", meta + strings.TrimSuffix(recv, "\n"), ""},
		{"longest line", meta + `{"type":"fault","name":"` + strings.Repeat("x", MaxLine-26) + `"}` + "\n", ""},
		{"empty", "", "no meta"},
		{"no meta first", recv + meta, "line 1: first event is \"recv\""},
		{"unknown type", meta + recv + `{"type":"snd"}` + "\n", `line 3: unknown event type "snd"`},
		{"second meta", meta + meta, "line 2: second meta"},
		{"bad json", meta + "{\n", "line 2:"},
		{"recv without id", meta + `{"type":"recv","value":"v"}` + "\n", "line 2: recv without id"},
		{"line too long", meta + recv + `{"type":"fault","name":"` + strings.Repeat("x", MaxLine) + `"}` + "\n", "line 3: longer than 1048576 bytes"},
		{"last line too long", meta + `{"type":"fault","name":"` + strings.Repeat("x", MaxLine) + `"}`, "line 2: longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHistory(strings.NewReader(tc.in))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestMsgIDOrder(t *testing.T) {
	tests := []struct {
		a, b MsgID
		less bool
	}{
		{MsgID{0, 1, 2, 0}, MsgID{0, 1, 2, 1}, true},
		{MsgID{0, 1, 2, 5}, MsgID{0, 1, 3, 0}, true},
		{MsgID{0, 1, 9, 0}, MsgID{0, 2, 0, 0}, true},
		{MsgID{0, 1, 2, 0}, MsgID{0, 1, 2, 0}, false},
		{MsgID{0, 2, 0, 0}, MsgID{0, 1, 9, 9}, false},
	}
	for _, tc := range tests {
		if got := tc.a.Less(tc.b); got != tc.less {
			t.Errorf("%s.Less(%s) = %v, want %v", tc.a, tc.b, got, tc.less)
		}
	}
	if s := (MsgID{3, 12, 40, 1}).String(); s != "3:12:40:1" {
		t.Errorf("String() = %q", s)
	}
}

func FuzzReadHistory(f *testing.F) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, clean().Meta)
	for _, e := range clean().Sends {
		_ = w.Send(e)
	}
	for _, e := range clean().Recvs {
		_ = w.Recv(e)
	}
	_ = w.Close()
	f.Add(buf.Bytes())
	f.Add([]byte(`{"type":"meta","meta":{}}` + "\n" + `{"type":"fault","start":1}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := ReadHistory(bytes.NewReader(in))
		if err != nil {
			return
		}
		r := Check(h)
		_ = r.Text()
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	})
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Error(err)
	}
}

// BenchmarkCheck checks a history of 200k events: 40k sends over 10
// partitions, read by four subscriptions and a drain.
func BenchmarkCheck(b *testing.B) {
	h := &History{Meta: Meta{Partitions: 10, Subscriptions: []string{"ex", "fo", "sh", "ks"}}}
	for i := range 40_000 {
		p := int32(i % 10)
		h.Sends = append(h.Sends, Event{Type: TypeSend, Producer: fmt.Sprint("p", i%4), Seq: int64(i), Result: ResultOK,
			Key: fmt.Sprint("k", i%100), Value: fmt.Sprint("v", i), Start: int64(i), End: int64(i + 5), ID: at(p, int64(i))})
	}
	for _, sub := range []struct{ name, typ string }{{"ex", SubExclusive}, {"fo", SubFailover}, {"sh", SubShared}, {"ks", SubKeyShared}, {"dr", SubDrain}} {
		for _, s := range h.Sends {
			h.Recvs = append(h.Recvs, Event{Type: TypeRecv, Sub: sub.name, SubType: sub.typ, Consumer: sub.name + "-1", Key: s.Key, Value: s.Value, ID: s.ID})
		}
	}
	for i := range 20 {
		h.Faults = append(h.Faults, Event{Type: TypeFault, Name: "kill-broker", Target: "broker-1", Start: int64(i * 2000)})
	}
	for b.Loop() {
		if r := Check(h); !r.Pass() {
			b.Fatal(r.Failures())
		}
	}
}
