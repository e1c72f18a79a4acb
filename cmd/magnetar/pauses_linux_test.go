package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// perf pauses runs its sleepers for the time asked and prints its line;
// bad flags are refused.
func TestPerfPauses(t *testing.T) {
	var out strings.Builder
	start := time.Now()
	if err := run(context.Background(), &out, "perf", "pauses", "--time", "300ms"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("ran %v of 300ms", took)
	}
	if !regexp.MustCompile(`^pauses: \d+ in 0\.3s \(every CPU late together by 2ms or more\): .* \(lower bounds\) \| late per CPU \[\d+( \d+)*\]\n`).MatchString(out.String()) {
		t.Fatalf("output %q", out.String())
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--time", "0s"}, "--time 0s: must be in (0, 24h]"},
		{[]string{"--sleep", "10us"}, "--sleep 10µs: must be in [100µs, 100ms]"},
		{[]string{"--threshold", "2s"}, "--threshold 2s: must be in [100µs, 1s]"},
		{[]string{"extra"}, `unknown command "extra"`},
	} {
		err := run(context.Background(), &out, append([]string{"perf", "pauses"}, tc.flags...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.flags, err, tc.want)
		}
	}
}
