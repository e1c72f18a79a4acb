package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/console"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// maxAdminBody caps a request body.
const maxAdminBody = 1 << 20

// route registers an admin handler under its authorization rule.
type route func(pattern string, allow rule, fn func(w http.ResponseWriter, r *http.Request) (any, error))

// adminHandler serves the admin REST API under Pulsar's paths
// (/admin/v2/...). Errors are 4xx/5xx with a JSON body {"reason": ...,
// "errorCode": ...} (restCodeOf), unknown paths and methods included:
// Pulsar's {"reason"} plus a machine-readable code. (Not "code": the
// official Go admin library decodes "code" as a number.)
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	// Every route names its authorization rule (authz.go), checked
	// before the handler runs.
	var h route = func(pattern string, allow rule, fn func(w http.ResponseWriter, r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
			ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
			defer cancel()
			r = r.WithContext(ctx)
			if err := allow(r); err != nil {
				writeResult(w, nil, err)
				return
			}
			out, err := fn(w, r)
			writeResult(w, out, err)
		})
	}
	s.tenantRoutes(h)
	s.namespaceRoutes(h)
	s.subscriptionRoutes(h)
	h("GET /admin/v2/owners", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		owners := map[string]string{}
		err := s.store.ListAll(r.Context(), metastore.OwnersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
			owner, _, _ := strings.Cut(string(kv.Value), "\n")
			owners["persistent://"+strings.TrimPrefix(kv.Key, metastore.OwnersPrefix)] = owner
			return nil
		})
		return owners, err
	})
	s.topicRoutes(h)
	s.schemaRoutes(h)
	s.clusterRoutes(h)
	s.brokerRoutes(h)
	s.bookieRoutes(h)
	s.permissionRoutes(h)
	mux.Handle("GET "+console.Prefix, console.Handler())
	mux.Handle("GET /console", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	// With authorization on, profiles are for superusers (the command line
	// they show may hold a key), and so is /metrics when it wants
	// credentials at all.
	superuser := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := s.superuserOnly(r); err != nil {
				writeResult(w, nil, err)
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
	return s.auth.HTTP(jsonRoutingErrors(mux), open, func(w http.ResponseWriter, _ *http.Request, err error) {
		writeResult(w, nil, err)
	})
}

// jsonRoutingErrors serves requests with mux, answering those it has no
// handler for in the API's JSON shape: 404 UNKNOWN_PATH for a path no
// pattern matches, 405 METHOD_NOT_ALLOWED (with mux's Allow header) for a
// path some pattern matches with another method. ServeMux decides which
// (a path matched with another method is its 405); it is asked, and its
// own plain-text answer is replaced.
func jsonRoutingErrors(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" { // a handler, or mux's redirect to a clean path
			mux.ServeHTTP(w, r)
			return
		}
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeResult(w, nil, fmt.Errorf("%w: %s %s (allowed: %s)", ErrMethodNotAllowed, r.Method, r.URL.Path, rec.header.Get("Allow")))
			return
		}
		writeResult(w, nil, fmt.Errorf("%w: %s %s", ErrUnknownPath, r.Method, r.URL.Path))
	})
}

// headerRecorder keeps the status and headers a handler writes and drops
// its body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }

func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

func (h *headerRecorder) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

type retentionJSON struct {
	Minutes int64 `json:"retentionTimeInMinutes"`
	SizeMB  int64 `json:"retentionSizeInMB"`
}

type persistenceJSON struct {
	Ensemble    int `json:"bookkeeperEnsemble"`
	WriteQuorum int `json:"bookkeeperWriteQuorum"`
	AckQuorum   int `json:"bookkeeperAckQuorum"`
}

// check refuses an ensemble and quorums that cannot be.
func (p persistenceJSON) check() error {
	if !(p.Ensemble >= p.WriteQuorum && p.WriteQuorum >= p.AckQuorum && p.AckQuorum >= 1) || p.Ensemble > 64 {
		return errorf(ErrInvalidArgument, "persistence %d/%d/%d: need 64 >= ensemble >= write quorum >= ack quorum >= 1", p.Ensemble, p.WriteQuorum, p.AckQuorum)
	}
	return nil
}

func durationMinutes(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return int64(d / time.Minute)
}

func sizeMB(b int64) int64 {
	if b < 0 {
		return -1
	}
	return b >> 20
}

func nsOf(r *http.Request) string { return r.PathValue("tenant") + "/" + r.PathValue("ns") }

func topicOf(r *http.Request) (topicname.Name, error) {
	return topicname.Parse("persistent://" + nsOf(r) + "/" + r.PathValue("topic"))
}

func nonNil(v []string, err error) (any, error) {
	if v == nil {
		v = []string{}
	}
	return v, err
}

// readJSON decodes the request body; an empty body is an error unless
// optional.
func readJSON(r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return errorf(ErrInvalidArgument, "request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		if optional {
			return nil
		}
		return errorf(ErrInvalidArgument, "request body is empty")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errorf(ErrInvalidArgument, "request body: %v", err)
	}
	return nil
}

// writeResult writes a JSON result, 204 for none, or the error.
func writeResult(w http.ResponseWriter, out any, err error) {
	w.Header().Set("Content-Type", "application/json")
	var redirect *redirectError
	if errors.As(err, &redirect) {
		// 307 keeps the method and body: the owner answers.
		w.Header().Set("Location", redirect.url)
		w.WriteHeader(http.StatusTemporaryRedirect)
		json.NewEncoder(w).Encode(map[string]string{"reason": redirect.Error(), "errorCode": "REDIRECT"})
		return
	}
	if err != nil {
		code, status := restCodeOf(err)
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"reason": err.Error(), "errorCode": code})
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if m, ok := out.(rawMessage); ok {
		writeRaw(w, m)
		return
	}
	if text, ok := out.(plainText); ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, string(text))
		return
	}
	json.NewEncoder(w).Encode(out)
}

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

// adminTopic loads the topic of an admin request (it must exist); a
// topic another broker owns is answered by a redirect to it.
func (s *Server) adminTopic(r *http.Request) (*topic, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	if err := s.ownedElsewhere(r.Context(), topicPath(n), r); err != nil {
		return nil, err
	}
	return s.getTopic(r.Context(), n, false)
}

func (s *Server) adminSubscription(r *http.Request) (*topic, *subscription, error) {
	t, err := s.adminTopic(r)
	if err != nil {
		return nil, nil, err
	}
	sub, err := t.subscription(r.PathValue("sub"))
	return t, sub, err
}

// forPartitions runs fn on a topic, or on each partition of a partitioned
// topic (the result then maps partition names to results).
func (s *Server) forPartitions(r *http.Request, what string, fn func(*topic) (any, error)) (any, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	parts, err := s.md.partitions(r.Context(), n)
	if err != nil {
		return nil, err
	}
	if parts == 0 {
		t, err := s.adminTopic(r)
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
		if err := s.store.Delete(ctx, metastore.SchemaKey(topicPath(n))); err != nil {
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
	t.mu.set = set
	if !set.blocksProducers() {
		t.mu.quotaBlock = nil // the quota that blocked is gone
	}
	t.mu.Unlock()
	t.ml.SetConfig(t.mlConfig())
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
}

func (t *topic) stats() topicStats {
	st := topicStats{Subscriptions: map[string]subscriptionStats{}, Publishers: []map[string]any{}}
	c := t.traffic.read(time.Now())
	st.MsgInCounter, st.BytesInCounter, st.MsgOutCounter, st.BytesOutCounter = c.msgIn, c.bytesIn, c.msgOut, c.bytesOut
	r, _, _ := t.win.get()
	st.MsgRateIn, st.MsgRateOut, st.MsgThroughputIn, st.MsgThroughputOut = r.MsgIn, r.MsgOut, r.BytesIn, r.BytesOut
	for _, ref := range t.ml.Ledgers() {
		st.StorageSize += ref.Size
		st.Entries += ref.Entries
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
	if current != nil {
		out["currentLedgerEntries"], out["currentLedgerSize"] = current.Entries, current.Size
		out["lastLedgerCreatedTimestamp"] = pulsarTime(uint64(current.CreatedAtUnixMs))
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

// peek returns the n-th unacknowledged entry, as Pulsar's admin API
// returns a message (rawEntry).
func (s *subscription) peek(ctx context.Context, t *topic, n int) (rawMessage, error) {
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
		return rawMessage{}, errorf(ErrNotFound, "the subscription has fewer unacknowledged messages")
	}
	return t.rawEntry(ctx, p)
}

// encodeRawMessage turns a stored entry into Pulsar's answer for a
// message: the payload, uncompressed (for a batch, the batch as stored:
// each message's metadata and payload), and the entry's metadata in
// X-Pulsar-* headers.
func encodeRawMessage(data []byte, p mledger.Position) (rawMessage, error) {
	md, payload, err := entry.Decode(data)
	if err != nil {
		return rawMessage{}, errorf(ErrInvalidMessage, "entry %v: %v", p, err)
	}
	raw := payload
	if md.GetCompression() != pulsarpb.CompressionType_NONE {
		if raw, err = entry.Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize())); err != nil {
			return rawMessage{}, errorf(ErrInvalidMessage, "entry %v: %v", p, err)
		}
	}
	h := http.Header{}
	h.Set("X-Pulsar-Message-ID", p.String())
	if md.PublishTime != nil {
		h.Set("X-Pulsar-publish-time", pulsarTime(md.GetPublishTime()))
	}
	if md.GetEventTime() != 0 {
		h.Set("X-Pulsar-event-time", pulsarTime(md.GetEventTime()))
	}
	if md.ProducerName != nil {
		h.Set("X-Pulsar-producer-name", md.GetProducerName())
	}
	if md.SequenceId != nil {
		h.Set("X-Pulsar-sequence-id", strconv.FormatUint(md.GetSequenceId(), 10))
	}
	if md.PartitionKey != nil {
		h.Set("X-Pulsar-partition-key", md.GetPartitionKey())
	}
	if len(md.Properties) > 0 {
		props := map[string]string{}
		for _, kv := range md.Properties {
			props[kv.GetKey()] = kv.GetValue()
		}
		b, _ := json.Marshal(props)
		h.Set("X-Pulsar-PROPERTY", string(b))
	}
	if md.NumMessagesInBatch != nil {
		h.Set("X-Pulsar-num-batch-message", strconv.Itoa(int(md.GetNumMessagesInBatch())))
		h.Set("X-Pulsar-batch-size", strconv.Itoa(len(raw)))
	}
	return rawMessage{header: h, body: raw}, nil
}
