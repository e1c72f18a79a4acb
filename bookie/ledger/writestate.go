package ledger

// writeState is the writer's protocol state, free of I/O: it numbers
// entries, says where each goes, counts durable acks and reports entries
// complete strictly in entry order. The Writer feeds it events (append,
// ack, bookie failure, replacement) under its lock and carries out what it
// returns.
//
// Invariants:
//   - pending holds exactly the entries lac+1 .. next-1, in order.
//   - An entry is complete when Qa distinct positions of its write set
//     acked it; it is reported only after every earlier entry was.
//   - While held (an ensemble change is running), completions wait and lac
//     does not move, so the new segment can start at lac+1.
//   - Acks from a failed position are ignored; when it is replaced every
//     pending entry it stores loses that position's ack and must be sent
//     to the replacement. When the writer stops, acks from positions still
//     failed are dropped before the last completions (see stop).
type writeState struct {
	ensemble, writeQuorum, ackQuorum int

	next    int64 // id of the next entry to append
	lac     int64 // last entry completed in order; -1 before the first
	length  int64 // total payload bytes through the last appended entry
	lacLen  int64 // total payload bytes through lac
	pending []*pendingEntry
	held    bool
	failed  map[int]bool // positions whose bookie failed, awaiting replacement
}

// pendingEntry is an appended entry not yet reported complete.
type pendingEntry struct {
	id      int64
	payload []byte
	length  int64  // ledger length through this entry
	acked   uint64 // bit p: position p acked
	nacks   int    // number of set bits in acked
	cb      func(id int64, err error)
}

// target is one (entry, ensemble position) send.
type target struct {
	e   *pendingEntry
	pos int
}

func newWriteState(ensemble, writeQuorum, ackQuorum int, next int64) *writeState {
	return &writeState{
		ensemble: ensemble, writeQuorum: writeQuorum, ackQuorum: ackQuorum,
		next: next, lac: next - 1,
		failed: make(map[int]bool),
	}
}

// append numbers a new entry and returns the sends to make now (positions
// whose bookie is failed are sent after their replacement).
func (w *writeState) append(payload []byte, cb func(int64, error)) (*pendingEntry, []target) {
	w.length += int64(len(payload))
	e := &pendingEntry{id: w.next, payload: payload, length: w.length, cb: cb}
	w.next++
	w.pending = append(w.pending, e)
	var ts []target
	for _, p := range writeSet(e.id, w.ensemble, w.writeQuorum) {
		if !w.failed[p] {
			ts = append(ts, target{e, p})
		}
	}
	return e, ts
}

func (w *writeState) find(id int64) *pendingEntry {
	i := id - (w.lac + 1)
	if i < 0 || i >= int64(len(w.pending)) {
		return nil
	}
	return w.pending[i]
}

// ack records that position pos has entry id durably and returns the
// entries that are now complete, in order.
func (w *writeState) ack(id int64, pos int) []*pendingEntry {
	e := w.find(id)
	if e == nil || w.failed[pos] || !inWriteSet(id, pos, w.ensemble, w.writeQuorum) || e.acked&(1<<pos) != 0 {
		return nil
	}
	e.acked |= 1 << pos
	e.nacks++
	return w.advance()
}

// advance pops complete entries from the head, unless held.
func (w *writeState) advance() []*pendingEntry {
	if w.held {
		return nil
	}
	n := 0
	for n < len(w.pending) && w.pending[n].nacks >= w.ackQuorum {
		n++
	}
	if n == 0 {
		return nil
	}
	done := w.pending[:n:n]
	w.pending = w.pending[n:]
	w.lac = done[n-1].id
	w.lacLen = done[n-1].length
	return done
}

// fail marks a position's bookie failed; it reports whether that is news.
func (w *writeState) fail(pos int) bool {
	if w.failed[pos] {
		return false
	}
	w.failed[pos] = true
	return true
}

// failedPositions lists the failed positions in increasing order.
func (w *writeState) failedPositions() []int {
	var ps []int
	for p := 0; p < w.ensemble; p++ {
		if w.failed[p] {
			ps = append(ps, p)
		}
	}
	return ps
}

// hold stops completions for an ensemble change; the new segment starts
// at the returned entry id (lac+1).
func (w *writeState) hold() int64 {
	w.held = true
	return w.lac + 1
}

// replace records that the given positions now have new bookies: their
// acks of pending entries no longer count, and every pending entry they
// store must be sent to them.
func (w *writeState) replace(positions []int) []target {
	var ts []target
	for _, p := range positions {
		delete(w.failed, p)
		for _, e := range w.pending {
			if !inWriteSet(e.id, p, w.ensemble, w.writeQuorum) {
				continue
			}
			if e.acked&(1<<p) != 0 {
				e.acked &^= 1 << p
				e.nacks--
			}
			ts = append(ts, target{e, p})
		}
	}
	return ts
}

// release ends a hold and returns the entries complete by then.
func (w *writeState) release() []*pendingEntry {
	w.held = false
	return w.advance()
}

// abort removes every pending entry (the writer stops) and returns them.
func (w *writeState) abort() []*pendingEntry {
	p := w.pending
	w.pending = nil
	return p
}

// stop ends the writer: the entries that are complete are returned as
// such, in order, and every other pending entry as failed.
//
// Acks from failed positions no longer count. The writer may stop while
// an ensemble change is running, after its metadata CAS committed and
// before it heard so: the stored write sets then name the replacements,
// not the failed bookies, and an entry counted complete with a failed
// position's ack would be on fewer than Qa bookies of its stored write
// set, so a recovery could decide it absent (invariant W1). Without the
// failed positions an entry has Qa acks from bookies that are in the write
// set whichever way the change went. Such an entry that had Qa acks with
// them fails ("maybe written"), as after a timeout.
func (w *writeState) stop() (complete, failed []*pendingEntry) {
	for p := range w.failed {
		for _, e := range w.pending {
			if e.acked&(1<<p) != 0 {
				e.acked &^= 1 << p
				e.nacks--
			}
		}
	}
	complete = w.release()
	return complete, w.abort()
}
