package mledger

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	ledgerpkg "github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// listState is the managed ledger's protocol for its ledger list, free of
// I/O: rollover, trimming and closing. The managed ledger feeds it events
// (a rollover or a close is asked, a ledger was closed, created, a list
// was stored, ...) under its lock and carries out the actions it returns,
// one at a time, in a goroutine of its own (see ManagedLedger.run).
//
//	writing ─roll─► closing ─ok─────────────────► creating ─ok─► storing ─ok─► writing
//	   │               └─failed─► recovering ─ok─┘    ↺ failed     ↺ unknown outcome: same list again
//	   └─trim─► trimming ─stored─► writing
//	Open when no ledger can be created (not enough bookies) ─► creating
//	close: after the last ledger is closed, storingClosed ─ok─► done
//	terminate: after the last ledger is closed, storingClosed ─ok─► terminated
//	terminated ─trim─► trimming ─stored─► terminated;  terminated ─close─► done
//	fenced (a write found another owner): done
//
// Terminating is closing without the end: the last ledger is closed as
// Close closes it and the list is stored with it closed and marked
// terminated; the managed ledger then serves reads (and trims) and
// refuses every append, for good. A managed ledger opened on a terminated
// list starts in terminated.
//
// A managed ledger opened while no ledger could be created for want of
// bookies starts in creating, with every ledger of its list closed (the
// list may be empty) and nothing to record (closedLast nil): it serves
// reads of what is stored, refuses appends with ErrNotEnoughBookies, and
// tries again to create a ledger, as a rollover whose creation failed
// does.
//
// Invariants:
//   - L1. Every list stored, and every list whose store was attempted (an
//     attempt whose outcome is unknown may have been applied), has every
//     ledger but the last closed. A new ledger is created only once the
//     last one is closed (by its writer, or else by recovery), and the
//     list that adds it records the closed one in the same write.
//   - L2. A list whose store had an unknown outcome is stored again,
//     unchanged, until the outcome is known: nothing else is written in
//     between, so the store that eventually succeeds (or finds its own
//     value already there) leaves the list the one intended.
//   - L3. At most one I/O action is in flight. Events from outside (roll,
//     trim, close) start I/O only from the writing phase; elsewhere they
//     are remembered and acted on when the running step ends.
//   - L4. After done, no ledger this managed ledger created is open and
//     unreferenced: a created ledger is either in the stored list, or
//     closed and deleted, or (when a store naming it may have been
//     applied) left for the orphan sweeper.
//   - L5. A list is stored terminated only with every ledger closed, and
//     once one was (or may have been) stored terminated, every later list
//     is too: once asked, termination is never undone, and no ledger is
//     created after it.
type listState struct {
	phase listPhase
	// stored is the list as last stored; never modified in place. Its last
	// ledger is the current one (open unless the managed ledger closed).
	stored []*metapb.LedgerRef
	rev    int64 // revision of stored
	// closedLast is the last ledger once closed, before a list records it;
	// nil in creating when the stored list has every ledger closed already
	// (opened without a ledger).
	closedLast *metapb.LedgerRef
	// next is a ledger created and not yet in stored (-1: none).
	next int64
	// nextMaybeStored: a store of a list naming next had an unknown
	// outcome, so that list may be in the metastore: next must not be
	// deleted.
	nextMaybeStored bool
	// storing is the list of the store in flight (or to retry); trimmed,
	// the ledgers it drops.
	storing []*metapb.LedgerRef
	trimmed []int64
	// storingTerminated: storing marks the list terminated.
	storingTerminated bool
	// Asked while another step ran.
	rollWanted, closeWanted bool
	// terminateWanted: termination was asked and its list is not stored
	// yet; terminated: a list marked terminated is stored (phase
	// terminated, or trimming or done from there). Appends are refused
	// while either is set.
	terminateWanted, terminated bool
	// refusing, if not nil, is why appends are refused until a new ledger
	// is in place: ErrUnavailable (a step failed, or the rollover replaces
	// a ledger whose append failed) or ErrNotEnoughBookies (no ledger can
	// be created for want of writable bookies).
	refusing error
	// err, once done: nil after a clean close, ErrFenced or errAbandoned.
	err error
}

type listPhase int

const (
	phaseWriting       listPhase = iota // the last ledger takes appends
	phaseTrimming                       // storing the list without a consumed prefix; appends go on
	phaseClosing                        // closing the last ledger's writer
	phaseRecovering                     // its close failed: recovering it (fence, close at its last entry)
	phaseCreating                       // creating the next ledger
	phaseStoring                        // storing the list that records the closed ledger and adds the next
	phaseStoringClosed                  // closing or terminating: storing the list with the last ledger closed
	phaseTerminated                     // terminated: every ledger closed, reads only
	phaseDone                           // closed or fenced
)

func (p listPhase) String() string {
	return [...]string{"writing", "trimming", "closing", "recovering", "creating", "storing", "storing-closed", "terminated", "done"}[p]
}

type actionKind int

const (
	// I/O actions: each one's result is fed back as an event.
	actCloseWriter actionKind = iota + 1 // close ledger's writer (waits for its appends) -> writerClosed
	actRecover                           // recover ledger (fence it, close it at its end) -> recovered
	actCreate                            // create a ledger -> created
	actStore                             // store list at rev, guarded -> stored
	// Actions without a result.
	actInstall    // ledger is the current one: hand it the queued appends
	actDiscard    // close ledger's writer, unused; delete the ledger if del
	actDelete     // delete the trimmed ledgers ids (no longer in the list)
	actFailQueue  // fail the queued appends: they are refused until a new ledger is in place
	actTrimmed    // tell Trim its outcome: ids dropped, or err
	actTerminated // tell Terminate its outcome: err nil once the terminated list is stored
	actDone       // terminal: err says why
)

func (k actionKind) String() string {
	return [...]string{"", "close-writer", "recover", "create", "store", "install", "discard", "delete", "fail-queue", "trimmed", "terminated", "done"}[k]
}

type action struct {
	kind   actionKind
	ledger int64
	list   []*metapb.LedgerRef // actStore
	rev    int64               // actStore
	term   bool                // actStore: the list is stored terminated
	ids    []int64             // actDelete, actTrimmed
	del    bool                // actDiscard
	retry  bool                // an I/O action again after a failure: back off first
	err    error               // actDone, actTrimmed
}

func (a action) String() string {
	s := a.kind.String()
	if a.retry {
		s += "(retry)"
	}
	if a.term {
		s += "(terminated)"
	}
	return fmt.Sprintf("%s ledger=%d ids=%v err=%v", s, a.ledger, a.ids, a.err)
}

// errStoreConflict is what the I/O layer reports when the stored list is
// neither what was there nor what this owner wrote: someone else changed
// it. Handled as fencing.
var errStoreConflict = errors.New("mledger: the ledger list was changed by someone else")

// errCloseWanted: a ledger creation not attempted, the managed ledger
// closing (fed to created as a failure).
var errCloseWanted = errors.New("mledger: closing: no new ledger needed")

// errAbandoned: Close gave up before the list was stored closed.
var errAbandoned = errors.New("mledger: close abandoned")

// cmpErr returns err, or def if err is nil.
func cmpErr(err, def error) error {
	if err == nil {
		return def
	}
	return err
}

// newListState starts in the writing phase with stored as the list (its
// last ledger open and current) at revision rev.
func newListState(stored []*metapb.LedgerRef, rev int64) *listState {
	return &listState{phase: phaseWriting, stored: stored, rev: rev, next: -1}
}

// newListStateWithoutLedger starts in the creating phase with stored (every
// ledger closed; it may be empty) at revision rev: Open could not create a
// ledger because too few bookies are writable. Appends are refused
// with ErrNotEnoughBookies until a ledger is created; the actions returned
// start trying again.
func newListStateWithoutLedger(stored []*metapb.LedgerRef, rev int64) (*listState, []action) {
	s := &listState{phase: phaseCreating, stored: stored, rev: rev, next: -1, refusing: ErrNotEnoughBookies}
	return s, []action{{kind: actCreate, retry: true}}
}

// newListStateTerminated starts in the terminated phase with stored (a
// list stored terminated, every ledger closed) at revision rev.
func newListStateTerminated(stored []*metapb.LedgerRef, rev int64) *listState {
	return &listState{phase: phaseTerminated, stored: stored, rev: rev, next: -1, terminated: true}
}

// ending reports whether the managed ledger is to stop writing: closing
// or terminating.
func (s *listState) ending() bool { return s.closeWanted || s.terminateWanted }

// store is the action storing s.storing.
func (s *listState) store(retry bool) action {
	return action{kind: actStore, list: s.storing, rev: s.rev, term: s.storingTerminated, retry: retry}
}

// current is the last ledger of the stored list.
func (s *listState) current() *metapb.LedgerRef { return s.stored[len(s.stored)-1] }

// hasCurrent reports whether the stored list has a ledger (it is empty
// only when opened without a ledger on a new partition).
func (s *listState) hasCurrent() bool { return len(s.stored) > 0 }

// takesAppends reports whether appends go to the current ledger's writer
// now (otherwise they queue, or are refused while refusing).
func (s *listState) takesAppends() bool {
	return (s.phase == phaseWriting || s.phase == phaseTrimming) && !s.rollWanted && !s.ending() && !s.terminated
}

// roll asks for a rollover: the current ledger is full, too old, or one of
// its appends failed (failed: appends are refused until the next ledger is
// in place, so that a producer's resent message is not stored after later
// ones).
func (s *listState) roll(failed bool) []action {
	if s.phase == phaseDone || s.ending() || s.terminated {
		return nil
	}
	var acts []action
	if failed {
		acts = s.refuse(ErrUnavailable)
	}
	switch s.phase {
	case phaseWriting:
		s.phase, s.rollWanted = phaseClosing, false
		acts = append(acts, action{kind: actCloseWriter, ledger: s.current().LedgerId})
	case phaseTrimming:
		s.rollWanted = true // once the trim is stored
	}
	return acts
}

// appendFailed: an append to ledger failed (not fenced). A rollover
// replaces the ledger; appends are refused until it is done.
func (s *listState) appendFailed(ledger int64) []action {
	if s.phase == phaseDone || !s.hasCurrent() || s.current().LedgerId != ledger {
		return nil // an earlier ledger, already replaced
	}
	return s.roll(true)
}

// trim asks to drop the first n ledgers (closed and consumed) from the
// list. It returns false if another step runs: try again later.
func (s *listState) trim(n int) ([]action, bool) {
	if s.phase != phaseWriting && s.phase != phaseTerminated || s.rollWanted || s.ending() || n <= 0 || n >= len(s.stored) {
		return nil, false
	}
	for _, ref := range s.stored[:n] {
		if !ref.Closed {
			return nil, false
		}
	}
	for _, ref := range s.stored[:n] {
		s.trimmed = append(s.trimmed, ref.LedgerId)
	}
	s.phase = phaseTrimming
	s.storing, s.storingTerminated = slices.Clone(s.stored[n:]), s.terminated
	return []action{s.store(false)}, true
}

// close asks to close the managed ledger: no new ledger is installed, the
// last one is closed and the list stored with it closed.
func (s *listState) close() []action {
	if s.phase == phaseDone {
		return nil
	}
	s.closeWanted = true
	switch s.phase {
	case phaseWriting:
		s.phase = phaseClosing
		return []action{{kind: actCloseWriter, ledger: s.current().LedgerId}}
	case phaseTerminated:
		return s.finish(nil) // nothing is open
	}
	return nil // the running step sees closeWanted when it ends
}

// terminate asks to terminate the managed ledger: the last ledger is
// closed, as close does, and the list stored with it closed and marked
// terminated; appends are refused from now on. The outcome is told with
// actTerminated (at once if terminated already).
func (s *listState) terminate() []action {
	switch {
	case s.phase == phaseDone:
		return []action{{kind: actTerminated, err: cmpErr(s.err, ErrClosed)}}
	case s.closeWanted && !s.terminateWanted:
		// Closing (unloading): the list being stored is not terminated;
		// the next owner can terminate.
		return []action{{kind: actTerminated, err: ErrClosed}}
	case s.terminated && s.phase != phaseTrimming:
		return []action{{kind: actTerminated}}
	case s.terminated || s.terminateWanted:
		return nil // told when the running step ends
	}
	s.terminateWanted = true
	if s.phase == phaseWriting {
		s.phase = phaseClosing
		return []action{{kind: actCloseWriter, ledger: s.current().LedgerId}}
	}
	return nil // the running step sees terminateWanted when it ends
}

// fence: another owner took over (a write failed on the ownership guard,
// or a ledger was fenced). Terminal.
func (s *listState) fence() []action {
	if s.phase == phaseDone {
		return nil
	}
	return s.finish(ErrFenced)
}

// abandon: the closer gave up waiting (its context ended). Terminal;
// nothing more is written.
func (s *listState) abandon() []action {
	if s.phase == phaseDone {
		return nil
	}
	return s.finish(errAbandoned)
}

// finish ends the protocol: err is nil after a clean close, else ErrFenced
// or errAbandoned.
func (s *listState) finish(err error) []action {
	var acts []action
	if s.next >= 0 {
		// A store naming next that is in flight may yet be applied.
		maybeStored := s.nextMaybeStored || s.phase == phaseStoring
		acts = append(acts, action{kind: actDiscard, ledger: s.next, del: !maybeStored})
		s.next = -1
	}
	if s.phase == phaseTrimming {
		acts = append(acts, action{kind: actTrimmed, err: cmpErr(err, ErrClosed)})
	}
	if s.terminateWanted || s.terminated && s.phase == phaseTrimming {
		acts = append(acts, action{kind: actTerminated, err: cmpErr(err, ErrClosed)})
		s.terminateWanted = false
	}
	s.phase, s.err = phaseDone, err
	s.storing, s.trimmed = nil, nil
	return append(acts, action{kind: actDone, err: err})
}

// writerClosed: the current ledger's writer closed (err nil) with entries
// entries of size bytes in all, or failed to.
func (s *listState) writerClosed(entries, size, nowMs int64, err error) []action {
	if s.phase != phaseClosing {
		return nil
	}
	switch {
	case errors.Is(err, ErrFenced):
		return s.fence()
	case err != nil:
		// The ledger may be open in its metadata (or closed by a write
		// whose reply was lost): recovery closes it at its last entry
		// that may have been acknowledged, whatever happened.
		s.phase = phaseRecovering
		return append(s.refuse(ErrUnavailable), action{kind: actRecover, ledger: s.current().LedgerId})
	}
	return s.lastClosed(entries, size, nowMs)
}

// recovered: the current ledger was recovered (closed at entries, size),
// or recovery failed and is tried again.
func (s *listState) recovered(entries, size, nowMs int64, err error) []action {
	if s.phase != phaseRecovering {
		return nil
	}
	if err != nil {
		return []action{{kind: actRecover, ledger: s.current().LedgerId, retry: true}}
	}
	return s.lastClosed(entries, size, nowMs)
}

func (s *listState) lastClosed(entries, size, nowMs int64) []action {
	ref := proto.Clone(s.current()).(*metapb.LedgerRef)
	ref.Entries, ref.Size, ref.Closed, ref.ClosedAtUnixMs = entries, size, true, nowMs
	s.closedLast = ref
	if s.ending() {
		return s.storeClosed()
	}
	s.phase = phaseCreating
	return []action{{kind: actCreate}}
}

// storeClosed ends a close or a termination once no ledger is open: the
// list is stored with the last ledger closed (and marked terminated), or,
// closing, if it is stored so already (opened without a ledger), the
// protocol is done.
func (s *listState) storeClosed() []action {
	if s.closedLast == nil && !s.terminateWanted {
		return s.finish(nil)
	}
	s.phase = phaseStoringClosed
	s.storing, s.storingTerminated = s.withClosedLast(), s.terminateWanted
	return []action{s.store(false)}
}

// withClosedLast is the stored list with its last ledger recorded closed.
func (s *listState) withClosedLast() []*metapb.LedgerRef {
	l := slices.Clone(s.stored)
	if s.closedLast != nil {
		l[len(l)-1] = s.closedLast
	}
	return l
}

// created: a new ledger was created (or not).
func (s *listState) created(ledger, nowMs int64, err error) []action {
	if s.phase != phaseCreating {
		if err == nil {
			// Done meanwhile (fenced): not ours to use.
			return []action{{kind: actDiscard, ledger: ledger, del: true}}
		}
		return nil
	}
	if err != nil {
		if s.ending() {
			// No new ledger is needed any more: record the closed one.
			return s.storeClosed()
		}
		why := ErrUnavailable
		if errors.Is(err, ledgerpkg.ErrNotEnoughBookies) {
			why = ErrNotEnoughBookies
		}
		acts := s.refuse(why)
		s.refusing = why
		return append(acts, action{kind: actCreate, retry: true})
	}
	if errors.Is(s.refusing, ErrNotEnoughBookies) {
		// There were bookies enough for this one: appends wait for it to be
		// put in place.
		s.refusing = ErrUnavailable
	}
	if s.ending() {
		return append([]action{{kind: actDiscard, ledger: ledger, del: true}}, s.storeClosed()...)
	}
	s.next, s.nextMaybeStored = ledger, false
	s.phase = phaseStoring
	s.storing = append(s.withClosedLast(), &metapb.LedgerRef{LedgerId: ledger, CreatedAtUnixMs: nowMs})
	s.storingTerminated = false
	return []action{s.store(false)}
}

// storeDone: the store in flight succeeded at revision rev, or failed.
// ErrNotOwner and errStoreConflict fence; any other error leaves the
// outcome unknown, and the same list is stored again.
func (s *listState) storeDone(rev int64, err error) []action {
	switch s.phase {
	case phaseTrimming, phaseStoring, phaseStoringClosed:
	default:
		return nil
	}
	if err != nil {
		if errors.Is(err, ErrFenced) || errors.Is(err, errStoreConflict) {
			return s.fence()
		}
		var acts []action
		if s.phase == phaseStoring {
			s.nextMaybeStored = true
			acts = s.refuse(ErrUnavailable)
		}
		if s.phase == phaseTrimming && s.rollWanted {
			// Appends queue for the rollover, which waits for this store:
			// refuse them meanwhile rather than let them pile up.
			acts = s.refuse(ErrUnavailable)
		}
		// The same list again (L2): a terminated one stays so (L5).
		return append(acts, s.store(true))
	}
	s.stored, s.rev, s.storing = s.storing, rev, nil
	switch s.phase {
	case phaseTrimming:
		acts := []action{{kind: actDelete, ids: s.trimmed}, {kind: actTrimmed, ids: s.trimmed}}
		s.trimmed = nil
		s.phase = phaseWriting
		switch {
		case s.terminated:
			s.phase = phaseTerminated
			// To a Terminate asked during the trim, if any.
			acts = append(acts, action{kind: actTerminated})
			if s.closeWanted {
				return append(acts, s.finish(nil)...)
			}
		case s.ending():
			s.phase = phaseClosing
			acts = append(acts, action{kind: actCloseWriter, ledger: s.current().LedgerId})
		case s.rollWanted:
			acts = append(acts, s.roll(false)...)
		}
		return acts
	case phaseStoring:
		s.closedLast, s.next, s.nextMaybeStored = nil, -1, false
		if s.ending() {
			// The new ledger is in the list, open: close it too.
			s.phase = phaseClosing
			return []action{{kind: actCloseWriter, ledger: s.current().LedgerId}}
		}
		s.phase, s.refusing, s.rollWanted = phaseWriting, nil, false
		return []action{{kind: actInstall, ledger: s.current().LedgerId}}
	default: // phaseStoringClosed
		s.closedLast = nil
		if !s.terminateWanted {
			return s.finish(nil)
		}
		s.terminateWanted, s.terminated = false, true
		acts := []action{{kind: actTerminated}}
		if s.closeWanted {
			return append(acts, s.finish(nil)...)
		}
		// A rollover asked before the termination took over is moot; left
		// set, it would refuse every trim.
		s.phase, s.refusing, s.rollWanted = phaseTerminated, nil, false
		return acts
	}
}

// refuse starts refusing appends (a step failed) for the reason why
// (ErrUnavailable or ErrNotEnoughBookies); the queued appends fail once,
// when refusing starts (none queue while refusing). Refusing already, the
// reason stays: only creation changes it (created), so that appends are
// refused with ErrNotEnoughBookies exactly while the last attempt to
// create a ledger failed for want of bookies.
func (s *listState) refuse(why error) []action {
	if s.refusing != nil || s.ending() {
		return nil
	}
	s.refusing = why
	return []action{{kind: actFailQueue}}
}
