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
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// topicPolicyNames are the topic-level policies of Pulsar's admin API
// (/admin/v2/persistent/{tenant}/{ns}/{topic}/{policy}). Magnetar's
// policies are set per namespace; every method on these paths is answered
// 405, as Pulsar answers with topicLevelPoliciesEnabled off.
var topicPolicyNames = []string{
	"autoSubscriptionCreation", "backlogQuota", "backlogQuotaMap", "compactionThreshold",
	"deduplicationEnabled", "deduplicationSnapshotInterval", "delayedDelivery", "dispatchRate",
	"inactiveTopicPolicies", "maxConsumers", "maxConsumersPerSubscription", "maxMessageSize",
	"maxProducers", "maxSubscriptionsPerTopic", "maxUnackedMessagesOnConsumer",
	"maxUnackedMessagesOnSubscription", "messageTTL", "offloadPolicies", "persistence",
	"publishRate", "replication", "replicatorDispatchRate", "retention",
	"schemaCompatibilityStrategy", "schemaValidationEnforced", "subscribeRate",
	"subscriptionDispatchRate",
}

// bundleRange is the one bundle of every namespace: Magnetar assigns
// partitions to brokers one by one, not by hash ranges of bundles.
const bundleRange = "0x00000000_0xffffffff"

// topicRoutes serves topics under Pulsar's /admin/v2/persistent paths and
// the topic lookup under /lookup/v2/topic.
func (s *Server) topicRoutes(h route) {
	const topicBase = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
	// Lists: the non-partitioned topics and every partition of the
	// partitioned ones (Pulsar's getList), and the partitioned ones by
	// their names.
	h("GET /admin/v2/persistent/{tenant}/{ns}", s.onNamespace(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nonNil(s.md.topicList(r.Context(), nsOf(r)))
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/partitioned", s.onNamespace(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nonNil(s.md.partitionedTopics(r.Context(), nsOf(r)))
	})
	// Every topic is persistent: there are no non-persistent ones to list,
	// and nothing else under non-persistent:// exists.
	for _, p := range []string{"GET /admin/v2/non-persistent/{tenant}/{ns}", "GET /admin/v2/non-persistent/{tenant}/{ns}/partitioned"} {
		h(p, s.onNamespace(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
			if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
				return nil, err
			}
			return []string{}, nil
		})
	}
	h("/admin/v2/non-persistent/", anyone, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: non-persistent topics: Magnetar stores every topic (use persistent://)", ErrNotImplemented)
	})

	// Creation, partitions, deletion.
	h("PUT "+topicBase, s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		var props map[string]string
		if err := readJSON(r, &props, true); err != nil {
			return nil, err
		}
		if len(props) > 0 {
			return nil, fmt.Errorf("%w: topic properties", ErrNotImplemented)
		}
		if exists, err := s.md.topicExists(r.Context(), n); err != nil {
			return nil, err
		} else if exists {
			return nil, errorf(ErrConflict, "topic %s already exists", n)
		}
		_, err = s.getTopic(r.Context(), n, true)
		return nil, err
	})
	h("PUT "+topicBase+"/partitions", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := readPartitionCount(r)
		if err != nil {
			return nil, err
		}
		return nil, s.md.createPartitioned(r.Context(), n, parts)
	})
	h("POST "+topicBase+"/partitions", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := readPartitionCount(r)
		if err != nil {
			return nil, err
		}
		return nil, s.md.updatePartitions(r.Context(), n, parts)
	})
	h("GET "+topicBase+"/partitions", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := s.md.partitions(r.Context(), n)
		return map[string]int{"partitions": parts}, err
	})
	for _, p := range []string{"DELETE " + topicBase, "DELETE " + topicBase + "/partitions"} {
		h(p, s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
			n, err := topicOf(r)
			if err != nil {
				return nil, err
			}
			return nil, s.deleteTopic(r.Context(), n, r.URL.Query().Get("force") == "true")
		})
	}
	// A topic has no properties of its own.
	h("GET "+topicBase+"/properties", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.adminTopic(r); err != nil {
			return nil, err
		}
		return map[string]string{}, nil
	})
	for _, p := range []string{"PUT " + topicBase + "/properties", "DELETE " + topicBase + "/properties"} {
		h(p, s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: topic properties", ErrNotImplemented)
		})
	}

	// Stats.
	h("GET "+topicBase+"/stats", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.forPartitions(r, "stats", func(t *topic) (any, error) { return t.stats(), nil })
	})
	h("GET "+topicBase+"/partitioned-stats", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.partitionedStats(r)
	})
	h("GET "+topicBase+"/internalStats", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.forPartitions(r, "internalStats", func(t *topic) (any, error) { return t.internalStats(), nil })
	})
	h("GET "+topicBase+"/internal-info", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, err := s.adminPartition(r)
		if err != nil {
			return nil, err
		}
		return t.internalInfo(), nil
	})

	// Message ids.
	h("GET "+topicBase+"/lastMessageId", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		t, err := s.adminPartition(r)
		if err != nil {
			return nil, err
		}
		return messageIDJSON(t, t.ml.LastConfirmed()), nil
	})
	h("GET "+topicBase+"/messageid/{timestamp}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
		if err != nil {
			return nil, errorf(ErrInvalidArgument, "timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp"))
		}
		t, err := s.adminPartition(r)
		if err != nil {
			return nil, err
		}
		p, err := t.findByTime(r.Context(), ts)
		if err != nil {
			return nil, err
		}
		if t.ml.LastConfirmed().Before(p) {
			return nil, errorf(ErrNotFound, "%s has no message published at or after %d", t.name, ts)
		}
		return messageIDJSON(t, p), nil
	})
	h("GET "+topicBase+"/ledger/{ledger}/entry/{entry}", s.onTopic(opConsume), func(w http.ResponseWriter, r *http.Request) (any, error) {
		l, err1 := strconv.ParseInt(r.PathValue("ledger"), 10, 64)
		e, err2 := strconv.ParseInt(r.PathValue("entry"), 10, 64)
		if err1 != nil || err2 != nil || l < 0 || e < 0 {
			return nil, errorf(ErrInvalidArgument, "message id %s:%s: want two non-negative integers", r.PathValue("ledger"), r.PathValue("entry"))
		}
		t, err := s.adminPartition(r)
		if err != nil {
			return nil, err
		}
		return t.rawEntry(r.Context(), mledger.Position{Ledger: l, Entry: e})
	})

	// What Magnetar does not have.
	for _, p := range []string{"POST " + topicBase + "/terminate", "POST " + topicBase + "/partitions/terminate"} {
		h(p, s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: terminating a topic", ErrNotImplemented)
		})
	}
	for _, p := range []string{"PUT " + topicBase + "/offload", "GET " + topicBase + "/offload"} {
		h(p, s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: tiered storage (offload): every entry stays on the bookies", ErrNotImplemented)
		})
	}
	for _, p := range []string{"PUT " + topicBase + "/compaction", "GET " + topicBase + "/compaction"} {
		h(p, s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: topic compaction", ErrNotImplemented)
		})
	}
	for _, name := range topicPolicyNames {
		h(topicBase+"/"+name, anyone, func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: set %s on the namespace (/admin/v2/namespaces/{tenant}/{namespace}/...); Magnetar has no topic-level policies, as Pulsar with topicLevelPoliciesEnabled=false",
				ErrTopicPoliciesDisabled, name)
		})
	}

	// Ownership.
	h("PUT "+topicBase+"/unload", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, err
		}
		if n.PartitionIndex() < 0 {
			if parts, err := s.md.partitions(r.Context(), n); err != nil {
				return nil, err
			} else if parts > 0 {
				return nil, errorf(ErrNotAllowed, "%s is partitioned: unload its partitions (%s ...)", n, n.Partition(0))
			}
		}
		if err := s.ownedElsewhere(r.Context(), topicPath(n), r); err != nil {
			return nil, err
		}
		return nil, s.unloadTopic(r.Context(), n)
	})
	h("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		return s.lookupREST(r)
	})
	h("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}/bundle", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		if _, err := topicOf(r); err != nil {
			return nil, err
		}
		return plainText(bundleRange), nil
	})
}

// readPartitionCount reads a partition count: a bare number, or Pulsar's
// partitioned-topic metadata {"partitions": N, "properties": {...}} (what
// pulsaradmin sends). Properties are not kept, so only none are accepted.
func readPartitionCount(r *http.Request) (int, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return 0, errorf(ErrInvalidArgument, "request body: %v", err)
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var meta struct {
			Partitions *int              `json:"partitions"`
			Properties map[string]string `json:"properties"`
		}
		if err := json.Unmarshal(body, &meta); err != nil {
			return 0, errorf(ErrInvalidArgument, `request body: want a partition count or {"partitions": N}: %v`, err)
		}
		if meta.Partitions == nil {
			return 0, errorf(ErrInvalidArgument, `request body: {"partitions": N} without "partitions"`)
		}
		if len(meta.Properties) > 0 {
			return 0, fmt.Errorf("%w: topic properties", ErrNotImplemented)
		}
		return *meta.Partitions, nil
	}
	var parts int
	if len(body) == 0 {
		return 0, errorf(ErrInvalidArgument, "request body is empty: want a partition count")
	}
	if err := json.Unmarshal(body, &parts); err != nil {
		return 0, errorf(ErrInvalidArgument, `request body: want a partition count or {"partitions": N}: %v`, err)
	}
	return parts, nil
}

// adminPartition is adminTopic for the calls that work on one partition
// (or non-partitioned topic) only: a partitioned topic's name is refused,
// as Pulsar refuses it (405).
func (s *Server) adminPartition(r *http.Request) (*topic, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	if n.PartitionIndex() < 0 {
		if parts, err := s.md.partitions(r.Context(), n); err != nil {
			return nil, err
		} else if parts > 0 {
			return nil, fmt.Errorf("%w: %s has %d partitions; name one (%s)", ErrPartitionedTopic, n, parts, n.Partition(0))
		}
	}
	return s.adminTopic(r)
}

// messageIDJSON is Pulsar's MessageIdImpl of a position of t.
func messageIDJSON(t *topic, p mledger.Position) map[string]int64 {
	return map[string]int64{"ledgerId": p.Ledger, "entryId": p.Entry, "partitionIndex": int64(t.name.PartitionIndex())}
}

// updatePartitions raises a partitioned topic's partition count, as
// Pulsar's updatePartitionedTopic: never lowers it. Clients that are
// connected keep the partitions they know; new ones use them all.
func (md *metadata) updatePartitions(ctx context.Context, n topicname.Name, partitions int) error {
	if partitions < 1 || partitions > MaxPartitions {
		return errorf(ErrInvalidArgument, "partitions %d must be in 1..%d", partitions, MaxPartitions)
	}
	key := metastore.PartitionedKey(topicPath(n))
	for {
		var pt metapb.PartitionedTopic
		rev, err := getProto(ctx, md.store, key, &pt)
		if errors.Is(err, metastore.ErrNotFound) {
			return errorf(ErrTopicNotFound, "%s is not a partitioned topic", n)
		}
		if err != nil {
			return err
		}
		if int(pt.Partitions) >= partitions {
			return errorf(ErrInvalidArgument, "%s has %d partitions: the count can only grow", n, pt.Partitions)
		}
		pt.Partitions = int32(partitions)
		if _, err := md.store.CompareAndSwap(ctx, key, marshal(&pt), rev); !errors.Is(err, metastore.ErrBadVersion) {
			return err
		}
	}
}

// partitionedTopics lists a namespace's partitioned topics.
func (md *metadata) partitionedTopics(ctx context.Context, ns string) ([]string, error) {
	parts, err := md.listChildren(ctx, metastore.PartitionedKey(ns+"/"))
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, "persistent://"+ns+"/"+p)
	}
	return out, err
}

// topicList is Pulsar's topic list of a namespace: the non-partitioned
// topics and every partition of the partitioned ones.
func (md *metadata) topicList(ctx context.Context, ns string) ([]string, error) {
	names, err := md.topics(ctx, ns)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range names {
		n, err := topicname.Parse(name)
		if err != nil {
			continue
		}
		parts, err := md.partitions(ctx, n)
		if err != nil {
			return nil, err
		}
		if parts == 0 {
			out = append(out, name)
			continue
		}
		for i := 0; i < parts; i++ {
			out = append(out, n.Partition(i).String())
		}
	}
	return out, nil
}

// partitionedStats is Pulsar's partitioned-stats: the sums over the
// partitions, and each partition's stats unless perPartition=false.
func (s *Server) partitionedStats(r *http.Request) (any, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	parts, err := s.md.partitions(r.Context(), n)
	if err != nil {
		return nil, err
	}
	if parts == 0 {
		return nil, errorf(ErrTopicNotFound, "%s is not a partitioned topic", n)
	}
	each, err := s.eachPartition(r, n, parts, "stats", func(t *topic) (any, error) { return t.stats(), nil })
	if err != nil {
		return nil, err
	}
	out := partitionedTopicStats{Metadata: map[string]int{"partitions": parts},
		topicStats: topicStats{Publishers: []map[string]any{}, Subscriptions: map[string]subscriptionStats{}}}
	per := map[string]topicStats{}
	for name, v := range each {
		st, ok := v.(topicStats)
		if !ok { // another broker's answer
			b, _ := v.(json.RawMessage)
			if err := json.Unmarshal(b, &st); err != nil {
				return nil, errorf(ErrServiceNotReady, "stats of %s from its owner: %v", name, err)
			}
		}
		per[name] = st
		out.add(st)
	}
	if r.URL.Query().Get("perPartition") != "false" {
		out.Partitions = per
	}
	return out, nil
}

type partitionedTopicStats struct {
	topicStats
	Metadata   map[string]int        `json:"metadata"`
	Partitions map[string]topicStats `json:"partitions,omitempty"`
}

// add sums a partition's stats into the topic's.
func (p *partitionedTopicStats) add(st topicStats) {
	p.StorageSize += st.StorageSize
	p.Entries += st.Entries
	p.MsgInCounter += st.MsgInCounter
	p.BytesInCounter += st.BytesInCounter
	p.MsgOutCounter += st.MsgOutCounter
	p.BytesOutCounter += st.BytesOutCounter
	p.MsgRateIn += st.MsgRateIn
	p.MsgRateOut += st.MsgRateOut
	p.MsgThroughputIn += st.MsgThroughputIn
	p.MsgThroughputOut += st.MsgThroughputOut
	p.Publishers = append(p.Publishers, st.Publishers...)
	for name, sub := range st.Subscriptions {
		sum, ok := p.Subscriptions[name]
		if !ok {
			sum = subscriptionStats{Type: sub.Type, Durable: sub.Durable, Consumers: []consumerStats{}}
		}
		sum.MsgBacklog += sub.MsgBacklog
		sum.UnackedMessages += sub.UnackedMessages
		sum.MsgRedelivered += sub.MsgRedelivered
		sum.MsgRateRedeliver += sub.MsgRateRedeliver
		sum.MsgDelayed += sub.MsgDelayed
		sum.Blocked = sum.Blocked || sub.Blocked
		sum.Consumers = append(sum.Consumers, sub.Consumers...)
		p.Subscriptions[name] = sum
	}
}

// eachPartition runs fn on every partition of n: here for the partitions
// this broker owns (or that nobody owns: it loads them), by asking the
// owner of the others (their value is then its JSON answer).
func (s *Server) eachPartition(r *http.Request, n topicname.Name, parts int, what string, fn func(*topic) (any, error)) (map[string]any, error) {
	out := map[string]any{}
	for i := 0; i < parts; i++ {
		pn := n.Partition(i)
		err := s.ownedElsewhere(r.Context(), topicPath(pn), r)
		var redirect *redirectError
		if errors.As(err, &redirect) {
			if out[pn.String()], err = s.fetchJSON(r.Context(), redirect.withPath("/admin/v2/persistent/"+pn.NamespaceName()+"/"+pn.Local+"/"+what)); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		t, err := s.getTopic(r.Context(), pn, true)
		if err != nil {
			return nil, err
		}
		if out[t.name.String()], err = fn(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// lookupREST is Pulsar's HTTP topic lookup: the owner's addresses (a
// partition nobody owns is assigned, as a client's lookup assigns it).
func (s *Server) lookupREST(r *http.Request) (any, error) {
	n, err := topicOf(r)
	if err != nil {
		return nil, err
	}
	if n.PartitionIndex() < 0 {
		if parts, err := s.md.partitions(r.Context(), n); err != nil {
			return nil, err
		} else if parts > 0 {
			return nil, fmt.Errorf("%w: %s has %d partitions; look up each (%s ...)", ErrPartitionedTopic, n, parts, n.Partition(0))
		}
	}
	owner, err := s.lookup(r.Context(), n)
	if err != nil {
		return nil, err
	}
	httpAddr := s.AdvertisedHTTPAddr()
	if owner != s.id {
		brokers, err := s.liveBrokers(r.Context())
		if err != nil {
			return nil, err
		}
		info, ok := brokers[owner]
		if !ok || info.HTTP == "" {
			return nil, errorf(ErrServiceNotReady, "%s is owned by broker %s, which serves no admin API now; try again", n, owner)
		}
		httpAddr = info.HTTP
	}
	// Pulsar's clients connect to brokerUrl: the owner's address for
	// Pulsar's protocol (its port of its own if it has one).
	paddr, ptls, err := s.pulsarAddrOf(r.Context(), owner)
	if err != nil {
		return nil, err
	}
	out := map[string]string{"brokerUrl": "", "brokerUrlTls": "", "httpUrl": "", "httpUrlTls": ""}
	if ptls {
		out["brokerUrlTls"] = "pulsar+ssl://" + paddr
	} else {
		out["brokerUrl"] = "pulsar://" + paddr
	}
	if s.tls != nil {
		out["httpUrlTls"] = "https://" + httpAddr
	} else {
		out["httpUrl"] = "http://" + httpAddr
	}
	out["nativeUrl"] = out["brokerUrl"] + out["brokerUrlTls"]
	return out, nil
}

// internalInfo is Pulsar's ManagedLedgerInfo: the stored list of ledgers
// and each cursor's mark-delete position.
func (t *topic) internalInfo() map[string]any {
	ledgers := []map[string]any{}
	for _, ref := range t.ml.Ledgers() {
		ledgers = append(ledgers, map[string]any{"ledgerId": ref.LedgerId, "entries": ref.Entries, "size": ref.Size,
			"timestamp": ref.CreatedAtUnixMs, "isOffloaded": false})
	}
	cursors := map[string]any{}
	for _, s := range t.subscriptions() {
		if !s.durable {
			continue
		}
		cs := s.cur.Stats()
		cursors[s.name] = map[string]any{"cursorsLedgerId": cs.CursorLedger,
			"markDelete": map[string]int64{"ledgerId": cs.MarkDelete.Ledger, "entryId": cs.MarkDelete.Entry}}
	}
	return map[string]any{"version": 0, "ledgers": ledgers, "cursors": cursors}
}

// rawEntry is an entry as Pulsar's admin API returns a message: its
// uncompressed payload (a batch's, with each message's metadata, as
// stored) and its metadata in X-Pulsar-* headers.
func (t *topic) rawEntry(ctx context.Context, p mledger.Position) (rawMessage, error) {
	if !t.ml.Owns(p.Ledger) || t.ml.LastConfirmed().Before(p) || p.Before(t.ml.First()) {
		return rawMessage{}, errorf(ErrNotFound, "%s has no message %v", t.name, p)
	}
	es, err := t.ml.Read(ctx, p, 1)
	if err != nil {
		return rawMessage{}, err
	}
	if len(es) == 0 || es[0].Pos != p {
		return rawMessage{}, errorf(ErrNotFound, "%s has no message %v", t.name, p)
	}
	return encodeRawMessage(es[0].Data, p)
}

// pulsarTime formats a time in milliseconds as Pulsar's DateFormatter
// does (ISO 8601 with milliseconds and the offset).
func pulsarTime(ms uint64) string {
	return time.UnixMilli(int64(ms)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// rawMessage is an answer of raw bytes with headers.
type rawMessage struct {
	header http.Header
	body   []byte
}

// writeRaw writes a rawMessage answer.
func writeRaw(w http.ResponseWriter, m rawMessage) {
	for k, v := range m.header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(m.body)))
	w.WriteHeader(http.StatusOK)
	w.Write(m.body)
}
