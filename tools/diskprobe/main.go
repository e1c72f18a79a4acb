// Command diskprobe writes and syncs files the way a bookie's entry log
// does, without Magnetar: several writers, each appending to (or
// overwriting) its own file at a fixed rate, each write followed by an
// fdatasync (or opened O_DSYNC), and reports the rate held, the
// latency of a write and its sync, and the process's CPU time over the
// timed writes divided by their number. Run `magnetar perf pauses` beside it
// to see what each pattern costs a virtual machine whose host charges
// its I/O to the machine's CPU allowance (docs/benchmarks.md, "Overwriting
// costs the host less").
//
// Modes:
//
//	append-fdatasync     empty files, written at their end, fdatasync after each write (the entry log's default)
//	append-dsync         the same, the file opened O_DSYNC instead
//	overwrite-fdatasync  files written whole first, then overwritten (as with --entry-log-recycle-files)
//	overwrite-dsync      the same, O_DSYNC
//
// Each writer has one file under -dir (required), of -file-size bytes at
// most: at its end the writer starts again at 0 (appending: the file
// emptied first). The files are removed at the end, on an error and on
// SIGINT or SIGTERM. Overwriting modes write the files whole before the
// writes are timed; "writing" goes to stderr when the timed writes start.
// A writer that falls behind its schedule (a slow sync) catches up without
// sleeping, so the rate held is the mean over -time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "diskprobe:", err)
		os.Exit(1)
	}
}

type options struct {
	dir      string
	append   bool // else overwrite
	dsync    bool // else fdatasync
	direct   bool
	size     int
	rate     int
	writers  int
	fileSize int64
	time     time.Duration
}

// run probes as args say; out gets the report, errOut flag errors and the
// start of the timed writes. It stops early, with an error, once ctx is
// done.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("diskprobe", flag.ContinueOnError)
	fs.SetOutput(errOut)
	var o options
	fs.StringVar(&o.dir, "dir", "", "directory for the files (required)")
	mode := fs.String("mode", "append-fdatasync", "append-fdatasync, append-dsync, overwrite-fdatasync or overwrite-dsync")
	fs.BoolVar(&o.direct, "direct", true, "direct I/O (O_DIRECT), as the entry log writes")
	fs.IntVar(&o.size, "size", 96<<10, "bytes per write (a multiple of 4096)")
	fs.IntVar(&o.rate, "rate", 1000, "writes a second per writer")
	fs.IntVar(&o.writers, "writers", 3, "writers, one file each (a 3-bookie standalone: 3)")
	fs.Int64Var(&o.fileSize, "file-size", 512<<20, "bytes per file; a writer that reaches its end starts again at 0")
	fs.DurationVar(&o.time, "time", 10*time.Second, "how long to write")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errors.New("bad flags") // the flag package has printed why
	}
	switch *mode {
	case "append-fdatasync":
		o.append = true
	case "append-dsync":
		o.append, o.dsync = true, true
	case "overwrite-fdatasync":
	case "overwrite-dsync":
		o.dsync = true
	default:
		return fmt.Errorf("-mode %q: want append-fdatasync, append-dsync, overwrite-fdatasync or overwrite-dsync", *mode)
	}
	switch {
	case o.dir == "":
		return errors.New("-dir: required (the files take -writers x -file-size bytes)")
	case o.size <= 0 || o.size%4096 != 0 || o.size > 64<<20:
		return fmt.Errorf("-size %d: want a multiple of 4096 up to 64MiB", o.size)
	case o.rate <= 0:
		return fmt.Errorf("-rate %d: must be positive", o.rate)
	case o.writers <= 0 || o.writers > 64:
		return fmt.Errorf("-writers %d: must be in 1..64", o.writers)
	case o.time <= 0:
		return fmt.Errorf("-time %v: must be positive", o.time)
	case o.fileSize < int64(o.size):
		return fmt.Errorf("-file-size %d is below -size %d", o.fileSize, o.size)
	}
	o.fileSize -= o.fileSize % int64(o.size)

	type result struct {
		lat []time.Duration
		err error
	}
	results := make(chan result, o.writers)
	files := make([]*os.File, o.writers)
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
				os.Remove(f.Name())
			}
		}
	}()
	for w := range files {
		// The pid in the name: runs side by side do not share files.
		f, err := o.open(filepath.Join(o.dir, fmt.Sprintf("diskprobe-%d-%d.dat", os.Getpid(), w)))
		if err != nil {
			return err
		}
		files[w] = f
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	fmt.Fprintf(errOut, "writing for %v\n", o.time)
	cpu0, cpuOK := cpuTime()
	start := time.Now()
	for _, f := range files {
		go func() {
			lat, err := o.write(ctx, f, start)
			results <- result{lat, err}
		}()
	}
	var all []time.Duration
	var errs []error
	for range files {
		r := <-results
		all = append(all, r.lat...)
		errs = append(errs, r.err)
	}
	elapsed := time.Since(start)
	cpu1, ok := cpuTime()
	cpuOK = cpuOK && ok
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(all) == 0 {
		return fmt.Errorf("no write completed within -time %v", o.time)
	}
	cpu := "na" // getrusage failed
	if cpuOK {
		cpu = ((cpu1 - cpu0) / time.Duration(len(all))).Round(time.Microsecond).String()
	}
	slices.Sort(all)
	q := func(p float64) time.Duration { return all[int(float64(len(all)-1)*p)] }
	fmt.Fprintf(out, "%s: %d writes of %d KiB by %d writers in %.1fs: %.0f/s (asked %d/s) | write and sync p50 %v p99 %v max %v | CPU %v a write and sync\n",
		*mode, len(all), o.size>>10, o.writers, elapsed.Seconds(), float64(len(all))/elapsed.Seconds(), o.rate*o.writers,
		q(0.5).Round(time.Microsecond), q(0.99).Round(time.Microsecond), q(1).Round(time.Microsecond), cpu)
	return nil
}

// cpuTime is the CPU time (user and system) the process has used so far,
// and false if getrusage failed. The kernel's work for the writes and
// syncs (on a virtual machine, its exits to the host too) is charged to
// the writers' system time; so is the probe's own, its sleeps and
// wake-ups between paced writes included.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// open creates a writer's file; to be overwritten, it is written whole
// and synced first. On an error the file is removed.
func (o *options) open(path string) (f *os.File, err error) {
	defer func() {
		if err != nil {
			os.Remove(path)
			err = fmt.Errorf("%w (direct I/O %v)", err, o.direct)
		}
	}()
	flags := os.O_CREATE | os.O_RDWR | os.O_TRUNC
	if o.direct {
		flags |= syscall.O_DIRECT
	}
	if !o.append {
		if err := o.fill(path, flags); err != nil {
			return nil, err
		}
		flags &^= os.O_TRUNC
	}
	if o.dsync {
		flags |= syscall.O_DSYNC
	}
	return os.OpenFile(path, flags, 0o644)
}

// fill writes path whole with zeros and syncs it.
func (o *options) fill(path string, flags int) error {
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := aligned(min(4<<20, int(o.fileSize)))
	for off := int64(0); off < o.fileSize; off += int64(len(buf)) {
		n := min(int64(len(buf)), o.fileSize-off)
		if _, err := f.WriteAt(buf[:n], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// write writes o.rate times a second until o.time has passed since start,
// and returns each write's latency, its sync's included. It stops with
// ctx's error once ctx is done.
func (o *options) write(ctx context.Context, f *os.File, start time.Time) ([]time.Duration, error) {
	buf := aligned(o.size)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	interval := time.Second / time.Duration(o.rate)
	var lat []time.Duration
	off := int64(0)
	for next := start; time.Since(start) < o.time; next = next.Add(interval) {
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if err := ctx.Err(); err != nil { // a writer behind schedule does not wait
			return lat, err
		}
		t0 := time.Now()
		if _, err := f.WriteAt(buf, off); err != nil {
			return lat, err
		}
		if !o.dsync {
			if err := syscall.Fdatasync(int(f.Fd())); err != nil {
				return lat, fmt.Errorf("fdatasync %s: %w", f.Name(), err)
			}
		}
		lat = append(lat, time.Since(t0))
		if off += int64(o.size); off == o.fileSize {
			off = 0
			if o.append { // append again: an empty file
				if err := f.Truncate(0); err != nil {
					return lat, err
				}
			}
		}
	}
	return lat, nil
}

// aligned returns n bytes at a 4 KiB-aligned address, as direct I/O needs.
func aligned(n int) []byte {
	b := make([]byte, n+4096)
	skip := (4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)) & 4095
	return b[skip : skip+n]
}
