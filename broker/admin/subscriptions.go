package admin

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/broker/internal/naming"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Subscriptions is what the subscriptions resource asks of the broker.
// Each call takes the request r: a topic another broker owns is answered
// by a Redirect to it, and the calls Pulsar takes on a partitioned topic
// reach every partition, those other brokers own by sending them the same
// request (a partition without the subscription is skipped, unless no
// partition has it: errs.ErrSubscriptionNotFound).
type Subscriptions interface {
	// Subscriptions lists a topic's durable subscriptions (a partitioned
	// topic's: those of any partition, sorted).
	Subscriptions(r *http.Request, n topicname.Name) ([]string, error)
	// CreateSubscription creates durable subscription sub at start, on
	// every partition of a partitioned topic (errs.ErrConflict if it
	// existed on all of them).
	CreateSubscription(r *http.Request, n topicname.Name, sub string, start SubscriptionStart) error
	// DeleteSubscription deletes a subscription; with connected
	// consumers only if force.
	DeleteSubscription(r *http.Request, n topicname.Name, sub string, force bool) error
	// ResetCursorToTime moves the subscription to the first message
	// published at or after ts (milliseconds since the epoch).
	ResetCursorToTime(r *http.Request, n topicname.Name, sub string, ts int64) error
	// ClearBacklog acknowledges everything published so far.
	ClearBacklog(r *http.Request, n topicname.Name, sub string) error
	// ExpireMessages acknowledges every message published before cutoff
	// (milliseconds since the epoch).
	ExpireMessages(r *http.Request, n topicname.Name, sub string, cutoff int64) error
	// ExpireAllSubscriptions is ExpireMessages on every durable
	// subscription.
	ExpireAllSubscriptions(r *http.Request, n topicname.Name, cutoff int64) error
	// The calls below take one partition (or non-partitioned topic): a
	// partitioned topic's name is errs.ErrPartitionedTopic.

	// ResetCursor moves the subscription to position p.
	ResetCursor(r *http.Request, n topicname.Name, sub string, p mledger.Position) error
	// Skip acknowledges the next count unacknowledged messages.
	Skip(r *http.Request, n topicname.Name, sub string, count int) error
	// Peek is the stored entry of the pos-th unacknowledged message (from
	// 1).
	Peek(r *http.Request, n topicname.Name, sub string, pos int) (mledger.Entry, error)
}

// Creating a subscription through the admin API:
// PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}, as
// Pulsar's PersistentTopics.createSubscription. The body is a message id,
// the JSON Pulsar's admin clients send: the Java admin a ResetCursorData
// ({"ledgerId", "entryId", "partitionIndex", "isExcluded", "batchIndex",
// "properties"}), pulsar-client-go's pulsaradmin a utils.MessageID
// ({"ledgerId", "entryId", "partitionedIndex"}). As in Pulsar:
//   - ledgerId and entryId -1 (MessageId.earliest) start at the first
//     stored message; both math.MaxInt64 (MessageId.latest) at the end;
//   - any other id starts at that message, included
//     (PersistentTopicsBase.internalCreateSubscriptionForNonPartitionedTopic
//     creates the cursor, then resetCursor(ledgerId:entryId)); an id before
//     the first stored message starts at the first one, an id after the
//     last at the end;
//   - no body (or null) starts at the end (Pulsar since its internalCreateSubscription
//     defaults to MessageId.latest; older versions took earliest);
//   - the partition and batch indexes, isExcluded and properties are not
//     used (Pulsar passes only ledgerId:entryId to every partition);
//   - the "replicated" query parameter is ignored (no geo-replication);
//   - on a partitioned topic the subscription is created on every
//     partition, through the partition's owner; the answer is 409 only if
//     it existed on all of them, and any other failure is reported.
//
// Magnetar's own "?messageId=earliest" (or "latest") is still read when
// there is no body. A body that is not a message id is 400 and creates
// nothing.

// SubscriptionStart is where a subscription created by the admin API
// starts.
type SubscriptionStart struct {
	Earliest, Latest bool
	At               mledger.Position // else: the first entry delivered
}

// String names the start as Magnetar's ?messageId= does, or the
// position.
func (st SubscriptionStart) String() string {
	switch {
	case st.Earliest:
		return "earliest"
	case st.Latest:
		return "latest"
	}
	return st.At.String()
}

// Body is the canonical JSON of st, sent to the owners of partitions.
func (st SubscriptionStart) Body() map[string]int64 {
	switch {
	case st.Earliest:
		return map[string]int64{"ledgerId": -1, "entryId": -1}
	case st.Latest:
		return map[string]int64{"ledgerId": math.MaxInt64, "entryId": math.MaxInt64}
	}
	return map[string]int64{"ledgerId": st.At.Ledger, "entryId": st.At.Entry}
}

// readSubscriptionStart decodes the request's message id.
func readSubscriptionStart(r *http.Request) (SubscriptionStart, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return SubscriptionStart{}, errorf(errs.ErrInvalidArgument, "request body: %v", err)
	}
	if b := bytes.TrimSpace(body); len(b) == 0 || string(b) == "null" {
		switch q := r.URL.Query().Get("messageId"); q {
		case "", "latest":
			return SubscriptionStart{Latest: true}, nil
		case "earliest":
			return SubscriptionStart{Earliest: true}, nil
		default:
			return SubscriptionStart{}, errorf(errs.ErrInvalidArgument, "messageId=%q: want earliest or latest, or a message id in the body", q)
		}
	}
	var id struct {
		LedgerID *int64 `json:"ledgerId"`
		EntryID  *int64 `json:"entryId"`
	}
	if err := json.Unmarshal(body, &id); err != nil {
		return SubscriptionStart{}, errorf(errs.ErrInvalidArgument, `request body: want a message id {"ledgerId": L, "entryId": E} (-1, -1 for earliest): %v`, err)
	}
	if id.LedgerID == nil || id.EntryID == nil {
		return SubscriptionStart{}, errorf(errs.ErrInvalidArgument, "request body: a message id needs ledgerId and entryId")
	}
	l, e := *id.LedgerID, *id.EntryID
	switch {
	case l == -1 && e == -1:
		return SubscriptionStart{Earliest: true}, nil
	case l == math.MaxInt64 && e == math.MaxInt64:
		return SubscriptionStart{Latest: true}, nil
	case l < 0 || e < 0:
		return SubscriptionStart{}, errorf(errs.ErrInvalidArgument, "message id %d:%d: want -1:-1 (earliest) or a position with no negative part", l, e)
	}
	return SubscriptionStart{At: mledger.Position{Ledger: l, Entry: e}}, nil
}

// subscriptionRoutes serves the subscriptions of a topic under Pulsar's
// paths. The calls Pulsar takes on a partitioned topic apply to every
// partition; skip, peek and a reset to a message id take one partition,
// and a partitioned topic's name is refused (405), as in Pulsar.
func subscriptionRoutes(h route, z Rules, b Subscriptions) {
	for _, d := range topicname.Domains {
		subscriptionDomainRoutes(h, z, b, "/admin/v2/"+d.String()+"/{tenant}/{ns}/{topic}")
	}
}

// subscriptionDomainRoutes serves the subscriptions of the topics under
// topicBase, of one domain.
func subscriptionDomainRoutes(h route, z Rules, b Subscriptions, topicBase string) {
	subBase := topicBase + "/subscription/{sub}"
	// onTopic runs fn with the topic of the path.
	onTopic := func(fn func(r *http.Request, n topicname.Name) (any, error)) handler {
		return func(r *http.Request) (any, error) {
			n, err := TopicOf(r)
			if err != nil {
				return nil, err
			}
			return fn(r, n)
		}
	}
	h("GET "+topicBase+"/subscriptions", z.TopicConsume, onTopic(func(r *http.Request, n topicname.Name) (any, error) {
		return b.Subscriptions(r, n)
	}))
	h("PUT "+subBase, z.TopicConsume, onTopic(func(r *http.Request, n topicname.Name) (any, error) {
		name := r.PathValue("sub")
		if err := naming.Check("subscription", name); err != nil {
			return nil, err
		}
		start, err := readSubscriptionStart(r)
		if err != nil {
			return nil, err
		}
		return nil, b.CreateSubscription(r, n, name, start)
	}))
	h("DELETE "+subBase, z.TopicConsume, onTopic(func(r *http.Request, n topicname.Name) (any, error) {
		return nil, b.DeleteSubscription(r, n, r.PathValue("sub"), r.URL.Query().Get("force") == "true")
	}))
	h("POST "+subBase+"/resetcursor/{timestamp}", z.TopicConsume, func(r *http.Request) (any, error) {
		ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
		if err != nil {
			return nil, errorf(errs.ErrInvalidArgument, "timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp"))
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, b.ResetCursorToTime(r, n, r.PathValue("sub"), ts)
	})
	h("POST "+subBase+"/resetcursor", z.TopicConsume, func(r *http.Request) (any, error) {
		var id struct {
			LedgerID int64 `json:"ledgerId"`
			EntryID  int64 `json:"entryId"`
		}
		if err := readJSON(r, &id, false); err != nil {
			return nil, err
		}
		if id.LedgerID < 0 || id.EntryID < 0 {
			return nil, errorf(errs.ErrInvalidArgument, "message id %d:%d", id.LedgerID, id.EntryID)
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, b.ResetCursor(r, n, r.PathValue("sub"), mledger.Position{Ledger: id.LedgerID, Entry: id.EntryID})
	})
	h("POST "+subBase+"/skip/{n}", z.TopicConsume, func(r *http.Request) (any, error) {
		count, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || count < 1 {
			return nil, errorf(errs.ErrInvalidArgument, "skip count %q must be a positive integer", r.PathValue("n"))
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, b.Skip(r, n, r.PathValue("sub"), count)
	})
	// Clearing the backlog: everything published so far is acknowledged.
	h("POST "+subBase+"/skip_all", z.TopicConsume, onTopic(func(r *http.Request, n topicname.Name) (any, error) {
		return nil, b.ClearBacklog(r, n, r.PathValue("sub"))
	}))
	h("POST "+subBase+"/expireMessages/{seconds}", z.TopicConsume, func(r *http.Request) (any, error) {
		cutoff, err := expiryCutoff(r)
		if err != nil {
			return nil, err
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, b.ExpireMessages(r, n, r.PathValue("sub"), cutoff)
	})
	h("POST "+topicBase+"/all_subscription/expireMessages/{seconds}", z.TopicConsume, func(r *http.Request) (any, error) {
		cutoff, err := expiryCutoff(r)
		if err != nil {
			return nil, err
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return nil, b.ExpireAllSubscriptions(r, n, cutoff)
	})
	h("GET "+subBase+"/position/{n}", z.TopicConsume, func(r *http.Request) (any, error) {
		pos, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || pos < 1 || pos > 10000 {
			return nil, errorf(errs.ErrInvalidArgument, "position %q must be in 1..10000", r.PathValue("n"))
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return rawEntry(b.Peek(r, n, r.PathValue("sub"), pos))
	})
}

// expiryCutoff is the publish time before which expireMessages/{seconds}
// expires messages.
func expiryCutoff(r *http.Request) (int64, error) {
	secs, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
	if err != nil || secs < 0 || secs > math.MaxInt64/1000 {
		return 0, errorf(errs.ErrInvalidArgument, "expiry %q: want a number of seconds, 0 or more", r.PathValue("seconds"))
	}
	return time.Now().UnixMilli() - secs*1000, nil
}
