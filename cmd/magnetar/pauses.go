package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

// perf pauses measures the times the machine itself stopped running: a
// virtual machine whose host throttles it (a CPU quota over a 100 ms
// period, say) stops every CPU at once for milliseconds, and every
// latency measured across such a pause grows by it, whatever the
// software. One sleeper thread per CPU (pinned, at real-time priority so
// that a busy CPU still runs it at once) sleeps a short time over and
// over; a sleeper waking later than --threshold past its time was late
// over that interval. A pause is an interval in which every CPU's sleeper
// was late: no busy CPU makes all of them late together, a stopped
// machine does (docs/benchmarks.md, "The host stops the whole machine, it seems").
// A late interval starts at the sleeper's due time, up to --sleep after
// the stop began: the lengths are lower bounds, and a stop shorter than
// about --threshold plus --sleep can go unseen. Only user-space load was
// shown not to count; long non-preemptible kernel work on every CPU at
// once would. It is not free: beside a loaded standalone its wakeups
// raised the publish p99 by a third or more, so measure beside a
// comparable load, not the run whose latency counts.

// interval is [from, to) on a run's clock (time since its start).
type interval struct{ from, to time.Duration }

func (i interval) len() time.Duration { return i.to - i.from }

// commonPauses returns the intervals in which every CPU was late, each
// CPU's late intervals in order and not overlapping; those shorter than
// shortest are dropped. No CPU: none.
func commonPauses(late [][]interval, shortest time.Duration) []interval {
	if len(late) == 0 {
		return nil
	}
	common := late[0]
	for _, l := range late[1:] {
		var out []interval
		for i, j := 0, 0; i < len(common) && j < len(l); {
			a, b := common[i], l[j]
			if from, to := max(a.from, b.from), min(a.to, b.to); from < to {
				out = append(out, interval{from, to})
			}
			if a.to < b.to {
				i++
			} else {
				j++
			}
		}
		common = out
	}
	return slices.DeleteFunc(slices.Clone(common), func(i interval) bool { return i.len() < shortest })
}

// pauseReport is what perf pauses prints.
type pauseReport struct {
	run       time.Duration
	threshold time.Duration
	realtime  bool  // the sleepers ran at real-time priority
	lateCPUs  []int // how many late intervals each CPU had
	pauses    []interval
}

func (r pauseReport) print(w io.Writer) {
	var total, longest time.Duration
	lens := make([]time.Duration, len(r.pauses))
	for i, p := range r.pauses {
		total += p.len()
		longest = max(longest, p.len())
		lens[i] = p.len()
	}
	slices.Sort(lens)
	var median time.Duration
	if len(lens) > 0 {
		median = lens[len(lens)/2]
	}
	share := 0.0
	if r.run > 0 {
		share = 100 * float64(total) / float64(r.run)
	}
	fmt.Fprintf(w, "pauses: %d in %.1fs (every CPU late together by %v or more): %.1f ms in all (%.1f%% of the run), longest %.1f ms, median %.1f ms (lower bounds) | late per CPU %v\n",
		len(r.pauses), r.run.Seconds(), r.threshold, inMs(total), share, inMs(longest), inMs(median), r.lateCPUs)
	if !r.realtime {
		fmt.Fprintln(w, "note: the sleepers could not have real-time priority (needs root or CAP_SYS_NICE): CPUs all busy at once count as a pause too")
	}
}

func inMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func newPerfPausesCmd() *cobra.Command {
	var duration, sleep, threshold time.Duration
	cmd := &cobra.Command{
		Use:   "pauses",
		Short: "Count the times every CPU's sleeper was late at once: the machine stopped running (a throttled virtual machine)",
		Long: "Count the times every CPU's sleeper was late at once: the machine stopped running (a throttled virtual machine).\n" +
			"One sleeper thread per CPU, pinned, at real-time priority (root or CAP_SYS_NICE; else busy CPUs count too).\n" +
			"Its wakeups slow a loaded machine (beside a standalone the publish p99 rose by a third or more):\n" +
			"run it beside a comparable load, not beside the run whose latency counts.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case duration <= 0 || duration > 24*time.Hour:
				return fmt.Errorf("--time %v: must be in (0, 24h]", duration)
			case sleep < 100*time.Microsecond || sleep > 100*time.Millisecond:
				return fmt.Errorf("--sleep %v: must be in [100µs, 100ms]", sleep)
			case threshold < 100*time.Microsecond || threshold > time.Second:
				return fmt.Errorf("--threshold %v: must be in [100µs, 1s]", threshold)
			}
			late, realtime, run, err := measureLate(cmd.Context(), duration, sleep, threshold)
			if err != nil {
				return fmt.Errorf("perf pauses: %w", err)
			}
			r := pauseReport{run: run, threshold: threshold, realtime: realtime, pauses: commonPauses(late, threshold)}
			for _, l := range late {
				r.lateCPUs = append(r.lateCPUs, len(l))
			}
			r.print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "time", 30*time.Second, "how long to measure")
	cmd.Flags().DurationVar(&sleep, "sleep", time.Millisecond, "each sleeper's sleep")
	cmd.Flags().DurationVar(&threshold, "threshold", 2*time.Millisecond, "how late past its time a sleeper must wake to count, and the shortest pause counted")
	return cmd
}
