package mledger

import (
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// listWorld is a model of what listState's actions act on: the list in the
// metastore, the ledgers' metadata and the writers, with faults injected
// into every action's outcome.
type listWorld struct {
	t    *testing.T
	seed uint64
	rng  *mathrand.Rand

	list    []*metapb.LedgerRef // in the metastore
	rev     int64
	ledgers map[int64]*modelLedger
	nextID  int64
	// unknown is the list of a store whose outcome the state machine does
	// not know; the next store must be the same list (L2).
	unknown []*metapb.LedgerRef
	// current is the ledger whose writer takes appends.
	current int64
	trimmed map[int64]bool
	// lastCreate is the outcome of the last ledger creation: "" (none
	// yet), "ok", "not-enough-bookies" or "failed".
	lastCreate string
	// term: the list in the metastore is marked terminated; termMaybe: a
	// list marked so may be there (a store of one was attempted);
	// termAsked: Terminate was called; termTold: a Terminate was told it
	// succeeded.
	term, termMaybe, termAsked, termTold bool
}

type modelLedger struct {
	closed     bool
	entries    int64 // acknowledged by its writer (or found by recovery)
	deleted    bool
	writerOpen bool
}

// newListWorld starts as after Open: two closed ledgers and an open one;
// or, one seed in four, as after an Open that could create no ledger (not
// enough bookies), with the two closed ledgers only, or (one in eight)
// none, in which case acts are the state's first actions.
func newListWorld(t *testing.T, seed uint64) (w *listWorld, st *listState, acts []action) {
	w = &listWorld{t: t, seed: seed, rng: mathrand.New(mathrand.NewPCG(seed, 3)), ledgers: map[int64]*modelLedger{}, nextID: 10, trimmed: map[int64]bool{}}
	withoutLedger, closed := seed%4 == 1, int64(2)
	if seed%8 == 5 {
		closed = 0
	}
	for i := int64(0); i < closed+1; i++ {
		if i == closed && withoutLedger {
			break
		}
		id := w.newLedger()
		l := w.ledgers[id]
		if i < closed {
			l.closed, l.entries, l.writerOpen = true, 5, false
		}
		w.list = append(w.list, &metapb.LedgerRef{LedgerId: id, Entries: map[bool]int64{true: 5}[i < closed], Closed: i < closed})
	}
	w.rev = 1
	if withoutLedger {
		w.current, w.lastCreate = -1, "not-enough-bookies"
		st, acts = newListStateWithoutLedger(slices.Clone(w.list), w.rev)
		return w, st, acts
	}
	w.current = w.list[len(w.list)-1].LedgerId
	return w, newListState(slices.Clone(w.list), w.rev), nil
}

// checkRefusal checks why appends are refused: ErrNotEnoughBookies only
// while the last creation failed for want of bookies, and always then
// while a ledger is being created.
func (w *listWorld) checkRefusal(st *listState) {
	w.t.Helper()
	if st.phase == phaseDone || st.ending() || st.terminated {
		return // appends are refused as closed or terminated
	}
	notEnough := w.lastCreate == "not-enough-bookies"
	if errors.Is(st.refusing, ErrNotEnoughBookies) != (notEnough && st.refusing != nil) {
		w.fatalf("appends refused with %v after a creation that ended %q", st.refusing, w.lastCreate)
	}
	if notEnough && st.phase == phaseCreating && !errors.Is(st.refusing, ErrNotEnoughBookies) {
		w.fatalf("no ledger could be created for want of bookies, yet appends are refused with %v", st.refusing)
	}
	if st.takesAppends() && st.refusing != nil {
		w.fatalf("appends taken and refused (%v) at once", st.refusing)
	}
}

func (w *listWorld) newLedger() int64 {
	w.nextID++
	w.ledgers[w.nextID] = &modelLedger{writerOpen: true}
	return w.nextID
}

func (w *listWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("seed %d: %s", w.seed, fmt.Sprintf(format, args...))
}

// checkList checks L1 on a list that is (or may be) in the metastore: every
// ledger but the last is closed, in the list and in its metadata, at the
// entries its writer had acknowledged; no ledger in it is deleted.
func (w *listWorld) checkList(what string, list []*metapb.LedgerRef) {
	w.t.Helper()
	for i, ref := range list {
		l := w.ledgers[ref.LedgerId]
		if l == nil || l.deleted {
			w.fatalf("%s names ledger %d, which is deleted", what, ref.LedgerId)
		}
		if i == len(list)-1 {
			continue
		}
		if !ref.Closed || !l.closed {
			w.fatalf("%s: ledger %d is not the last and is open (list closed=%v, metadata closed=%v)", what, ref.LedgerId, ref.Closed, l.closed)
		}
		if ref.Entries != l.entries {
			w.fatalf("%s: ledger %d recorded with %d entries, %d acknowledged", what, ref.LedgerId, ref.Entries, l.entries)
		}
	}
}

// checkTerminated checks a list marked terminated: every ledger closed
// (L5), at the entries its writer had acknowledged.
func (w *listWorld) checkTerminated(what string, list []*metapb.LedgerRef) {
	w.t.Helper()
	for _, ref := range list {
		if l := w.ledgers[ref.LedgerId]; !ref.Closed || !l.closed || ref.Entries != l.entries {
			w.fatalf("%s: ledger %d closed in the list %v, in its metadata %v, with %d entries of %d", what, ref.LedgerId, ref.Closed, l.closed, ref.Entries, l.entries)
		}
	}
}

func (w *listWorld) inList(id int64) bool {
	return slices.ContainsFunc(w.list, func(r *metapb.LedgerRef) bool { return r.LedgerId == id })
}

// do carries out one action with a random outcome and returns the event's
// follow-up actions; done reports the terminal action. As the managed
// ledger does, I/O actions still queued when the state is done are
// dropped.
func (w *listWorld) do(st *listState, a action, faults bool) (more []action, done bool) {
	fail := func(p int) bool { return faults && w.rng.IntN(100) < p }
	if a.kind <= actStore && st.phase == phaseDone {
		return nil, false
	}
	const now = 1000
	switch a.kind {
	case actCloseWriter:
		l := w.ledgers[a.ledger]
		if !l.writerOpen {
			w.fatalf("close-writer of ledger %d, whose writer is not open", a.ledger)
		}
		if w.current == a.ledger {
			w.current = -1
		}
		l.writerOpen = false
		w.lastCreate = "" // a rollover (or close) starts
		switch r := w.rng.IntN(100); {
		case fail(15) && r < 50: // the close's CAS failed
			return st.writerClosed(0, 0, now, errors.New("etcd unavailable")), false
		case fail(15): // applied, reply lost
			l.closed = true
			return st.writerClosed(0, 0, now, errors.New("etcd timeout")), false
		case fail(3):
			return st.writerClosed(0, 0, now, fmt.Errorf("%w: ledger recovered", ErrFenced)), false
		}
		l.closed = true
		return st.writerClosed(l.entries, l.entries*10, now, nil), false
	case actRecover:
		l := w.ledgers[a.ledger]
		if l.writerOpen {
			w.fatalf("recovering ledger %d while its writer is open", a.ledger)
		}
		if fail(30) {
			return st.recovered(0, 0, now, errors.New("bookies unreachable")), false
		}
		l.closed = true
		return st.recovered(l.entries, l.entries*10, now, nil), false
	case actCreate:
		if w.term {
			w.fatalf("a ledger created for a terminated list (L5)")
		}
		if fail(20) {
			if w.rng.IntN(2) == 0 {
				w.lastCreate = "not-enough-bookies"
				return st.created(0, now, fmt.Errorf("create ledger: %w: need 3, 2 available", ledger.ErrNotEnoughBookies)), false
			}
			w.lastCreate = "failed"
			return st.created(0, now, errors.New("etcd unavailable")), false
		}
		w.lastCreate = "ok"
		return st.created(w.newLedger(), now, nil), false
	case actStore:
		if a.term {
			w.checkTerminated("a list stored terminated", a.list)
			w.termMaybe = true
		} else if w.termMaybe {
			w.fatalf("a list not marked terminated stored after one that was (L5)")
		}
		if w.unknown != nil && !slices.EqualFunc(w.unknown, a.list, func(x, y *metapb.LedgerRef) bool { return proto.Equal(x, y) }) {
			w.fatalf("a store with an unknown outcome is followed by a store of another list (L2)")
		}
		w.checkList("a list stored", a.list)
		apply := func() {
			for _, ref := range w.list {
				if !slices.ContainsFunc(a.list, func(r *metapb.LedgerRef) bool { return r.LedgerId == ref.LedgerId }) {
					w.trimmed[ref.LedgerId] = true // leaves the list: only a trim does that
				}
			}
			w.list, w.rev, w.term = slices.Clone(a.list), w.rev+1, a.term
			w.checkList("the stored list", w.list)
		}
		switch r := w.rng.IntN(100); {
		case fail(20) && r < 40: // not applied
			w.unknown = a.list
			return st.storeDone(0, errors.New("etcd unavailable")), false
		case fail(20): // applied, reply lost
			if a.rev == w.rev {
				apply()
			}
			w.unknown = a.list
			return st.storeDone(0, errors.New("etcd timeout")), false
		case fail(2):
			w.unknown = nil
			return st.storeDone(0, fmt.Errorf("%w: not the owner", ErrFenced)), false
		}
		w.unknown = nil
		if a.rev != w.rev {
			// What storeList does on a bad version: read back.
			if !slices.EqualFunc(w.list, a.list, func(x, y *metapb.LedgerRef) bool { return proto.Equal(x, y) }) {
				w.fatalf("store at revision %d, the list is at %d and holds something else", a.rev, w.rev)
			}
			return st.storeDone(w.rev, nil), false
		}
		apply()
		return st.storeDone(w.rev, nil), false
	case actTerminated:
		if a.err == nil {
			if !w.term {
				w.fatalf("Terminate told it succeeded, and the stored list is not terminated")
			}
			w.checkTerminated("the list of a successful Terminate", w.list)
			w.termTold = true
		}
	case actInstall:
		if w.termAsked {
			w.fatalf("ledger %d installed after Terminate", a.ledger)
		}
		l := w.ledgers[a.ledger]
		if !l.writerOpen || l.closed || w.list[len(w.list)-1].LedgerId != a.ledger {
			w.fatalf("install of ledger %d: writer open %v, closed %v, last of the list %v", a.ledger, l.writerOpen, l.closed, w.list[len(w.list)-1].LedgerId == a.ledger)
		}
		w.current = a.ledger
	case actDiscard:
		l := w.ledgers[a.ledger]
		if l.writerOpen {
			l.writerOpen, l.closed = false, true
		}
		if l.entries > 0 {
			w.fatalf("discarding ledger %d, which has acknowledged entries", a.ledger)
		}
		if a.del {
			if w.inList(a.ledger) {
				w.fatalf("deleting ledger %d, which the stored list names", a.ledger)
			}
			l.deleted = true
		}
	case actDelete:
		for _, id := range a.ids {
			if w.inList(id) {
				w.fatalf("deleting trimmed ledger %d, which the stored list names", id)
			}
			if !w.trimmed[id] {
				w.fatalf("deleting ledger %d, which no stored list dropped", id)
			}
			w.ledgers[id].deleted = true
		}
	case actDone:
		return nil, true
	}
	return nil, false
}

// TestListStateModel drives the ledger-list state machine through random
// interleavings of appends, rollovers, failed appends, trims, closes,
// fencing and abandoned closes, with every I/O step failing now and then
// (a close or a store that failed, or that was applied and whose reply
// was lost). After every step the list in the metastore has every ledger
// but the last closed (L1), and so does every list whose store was
// attempted; a list whose store had an unknown outcome is stored again
// unchanged (L2); at most one I/O action runs at a time (L3); nothing
// referenced is deleted and no created ledger is left open (L4); no
// acknowledged entry is lost; a close completes once I/O works again.
//
// Terminations come among the other events: once asked, no append is
// taken and no ledger installed; a list marked terminated has every
// ledger closed, and every list stored after it is marked too (L5); a
// Terminate is told it succeeded only once such a list is stored; and it
// completes once I/O works again.
//
// One run in four starts as after an Open that could create no ledger
// (not enough bookies): every ledger of the list closed, or none at all;
// appends are refused, with ErrNotEnoughBookies exactly while the last
// creation failed for want of bookies, until a ledger is created.
func TestListStateModel(t *testing.T) {
	for seed := uint64(0); seed < 10000; seed++ {
		w, st, initial := newListWorld(t, seed)
		var queue []action
		ioInFlight := func() bool {
			return slices.ContainsFunc(queue, func(a action) bool { return a.kind <= actStore })
		}
		// As the managed ledger does, an install is carried out with the
		// event that returned it (under the same lock); the rest queues.
		push := func(acts []action) {
			for _, a := range acts {
				if a.kind <= actStore && ioInFlight() {
					w.fatalf("two I/O actions at once (L3): %v while %v", a, queue)
				}
				if a.kind == actInstall {
					w.do(st, a, false)
					continue
				}
				queue = append(queue, a)
			}
		}
		push(initial)
		finished, closing, abandoned := false, false, false
		for step := 0; step < 400 && !(finished && len(queue) == 0); step++ {
			w.checkRefusal(st)
			faults := !closing || step < 300
			if !finished && (len(queue) == 0 || w.rng.IntN(100) < 30) {
				switch r := w.rng.IntN(100); {
				case r < 45: // an append
					if st.takesAppends() && w.termAsked {
						w.fatalf("appends taken after Terminate")
					}
					if st.takesAppends() {
						if w.current < 0 || w.current != st.current().LedgerId {
							w.fatalf("appends taken with ledger %d installed, current %d", w.current, st.current().LedgerId)
						}
						w.ledgers[w.current].entries++
					}
				case r < 55:
					push(st.roll(false))
				case r < 60:
					if st.hasCurrent() {
						push(st.appendFailed(st.current().LedgerId))
					}
				case r < 72:
					if n := len(st.stored); n > 1 {
						acts, ok := st.trim(1 + w.rng.IntN(n-1))
						if !ok && st.phase == phaseTerminated {
							w.fatalf("a terminated list refuses a trim (roll wanted %v)", st.rollWanted)
						}
						push(acts)
					}
				case r < 77:
					closing = true
					push(st.close())
				case r < 78:
					push(st.fence())
				case r < 80:
					if closing && !abandoned {
						abandoned = true
						push(st.abandon())
					}
				case r < 83:
					w.termAsked = true
					push(st.terminate())
				}
				continue
			}
			a := queue[0]
			queue = queue[1:]
			more, done := w.do(st, a, faults)
			push(more)
			finished = finished || done
			w.checkList("the stored list", w.list)
			w.checkRefusal(st)
		}
		if !finished && w.termAsked {
			// I/O works again: a termination completes, and leaves the
			// state terminated.
			push(st.terminate())
			for i := 0; !w.termTold; i++ {
				if i > 100 || len(queue) == 0 {
					w.fatalf("terminate did not complete: phase %v, queue %v", st.phase, queue)
				}
				a := queue[0]
				queue = queue[1:]
				more, done := w.do(st, a, false)
				push(more)
				finished = finished || done
			}
			if !finished && (st.phase != phaseTerminated && st.phase != phaseTrimming || !st.terminated) {
				w.fatalf("terminated, and the phase is %v (terminated %v)", st.phase, st.terminated)
			}
			// Retention goes on after a termination.
			if !finished && st.phase == phaseTerminated && len(st.stored) > 1 {
				acts, ok := st.trim(1)
				if !ok {
					w.fatalf("a terminated list refuses a trim (roll wanted %v)", st.rollWanted)
				}
				push(acts)
			}
		}
		if !finished {
			// I/O works again: a close completes.
			push(st.close())
			for i := 0; !finished || len(queue) > 0; i++ {
				if i > 100 || len(queue) == 0 {
					w.fatalf("close did not complete: phase %v, queue %v", st.phase, queue)
				}
				a := queue[0]
				queue = queue[1:]
				more, done := w.do(st, a, false)
				push(more)
				finished = finished || done
			}
		}
		// After done: nothing open but what the driver closes at done (the
		// current writer after fencing or abandoning), nothing lost.
		for id, l := range w.ledgers {
			if l.writerOpen && id != w.current && !w.inList(id) {
				w.fatalf("ledger %d: writer left open and the ledger in no list (L4)", id)
			}
		}
		if st.err == nil {
			for _, ref := range w.list {
				if !ref.Closed || !w.ledgers[ref.LedgerId].closed {
					w.fatalf("closed cleanly, but ledger %d is open", ref.LedgerId)
				}
			}
		}
		for id, l := range w.ledgers {
			if l.entries > 0 && !w.inList(id) && !w.trimmed[id] {
				w.fatalf("ledger %d with %d acknowledged entries is in no list and was not trimmed", id, l.entries)
			}
		}
		for _, ref := range w.list {
			if l := w.ledgers[ref.LedgerId]; ref.Closed && ref.Entries != l.entries {
				w.fatalf("ledger %d recorded with %d entries, %d acknowledged", ref.LedgerId, ref.Entries, l.entries)
			}
		}
	}
}

// The failed close of the old ledger is item 9 of the correctness sweep:
// the rollover must recover the ledger before adding a new one, so the
// list never holds an open ledger before the last.
func TestListStateFailedCloseRecoversFirst(t *testing.T) {
	st := newListState([]*metapb.LedgerRef{{LedgerId: 5}}, 1)
	acts := st.roll(false)
	if len(acts) != 1 || acts[0].kind != actCloseWriter || acts[0].ledger != 5 {
		t.Fatalf("roll: %v", acts)
	}
	acts = st.writerClosed(0, 0, 0, errors.New("etcd unavailable"))
	if len(acts) != 2 || acts[0].kind != actFailQueue || acts[1].kind != actRecover || acts[1].ledger != 5 {
		t.Fatalf("after a failed close: %v, want fail-queue and recover 5", acts)
	}
	if st.takesAppends() || st.refusing == nil {
		t.Fatal("appends must be refused while the ledger is recovered")
	}
	acts = st.recovered(0, 0, 0, errors.New("bookies unreachable"))
	if len(acts) != 1 || acts[0].kind != actRecover || !acts[0].retry {
		t.Fatalf("after a failed recovery: %v, want recover again", acts)
	}
	acts = st.recovered(5, 50, 7, nil)
	if len(acts) != 1 || acts[0].kind != actCreate {
		t.Fatalf("after recovery: %v, want create", acts)
	}
	acts = st.created(9, 8, nil)
	if len(acts) != 1 || acts[0].kind != actStore {
		t.Fatalf("after create: %v, want store", acts)
	}
	if l := acts[0].list; len(l) != 2 || !l[0].Closed || l[0].Entries != 5 || l[0].Size != 50 || l[1].LedgerId != 9 || l[1].Closed {
		t.Fatalf("stored list %v, want [5 closed with 5 entries, 9 open]", l)
	}
	acts = st.storeDone(2, nil)
	if len(acts) != 1 || acts[0].kind != actInstall || acts[0].ledger != 9 || !st.takesAppends() || st.refusing != nil {
		t.Fatalf("after store: %v, takes appends %v", acts, st.takesAppends())
	}
}

// Close during a rollover is item 10: the new ledger must not be installed
// nor left open; it is closed (and the list records it closed) or, if the
// list never named it, deleted.
func TestListStateCloseDuringRollover(t *testing.T) {
	for _, at := range []listPhase{phaseClosing, phaseCreating, phaseStoring} {
		t.Run(at.String(), func(t *testing.T) {
			st := newListState([]*metapb.LedgerRef{{LedgerId: 5}}, 1)
			step := func(acts []action) []action {
				if st.phase == at {
					if got := st.close(); got != nil {
						t.Fatalf("close during %v started %v while a step runs", at, got)
					}
				}
				return acts
			}
			acts := step(st.roll(false))
			acts = step(st.writerClosed(3, 30, 0, nil))
			var discarded []action
			for st.phase != phaseDone {
				if len(acts) == 0 {
					t.Fatalf("stuck in %v", st.phase)
				}
				a := acts[0]
				acts = acts[1:]
				switch a.kind {
				case actCreate:
					acts = append(acts, step(st.created(9, 0, nil))...)
				case actStore:
					acts = append(acts, step(st.storeDone(2, nil))...)
				case actCloseWriter:
					acts = append(acts, st.writerClosed(0, 0, 0, nil)...)
				case actInstall:
					t.Fatalf("ledger %d installed after close", a.ledger)
				case actDiscard:
					discarded = append(discarded, a)
				}
			}
			if st.err != nil {
				t.Fatalf("close ended with %v", st.err)
			}
			for _, ref := range st.stored {
				if !ref.Closed {
					t.Fatalf("ledger %d open after close: %v", ref.LedgerId, st.stored)
				}
			}
			if at == phaseStoring {
				if len(st.stored) != 2 || st.stored[1].LedgerId != 9 {
					t.Fatalf("list %v, want 9 recorded closed", st.stored)
				}
			} else if len(discarded) == 0 && at == phaseCreating {
				t.Fatal("the ledger created after close was not discarded")
			}
		})
	}
}

// Close while the next ledger cannot be created (not enough bookies): the
// closed ledger is recorded at once, with the metastore alone, rather than
// creation being retried until the closer gives up.
func TestListStateCloseWhileCreationFails(t *testing.T) {
	st := newListState([]*metapb.LedgerRef{{LedgerId: 5}}, 1)
	st.roll(false)
	if acts := st.writerClosed(3, 30, 0, nil); len(acts) != 1 || acts[0].kind != actCreate {
		t.Fatalf("after close: %v", acts)
	}
	if acts := st.close(); acts != nil {
		t.Fatalf("close during creation started %v", acts)
	}
	acts := st.created(0, 0, errors.New("not enough bookies"))
	if len(acts) != 1 || acts[0].kind != actStore || len(acts[0].list) != 1 || !acts[0].list[0].Closed || acts[0].list[0].Entries != 3 {
		t.Fatalf("failed creation after close: %v, want the list stored with ledger 5 closed", acts)
	}
	if acts := st.storeDone(2, nil); len(acts) != 1 || acts[0].kind != actDone || acts[0].err != nil {
		t.Fatalf("after the store: %v", acts)
	}
}

// A rollover waits for a trim whose store keeps failing: appends, which
// queue for the rollover, are refused meanwhile instead of piling up.
func TestListStateRolloverWaitingForATrimRefusesAppends(t *testing.T) {
	st := newListState([]*metapb.LedgerRef{{LedgerId: 4, Closed: true, Entries: 2}, {LedgerId: 5}}, 1)
	if _, ok := st.trim(1); !ok {
		t.Fatal("trim refused")
	}
	if acts := st.roll(false); acts != nil || st.takesAppends() {
		t.Fatalf("roll during a trim: %v, takes appends %v", acts, st.takesAppends())
	}
	acts := st.storeDone(0, errors.New("etcd unavailable"))
	if len(acts) != 2 || acts[0].kind != actFailQueue || acts[1].kind != actStore || !acts[1].retry || st.refusing == nil {
		t.Fatalf("trim store failed with a rollover waiting: %v, refusing %v", acts, st.refusing)
	}
	acts = st.storeDone(2, nil)
	if len(acts) != 3 || acts[0].kind != actDelete || acts[2].kind != actCloseWriter {
		t.Fatalf("trim stored: %v, want delete, trimmed, then the rollover", acts)
	}
}

// A trim asked over an open ledger is refused and remembers nothing.
func TestListStateTrimOverAnOpenLedger(t *testing.T) {
	st := newListState([]*metapb.LedgerRef{{LedgerId: 3, Closed: true}, {LedgerId: 4}, {LedgerId: 5}}, 1)
	if _, ok := st.trim(2); ok {
		t.Fatal("trim over an open ledger accepted")
	}
	if len(st.trimmed) != 0 || st.phase != phaseWriting {
		t.Fatalf("a refused trim left %v, phase %v", st.trimmed, st.phase)
	}
}

// Opened without a ledger (not enough bookies): appends are refused, with
// ErrNotEnoughBookies while creation fails for want of bookies; the first
// ledger created goes after the closed ones and takes appends. A close
// before then stores nothing (the list is stored closed already) and
// leaves no ledger it created behind.
func TestListStateOpenWithoutLedger(t *testing.T) {
	notEnough := fmt.Errorf("create ledger: %w: need 2, 1 available", ledger.ErrNotEnoughBookies)
	for _, stored := range [][]*metapb.LedgerRef{nil, {{LedgerId: 4, Closed: true, Entries: 3}}} {
		st, acts := newListStateWithoutLedger(stored, 1)
		if len(acts) != 1 || acts[0].kind != actCreate || !acts[0].retry || st.takesAppends() || !errors.Is(st.refusing, ErrNotEnoughBookies) {
			t.Fatalf("opened without a ledger: %v, takes appends %v, refusing %v", acts, st.takesAppends(), st.refusing)
		}
		if acts := append(st.roll(false), st.appendFailed(4)...); acts != nil {
			t.Fatalf("roll or a late append failure without a ledger: %v", acts)
		}
		if _, ok := st.trim(1); ok {
			t.Fatal("trim accepted without a ledger")
		}
		for _, c := range []struct {
			err  error
			want error
		}{{notEnough, ErrNotEnoughBookies}, {errors.New("etcd unavailable"), ErrUnavailable}, {notEnough, ErrNotEnoughBookies}} {
			acts = st.created(0, 0, c.err)
			if len(acts) != 1 || acts[0].kind != actCreate || !acts[0].retry || st.refusing != c.want {
				t.Fatalf("creation failed with %v: %v, refusing %v", c.err, acts, st.refusing)
			}
		}
		acts = st.created(9, 5, nil)
		if len(acts) != 1 || acts[0].kind != actStore || st.takesAppends() || st.refusing != ErrUnavailable {
			t.Fatalf("created: %v, refusing %v", acts, st.refusing)
		}
		if l := acts[0].list; len(l) != len(stored)+1 || l[len(l)-1].LedgerId != 9 || l[len(l)-1].Closed || (len(stored) > 0 && !proto.Equal(l[0], stored[0])) {
			t.Fatalf("stored list %v, want %v and 9 open", l, stored)
		}
		acts = st.storeDone(2, nil)
		if len(acts) != 1 || acts[0].kind != actInstall || acts[0].ledger != 9 || !st.takesAppends() || st.refusing != nil {
			t.Fatalf("stored: %v, takes appends %v, refusing %v", acts, st.takesAppends(), st.refusing)
		}
	}
	for _, created := range []int64{0, 9} {
		st, _ := newListStateWithoutLedger([]*metapb.LedgerRef{{LedgerId: 4, Closed: true, Entries: 3}}, 1)
		if acts := st.close(); acts != nil {
			t.Fatalf("close while creating started %v", acts)
		}
		var acts []action
		if created == 0 {
			acts = st.created(0, 0, errCloseWanted)
		} else {
			acts = st.created(created, 0, nil)
			if len(acts) == 0 || acts[0].kind != actDiscard || acts[0].ledger != created || !acts[0].del {
				t.Fatalf("ledger created after close: %v, want it discarded and deleted", acts)
			}
			acts = acts[1:]
		}
		if len(acts) != 1 || acts[0].kind != actDone || acts[0].err != nil || st.phase != phaseDone {
			t.Fatalf("close without a ledger: %v, want done at once", acts)
		}
	}
}
