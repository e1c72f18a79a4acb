package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// measureLate runs one sleeper per CPU this process may run on, pinned to
// it and at the lowest real-time priority if allowed, for d (or until ctx
// ends), and returns each CPU's late intervals and how long it ran.
func measureLate(ctx context.Context, d, sleep, threshold time.Duration) (late [][]interval, realtime bool, run time.Duration, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, false, 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c, n := 0, set.Count(); c < 1<<16 && len(cpus) < n; c++ { // IsSet is false past the set's end
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	late = make([][]interval, len(cpus))
	rt := make([]bool, len(cpus))
	errs := make([]error, len(cpus))
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The thread is changed for good: it ends with the goroutine,
			// still locked.
			runtime.LockOSThread()
			var one unix.CPUSet
			one.Set(c)
			if err := unix.SchedSetaffinity(0, &one); err != nil {
				errs[i] = fmt.Errorf("pin to CPU %d: %w", c, err)
				return
			}
			rt[i] = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0) == nil
			ts := unix.NsecToTimespec(sleep.Nanoseconds())
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				_ = unix.Nanosleep(&ts, nil) // EINTR: woken early, not late
				due := t0.Add(sleep)
				if t1 := time.Now(); t1.Sub(due) >= threshold {
					late[i] = append(late[i], interval{due.Sub(start), t1.Sub(start)})
				}
			}
		}()
	}
	wg.Wait()
	realtime = true
	for i := range cpus {
		if errs[i] != nil {
			return nil, false, 0, errs[i]
		}
		realtime = realtime && rt[i]
	}
	return late, realtime, min(time.Since(start), d), nil
}
