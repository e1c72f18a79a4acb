package autoscaler

import (
	"fmt"
	"time"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
)

// ActionKind is what the autoscaler does after one look at the cluster.
type ActionKind int

const (
	// Wait: nothing to do now (Reason says why when something holds a
	// change back).
	Wait ActionKind = iota
	// ScaleUp sets the StatefulSet's replicas to Replicas (one more).
	ScaleUp
	// Decommission starts draining Bookie, the highest ordinal: its
	// copies move to the others before its pod is removed.
	Decommission
	// ScaleDown sets replicas to Replicas (one fewer), once Bookie holds
	// nothing.
	ScaleDown
	// Forget removes what the metastore keeps of Bookie, a decommissioned
	// bookie whose pod is gone (its cookie and drain record), so that a
	// later scale-up starts a fresh bookie under the same name.
	Forget
)

func (k ActionKind) String() string {
	return [...]string{"Wait", "ScaleUp", "Decommission", "ScaleDown", "Forget"}[k]
}

// Action is one decision, with the reason recorded in the log and as a
// Kubernetes Event.
type Action struct {
	Kind     ActionKind
	Replicas int    // ScaleUp, ScaleDown: the new count
	Bookie   string // Decommission, ScaleDown, Forget
	Reason   string
}

// Rules are the thresholds and windows of the decisions (Config holds
// them for the command).
type Rules struct {
	// MinBookies, MaxBookies bound the replicas. Scale-in also never goes
	// below the largest ensemble of any ledger (the decommission refuses).
	MinBookies, MaxBookies int
	// Up when the fullest bookie's disk usage or the mean write rate per
	// bookie is above these; down when both are below the low ones.
	ScaleUpDiskUsage, ScaleDownDiskUsage   float64
	ScaleUpWriteBytes, ScaleDownWriteBytes float64
	// Window: a condition must hold this long before it acts. Cooldown:
	// the least time between the end of one change and the next one.
	Window, Cooldown time.Duration
}

// Bookie is one bookie of the StatefulSet as the autoscaler sees it.
type Bookie struct {
	Ordinal int
	ID      string
	// State is autorecovery's (writable, read-only, draining,
	// decommissioned, down, lost), "" for a name that never registered.
	State string
	// Registered: its process is up (it may be draining, or stopping).
	Registered       bool
	DiskUsage        float64 // used share of its filesystem
	WriteBytesPerSec float64
}

// Observation is one look at the cluster.
type Observation struct {
	Now time.Time
	// The StatefulSet: the replicas asked for and how many of its pods
	// are ready (of any revision: Rolling says whether an upgrade runs).
	Replicas, ReadyReplicas int
	// Rolling: an upgrade is replacing pods (the StatefulSet's current and
	// update revisions differ).
	Rolling bool
	// Ours is the bookie the autoscaler decommissioned and has not
	// finished removing (recorded on the StatefulSet, DrainingAnnotation):
	// only that one is scaled in; another drain is an operator's.
	Ours string
	// Bookies of the StatefulSet, by ordinal: one for every ordinal below
	// Replicas (State "" if the metastore does not know it), and every
	// other name the metastore knows (above Replicas: removed pods).
	Bookies []Bookie
}

// decider turns observations into actions. It is a pure state machine:
// no I/O, the clock is the observation's, and tests step it.
//
// What it remembers is only what a new leader may forget safely: since
// when a condition held (it starts counting again) and when the last
// change ended (a new leader waits a whole cooldown). Whether a change is
// in progress is read from the observation each time: a bookie being
// drained, a StatefulSet not settled, so a leader that takes over half
// way through a change carries it on.
type decider struct {
	rules      Rules
	highSince  time.Time // zero: the scale-up condition does not hold
	lowSince   time.Time
	lastChange time.Time // the end of the last change (or the start)
	settled    bool      // the previous observation was settled
}

// newDecider starts as if a change had just ended at now: a new leader
// waits a whole cooldown before its first change.
func newDecider(r Rules, now time.Time) *decider {
	return &decider{rules: r, lastChange: now, settled: true}
}

// step decides what to do given o.
func (d *decider) step(o Observation) Action {
	wait := func(format string, args ...any) Action {
		return Action{Kind: Wait, Reason: fmt.Sprintf(format, args...)}
	}
	// A removed pod's bookie is forgotten first (once drained and gone): a
	// scale-up must find its name free. One removed without a drain (by
	// hand) is lost: autorecovery re-replicates its copies, and it is
	// forgotten once none is left on it (Forget refuses before).
	var above *Bookie
	for i, b := range o.Bookies {
		switch {
		case b.Ordinal < o.Replicas:
		case b.Registered:
			return wait("%s (ordinal %d, above the %d replicas) is still running", b.ID, b.Ordinal, o.Replicas)
		case b.State == autorecovery.StateDecommissioned || b.State == autorecovery.StateLost:
			return Action{Kind: Forget, Bookie: b.ID, Reason: fmt.Sprintf("%s was removed (%s)", b.ID, b.State)}
		case b.Ordinal == o.Replicas:
			above = &o.Bookies[i]
		}
	}
	// A change in progress: one at a time.
	if o.ReadyReplicas != o.Replicas || o.Rolling {
		d.settled = false
		d.highSince, d.lowSince = time.Time{}, time.Time{}
		if o.Rolling {
			return wait("an upgrade is rolling over the bookies")
		}
		return wait("the StatefulSet is not settled: %d of %d bookies ready", o.ReadyReplicas, o.Replicas)
	}
	last := o.Replicas - 1
	for _, b := range o.Bookies {
		ours := b.Ordinal == last && b.ID == o.Ours
		switch {
		case ours && b.State == autorecovery.StateDecommissioned:
			return Action{Kind: ScaleDown, Replicas: o.Replicas - 1, Bookie: b.ID, Reason: fmt.Sprintf("%s is drained: it holds no ledger", b.ID)}
		case ours && b.State == autorecovery.StateDraining:
			d.settled = false
			return wait("%s is draining", b.ID)
		case b.State == autorecovery.StateDraining || b.State == autorecovery.StateDecommissioned:
			// Not ours (an operator's): no scaling until it is resolved.
			d.settled = false
			return wait("%s is being decommissioned by someone else: no scaling meanwhile", b.ID)
		case b.Ordinal <= last && (!b.Registered || b.State != autorecovery.StateWritable && b.State != autorecovery.StateReadOnly):
			d.settled = false
			d.highSince, d.lowSince = time.Time{}, time.Time{}
			return wait("%s is %s", b.ID, stateName(b.State))
		}
	}
	if !d.settled {
		// The change (or the outage) just ended: the cooldown starts now.
		d.settled = true
		d.lastChange = o.Now
	}

	// The load of the bookies that take writes (every one below Replicas
	// is registered and writable or read-only by now).
	var maxDisk, sumWrite float64
	n := 0
	for _, b := range o.Bookies {
		if b.Ordinal > last {
			continue
		}
		n++
		maxDisk = max(maxDisk, b.DiskUsage)
		sumWrite += b.WriteBytesPerSec
	}
	if n == 0 {
		return wait("no bookie")
	}
	meanWrite := sumWrite / float64(n)
	r := d.rules
	high := maxDisk > r.ScaleUpDiskUsage || meanWrite > r.ScaleUpWriteBytes
	low := maxDisk < r.ScaleDownDiskUsage && meanWrite < r.ScaleDownWriteBytes
	load := fmt.Sprintf("fullest disk %.0f%%, mean write %s/s per bookie over %d", 100*maxDisk, bytes(meanWrite), n)
	d.highSince = since(d.highSince, high, o.Now)
	d.lowSince = since(d.lowSince, low, o.Now)
	cool := o.Now.Sub(d.lastChange) >= r.Cooldown
	switch {
	case high && o.Replicas >= r.MaxBookies:
		return wait("load is high (%s) but the bookies are at their maximum, %d", load, r.MaxBookies)
	case high && o.Now.Sub(d.highSince) < r.Window:
		return wait("load is high (%s) since %v; acting after %v", load, o.Now.Sub(d.highSince).Round(time.Second), r.Window)
	case high && !cool:
		return wait("load is high (%s); cooling down after the last change", load)
	case high && above != nil:
		return wait("load is high (%s) but %s, the name a new bookie would take, is still known (%s) and still holds data", load, above.ID, stateName(above.State))
	case high:
		d.highSince = time.Time{}
		return Action{Kind: ScaleUp, Replicas: o.Replicas + 1, Reason: fmt.Sprintf("load high for %v: %s (up above %.3g%% disk or %s/s)", r.Window, load, 100*r.ScaleUpDiskUsage, bytes(r.ScaleUpWriteBytes))}
	case low && o.Replicas <= max(r.MinBookies, 1):
		return wait("load is low (%s); the bookies are at their minimum, %d", load, r.MinBookies)
	case low && o.Now.Sub(d.lowSince) < r.Window:
		return wait("load is low (%s) since %v; acting after %v", load, o.Now.Sub(d.lowSince).Round(time.Second), r.Window)
	case low && !cool:
		return wait("load is low (%s); cooling down after the last change", load)
	case low:
		d.lowSince = time.Time{}
		id := o.Bookies[0].ID
		for _, b := range o.Bookies {
			if b.Ordinal == last {
				id = b.ID
			}
		}
		return Action{Kind: Decommission, Bookie: id, Reason: fmt.Sprintf("load low for %v: %s (down below %.3g%% disk and %s/s)", r.Window, load, 100*r.ScaleDownDiskUsage, bytes(r.ScaleDownWriteBytes))}
	}
	return wait("load is within bounds: %s", load)
}

// refused tells the decider that its last Decommission was refused (the
// bookies left would be fewer than a ledger's ensemble): it waits a
// cooldown before asking again.
func (d *decider) refused(now time.Time) { d.lastChange = now }

// acted tells the decider a change started: the cooldown counts from its
// end, which the next settled observation marks.
func (d *decider) acted() { d.settled = false }

func since(t time.Time, cond bool, now time.Time) time.Time {
	switch {
	case !cond:
		return time.Time{}
	case t.IsZero():
		return now
	}
	return t
}

func stateName(s string) string {
	if s == "" {
		return "not registered yet"
	}
	return s
}

func bytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}
