package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The subscriptions resource of the admin API
// (broker/admin/subscriptions.go). The calls Pulsar takes on a
// partitioned topic apply to every partition (onPartitions); skip, peek
// and a reset to a message id take one partition
// (adminPartitionSubscription).

func (b adminBackend) Subscriptions(r *http.Request, n topicname.Name) ([]string, error) {
	out, err := b.s.forPartitions(r, n, "subscriptions", func(t *topic) (any, error) { return t.durableSubscriptions(), nil })
	if err != nil {
		return nil, err
	}
	m, partitioned := out.(map[string]any)
	if !partitioned {
		return out.([]string), nil
	}
	// A partitioned topic's: those of any partition.
	seen := map[string]bool{}
	names := []string{}
	for pn, v := range m["partitions"].(map[string]any) {
		subs, ok := v.([]string)
		if !ok { // another broker's answer
			raw, _ := v.(json.RawMessage)
			if err := json.Unmarshal(raw, &subs); err != nil {
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
}

func (b adminBackend) CreateSubscription(r *http.Request, n topicname.Name, sub string, start admin.SubscriptionStart) error {
	return b.s.createSubscriptionREST(r, n, sub, start)
}

func (b adminBackend) DeleteSubscription(r *http.Request, n topicname.Name, sub string, force bool) error {
	return b.s.onPartitions(r, n, nil, func(t *topic) error {
		return t.removeSubscription(r.Context(), sub, force)
	})
}

func (b adminBackend) ResetCursorToTime(r *http.Request, n topicname.Name, sub string, ts int64) error {
	if err := requirePersistent(n, "reset cursor"); err != nil {
		return err
	}
	return b.s.onPartitions(r, n, nil, func(t *topic) error {
		one, err := t.subscription(sub)
		if err != nil {
			return err
		}
		p, err := t.findByTime(r.Context(), ts)
		if err != nil {
			return err
		}
		one.seek(p, nil)
		return nil
	})
}

func (b adminBackend) ClearBacklog(r *http.Request, n topicname.Name, sub string) error {
	if err := requirePersistent(n, "clear backlog"); err != nil {
		return err
	}
	return b.s.onPartitions(r, n, nil, func(t *topic) error {
		one, err := t.subscription(sub)
		if err != nil {
			return err
		}
		one.skipAll(t)
		return nil
	})
}

func (b adminBackend) ExpireMessages(r *http.Request, n topicname.Name, sub string, cutoff int64) error {
	if err := requirePersistent(n, "expire messages"); err != nil {
		return err
	}
	return b.s.onPartitions(r, n, nil, func(t *topic) error {
		one, err := t.subscription(sub)
		if err != nil {
			return err
		}
		return one.expireAll(r.Context(), cutoff)
	})
}

func (b adminBackend) ExpireAllSubscriptions(r *http.Request, n topicname.Name, cutoff int64) error {
	if err := requirePersistent(n, "expire messages"); err != nil {
		return err
	}
	return b.s.onPartitions(r, n, nil, func(t *topic) error {
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
}

func (b adminBackend) ResetCursor(r *http.Request, n topicname.Name, sub string, p mledger.Position) error {
	if err := requirePersistent(n, "reset cursor"); err != nil {
		return err
	}
	_, one, err := b.s.adminPartitionSubscription(r, n, sub)
	if err != nil {
		return err
	}
	one.seek(p, nil)
	return nil
}

func (b adminBackend) Skip(r *http.Request, n topicname.Name, sub string, count int) error {
	if err := requirePersistent(n, "skip messages"); err != nil {
		return err
	}
	t, one, err := b.s.adminPartitionSubscription(r, n, sub)
	if err != nil {
		return err
	}
	return one.skip(r.Context(), t, count)
}

func (b adminBackend) Peek(r *http.Request, n topicname.Name, sub string, pos int) (mledger.Entry, error) {
	if err := requirePersistent(n, "peek messages"); err != nil {
		return mledger.Entry{}, err
	}
	t, one, err := b.s.adminPartitionSubscription(r, n, sub)
	if err != nil {
		return mledger.Entry{}, err
	}
	return one.peek(r.Context(), t, pos)
}

// createSubscriptionREST serves PUT .../subscription/{sub} (see
// broker/admin/subscriptions.go).
func (s *Server) createSubscriptionREST(r *http.Request, n topicname.Name, name string, start admin.SubscriptionStart) error {
	parts, err := s.md.partitions(r.Context(), n)
	if err != nil {
		return err
	}
	if parts == 0 {
		t, err := s.adminTopic(r, n) // or a redirect to its owner
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
func (s *Server) createSubscriptionOnPartition(r *http.Request, pn topicname.Name, name string, start admin.SubscriptionStart) error {
	ctx := r.Context()
	err := s.ownedElsewhere(ctx, topicPath(pn), r)
	var redirect *redirectError
	if errors.As(err, &redirect) {
		return s.putJSON(ctx, redirect.withPath(adminPath(pn)+"/subscription/"+name), start.Body())
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
	_, err := s.peerCall(ctx, method, u, body)
	return err
}

// peerCall is peerSend returning the answer's body (up to 1 MiB).
func (s *Server) peerCall(ctx context.Context, method, u string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.peerDo(req)
	if err != nil {
		return nil, errorf(ErrServiceNotReady, "ask the owner: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return nil, errorf(ErrServiceNotReady, "ask the owner: %v", err)
		}
		return out, nil
	}
	var answer struct {
		Reason string `json:"reason"`
		Code   string `json:"errorCode"`
	}
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(out, &answer) != nil || answer.Reason == "" {
		answer.Reason = strings.TrimSpace(string(out))
	}
	return nil, fmt.Errorf("%w: the owner answered %s", remoteSentinel(resp.StatusCode, answer.Code), answer.Reason)
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
func (t *topic) createSubscription(ctx context.Context, name string, start admin.SubscriptionStart) error {
	if _, err := t.subscription(name); err == nil {
		return errorf(ErrConflict, "subscription %s already exists on %s", name, t.name)
	}
	req := &brokerpb.Subscribe{Subscription: name, Durable: true, InitialPosition: brokerpb.InitialPosition_LATEST}
	if t.ml == nil {
		// Non-persistent: kept, empty, until unsubscribed or the topic
		// unloads; it gets what is published from now on.
		_, err := t.getOrCreateSubscription(ctx, req)
		return err
	}
	seek := false
	if !start.Earliest && !start.Latest {
		switch first, last := t.ml.First(), t.ml.LastConfirmed(); {
		case !first.Before(start.At): // at or before the first stored entry
			start.Earliest = true
		case last.Before(start.At): // after the last one
			start.Latest = true
		default:
			seek = true
		}
	}
	if start.Earliest {
		req.InitialPosition = brokerpb.InitialPosition_EARLIEST
	}
	sub, err := t.getOrCreateSubscription(ctx, req)
	if err != nil {
		return err
	}
	if seek {
		sub.seek(start.At, nil)
	}
	return sub.cur.Persist(ctx)
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
func (s *Server) adminPartitionSubscription(r *http.Request, n topicname.Name, name string) (*topic, *subscription, error) {
	t, err := s.adminPartition(r, n)
	if err != nil {
		return nil, nil, err
	}
	sub, err := t.subscription(name)
	return t, sub, err
}

// onPartitions runs an admin call on a topic, or on every partition of a
// partitioned one: fn here for the partitions this broker owns (or that
// nobody owns: it loads them), the same request (with body) sent to the
// owner of each other one. A non-partitioned topic owned elsewhere is
// answered by a redirect. A partition without the subscription is
// skipped, unless no partition has it (ErrSubscriptionNotFound).
func (s *Server) onPartitions(r *http.Request, n topicname.Name, body []byte, fn func(*topic) error) error {
	ctx := r.Context()
	parts, err := s.md.partitions(ctx, n)
	if err != nil {
		return err
	}
	if parts == 0 {
		t, err := s.adminTopic(r, n)
		if err != nil {
			return err
		}
		return fn(t)
	}
	prefix := adminPath(n)
	var errs []error
	missing := 0
	for i := 0; i < parts; i++ {
		pn := n.Partition(i)
		err := s.ownedElsewhere(ctx, topicPath(pn), r)
		var redirect *redirectError
		switch {
		case errors.As(err, &redirect):
			u := redirect.withPath(adminPath(pn) + strings.TrimPrefix(r.URL.Path, prefix))
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
