package main

import (
	"strings"
	"testing"
	"time"
)

// A pause is where every CPU was late at once; a CPU late alone is not.
func TestCommonPauses(t *testing.T) {
	ms := time.Millisecond
	iv := func(from, to int) interval { return interval{time.Duration(from) * ms, time.Duration(to) * ms} }
	for _, tc := range []struct {
		name     string
		late     [][]interval
		shortest time.Duration
		want     []interval
	}{
		{"no CPU", nil, 0, nil},
		{"one CPU: its own", [][]interval{{iv(1, 5), iv(10, 11)}}, 2 * ms, []interval{iv(1, 5)}},
		{"two CPUs, overlapping", [][]interval{{iv(100, 108), iv(200, 207)}, {iv(101, 110), iv(203, 209)}}, 2 * ms,
			[]interval{iv(101, 108), iv(203, 207)}},
		{"two CPUs, one late alone", [][]interval{{iv(100, 108), iv(150, 160)}, {iv(101, 110)}}, 2 * ms, []interval{iv(101, 108)}},
		{"overlap shorter than the threshold", [][]interval{{iv(100, 103)}, {iv(102, 110)}}, 2 * ms, nil},
		{"a long interval against several", [][]interval{{iv(0, 100)}, {iv(10, 20), iv(30, 35), iv(90, 120)}}, 2 * ms,
			[]interval{iv(10, 20), iv(30, 35), iv(90, 100)}},
		{"three CPUs: all three", [][]interval{{iv(0, 10), iv(50, 60)}, {iv(2, 9), iv(50, 60)}, {iv(4, 20)}}, 2 * ms,
			[]interval{iv(4, 9)}},
		{"a CPU never late", [][]interval{{iv(0, 10)}, {}}, 2 * ms, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := commonPauses(tc.late, tc.shortest)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestPauseReport(t *testing.T) {
	ms := time.Millisecond
	r := pauseReport{run: 10 * time.Second, threshold: 2 * ms, realtime: true, lateCPUs: []int{4, 3},
		pauses: []interval{{0, 5 * ms}, {100 * ms, 107 * ms}, {200 * ms, 212 * ms}}}
	var out strings.Builder
	r.print(&out)
	want := "pauses: 3 in 10.0s (every CPU late together by 2ms or more): 24.0 ms in all (0.2% of the run), longest 12.0 ms, median 7.0 ms (lower bounds) | late per CPU [4 3]\n"
	if out.String() != want {
		t.Fatalf("got  %q\nwant %q", out.String(), want)
	}
	r.realtime = false
	out.Reset()
	r.print(&out)
	if !strings.Contains(out.String(), "note: the sleepers could not have real-time priority") {
		t.Fatalf("no note without real-time priority: %q", out.String())
	}
}
