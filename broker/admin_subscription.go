package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

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

// subscriptionStart is where a subscription created by the admin API
// starts.
type subscriptionStart struct {
	earliest, latest bool
	at               mledger.Position // else: the first entry delivered
}

func (st subscriptionStart) String() string {
	switch {
	case st.earliest:
		return "earliest"
	case st.latest:
		return "latest"
	}
	return st.at.String()
}

// body is the canonical JSON of st, sent to the owners of partitions.
func (st subscriptionStart) body() map[string]int64 {
	switch {
	case st.earliest:
		return map[string]int64{"ledgerId": -1, "entryId": -1}
	case st.latest:
		return map[string]int64{"ledgerId": math.MaxInt64, "entryId": math.MaxInt64}
	}
	return map[string]int64{"ledgerId": st.at.Ledger, "entryId": st.at.Entry}
}

// readSubscriptionStart decodes the request's message id.
func readSubscriptionStart(r *http.Request) (subscriptionStart, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return subscriptionStart{}, errorf(ErrInvalidArgument, "request body: %v", err)
	}
	if b := bytes.TrimSpace(body); len(b) == 0 || string(b) == "null" {
		switch q := r.URL.Query().Get("messageId"); q {
		case "", "latest":
			return subscriptionStart{latest: true}, nil
		case "earliest":
			return subscriptionStart{earliest: true}, nil
		default:
			return subscriptionStart{}, errorf(ErrInvalidArgument, "messageId=%q: want earliest or latest, or a message id in the body", q)
		}
	}
	var id struct {
		LedgerID *int64 `json:"ledgerId"`
		EntryID  *int64 `json:"entryId"`
	}
	if err := json.Unmarshal(body, &id); err != nil {
		return subscriptionStart{}, errorf(ErrInvalidArgument, `request body: want a message id {"ledgerId": L, "entryId": E} (-1, -1 for earliest): %v`, err)
	}
	if id.LedgerID == nil || id.EntryID == nil {
		return subscriptionStart{}, errorf(ErrInvalidArgument, "request body: a message id needs ledgerId and entryId")
	}
	l, e := *id.LedgerID, *id.EntryID
	switch {
	case l == -1 && e == -1:
		return subscriptionStart{earliest: true}, nil
	case l == math.MaxInt64 && e == math.MaxInt64:
		return subscriptionStart{latest: true}, nil
	case l < 0 || e < 0:
		return subscriptionStart{}, errorf(ErrInvalidArgument, "message id %d:%d: want -1:-1 (earliest) or a position with no negative part", l, e)
	}
	return subscriptionStart{at: mledger.Position{Ledger: l, Entry: e}}, nil
}

// createSubscriptionREST serves PUT .../subscription/{sub}.
func (s *Server) createSubscriptionREST(r *http.Request) error {
	n, err := topicOf(r)
	if err != nil {
		return err
	}
	name := r.PathValue("sub")
	if err := checkName("subscription", name); err != nil {
		return err
	}
	start, err := readSubscriptionStart(r)
	if err != nil {
		return err
	}
	parts, err := s.md.partitions(r.Context(), n)
	if err != nil {
		return err
	}
	if parts == 0 {
		t, err := s.adminTopic(r) // or a redirect to its owner
		if err != nil {
			return err
		}
		return t.createSubscription(r.Context(), name, start)
	}
	conflicts := 0
	var errs []error
	for i := 0; i < parts; i++ {
		err := s.createSubscriptionOnPartition(r, n.Partition(i), name, start)
		switch {
		case errors.Is(err, ErrConflict):
			conflicts++
		case err != nil:
			errs = append(errs, fmt.Errorf("partition %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if conflicts == parts {
		return errorf(ErrConflict, "subscription %s already exists on every partition of %s", name, n)
	}
	return nil
}

// createSubscriptionOnPartition creates the subscription on one partition:
// here, or by asking the partition's owner.
func (s *Server) createSubscriptionOnPartition(r *http.Request, pn topicname.Name, name string, start subscriptionStart) error {
	ctx := r.Context()
	err := s.ownedElsewhere(ctx, topicPath(pn), r)
	var redirect *redirectError
	if errors.As(err, &redirect) {
		return s.putJSON(ctx, redirect.withPath("/admin/v2/persistent/"+pn.NamespaceName()+"/"+pn.Local+"/subscription/"+name), start.body())
	}
	if err != nil {
		return err
	}
	t, err := s.getTopic(ctx, pn, true)
	if err != nil {
		return err
	}
	return t.createSubscription(ctx, name, start)
}

// putJSON sends a PUT with a JSON body to another broker's admin API and
// turns its error answer back into our sentinel.
func (s *Server) putJSON(ctx context.Context, u string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return s.peerSend(ctx, http.MethodPut, u, b)
}

// peerSend sends a request (with a JSON body, if any) to another broker's
// admin API and turns its error answer back into our sentinel.
func (s *Server) peerSend(ctx context.Context, method, u string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.peerDo(req)
	if err != nil {
		return errorf(ErrServiceNotReady, "ask the owner: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var answer struct {
		Reason string `json:"reason"`
		Code   string `json:"errorCode"`
	}
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(out, &answer) != nil || answer.Reason == "" {
		answer.Reason = strings.TrimSpace(string(out))
	}
	return fmt.Errorf("%w: the owner answered %s", remoteSentinel(resp.StatusCode, answer.Code), answer.Reason)
}

// remoteSentinel maps another broker's admin answer back to the sentinel
// it came from (the inverse of restCodeOf, as far as it matters here).
func remoteSentinel(status int, code string) error {
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		// The other broker refused this broker's credentials, not the
		// caller's (see --client-auth-token-file).
		return errorf(ErrServiceNotReady, "another broker refused this broker's credentials (%d %s): check --client-auth-token-file and the TLS certificates", status, code)
	}
	for _, row := range errorTable {
		if row.http == status && row.reason.String() == code {
			return row.err
		}
	}
	switch status {
	case http.StatusConflict:
		return ErrConflict
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusBadRequest:
		return ErrInvalidArgument
	}
	return ErrServiceNotReady
}

// createSubscription creates a durable subscription with no consumer at
// start (ErrConflict if it exists), and persists its cursor.
func (t *topic) createSubscription(ctx context.Context, name string, start subscriptionStart) error {
	if _, err := t.subscription(name); err == nil {
		return errorf(ErrConflict, "subscription %s already exists on %s", name, t.name)
	}
	req := &brokerpb.Subscribe{Subscription: name, Durable: true, InitialPosition: brokerpb.InitialPosition_LATEST}
	seek := false
	if !start.earliest && !start.latest {
		switch first, last := t.ml.First(), t.ml.LastConfirmed(); {
		case !first.Before(start.at): // at or before the first stored entry
			start.earliest = true
		case last.Before(start.at): // after the last one
			start.latest = true
		default:
			seek = true
		}
	}
	if start.earliest {
		req.InitialPosition = brokerpb.InitialPosition_EARLIEST
	}
	sub, err := t.getOrCreateSubscription(ctx, req)
	if err != nil {
		return err
	}
	if seek {
		sub.seek(start.at, nil)
	}
	return sub.cur.Persist(ctx)
}

// subscriptionRoutes serves the subscriptions of a topic under Pulsar's
// paths. The calls Pulsar takes on a partitioned topic apply to every
// partition (onPartitions); skip, peek and a reset to a message id take
// one partition, and a partitioned topic's name is refused (405), as in
// Pulsar.
func (s *Server) subscriptionRoutes(h route) {
	const subBase = "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}"
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/subscriptions", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		out, err := s.forPartitions(r, "subscriptions", func(t *topic) (any, error) { return t.durableSubscriptions(), nil })
		if err != nil {
			return nil, err
		}
		m, partitioned := out.(map[string]any)
		if !partitioned {
			return out, nil
		}
		// A partitioned topic's: those of any partition.
		seen := map[string]bool{}
		names := []string{}
		for pn, v := range m["partitions"].(map[string]any) {
			subs, ok := v.([]string)
			if !ok { // another broker's answer
				b, _ := v.(json.RawMessage)
				if err := json.Unmarshal(b, &subs); err != nil {
					return nil, errorf(ErrServiceNotReady, "subscriptions of %s from its owner: %v", pn, err)
				}
			}
			for _, sub := range subs {
				if !seen[sub] {
					seen[sub] = true
					names = append(names, sub)
				}
			}
		}
		slices.Sort(names)
		return names, nil
	})
	h("PUT "+subBase, s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.createSubscriptionREST(r)
	})
	h("DELETE "+subBase, s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		force := r.URL.Query().Get("force") == "true"
		return nil, s.onPartitions(r, nil, func(t *topic) error {
			return t.removeSubscription(r.Context(), r.PathValue("sub"), force)
		})
	})
	h("POST "+subBase+"/resetcursor/{timestamp}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
		if err != nil {
			return nil, errorf(ErrInvalidArgument, "timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp"))
		}
		return nil, s.onPartitions(r, nil, func(t *topic) error {
			sub, err := t.subscription(r.PathValue("sub"))
			if err != nil {
				return err
			}
			p, err := t.findByTime(r.Context(), ts)
			if err != nil {
				return err
			}
			sub.seek(p, nil)
			return nil
		})
	})
	h("POST "+subBase+"/resetcursor", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		var id struct {
			LedgerID int64 `json:"ledgerId"`
			EntryID  int64 `json:"entryId"`
		}
		if err := readJSON(r, &id, false); err != nil {
			return nil, err
		}
		if id.LedgerID < 0 || id.EntryID < 0 {
			return nil, errorf(ErrInvalidArgument, "message id %d:%d", id.LedgerID, id.EntryID)
		}
		_, sub, err := s.adminPartitionSubscription(r)
		if err != nil {
			return nil, err
		}
		sub.seek(mledger.Position{Ledger: id.LedgerID, Entry: id.EntryID}, nil)
		return nil, nil
	})
	h("POST "+subBase+"/skip/{n}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 1 {
			return nil, errorf(ErrInvalidArgument, "skip count %q must be a positive integer", r.PathValue("n"))
		}
		t, sub, err := s.adminPartitionSubscription(r)
		if err != nil {
			return nil, err
		}
		return nil, sub.skip(r.Context(), t, n)
	})
	// Clearing the backlog: everything published so far is acknowledged.
	h("POST "+subBase+"/skip_all", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.onPartitions(r, nil, func(t *topic) error {
			sub, err := t.subscription(r.PathValue("sub"))
			if err != nil {
				return err
			}
			sub.skipAll(t)
			return nil
		})
	})
	h("POST "+subBase+"/expireMessages/{seconds}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		cutoff, err := expiryCutoff(r)
		if err != nil {
			return nil, err
		}
		return nil, s.onPartitions(r, nil, func(t *topic) error {
			sub, err := t.subscription(r.PathValue("sub"))
			if err != nil {
				return err
			}
			return sub.expireAll(r.Context(), cutoff)
		})
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/all_subscription/expireMessages/{seconds}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		cutoff, err := expiryCutoff(r)
		if err != nil {
			return nil, err
		}
		return nil, s.onPartitions(r, nil, func(t *topic) error {
			for _, sub := range t.subscriptions() {
				if !sub.durable {
					continue
				}
				if err := sub.expireAll(r.Context(), cutoff); err != nil {
					return err
				}
			}
			return nil
		})
	})
	h("GET "+subBase+"/position/{n}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 1 || n > 10000 {
			return nil, errorf(ErrInvalidArgument, "position %q must be in 1..10000", r.PathValue("n"))
		}
		t, sub, err := s.adminPartitionSubscription(r)
		if err != nil {
			return nil, err
		}
		return sub.peek(r.Context(), t, n)
	})
}

// expiryCutoff is the publish time before which expireMessages/{seconds}
// expires messages.
func expiryCutoff(r *http.Request) (int64, error) {
	secs, err := strconv.ParseInt(r.PathValue("seconds"), 10, 64)
	if err != nil || secs < 0 || secs > math.MaxInt64/1000 {
		return 0, errorf(ErrInvalidArgument, "expiry %q: want a number of seconds, 0 or more", r.PathValue("seconds"))
	}
	return time.Now().UnixMilli() - secs*1000, nil
}

// durableSubscriptions lists the topic's durable subscriptions.
func (t *topic) durableSubscriptions() []string {
	names := []string{}
	for _, sub := range t.subscriptions() {
		if sub.durable {
			names = append(names, sub.name)
		}
	}
	return names
}

// adminPartitionSubscription is the subscription of an admin request on
// one partition (or non-partitioned topic).
func (s *Server) adminPartitionSubscription(r *http.Request) (*topic, *subscription, error) {
	t, err := s.adminPartition(r)
	if err != nil {
		return nil, nil, err
	}
	sub, err := t.subscription(r.PathValue("sub"))
	return t, sub, err
}

// onPartitions runs an admin call on a topic, or on every partition of a
// partitioned one: fn here for the partitions this broker owns (or that
// nobody owns: it loads them), the same request (with body) sent to the
// owner of each other one. A non-partitioned topic owned elsewhere is
// answered by a redirect. A partition without the subscription is
// skipped, unless no partition has it (ErrSubscriptionNotFound).
func (s *Server) onPartitions(r *http.Request, body []byte, fn func(*topic) error) error {
	ctx := r.Context()
	n, err := topicOf(r)
	if err != nil {
		return err
	}
	parts, err := s.md.partitions(ctx, n)
	if err != nil {
		return err
	}
	if parts == 0 {
		t, err := s.adminTopic(r)
		if err != nil {
			return err
		}
		return fn(t)
	}
	prefix := "/admin/v2/persistent/" + n.NamespaceName() + "/" + n.Local
	var errs []error
	missing := 0
	for i := 0; i < parts; i++ {
		pn := n.Partition(i)
		err := s.ownedElsewhere(ctx, topicPath(pn), r)
		var redirect *redirectError
		switch {
		case errors.As(err, &redirect):
			u := redirect.withPath("/admin/v2/persistent/" + pn.NamespaceName() + "/" + pn.Local + strings.TrimPrefix(r.URL.Path, prefix))
			if r.URL.RawQuery != "" {
				u += "?" + r.URL.RawQuery
			}
			err = s.peerSend(ctx, r.Method, u, body)
		case err == nil:
			var t *topic
			if t, err = s.getTopic(ctx, pn, true); err == nil {
				err = fn(t)
			}
		}
		switch {
		case errors.Is(err, ErrSubscriptionNotFound):
			missing++
		case err != nil:
			errs = append(errs, fmt.Errorf("partition %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if missing == parts {
		return errorf(ErrSubscriptionNotFound, "no partition of %s has subscription %s", n, r.PathValue("sub"))
	}
	return nil
}
