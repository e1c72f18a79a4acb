package metastore

import "errors"

var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("metastore: key not found")
	// ErrBadVersion: a compare-and-swap lost, the key's revision was not
	// the expected one (or the key existed where it was expected not to).
	ErrBadVersion = errors.New("metastore: bad version")
	// ErrNotOwner: a guarded write failed because the ownership token is
	// no longer valid (the owner key was deleted or re-created).
	ErrNotOwner = errors.New("metastore: ownership token is no longer valid")
	// ErrSessionLost: the session's lease expired or was revoked by
	// someone else.
	ErrSessionLost = errors.New("metastore: session lost")
	// ErrClosed: the store or session was closed by its owner.
	ErrClosed = errors.New("metastore: closed")
)
