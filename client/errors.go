package client

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

var (
	// ErrInvalidOptions: options rejected at construction.
	ErrInvalidOptions = errors.New("client: invalid options")
	// ErrClosed: the client, producer or consumer was closed.
	ErrClosed = errors.New("client: closed")
	// ErrSendTimeout: no receipt within SendTimeout; the message may or
	// may not be stored.
	ErrSendTimeout = errors.New("client: send timed out")
	// ErrMessageTooLarge: the message exceeds the broker's maximum size.
	ErrMessageTooLarge = errors.New("client: message too large")
	// ErrTopicNotFound: the topic does not exist (and is not created on
	// first use).
	ErrTopicNotFound = errors.New("client: topic not found")
	// ErrConsumerBusy: an exclusive subscription already has a consumer, or
	// the subscription has another type.
	ErrConsumerBusy = errors.New("client: consumer busy")
	// ErrProducerBusy: a producer with the same name is connected.
	ErrProducerBusy = errors.New("client: producer busy")
	// ErrNotAllowed: the broker refused the operation.
	ErrNotAllowed = errors.New("client: not allowed")
	// ErrInvalidTopicName: the topic name is not valid.
	ErrInvalidTopicName = errors.New("client: invalid topic name")
	// ErrUnavailable: no broker could be reached, or it is not ready; the
	// client retries by itself where it can.
	ErrUnavailable = errors.New("client: broker unavailable")
	// ErrNotEnoughBookies: the cluster has fewer writable bookies than the
	// topic's ensemble size, so nothing can be stored for now; what is
	// stored stays readable. It is retriable, an ErrUnavailable too: a
	// producer keeps resending within its SendTimeout, and a send that
	// times out meanwhile fails with an ErrSendTimeout that wraps it.
	ErrNotEnoughBookies error = retriableError("client: not enough bookies to store messages")
	// ErrTopicTerminated: the topic was terminated (an administrator's
	// terminate): it takes no more messages, ever. A producer whose topic
	// is terminated fails what it has pending with it, and every later
	// send; creating a producer on such a topic fails with it. Consumers
	// read on to the end (Consumer.HasReachedEndOfTopic).
	ErrTopicTerminated = errors.New("client: topic terminated")
	// ErrIncompatibleSchema: the topic has a schema and its namespace
	// enforces schema validation, so a producer without one (this SDK's)
	// is refused.
	ErrIncompatibleSchema = errors.New("client: incompatible schema")
	// ErrUnauthenticated: the broker refused the credentials (none, a bad
	// signature, another algorithm, expired). Not retried.
	ErrUnauthenticated = errors.New("client: authentication failed")
	// ErrUnauthorized: the role may not do this.
	ErrUnauthorized = errors.New("client: not authorized")
	// ErrBacklogQuotaHeld: the topic's backlog is over its backlog quota,
	// whose policy is producer_request_hold. It is retriable, an
	// ErrUnavailable too: sends are held (resent) until the backlog is
	// consumed or SendTimeout, and a producer's creation is retried
	// within OperationTimeout.
	ErrBacklogQuotaHeld error = retriableError("client: producer held: the topic's backlog is over its quota")
	// ErrBacklogQuotaExceeded: the same with policy producer_exception:
	// sends and producer creation fail at once.
	ErrBacklogQuotaExceeded = errors.New("client: producer blocked: the topic's backlog is over its quota")
)

// retriableError is a package error that a retry may cure: it is also an
// ErrUnavailable.
type retriableError string

func (e retriableError) Error() string        { return string(e) }
func (e retriableError) Is(target error) bool { return target == ErrUnavailable }

// Error is an error reported by a broker.
type Error struct {
	Reason  brokerpb.ErrorReason
	Message string
	err     error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the package error matching the reason.
func (e *Error) Unwrap() error { return e.err }

var reasonErrors = map[brokerpb.ErrorReason]error{
	brokerpb.ErrorReason_INVALID_TOPIC_NAME:  ErrInvalidTopicName,
	brokerpb.ErrorReason_TOPIC_NOT_FOUND:     ErrTopicNotFound,
	brokerpb.ErrorReason_CONSUMER_BUSY:       ErrConsumerBusy,
	brokerpb.ErrorReason_PRODUCER_BUSY:       ErrProducerBusy,
	brokerpb.ErrorReason_MESSAGE_TOO_LARGE:   ErrMessageTooLarge,
	brokerpb.ErrorReason_NOT_ALLOWED:         ErrNotAllowed,
	brokerpb.ErrorReason_SERVICE_NOT_READY:   ErrUnavailable,
	brokerpb.ErrorReason_NOT_OWNER:           ErrUnavailable,
	brokerpb.ErrorReason_TOPIC_CLOSED:        ErrUnavailable,
	brokerpb.ErrorReason_PERSISTENCE_ERROR:   ErrUnavailable,
	brokerpb.ErrorReason_NOT_ENOUGH_BOOKIES:  ErrNotEnoughBookies,
	brokerpb.ErrorReason_TOPIC_TERMINATED:    ErrTopicTerminated,
	brokerpb.ErrorReason_INCOMPATIBLE_SCHEMA: ErrIncompatibleSchema,

	brokerpb.ErrorReason_AUTHENTICATION_ERROR: ErrUnauthenticated,
	brokerpb.ErrorReason_AUTHORIZATION_ERROR:  ErrUnauthorized,

	brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR:     ErrBacklogQuotaHeld,
	brokerpb.ErrorReason_PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION: ErrBacklogQuotaExceeded,
}

// reasonError is the client error of a broker's reason. A reason this
// client does not know (a newer broker's) is taken as retriable: a send
// refused for it is resent until SendTimeout, rather than failed at once
// for what may be a passing condition.
func reasonError(reason brokerpb.ErrorReason, msg string) error {
	err := reasonErrors[reason]
	if _, known := brokerpb.ErrorReason_name[int32(reason)]; !known {
		err = ErrUnavailable
	}
	return &Error{Reason: reason, Message: msg, err: err}
}

// fromStatus turns a gRPC error from a broker into a client error.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == "broker.magnetar.io" {
			if r, ok := brokerpb.ErrorReason_value[info.Reason]; ok {
				return reasonError(brokerpb.ErrorReason(r), st.Message())
			}
		}
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		// Only a message over gRPC's size limit gets it.
		return fmt.Errorf("%w: %s", ErrMessageTooLarge, st.Message())
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return fmt.Errorf("%w: %s", ErrUnavailable, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%w: %s", ErrClosed, st.Message())
	case codes.Unauthenticated:
		return fmt.Errorf("%w: %s", ErrUnauthenticated, st.Message())
	case codes.PermissionDenied:
		return fmt.Errorf("%w: %s", ErrUnauthorized, st.Message())
	}
	return err
}

// retriable reports whether an operation failed for a reason that a
// reconnection may cure.
func retriable(err error) bool {
	return errors.Is(err, ErrUnavailable)
}
