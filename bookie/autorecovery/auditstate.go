package autorecovery

import (
	"time"
)

// auditState is the auditor's decision logic, free of I/O: fed snapshots
// of the bookie registry, it says which bookies to treat as lost and which
// came back with a new instance (a wiped disk). The auditor's loop takes
// the snapshots and carries the decisions out (marking the ledgers of
// those bookies under-replicated).
//
// Invariants:
//   - A bookie is reported lost once per auditor term, and only after it
//     stayed unregistered for the whole delay: a bookie that comes back
//     within the delay is never reported (a restart copies nothing).
//   - A bookie reported lost that comes back is forgotten: if it goes
//     again, the delay starts over.
//   - A bookie whose instance changed while this auditor watched it (its
//     data directory was replaced) is reported as wiped at once.
type auditState struct {
	delay    time.Duration
	gone     map[string]time.Time // known, not registered, since
	lost     map[string]bool      // reported lost this term
	instance map[string]string    // last instance seen registered
}

func newAuditState(delay time.Duration) *auditState {
	return &auditState{delay: delay, gone: map[string]time.Time{}, lost: map[string]bool{}, instance: map[string]string{}}
}

// observe takes the registry at time now: registered maps the live
// bookies to their instance ids, known lists every bookie that ever
// registered (their cookies). It returns the bookies to report lost and
// those that came back wiped.
func (a *auditState) observe(now time.Time, registered map[string]string, known []string) (lost, wiped []string) {
	for _, b := range sortedKeys(registered) {
		inst := registered[b]
		delete(a.gone, b)
		delete(a.lost, b)
		if prev, ok := a.instance[b]; ok && prev != inst {
			wiped = append(wiped, b)
		}
		a.instance[b] = inst
	}
	for _, b := range known {
		if _, ok := registered[b]; ok {
			continue
		}
		since, ok := a.gone[b]
		if !ok {
			a.gone[b], since = now, now
		}
		if !a.lost[b] && now.Sub(since) >= a.delay {
			a.lost[b] = true
			lost = append(lost, b)
		}
	}
	return lost, wiped
}

// lostBookies lists the bookies reported lost and still gone.
func (a *auditState) lostBookies() []string {
	return sortedKeys(a.lost)
}
