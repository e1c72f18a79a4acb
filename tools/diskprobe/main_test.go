package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every mode runs, reports the writes it made and leaves no file behind.
// Through the page cache: the test's directory may not allow direct I/O
// (tmpfs).
func TestModes(t *testing.T) {
	re := regexp.MustCompile(`: (\d+) writes of 4 KiB by 2 writers in .* \| CPU (\S+) a write and sync\n$`)
	for _, mode := range []string{"append-fdatasync", "append-dsync", "overwrite-fdatasync", "overwrite-dsync"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			var out strings.Builder
			// 2 writers at 50/s for 200 ms: at most 11 writes each, the
			// first at once; files of 8 KiB, so that each writer that
			// makes 3 writes or more starts again at 0.
			err := run(context.Background(), []string{"-dir", dir, "-mode", mode, "-direct=false", "-size", "4096", "-rate", "50",
				"-writers", "2", "-file-size", "8192", "-time", "200ms"}, &out, io.Discard)
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
			// Each write and sync takes some CPU in the kernel; an
			// unparsable or zero figure means it was not measured.
			if d, err := time.ParseDuration(m[2]); err != nil || d <= 0 {
				t.Errorf("CPU a write and sync %q: want a positive duration (%v)", m[2], err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("files left: %v", left)
			}
		})
	}
}

// A writer keeps to its rate (at most one write per interval, the first at
// once) and to its file's size, starting again at 0: appending empties the
// file, overwriting keeps it whole.
func TestWriterRateAndWrap(t *testing.T) {
	for _, appending := range []bool{true, false} {
		o := options{dir: t.TempDir(), append: appending, size: 4096, rate: 50, writers: 1, fileSize: 8192, time: 200 * time.Millisecond}
		f, err := o.open(filepath.Join(o.dir, "w.dat"))
		if err != nil {
			t.Fatal(err)
		}
		lat, err := o.write(context.Background(), f, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		// 50/s for 200 ms: 11 at most, however late the writer runs.
		if n := len(lat); n < 1 || n > 11 {
			t.Errorf("append %v: %d writes; want 1 to 11", appending, n)
		}
		// Appending, the file is emptied as a write reaches its end: every
		// second write here.
		want := int64(len(lat)%2) * 4096
		if !appending {
			want = 8192
		}
		if st.Size() != want {
			t.Errorf("append %v: %d writes left a file of %d bytes; want %d", appending, len(lat), st.Size(), want)
		}
	}
}

// started is an io.Writer that closes ch at its first write.
type started struct{ ch chan struct{} }

func (s started) Write(p []byte) (int, error) {
	select {
	case <-s.ch:
	default:
		close(s.ch)
	}
	return len(p), nil
}

// An interrupted probe stops at once and removes its files: writers that
// wait for their next write, and writers behind their schedule, which do
// not wait.
func TestStopsWhenCancelled(t *testing.T) {
	for _, rate := range []string{"1", "1000000"} {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		writing := started{make(chan struct{})}
		go func() {
			done <- run(ctx, []string{"-dir", dir, "-direct=false", "-size", "4096", "-rate", rate, "-writers", "2", "-file-size", "8192", "-time", "1h"}, io.Discard, writing)
		}()
		select {
		case <-writing.ch:
		case err := <-done:
			t.Fatalf("rate %s: ended before writing: %v", rate, err)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("rate %s: got %v, want context.Canceled", rate, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("rate %s: the cancelled probe did not stop", rate)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("rate %s: files left: %v", rate, left)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "append"}, `-mode "append": want`},
		{[]string{"-size", "1000"}, "-size 1000: want a multiple of 4096"},
		{[]string{"-rate", "0"}, "-rate 0: must be positive"},
		{[]string{"-writers", "65"}, "-writers 65: must be in 1..64"},
		{[]string{"-file-size", "4096", "-size", "8192"}, "-file-size 4096 is below -size 8192"},
		{[]string{"-dir", "/nonexistent/dir"}, "no such file or directory (direct I/O true)"},
		{[]string{"-rat", "1"}, "bad flags"},
	} {
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "-dir") {
			args = append(args, "-dir", t.TempDir())
		}
		err := run(context.Background(), append(args, "-time", time.Millisecond.String()), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error about %q", tc.args, err, tc.want)
		}
	}
	if err := run(context.Background(), []string{"-time", "1ms"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-dir: required") {
		t.Errorf("no -dir: got %v", err)
	}
}
