// Package wire holds what the bookie and its clients must agree on beyond
// the protobuf messages: the errors of the bookie protocol with their single
// translation to and from gRPC statuses, and the entry checksum.
//
// Inside the bookie and the ledger client errors are these sentinels,
// wrapped with %w and tested with errors.Is. At the wire, ToStatus turns
// one into a gRPC status carrying a google.rpc.ErrorInfo with Domain and a
// reason; FromStatus turns such a status back into an error that matches
// the same sentinel, keeping the server's message.
package wire

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain of the ErrorInfo details bookies send.
const Domain = "bookie.magnetar.io"

var (
	// ErrFenced: the ledger is fenced; a normal add is refused. For a
	// writer this means another client is recovering the ledger.
	ErrFenced = errors.New("ledger is fenced")
	// ErrBadMasterKey: the request's master key is not the ledger's.
	ErrBadMasterKey = errors.New("wrong master key for the ledger")
	// ErrNoSuchLedger: the bookie holds nothing of the ledger.
	ErrNoSuchLedger = errors.New("no such ledger")
	// ErrNoSuchEntry: the bookie does not hold the entry.
	ErrNoSuchEntry = errors.New("no such entry")
	// ErrEntryTooLarge: the payload exceeds the bookie's maximum entry size.
	ErrEntryTooLarge = errors.New("entry too large")
	// ErrInvalidArgument: a malformed request (negative or zero ids, a
	// missing or oversized master key, ...).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrBadChecksum: the entry's checksum does not match its content.
	ErrBadChecksum = errors.New("entry checksum mismatch")
	// ErrStorage: the bookie's disk failed; it stops serving until it is
	// restarted.
	ErrStorage = errors.New("bookie storage failed")
	// ErrUnavailable: the bookie is shutting down or cannot be reached.
	ErrUnavailable = errors.New("bookie unavailable")
	// ErrReadOnly: the bookie is read-only (its disk is nearly full, it
	// ran out of space, or it is being drained) and refuses normal adds;
	// it still serves reads, and recovery adds while it has space. A
	// writer replaces it like a failed bookie.
	ErrReadOnly = errors.New("bookie is read-only")
	// ErrUnauthenticated: the caller's credentials are missing or
	// invalid.
	ErrUnauthenticated = errors.New("not authenticated by the bookie")
	// ErrUnauthorized: the caller's role may not use the bookie (only the
	// bookie's --allowed-roles may: brokers and autorecovery).
	ErrUnauthorized = errors.New("not authorized by the bookie")
)

// StreamExpired is the reason of the add stream's control result (request
// id 0) telling the client that the credentials it opened the stream with
// expired: it sends its next adds on a new stream and closes this one
// once every add sent on it is answered.
const StreamExpired = "STREAM_EXPIRED"

// The wire table: one row per sentinel.
var table = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrFenced, codes.FailedPrecondition, "LEDGER_FENCED"},
	{ErrBadMasterKey, codes.PermissionDenied, "BAD_MASTER_KEY"},
	{ErrNoSuchLedger, codes.NotFound, "NO_SUCH_LEDGER"},
	{ErrNoSuchEntry, codes.NotFound, "NO_SUCH_ENTRY"},
	{ErrEntryTooLarge, codes.InvalidArgument, "ENTRY_TOO_LARGE"},
	{ErrInvalidArgument, codes.InvalidArgument, "INVALID_ARGUMENT"},
	{ErrBadChecksum, codes.DataLoss, "BAD_CHECKSUM"},
	{ErrStorage, codes.Unavailable, "STORAGE_FAILED"},
	{ErrUnavailable, codes.Unavailable, "BOOKIE_UNAVAILABLE"},
	{ErrReadOnly, codes.FailedPrecondition, "BOOKIE_READ_ONLY"},
	{ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED"},
	{ErrUnauthorized, codes.PermissionDenied, "UNAUTHORIZED"},
}

// Reason returns the wire reason of err's sentinel, or "" if it has none.
func Reason(err error) string {
	for _, row := range table {
		if errors.Is(err, row.err) {
			return row.reason
		}
	}
	return ""
}

// ToStatus converts an error into a gRPC status error. Errors that match no
// sentinel become codes.Internal; context errors keep their gRPC codes.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, row := range table {
		if errors.Is(err, row.err) {
			st := status.New(row.code, err.Error())
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: row.reason, Domain: Domain}); derr == nil {
				st = d
			}
			return st.Err()
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// Error is a bookie error received over the wire. It matches its sentinel
// with errors.Is and prints the server's message.
type Error struct {
	Sentinel error
	Code     codes.Code
	Msg      string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Sentinel }

// FromStatus converts an error returned by a gRPC call to a bookie back
// into one matching a sentinel. Transport failures (Unavailable without a
// reason, DeadlineExceeded) match ErrUnavailable; errors that are not
// statuses (context errors, for example) are returned as they are.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != Domain {
			continue
		}
		for _, row := range table {
			if row.reason == info.Reason {
				return &Error{Sentinel: row.err, Code: st.Code(), Msg: st.Message()}
			}
		}
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return &Error{Sentinel: ErrUnavailable, Code: st.Code(), Msg: fmt.Sprintf("%s: %s", st.Code(), st.Message())}
	}
	return err
}

// ToResult is ToStatus for the results of a stream: the code, reason and
// message an error travels as (code 0 for nil).
func ToResult(err error) (code uint32, reason, msg string) {
	if err == nil {
		return 0, "", ""
	}
	st := status.Convert(ToStatus(err))
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == Domain {
			reason = info.Reason
		}
	}
	return uint32(st.Code()), reason, st.Message()
}

// FromResult is FromStatus for a result received on a stream.
func FromResult(code uint32, reason, msg string) error {
	if code == 0 {
		return nil
	}
	for _, row := range table {
		if row.reason == reason {
			return &Error{Sentinel: row.err, Code: codes.Code(code), Msg: msg}
		}
	}
	return FromStatus(status.Error(codes.Code(code), msg))
}
