package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Topics is what the topics resource asks of the broker. The calls that
// take the request r work on the topic's data: a topic another broker
// owns is answered by a Redirect to it, or (a partitioned topic's
// partitions) asked of their owners.
type Topics interface {
	// Policies are a namespace's stored policies (Namespaces).
	Policies(ctx context.Context, ns string) (*metapb.NamespacePolicies, error)
	// TopicList is Pulsar's topic list of a namespace, of domain d
	// (Namespaces).
	TopicList(ctx context.Context, ns string, d topicname.Domain) ([]string, error)
	// PartitionedTopics lists a namespace's partitioned topics of domain
	// d.
	PartitionedTopics(ctx context.Context, ns string, d topicname.Domain) ([]string, error)
	// Owners maps every owned topic partition to its owner.
	Owners(ctx context.Context) (map[string]string, error)
	// CreateTopic creates non-partitioned topic n (errs.ErrConflict if
	// it exists).
	CreateTopic(ctx context.Context, n topicname.Name) error
	// CreatePartitioned creates a partitioned topic.
	CreatePartitioned(ctx context.Context, n topicname.Name, partitions int) error
	// UpdatePartitions raises a partitioned topic's partition count.
	UpdatePartitions(ctx context.Context, n topicname.Name, partitions int) error
	// Partitions is a topic's partition count (0: not partitioned).
	Partitions(ctx context.Context, n topicname.Name) (int, error)
	// DeleteTopic deletes a topic (every partition of a partitioned one):
	// its subscriptions, ledgers and metadata; with connected producers
	// or consumers only if force.
	DeleteTopic(ctx context.Context, n topicname.Name, force bool) error
	// CheckTopic checks that topic n exists.
	CheckTopic(r *http.Request, n topicname.Name) error
	// TopicStats are Pulsar's TopicStats of a topic, or of each partition
	// of a partitioned topic ({"partitions": {name: stats}}).
	TopicStats(r *http.Request, n topicname.Name) (any, error)
	// PartitionedStats are Pulsar's PartitionedTopicStats: the sums over
	// the partitions, and each partition's stats if perPartition.
	PartitionedStats(r *http.Request, n topicname.Name, perPartition bool) (any, error)
	// InternalStats are Pulsar's PersistentTopicInternalStats, as
	// TopicStats lays them out.
	InternalStats(r *http.Request, n topicname.Name) (any, error)
	// The calls below work on one partition (or non-partitioned topic):
	// a partitioned topic's name is errs.ErrPartitionedTopic.

	// InternalInfo is Pulsar's ManagedLedgerInfo.
	InternalInfo(r *http.Request, n topicname.Name) (any, error)
	// LastMessageID is the position of the last message stored.
	LastMessageID(r *http.Request, n topicname.Name) (mledger.Position, error)
	// MessageIDAt is the position of the first message published at or
	// after ts (milliseconds since the epoch).
	MessageIDAt(r *http.Request, n topicname.Name, ts int64) (mledger.Position, error)
	// Entry is the stored entry at p.
	Entry(r *http.Request, n topicname.Name, p mledger.Position) (mledger.Entry, error)
	// Terminate terminates a partition or non-partitioned topic: it takes
	// no more messages, ever; the position of its last message is
	// returned.
	Terminate(r *http.Request, n topicname.Name) (mledger.Position, error)
	// TerminatePartitions terminates every partition of a partitioned
	// topic (Pulsar's .../terminate/partitions): the last message of
	// each, by partition index.
	TerminatePartitions(r *http.Request, n topicname.Name) (map[int]mledger.Position, error)
	// UnloadTopic unloads a topic (a partition, or a non-partitioned
	// topic) from its owner.
	UnloadTopic(r *http.Request, n topicname.Name) error
	// LookupTopic is Pulsar's HTTP topic lookup: the owner's addresses
	// (a partition nobody owns is assigned, as a client's lookup assigns
	// it).
	LookupTopic(ctx context.Context, n topicname.Name) (map[string]string, error)
}

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

// topicRoutes serves topics under Pulsar's /admin/v2/persistent and
// /admin/v2/non-persistent paths and the topic lookup under
// /lookup/v2/topic.
func topicRoutes(h route, z Rules, b Topics) {
	for _, d := range topicname.Domains {
		topicDomainRoutes(h, z, b, d)
	}
	// Ownership.
	h("GET /admin/v2/owners", z.Superuser, func(r *http.Request) (any, error) {
		return b.Owners(r.Context())
	})
}

// topicDomainRoutes serves the topics of one domain. The calls that need
// stored messages are refused on non-persistent topics by the backend
// (errs.ErrNonPersistent).
func topicDomainRoutes(h route, z Rules, b Topics, d topicname.Domain) {
	nsBase := "/admin/v2/" + d.String() + "/{tenant}/{ns}"
	topicBase := nsBase + "/{topic}"
	// Lists: the non-partitioned topics and every partition of the
	// partitioned ones (Pulsar's getList), and the partitioned ones by
	// their names.
	h("GET "+nsBase, z.NamespaceLookup, func(r *http.Request) (any, error) {
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nonNil(b.TopicList(r.Context(), nsOf(r), d))
	})
	h("GET "+nsBase+"/partitioned", z.NamespaceLookup, func(r *http.Request) (any, error) {
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nonNil(b.PartitionedTopics(r.Context(), nsOf(r), d))
	})

	// Creation, partitions, deletion.
	h("PUT "+topicBase, z.TopicAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		var props map[string]string
		if err := readJSON(r, &props, true); err != nil {
			return nil, err
		}
		if len(props) > 0 {
			return nil, fmt.Errorf("%w: topic properties", errs.ErrNotImplemented)
		}
		return nil, b.CreateTopic(r.Context(), n)
	})
	h("PUT "+topicBase+"/partitions", z.TopicAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := readPartitionCount(r)
		if err != nil {
			return nil, err
		}
		return nil, b.CreatePartitioned(r.Context(), n, parts)
	})
	h("POST "+topicBase+"/partitions", z.TopicAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := readPartitionCount(r)
		if err != nil {
			return nil, err
		}
		return nil, b.UpdatePartitions(r.Context(), n, parts)
	})
	h("GET "+topicBase+"/partitions", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		parts, err := b.Partitions(r.Context(), n)
		return map[string]int{"partitions": parts}, err
	})
	for _, p := range []string{"DELETE " + topicBase, "DELETE " + topicBase + "/partitions"} {
		h(p, z.TopicAdmin, func(r *http.Request) (any, error) {
			n, err := TopicOf(r)
			if err != nil {
				return nil, err
			}
			return nil, b.DeleteTopic(r.Context(), n, r.URL.Query().Get("force") == "true")
		})
	}
	// A topic has no properties of its own.
	h("GET "+topicBase+"/properties", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		if err := b.CheckTopic(r, n); err != nil {
			return nil, err
		}
		return map[string]string{}, nil
	})
	for _, p := range []string{"PUT " + topicBase + "/properties", "DELETE " + topicBase + "/properties"} {
		h(p, z.TopicAdmin, func(r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: topic properties", errs.ErrNotImplemented)
		})
	}

	// Stats.
	h("GET "+topicBase+"/stats", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return b.TopicStats(r, n)
	})
	h("GET "+topicBase+"/partitioned-stats", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return b.PartitionedStats(r, n, r.URL.Query().Get("perPartition") != "false")
	})
	h("GET "+topicBase+"/internalStats", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return b.InternalStats(r, n)
	})
	h("GET "+topicBase+"/internal-info", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return b.InternalInfo(r, n)
	})

	// Message ids.
	h("GET "+topicBase+"/lastMessageId", z.TopicConsume, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		p, err := b.LastMessageID(r, n)
		if err != nil {
			return nil, err
		}
		return messageIDJSON(n, p), nil
	})
	h("GET "+topicBase+"/messageid/{timestamp}", z.TopicConsume, func(r *http.Request) (any, error) {
		ts, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
		if err != nil {
			return nil, errorf(errs.ErrInvalidArgument, "timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp"))
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		p, err := b.MessageIDAt(r, n, ts)
		if err != nil {
			return nil, err
		}
		return messageIDJSON(n, p), nil
	})
	h("GET "+topicBase+"/ledger/{ledger}/entry/{entry}", z.TopicConsume, func(r *http.Request) (any, error) {
		l, err1 := strconv.ParseInt(r.PathValue("ledger"), 10, 64)
		e, err2 := strconv.ParseInt(r.PathValue("entry"), 10, 64)
		if err1 != nil || err2 != nil || l < 0 || e < 0 {
			return nil, errorf(errs.ErrInvalidArgument, "message id %s:%s: want two non-negative integers", r.PathValue("ledger"), r.PathValue("entry"))
		}
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return rawEntry(b.Entry(r, n, mledger.Position{Ledger: l, Entry: e}))
	})

	// Termination: Pulsar answers with the last message's id, or for a
	// partitioned topic a map of them by partition index.
	h("POST "+topicBase+"/terminate", z.TopicAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		p, err := b.Terminate(r, n)
		if err != nil {
			return nil, err
		}
		return messageIDJSON(n, p), nil
	})
	h("POST "+topicBase+"/terminate/partitions", z.TopicAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		last, err := b.TerminatePartitions(r, n)
		if err != nil {
			return nil, err
		}
		out := make(map[string]map[string]int64, len(last))
		for i, p := range last {
			out[strconv.Itoa(i)] = messageIDJSON(n.Partition(i), p)
		}
		return out, nil
	})

	// What Magnetar does not have.
	for _, p := range []string{"PUT " + topicBase + "/offload", "GET " + topicBase + "/offload"} {
		h(p, z.TopicAdmin, func(r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: tiered storage (offload): every entry stays on the bookies", errs.ErrNotImplemented)
		})
	}
	for _, p := range []string{"PUT " + topicBase + "/compaction", "GET " + topicBase + "/compaction"} {
		h(p, z.TopicAdmin, func(r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: topic compaction", errs.ErrNotImplemented)
		})
	}
	for _, name := range topicPolicyNames {
		h(topicBase+"/"+name, anyone, func(r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: set %s on the namespace (/admin/v2/namespaces/{tenant}/{namespace}/...); Magnetar has no topic-level policies, as Pulsar with topicLevelPoliciesEnabled=false",
				errs.ErrTopicPoliciesDisabled, name)
		})
	}

	h("PUT "+topicBase+"/unload", z.TopicAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		if n.PartitionIndex() < 0 {
			if parts, err := b.Partitions(r.Context(), n); err != nil {
				return nil, err
			} else if parts > 0 {
				return nil, errorf(errs.ErrNotAllowed, "%s is partitioned: unload its partitions (%s ...)", n, n.Partition(0))
			}
		}
		return nil, b.UnloadTopic(r, n)
	})
	h("GET /lookup/v2/topic/"+d.String()+"/{tenant}/{ns}/{topic}", z.TopicLookup, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, err
		}
		return b.LookupTopic(r.Context(), n)
	})
	h("GET /lookup/v2/topic/"+d.String()+"/{tenant}/{ns}/{topic}/bundle", z.TopicLookup, func(r *http.Request) (any, error) {
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		if _, err := TopicOf(r); err != nil {
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
		return 0, errorf(errs.ErrInvalidArgument, "request body: %v", err)
	}
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var meta struct {
			Partitions *int              `json:"partitions"`
			Properties map[string]string `json:"properties"`
		}
		if err := json.Unmarshal(body, &meta); err != nil {
			return 0, errorf(errs.ErrInvalidArgument, `request body: want a partition count or {"partitions": N}: %v`, err)
		}
		if meta.Partitions == nil {
			return 0, errorf(errs.ErrInvalidArgument, `request body: {"partitions": N} without "partitions"`)
		}
		if len(meta.Properties) > 0 {
			return 0, fmt.Errorf("%w: topic properties", errs.ErrNotImplemented)
		}
		return *meta.Partitions, nil
	}
	var parts int
	if len(body) == 0 {
		return 0, errorf(errs.ErrInvalidArgument, "request body is empty: want a partition count")
	}
	if err := json.Unmarshal(body, &parts); err != nil {
		return 0, errorf(errs.ErrInvalidArgument, `request body: want a partition count or {"partitions": N}: %v`, err)
	}
	return parts, nil
}

// messageIDJSON is Pulsar's MessageIdImpl of a position of topic n.
func messageIDJSON(n topicname.Name, p mledger.Position) map[string]int64 {
	return map[string]int64{"ledgerId": p.Ledger, "entryId": p.Entry, "partitionIndex": int64(n.PartitionIndex())}
}

// rawEntry is an entry as Pulsar's admin API returns a message
// (encodeRawMessage).
func rawEntry(e mledger.Entry, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return encodeRawMessage(e.Data, e.Pos)
}

// encodeRawMessage turns a stored entry into Pulsar's answer for a
// message: the payload, uncompressed (for a batch, the batch as stored:
// each message's metadata and payload), and the entry's metadata in
// X-Pulsar-* headers.
func encodeRawMessage(data []byte, p mledger.Position) (rawMessage, error) {
	md, payload, err := entry.Decode(data)
	if err != nil {
		return rawMessage{}, errorf(errs.ErrInvalidMessage, "entry %v: %v", p, err)
	}
	raw := payload
	if md.GetCompression() != pulsarpb.CompressionType_NONE {
		if raw, err = entry.Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize())); err != nil {
			return rawMessage{}, errorf(errs.ErrInvalidMessage, "entry %v: %v", p, err)
		}
	}
	h := http.Header{}
	h.Set("X-Pulsar-Message-ID", p.String())
	if md.PublishTime != nil {
		h.Set("X-Pulsar-publish-time", PulsarTime(md.GetPublishTime()))
	}
	if md.GetEventTime() != 0 {
		h.Set("X-Pulsar-event-time", PulsarTime(md.GetEventTime()))
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

// PulsarTime formats a time in milliseconds as Pulsar's DateFormatter
// does (ISO 8601 with milliseconds and the offset).
func PulsarTime(ms uint64) string {
	return time.UnixMilli(int64(ms)).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
