package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// A mistyped or inconsistent autoscaler setting is a clear error before
// anything is contacted.
func TestAutoscalerBadSettings(t *testing.T) {
	base := []string{"autoscaler", "--metastore", "127.0.0.1:1", "--namespace", "ns"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"autoscaler", "--metastore", "127.0.0.1:1"}, "--namespace is empty"},
		{[]string{"autoscaler", "--namespace", "ns"}, "no metastore (etcd) endpoints"},
		{append(base, "--min-bookies", "0"), "want 1 <= min <= max"},
		{append(base, "--min-bookies", "5", "--max-bookies", "4"), "want 1 <= min <= max"},
		{append(base, "--scale-up-disk-usage", "0.5", "--scale-down-disk-usage", "0.6"), "want 0 < down < up <= 1"},
		{append(base, "--scale-up-disk-usage", "1.5"), "want 0 < down < up <= 1"},
		{append(base, "--scale-up-write-bytes-per-sec", "10", "--scale-down-write-bytes-per-sec", "10"), "want 0 <= down < up"},
		{append(base, "--window", "-1s"), "--window -1s is negative"},
		{append(base, "--interval", "0s"), "--interval 0s must be positive"},
		{append(base, "--lease-duration", "1s"), "--lease-duration 1s is below 3s"},
		{append(base, "--http", "8000"), `--http "8000": missing port`},
		{append(base, "--statefulset", ""), "--statefulset is empty"},
		{append(base, "--min-bookie", "3"), "unknown flag: --min-bookie"},
	} {
		err := run(context.Background(), io.Discard, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error with %q", tc.args[1:], err, tc.want)
		}
	}
}
