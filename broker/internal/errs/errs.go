// Package errs holds the sentinel errors that the broker and its admin API
// (broker/admin) both return. They are mapped to the wire once, at the
// edge (broker/errors.go); package broker re-exports them under the same
// names, so errors.Is identity is the same whichever package a caller
// names.
package errs

import (
	"errors"
	"fmt"
)

// Sentinels of the client protocol and the admin API alike.
var (
	// ErrTopicNotFound: the topic does not exist.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrSubscriptionNotFound: the topic has no such subscription.
	ErrSubscriptionNotFound = errors.New("subscription not found")
	// ErrInvalidMessage: a stored or sent message cannot be read.
	ErrInvalidMessage = errors.New("invalid message")
	// ErrInvalidArgument: the request is malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotAllowed: the request is well formed but refused.
	ErrNotAllowed = errors.New("not allowed")
	// ErrServiceNotReady: try again later.
	ErrServiceNotReady = errors.New("service not ready")
	// ErrNotFound: what the request names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: what the request creates exists already.
	ErrConflict = errors.New("already exists")
	// ErrNonPersistent refuses on a non-persistent topic what needs its
	// messages stored (a seek, a peek, a backlog to skip or expire, the
	// last message id, termination). A kind of ErrNotAllowed; HTTP 405,
	// as Pulsar answers.
	ErrNonPersistent = fmt.Errorf("%w on a non-persistent topic", ErrNotAllowed)
)

// Errors of the admin REST API alone; they never reach the client
// protocol.
var (
	ErrUnknownPath      = errors.New("no such admin path")
	ErrMethodNotAllowed = errors.New("method not allowed")

	ErrClusterNotFound       = errors.New("cluster not found")
	ErrFailureDomainNotFound = errors.New("failure domain not found")
	ErrBrokerNotFound        = errors.New("broker not found")
	// ErrTopicPoliciesDisabled answers topic-level policies: Magnetar has
	// namespace policies only, as Pulsar with topicLevelPoliciesEnabled
	// off (and Pulsar's 405).
	ErrTopicPoliciesDisabled = errors.New("topic level policies are disabled")
	// ErrPartitionedTopic refuses, as Pulsar does (405), an operation that
	// works on one partition at a time when given a partitioned topic.
	ErrPartitionedTopic = errors.New("not allowed on a partitioned topic")
	// ErrNotImplemented answers an admin call Pulsar has and Magnetar does
	// not (docs/pulsar-compatibility.md lists them): HTTP 501, as Pulsar
	// answers the calls it does not implement.
	ErrNotImplemented = errors.New("not implemented by Magnetar")
	// ErrNoSchema: the topic has no schema (or not the version asked
	// for).
	ErrNoSchema = errors.New("no schema")
)

// Errorf wraps sentinel with a message: errors.Is finds the sentinel, the
// message says what was wrong.
func Errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
