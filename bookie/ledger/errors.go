package ledger

import "errors"

var (
	// ErrFenced: another client opened the ledger for recovery; this writer
	// stops. Entries whose append failed with it may or may not be in the
	// ledger, like after a timeout.
	ErrFenced = errors.New("ledger: writer fenced by a recovery")
	// ErrNotEnoughBookies: fewer live, writable bookies than needed.
	ErrNotEnoughBookies = errors.New("ledger: not enough bookies")
	// ErrNoSuchLedger: the ledger's metadata does not exist.
	ErrNoSuchLedger = errors.New("ledger: no such ledger")
	// ErrWriterClosed: Append after Close, or after the writer failed.
	ErrWriterClosed = errors.New("ledger: writer closed")
	// ErrReadPastEnd: a read past the last add confirmed of an open ledger
	// or past the last entry of a closed one.
	ErrReadPastEnd = errors.New("ledger: read past the last confirmed entry")
	// ErrEntryUnreadable: no bookie of the entry's write set returned it.
	ErrEntryUnreadable = errors.New("ledger: entry unreadable from every replica")
	// ErrRecoveryIncomplete: too few bookies answered to fence or to decide
	// the last entry; retry when more bookies are reachable.
	ErrRecoveryIncomplete = errors.New("ledger: recovery could not complete")
	// ErrInvalidArgument: bad options or arguments.
	ErrInvalidArgument = errors.New("ledger: invalid argument")
	// ErrNoCopy: no bookie holds an intact copy of an entry to copy from.
	ErrNoCopy = errors.New("ledger: no intact copy to re-replicate from")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("ledger: client closed")
)
