package ledger

// The pure protocol rules: which bookies hold an entry, when fencing is
// complete, and what a recovery read's answers mean. No I/O here, so that
// each rule can be tested exhaustively.

// writeSet returns the ensemble positions that store entry: Qw consecutive
// positions starting at entry mod E (striping).
func writeSet(entry int64, ensemble, writeQuorum int) []int {
	ws := make([]int, writeQuorum)
	start := int(entry % int64(ensemble))
	for i := range ws {
		ws[i] = (start + i) % ensemble
	}
	return ws
}

// inWriteSet reports whether position pos stores entry.
func inWriteSet(entry int64, pos, ensemble, writeQuorum int) bool {
	start := int(entry % int64(ensemble))
	d := (pos - start + ensemble) % ensemble
	return d < writeQuorum
}

// fencingComplete reports whether the fence answers received (answered[p]
// for position p) stop the old writer for good: in every write set, fewer
// than Qa bookies may still accept its adds, i.e. at least Qw-Qa+1 of each
// write set are fenced. With E > Qw every rotation is a write set.
func fencingComplete(answered []bool, writeQuorum, ackQuorum int) bool {
	e := len(answered)
	need := writeQuorum - ackQuorum + 1
	for start := 0; start < e; start++ {
		n := 0
		for i := 0; i < writeQuorum; i++ {
			if answered[(start+i)%e] {
				n++
			}
		}
		if n < need {
			return false
		}
	}
	return true
}

// readOutcome is what a recovery read learns about one entry.
type readOutcome int

const (
	// entryUnknown: not enough answers yet to decide.
	entryUnknown readOutcome = iota
	// entryPresent: some bookie has it; it may have been acknowledged.
	entryPresent
	// entryAbsent: enough bookies of its write set lack it that it cannot
	// have reached Qa acks: it was never acknowledged.
	entryAbsent
)

// recoveryDecision decides an entry from its write set's answers: present
// as soon as one bookie has it; absent only when at least Qw-Qa+1 bookies
// (QC) say "no such entry", because then at most Qa-1 can hold it. Errors
// and silence prove nothing.
func recoveryDecision(found, noSuchEntry, writeQuorum, ackQuorum int) readOutcome {
	switch {
	case found > 0:
		return entryPresent
	case noSuchEntry >= writeQuorum-ackQuorum+1:
		return entryAbsent
	}
	return entryUnknown
}
