package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every mode writes at the rate asked, reports it, and leaves no file
// behind. Through the page cache: the test's directory may not allow
// direct I/O (tmpfs).
func TestModes(t *testing.T) {
	re := regexp.MustCompile(`: (\d+) writes of 4 KiB by 2 writers in`)
	for _, mode := range []string{"append-fdatasync", "append-dsync", "overwrite-fdatasync", "overwrite-dsync"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			var out strings.Builder
			// 2 writers at 50/s for 200 ms: about 20 writes; files of 8
			// KiB, so that each writer wraps around several times.
			err := run([]string{"-dir", dir, "-mode", mode, "-direct=false", "-size", "4096", "-rate", "50",
				"-writers", "2", "-file-size", "8192", "-time", "200ms"}, &out)
			if err != nil {
				t.Fatal(err)
			}
			m := re.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("report %q", out.String())
			}
			if n, _ := strconv.Atoi(m[1]); n < 2 || n > 22 {
				t.Errorf("%d writes; want 2 to 22 (2 writers, 50/s, 200ms)", n)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("files left: %v", left)
			}
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "append"}, `-mode "append": want`},
		{[]string{"-size", "1000"}, "-size 1000: want a multiple of 4096"},
		{[]string{"-rate", "0"}, "must be positive"},
		{[]string{"-writers", "65"}, "up to 64"},
		{[]string{"-file-size", "4096", "-size", "8192"}, "-file-size 4096 is below -size 8192"},
		{[]string{"-dir", "/nonexistent/dir", "-time", "1ms"}, "no such file"},
	} {
		var out strings.Builder
		err := run(append(tc.args, "-time", time.Millisecond.String()), &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}
