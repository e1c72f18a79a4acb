package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/broker/console"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// adminHandler serves the admin REST API (broker/admin, over
// adminBackend), the console and the ops endpoints, behind
// authentication. Every answer of the API is JSON, errors included
// (restCodeOf).
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	api := admin.New(adminBackend{s}, s.adminRules(), restCodeOf)
	api.Register(mux)
	mux.Handle("GET "+console.Prefix, console.Handler())
	mux.Handle("GET /console", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	// With authorization on, profiles are for superusers (the command line
	// they show may hold a key), and so is /metrics when it wants
	// credentials at all.
	superuser := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := s.superuserOnly(r); err != nil {
				api.WriteError(w, err)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	o := ops.Options{Health: s.healthChecks(), Metrics: s.gather, Pprof: s.cfg.Pprof, PprofGuard: superuser}
	if s.cfg.AuthenticateMetricsEndpoint {
		o.MetricsGuard = superuser
	}
	ops.Register(mux, o)
	// With authentication on, every path needs credentials but the
	// probes' (and /metrics unless --authenticate-metrics-endpoint).
	open := func(r *http.Request) bool {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/admin/v2/brokers/ready":
			return true
		case "/metrics":
			return !s.cfg.AuthenticateMetricsEndpoint
		}
		// The console's files hold no data; it calls the API with the
		// user's token.
		return r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, console.Prefix)
	}
	return s.auth.HTTP(api.RoutingErrors(mux), open, func(w http.ResponseWriter, _ *http.Request, err error) {
		api.WriteError(w, err)
	})
}

// adminBackend implements admin.Backend: what the admin API asks of the
// broker, resource by resource (admin_clusters.go, admin_tenants.go, ...).
// It is a type of its own so that Server's methods stay the broker's.
type adminBackend struct{ s *Server }

// setPolicies changes a namespace's policies with fn and applies the
// settings they make to its loaded topics.
func (s *Server) setPolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error {
	if err := s.md.updatePolicies(ctx, ns, fn); err != nil {
		return err
	}
	p, err := s.md.policies(ctx, ns)
	if err != nil {
		return err
	}
	set := s.md.settings(p)
	for _, t := range s.loadedTopics() {
		if t.name.NamespaceName() == ns {
			t.setSettings(set)
		}
	}
	return nil
}

// adminTopic loads topic n of admin request r (it must exist); a topic
// another broker owns is answered by a redirect to it.
func (s *Server) adminTopic(r *http.Request, n topicname.Name) (*topic, error) {
	if err := s.ownedElsewhere(r.Context(), topicPath(n), r); err != nil {
		return nil, err
	}
	return s.getTopic(r.Context(), n, false)
}

// forPartitions runs fn on a topic, or on each partition of a partitioned
// topic (the result then maps partition names to results).
func (s *Server) forPartitions(r *http.Request, n topicname.Name, what string, fn func(*topic) (any, error)) (any, error) {
	parts, err := s.md.partitions(r.Context(), n)
	if err != nil {
		return nil, err
	}
	if parts == 0 {
		t, err := s.adminTopic(r, n)
		if err != nil {
			return nil, err
		}
		return fn(t)
	}
	out, err := s.eachPartition(r, n, parts, what, fn)
	if err != nil {
		return nil, err
	}
	return map[string]any{"partitions": out}, nil
}

// fetchJSON gets a JSON document from another broker's admin API.
func (s *Server) fetchJSON(ctx context.Context, u string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.peerDo(req)
	if err != nil {
		return nil, errorf(ErrServiceNotReady, "ask the owner: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, errorf(ErrServiceNotReady, "ask the owner: %v", err)
	}
	if resp.StatusCode != http.StatusOK || !json.Valid(body) {
		return nil, errorf(ErrServiceNotReady, "the owner answered %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// deleteTopic deletes a topic (every partition of a partitioned one): its
// subscriptions, ledgers and metadata.
func (s *Server) deleteTopic(ctx context.Context, n topicname.Name, force bool) error {
	parts, err := s.md.partitions(ctx, n)
	if err != nil {
		return err
	}
	names := []topicname.Name{n}
	if parts > 0 {
		names = names[:0]
		for i := 0; i < parts; i++ {
			names = append(names, n.Partition(i))
		}
	}
	for _, pn := range names {
		if exists, err := s.md.topicExists(ctx, pn); err != nil {
			return err
		} else if !exists {
			if parts > 0 {
				continue // a partition never used
			}
			return errorf(ErrTopicNotFound, "%s", pn)
		}
		t, err := s.getTopic(ctx, pn, false)
		if err != nil {
			return err
		}
		if err := t.delete(ctx, force); err != nil {
			return err
		}
		s.mu.Lock()
		_, loaded := s.mu.topics[topicPath(pn)]
		delete(s.mu.topics, topicPath(pn))
		s.mu.Unlock()
		if loaded {
			s.metrics.ownership.WithLabelValues("released").Inc()
		}
	}
	if parts > 0 {
		if err := s.store.Delete(ctx, metastore.PartitionedKey(topicPath(n))); err != nil {
			return err
		}
	}
	if n.PartitionIndex() < 0 {
		// A non-persistent topic's schemas are its persistent namesake's
		// too (schemaPath): they stay.
		if !n.Persistent() {
			return s.dropTopicGrants(ctx, n)
		}
		if err := s.store.Delete(ctx, metastore.SchemaKey(schemaPath(n))); err != nil {
			return fmt.Errorf("%s is deleted, but its schemas are not: %w", n, err)
		}
		if err := s.dropTopicGrants(ctx, n); err != nil {
			return fmt.Errorf("%s is deleted, but its grants are not (delete them with DELETE .../permissions/{role}): %w", n, err)
		}
	}
	return nil
}

// ---- topic admin operations ----

func (t *topic) setSettings(set settings) {
	t.mu.Lock()
	t.mu.set = t.applicable(set)
	if !set.blocksProducers() {
		t.mu.quotaBlock = nil // the quota that blocked is gone
	}
	t.mu.Unlock()
	if t.ml != nil {
		t.ml.SetConfig(t.mlConfig())
	}
}

// delete removes the topic's subscriptions, ledgers and metadata, then
// unloads it.
func (t *topic) delete(ctx context.Context, force bool) error {
	t.mu.Lock()
	busy := len(t.mu.producers)
	for _, s := range t.mu.subs {
		busy += s.consumerCount()
	}
	t.mu.Unlock()
	if busy > 0 && !force {
		return errorf(ErrNotAllowed, "%s has %d connected producers and consumers (use force)", t.name, busy)
	}
	for _, s := range t.subscriptions() {
		if err := t.removeSubscription(ctx, s.name, true); err != nil {
			return err
		}
	}
	if t.ml == nil { // non-persistent: nothing stored
		return t.close(ctx)
	}
	refs := t.ml.Ledgers()
	if err := t.close(ctx); err != nil {
		return err
	}
	for _, ref := range refs {
		t.s.ledgers.Delete(ctx, ref.LedgerId)
	}
	// Ownership was released by close: the keys go unguarded, but nobody
	// else may load the topic meanwhile either way: it is being deleted.
	for _, key := range []string{metastore.ManagedLedgerKey(t.path), metastore.DedupKey(t.path)} {
		if err := t.s.store.Delete(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

type topicStats struct {
	StorageSize int64 `json:"storageSize"`
	Entries     int64 `json:"entries"`
	// Counters since the partition was loaded here, and Pulsar's rates
	// over the last stats window (--stats-interval).
	MsgInCounter     int64                        `json:"msgInCounter"`
	BytesInCounter   int64                        `json:"bytesInCounter"`
	MsgOutCounter    int64                        `json:"msgOutCounter"`
	BytesOutCounter  int64                        `json:"bytesOutCounter"`
	MsgRateIn        float64                      `json:"msgRateIn"`
	MsgRateOut       float64                      `json:"msgRateOut"`
	MsgThroughputIn  float64                      `json:"msgThroughputIn"`
	MsgThroughputOut float64                      `json:"msgThroughputOut"`
	Publishers       []map[string]any             `json:"publishers"`
	Subscriptions    map[string]subscriptionStats `json:"subscriptions"`
	// Non-persistent topics only: messages dropped over the last stats
	// window (per second) and since the topic was loaded, summed over its
	// subscriptions.
	MsgDropRate    *float64 `json:"msgDropRate,omitempty"`
	MsgDropCounter *int64   `json:"msgDropCounter,omitempty"`
}

func (t *topic) stats() topicStats {
	st := topicStats{Subscriptions: map[string]subscriptionStats{}, Publishers: []map[string]any{}}
	c := t.traffic.read(time.Now())
	st.MsgInCounter, st.BytesInCounter, st.MsgOutCounter, st.BytesOutCounter = c.msgIn, c.bytesIn, c.msgOut, c.bytesOut
	r, _, _ := t.win.get()
	st.MsgRateIn, st.MsgRateOut, st.MsgThroughputIn, st.MsgThroughputOut = r.MsgIn, r.MsgOut, r.BytesIn, r.BytesOut
	if t.ml == nil {
		st.MsgDropRate, st.MsgDropCounter = &r.MsgDropped, &c.msgDropped
	} else {
		for _, ref := range t.ml.Ledgers() {
			st.StorageSize += ref.Size
			st.Entries += ref.Entries
		}
	}
	t.mu.Lock()
	for name, p := range t.mu.producers {
		pub := map[string]any{"producerName": name, "metadata": p.client.metadataJSON()}
		if p.client.version != "" {
			pub["clientVersion"] = p.client.version
		}
		if p.client.address != "" {
			pub["address"] = p.client.address
		}
		st.Publishers = append(st.Publishers, pub)
	}
	t.mu.Unlock()
	for _, s := range t.subscriptions() {
		st.Subscriptions[s.name] = s.stats()
	}
	return st
}

// maxDeletedRanges bounds the ranges internalStats lists per cursor.
const maxDeletedRanges = 10000

// internalStats is Pulsar's PersistentTopicInternalStats, with
// Magnetar's own fields added (a ledger's closed and createdAt, a cursor's
// ackHoles and durable).
func (t *topic) internalStats() map[string]any {
	if t.ml == nil {
		// Pulsar's for a non-persistent topic: the entries it was sent, and
		// each subscription with an empty cursor.
		cursors := map[string]any{}
		for _, s := range t.subscriptions() {
			cursors[s.name] = map[string]any{}
		}
		return map[string]any{"entriesAddedCounter": t.traffic.entriesIn.Load(), "numberOfEntries": 0, "totalSize": 0,
			"ledgers": []any{}, "cursors": cursors}
	}
	ledgers := []map[string]any{}
	var entries, size int64
	var current *metapb.LedgerRef
	for _, ref := range t.ml.Ledgers() {
		ledgers = append(ledgers, map[string]any{"ledgerId": ref.LedgerId, "entries": ref.Entries, "size": ref.Size, "offloaded": false,
			"closed": ref.Closed, "createdAt": time.UnixMilli(ref.CreatedAtUnixMs).UTC().Format(time.RFC3339Nano)})
		entries += ref.Entries
		size += ref.Size
		current = ref
	}
	cursors := map[string]any{}
	for _, s := range t.subscriptions() {
		cs := s.cur.Stats()
		cursors[s.name] = map[string]any{"markDeletePosition": cs.MarkDelete.String(), "readPosition": cs.ReadPos.String(),
			"cursorLedger": cs.CursorLedger, "individuallyDeletedMessages": s.cur.DeletedRanges(maxDeletedRanges),
			"totalNonContiguousDeletedMessagesRange": cs.Holes, "state": "Open",
			"numberOfEntriesSinceFirstNotAckedMessage": t.ml.EntriesBetween(cs.MarkDelete, cs.ReadPos),
			"ackHoles": cs.Holes, "durable": s.durable}
	}
	out := map[string]any{"lastConfirmedEntry": t.ml.LastConfirmed().String(), "ledgers": ledgers, "cursors": cursors,
		"numberOfEntries": entries, "totalSize": size, "state": "LedgerOpened"}
	if t.ml.Terminated() {
		out["state"] = "Terminated" // Pulsar's managed ledger state
	}
	if current != nil {
		out["currentLedgerEntries"], out["currentLedgerSize"] = current.Entries, current.Size
		out["lastLedgerCreatedTimestamp"] = admin.PulsarTime(uint64(current.CreatedAtUnixMs))
	}
	return out
}

// skip acknowledges the next n unacknowledged entries.
func (s *subscription) skip(ctx context.Context, t *topic, n int) error {
	p := t.ml.Next(s.cur.MarkDelete())
	last := t.ml.LastConfirmed()
	for n > 0 && !last.Before(p) {
		if !s.cur.IsAcked(p) {
			s.cur.Ack(p)
			n--
		}
		p = t.ml.Next(p)
	}
	s.mu.Lock()
	s.refreshPendingLocked()
	s.rewindLocked()
	s.mu.Unlock()
	return nil
}

// skipAll acknowledges everything published so far (Pulsar's clear
// backlog).
func (s *subscription) skipAll(t *topic) {
	s.cur.AckCumulative(t.ml.LastConfirmed())
	s.mu.Lock()
	s.refreshPendingLocked()
	s.rewindLocked()
	s.mu.Unlock()
}

// expireAll acknowledges every entry published before cutoff (Pulsar's
// expire messages), in expire's bounded steps.
func (s *subscription) expireAll(ctx context.Context, cutoff int64) error {
	for {
		before := s.cur.MarkDelete()
		s.expire(ctx, cutoff)
		if s.cur.MarkDelete() == before {
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// peek returns the n-th unacknowledged entry.
func (s *subscription) peek(ctx context.Context, t *topic, n int) (mledger.Entry, error) {
	p := t.ml.Next(s.cur.MarkDelete())
	last := t.ml.LastConfirmed()
	for ; !last.Before(p); p = t.ml.Next(p) {
		if s.cur.IsAcked(p) {
			continue
		}
		if n--; n == 0 {
			break
		}
	}
	if last.Before(p) || n > 0 {
		return mledger.Entry{}, errorf(ErrNotFound, "the subscription has fewer unacknowledged messages")
	}
	return t.rawEntry(ctx, p)
}
