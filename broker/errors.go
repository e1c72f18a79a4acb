package broker

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/bookie/autorecovery"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker/internal/cursor"
	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// ErrorDomain of the ErrorInfo details brokers send.
const ErrorDomain = "broker.magnetar.io"

// The sentinels the admin API shares are defined in broker/internal/errs
// (broker/admin cannot import this package); these are the same values.
var (
	ErrTopicNotFound        = errs.ErrTopicNotFound
	ErrSubscriptionNotFound = errs.ErrSubscriptionNotFound
	ErrConsumerBusy         = errors.New("consumer busy")
	ErrProducerBusy         = errors.New("producer busy")
	ErrMessageTooLarge      = errors.New("message too large")
	ErrInvalidMessage       = errs.ErrInvalidMessage
	ErrInvalidArgument      = errs.ErrInvalidArgument
	ErrNotAllowed           = errs.ErrNotAllowed
	ErrNonPersistent        = errs.ErrNonPersistent
	ErrNotOwner             = errors.New("topic not owned by this broker")
	ErrServiceNotReady      = errs.ErrServiceNotReady
	ErrTopicClosed          = errors.New("topic closed")
	// ErrTopicTerminated: the topic was terminated; it takes no more
	// messages nor producers (Pulsar's TopicTerminatedError).
	ErrTopicTerminated = errors.New("topic terminated")
	ErrNotFound        = errs.ErrNotFound
	ErrConflict        = errs.ErrConflict
)

// The wire table: sentinel, reason, gRPC code, HTTP status.
var errorTable = []struct {
	err    error
	reason brokerpb.ErrorReason
	code   codes.Code
	http   int
}{
	{topicname.ErrInvalid, brokerpb.ErrorReason_INVALID_TOPIC_NAME, codes.InvalidArgument, http.StatusBadRequest},
	{ErrTopicNotFound, brokerpb.ErrorReason_TOPIC_NOT_FOUND, codes.NotFound, http.StatusNotFound},
	{ErrSubscriptionNotFound, brokerpb.ErrorReason_SUBSCRIPTION_NOT_FOUND, codes.NotFound, http.StatusNotFound},
	{ErrNotFound, brokerpb.ErrorReason_TOPIC_NOT_FOUND, codes.NotFound, http.StatusNotFound},
	{ErrConsumerBusy, brokerpb.ErrorReason_CONSUMER_BUSY, codes.FailedPrecondition, http.StatusConflict},
	{ErrProducerBusy, brokerpb.ErrorReason_PRODUCER_BUSY, codes.FailedPrecondition, http.StatusConflict},
	{ErrConflict, brokerpb.ErrorReason_NOT_ALLOWED, codes.AlreadyExists, http.StatusConflict},
	{ErrMessageTooLarge, brokerpb.ErrorReason_MESSAGE_TOO_LARGE, codes.InvalidArgument, http.StatusRequestEntityTooLarge},
	{ErrInvalidMessage, brokerpb.ErrorReason_INVALID_MESSAGE, codes.InvalidArgument, http.StatusBadRequest},
	{ErrInvalidArgument, brokerpb.ErrorReason_INVALID_ARGUMENT, codes.InvalidArgument, http.StatusBadRequest},
	{ErrNotAllowed, brokerpb.ErrorReason_NOT_ALLOWED, codes.FailedPrecondition, http.StatusPreconditionFailed},
	{ErrNotOwner, brokerpb.ErrorReason_NOT_OWNER, codes.Unavailable, http.StatusServiceUnavailable},
	{mledger.ErrFenced, brokerpb.ErrorReason_NOT_OWNER, codes.Unavailable, http.StatusServiceUnavailable},
	{cursor.ErrFenced, brokerpb.ErrorReason_NOT_OWNER, codes.Unavailable, http.StatusServiceUnavailable},
	{ErrTopicClosed, brokerpb.ErrorReason_TOPIC_CLOSED, codes.Unavailable, http.StatusServiceUnavailable},
	{mledger.ErrClosed, brokerpb.ErrorReason_TOPIC_CLOSED, codes.Unavailable, http.StatusServiceUnavailable},
	{ErrTopicTerminated, brokerpb.ErrorReason_TOPIC_TERMINATED, codes.FailedPrecondition, http.StatusPreconditionFailed},
	{mledger.ErrTerminated, brokerpb.ErrorReason_TOPIC_TERMINATED, codes.FailedPrecondition, http.StatusPreconditionFailed},
	{ErrIncompatibleSchema, brokerpb.ErrorReason_INCOMPATIBLE_SCHEMA, codes.FailedPrecondition, http.StatusConflict},
	{ErrServiceNotReady, brokerpb.ErrorReason_SERVICE_NOT_READY, codes.Unavailable, http.StatusServiceUnavailable},
	{mledger.ErrUnavailable, brokerpb.ErrorReason_SERVICE_NOT_READY, codes.Unavailable, http.StatusServiceUnavailable},
	// Too few writable bookies: mledger.ErrNotEnoughBookies (appends
	// refused while no ledger can be created) wraps it, as do cursor
	// ledger creations and a writer that found no replacement bookie.
	{ledger.ErrNotEnoughBookies, brokerpb.ErrorReason_NOT_ENOUGH_BOOKIES, codes.Unavailable, http.StatusServiceUnavailable},
	{ErrBacklogQuotaHeld, brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR, codes.Unavailable, http.StatusServiceUnavailable},
	{ErrBacklogQuotaExceeded, brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION, codes.FailedPrecondition, http.StatusPreconditionFailed},
	{auth.ErrUnauthenticated, brokerpb.ErrorReason_AUTHENTICATION_ERROR, codes.Unauthenticated, http.StatusUnauthorized},
	{ErrUnauthorized, brokerpb.ErrorReason_AUTHORIZATION_ERROR, codes.PermissionDenied, http.StatusForbidden},
	// A stream whose token expired: the client reconnects with a fresh
	// one (retriable).
	{auth.ErrExpired, brokerpb.ErrorReason_SERVICE_NOT_READY, codes.Unavailable, http.StatusUnauthorized},
}

// Errors of the admin REST API alone; they never reach the client
// protocol. Those broker/admin returns are defined in broker/internal/errs
// (see there); these are the same values.
var (
	ErrUnknownPath           = errs.ErrUnknownPath
	ErrMethodNotAllowed      = errs.ErrMethodNotAllowed
	ErrClusterNotFound       = errs.ErrClusterNotFound
	ErrFailureDomainNotFound = errs.ErrFailureDomainNotFound
	ErrBrokerNotFound        = errs.ErrBrokerNotFound
	ErrTopicPoliciesDisabled = errs.ErrTopicPoliciesDisabled
	ErrPartitionedTopic      = errs.ErrPartitionedTopic

	// ErrBacklogQuotaHeld and ErrBacklogQuotaExceeded refuse new messages
	// and producers while a topic's backlog is over its namespace's
	// backlog quota (policies producer_request_hold, producer_exception).
	ErrBacklogQuotaHeld     = errors.New("producer held: the backlog is over its quota")
	ErrBacklogQuotaExceeded = errors.New("producer blocked: the backlog is over its quota")
	// ErrNotEmpty refuses to delete a tenant with namespaces or a
	// namespace with topics (Pulsar's 409).
	ErrNotEmpty = errors.New("not empty")
)

// ErrNotImplemented answers a call Pulsar has and Magnetar does not
// (errs.ErrNotImplemented).
var ErrNotImplemented = errs.ErrNotImplemented

// The REST-only table: sentinel, the JSON "errorCode", HTTP status. These codes
// are not brokerpb.ErrorReason values (the SDK never sees them), so they
// need no proto change.
var restErrorTable = []struct {
	err  error
	code string
	http int
}{
	{ErrUnknownPath, "UNKNOWN_PATH", http.StatusNotFound},
	{ErrMethodNotAllowed, "METHOD_NOT_ALLOWED", http.StatusMethodNotAllowed},
	{ErrNotImplemented, "NOT_IMPLEMENTED", http.StatusNotImplemented},
	{ErrClusterNotFound, "CLUSTER_NOT_FOUND", http.StatusNotFound},
	{ErrFailureDomainNotFound, "FAILURE_DOMAIN_NOT_FOUND", http.StatusNotFound},
	{ErrBrokerNotFound, "BROKER_NOT_FOUND", http.StatusNotFound},
	{ErrTopicPoliciesDisabled, "TOPIC_POLICIES_DISABLED", http.StatusMethodNotAllowed},
	{ErrPartitionedTopic, "PARTITIONED_TOPIC", http.StatusMethodNotAllowed},
	{ErrNotEmpty, "NOT_EMPTY", http.StatusConflict},
	{ErrNoSchema, "SCHEMA_NOT_FOUND", http.StatusNotFound},
	{ErrNonPersistent, "NOT_ALLOWED", http.StatusMethodNotAllowed},
	{autorecovery.ErrUnknownBookie, "BOOKIE_NOT_FOUND", http.StatusNotFound},
	{autorecovery.ErrTooFewBookies, "NOT_ENOUGH_BOOKIES", http.StatusPreconditionFailed},
	{autorecovery.ErrNotDraining, "NOT_DRAINING", http.StatusConflict},
	{autorecovery.ErrInvalidArgument, "INVALID_ARGUMENT", http.StatusBadRequest},
}

// restCodeOf returns the JSON code and HTTP status of an admin API error:
// the REST-only table first, then the wire table.
func restCodeOf(err error) (string, int) {
	for _, row := range restErrorTable {
		if errors.Is(err, row.err) {
			return row.code, row.http
		}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return brokerpb.ErrorReason_INVALID_ARGUMENT.String(), http.StatusRequestEntityTooLarge
	}
	reason, _, status := reasonOf(err)
	return reason.String(), status
}

// reasonOf returns the wire reason of an error: PERSISTENCE_ERROR for
// storage failures that match no sentinel.
func reasonOf(err error) (brokerpb.ErrorReason, codes.Code, int) {
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			return row.reason, row.code, row.http
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return brokerpb.ErrorReason_SERVICE_NOT_READY, codes.Canceled, http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return brokerpb.ErrorReason_PERSISTENCE_ERROR, codes.DeadlineExceeded, http.StatusGatewayTimeout
	}
	return brokerpb.ErrorReason_PERSISTENCE_ERROR, codes.Internal, http.StatusInternalServerError
}

// toStatus is the one translation of errors to gRPC statuses.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	reason, code, _ := reasonOf(err)
	st := status.New(code, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason.String(), Domain: ErrorDomain}); derr == nil {
		st = d
	}
	return st.Err()
}

// errorf wraps sentinel with a message (errs.Errorf).
func errorf(sentinel error, format string, args ...any) error {
	return errs.Errorf(sentinel, format, args...)
}
