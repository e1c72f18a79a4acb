package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The topics resource of the admin API (broker/admin/topics.go).

func (b adminBackend) PartitionedTopics(ctx context.Context, ns string, d topicname.Domain) ([]string, error) {
	return b.s.md.partitionedTopics(ctx, ns, d)
}

func (b adminBackend) Owners(ctx context.Context) (map[string]string, error) {
	owners := map[string]string{}
	err := b.s.store.ListAll(ctx, metastore.OwnersPrefix, metastore.ListOptions{}, func(kv metastore.KV) error {
		owner, _, _ := strings.Cut(string(kv.Value), "\n")
		if n, err := topicname.ParsePath(strings.TrimPrefix(kv.Key, metastore.OwnersPrefix)); err == nil {
			owners[n.String()] = owner
		}
		return nil
	})
	return owners, err
}

func (b adminBackend) CreateTopic(ctx context.Context, n topicname.Name) error {
	if exists, err := b.s.md.topicExists(ctx, n); err != nil {
		return err
	} else if exists {
		return errorf(ErrConflict, "topic %s already exists", n)
	}
	_, err := b.s.getTopic(ctx, n, true)
	return err
}

func (b adminBackend) CreatePartitioned(ctx context.Context, n topicname.Name, partitions int) error {
	return b.s.md.createPartitioned(ctx, n, partitions)
}

func (b adminBackend) UpdatePartitions(ctx context.Context, n topicname.Name, partitions int) error {
	return b.s.md.updatePartitions(ctx, n, partitions)
}

func (b adminBackend) Partitions(ctx context.Context, n topicname.Name) (int, error) {
	return b.s.md.partitions(ctx, n)
}

func (b adminBackend) DeleteTopic(ctx context.Context, n topicname.Name, force bool) error {
	return b.s.deleteTopic(ctx, n, force)
}

func (b adminBackend) CheckTopic(r *http.Request, n topicname.Name) error {
	_, err := b.s.adminTopic(r, n)
	return err
}

func (b adminBackend) TopicStats(r *http.Request, n topicname.Name) (any, error) {
	return b.s.forPartitions(r, n, "stats", func(t *topic) (any, error) { return t.stats(), nil })
}

func (b adminBackend) PartitionedStats(r *http.Request, n topicname.Name, perPartition bool) (any, error) {
	return b.s.partitionedStats(r, n, perPartition)
}

func (b adminBackend) InternalStats(r *http.Request, n topicname.Name) (any, error) {
	return b.s.forPartitions(r, n, "internalStats", func(t *topic) (any, error) { return t.internalStats(), nil })
}

// requirePersistent refuses on a non-persistent topic an admin call that
// needs stored messages (Pulsar's 405).
func requirePersistent(n topicname.Name, what string) error {
	if n.Persistent() {
		return nil
	}
	return errorf(ErrNonPersistent, "%s: %s stores no messages", what, n)
}

func (b adminBackend) InternalInfo(r *http.Request, n topicname.Name) (any, error) {
	if err := requirePersistent(n, "internal info"); err != nil {
		return nil, err
	}
	t, err := b.s.adminPartition(r, n)
	if err != nil {
		return nil, err
	}
	return t.internalInfo(), nil
}

func (b adminBackend) LastMessageID(r *http.Request, n topicname.Name) (mledger.Position, error) {
	if err := requirePersistent(n, "last message id"); err != nil {
		return mledger.Position{}, err
	}
	t, err := b.s.adminPartition(r, n)
	if err != nil {
		return mledger.Position{}, err
	}
	return t.ml.LastConfirmed(), nil
}

func (b adminBackend) Terminate(r *http.Request, n topicname.Name) (mledger.Position, error) {
	if err := requirePersistent(n, "terminate"); err != nil {
		return mledger.Position{}, err
	}
	t, err := b.s.adminPartition(r, n)
	if err != nil {
		return mledger.Position{}, err
	}
	return t.terminate(r.Context())
}

func (b adminBackend) TerminatePartitions(r *http.Request, n topicname.Name) (map[int]mledger.Position, error) {
	if err := requirePersistent(n, "terminate"); err != nil {
		return nil, err
	}
	return b.s.terminatePartitions(r, n)
}

// terminatePartitions terminates every partition of a partitioned topic,
// here or on its owner, and returns the last message of each.
func (s *Server) terminatePartitions(r *http.Request, n topicname.Name) (map[int]mledger.Position, error) {
	ctx := r.Context()
	parts, err := s.md.partitions(ctx, n)
	if err != nil {
		return nil, err
	}
	if parts == 0 {
		return nil, fmt.Errorf("%w: %s is not a partitioned topic: terminate it with /terminate", ErrMethodNotAllowed, n)
	}
	out := make(map[int]mledger.Position, parts)
	for i := 0; i < parts; i++ {
		pn := n.Partition(i)
		err := s.ownedElsewhere(ctx, topicPath(pn), r)
		var redirect *redirectError
		switch {
		case errors.As(err, &redirect):
			body, err := s.peerCall(ctx, http.MethodPost, redirect.withPath(adminPath(pn)+"/terminate"), nil)
			if err != nil {
				return nil, fmt.Errorf("partition %d: %w", i, err)
			}
			var id struct {
				LedgerID int64 `json:"ledgerId"`
				EntryID  int64 `json:"entryId"`
			}
			if err := json.Unmarshal(body, &id); err != nil {
				return nil, errorf(ErrServiceNotReady, "partition %d: the owner answered %q: %v", i, body, err)
			}
			out[i] = mledger.Position{Ledger: id.LedgerID, Entry: id.EntryID}
		case err != nil:
			return nil, err
		default:
			t, err := s.getTopic(ctx, pn, true)
			if err != nil {
				return nil, err
			}
			if out[i], err = t.terminate(ctx); err != nil {
				return nil, fmt.Errorf("partition %d: %w", i, err)
			}
		}
	}
	return out, nil
}

func (b adminBackend) MessageIDAt(r *http.Request, n topicname.Name, ts int64) (mledger.Position, error) {
	if err := requirePersistent(n, "message id by time"); err != nil {
		return mledger.Position{}, err
	}
	t, err := b.s.adminPartition(r, n)
	if err != nil {
		return mledger.Position{}, err
	}
	p, err := t.findByTime(r.Context(), ts)
	if err != nil {
		return mledger.Position{}, err
	}
	if t.ml.LastConfirmed().Before(p) {
		return mledger.Position{}, errorf(ErrNotFound, "%s has no message published at or after %d", t.name, ts)
	}
	return p, nil
}

func (b adminBackend) Entry(r *http.Request, n topicname.Name, p mledger.Position) (mledger.Entry, error) {
	if err := requirePersistent(n, "get message"); err != nil {
		return mledger.Entry{}, err
	}
	t, err := b.s.adminPartition(r, n)
	if err != nil {
		return mledger.Entry{}, err
	}
	return t.rawEntry(r.Context(), p)
}

func (b adminBackend) UnloadTopic(r *http.Request, n topicname.Name) error {
	if err := b.s.ownedElsewhere(r.Context(), topicPath(n), r); err != nil {
		return err
	}
	return b.s.unloadTopic(r.Context(), n)
}

func (b adminBackend) LookupTopic(ctx context.Context, n topicname.Name) (map[string]string, error) {
	return b.s.lookupREST(ctx, n)
}

// adminPartition is adminTopic for the calls that work on one partition
// (or non-partitioned topic) only: a partitioned topic's name is refused,
// as Pulsar refuses it (405).
func (s *Server) adminPartition(r *http.Request, n topicname.Name) (*topic, error) {
	if n.PartitionIndex() < 0 {
		if parts, err := s.md.partitions(r.Context(), n); err != nil {
			return nil, err
		} else if parts > 0 {
			return nil, fmt.Errorf("%w: %s has %d partitions; name one (%s)", ErrPartitionedTopic, n, parts, n.Partition(0))
		}
	}
	return s.adminTopic(r, n)
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

// partitionedTopics lists a namespace's partitioned topics of domain d.
func (md *metadata) partitionedTopics(ctx context.Context, ns string, d topicname.Domain) ([]string, error) {
	parts, err := md.listChildren(ctx, metastore.PartitionedKey(ns+"/"))
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if n, err := topicname.ParsePath(ns + "/" + p); err == nil && n.Domain == d {
			out = append(out, n.String())
		}
	}
	return out, err
}

// topicList is Pulsar's topic list of a namespace, of domain d: the
// non-partitioned topics and every partition of the partitioned ones.
func (md *metadata) topicList(ctx context.Context, ns string, d topicname.Domain) ([]string, error) {
	names, err := md.topics(ctx, ns, d)
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
// partitions, and each partition's stats if perPartition.
func (s *Server) partitionedStats(r *http.Request, n topicname.Name, perPartition bool) (any, error) {
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
	if perPartition {
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
	p.MsgDropRate, p.MsgDropCounter = addSet(p.MsgDropRate, st.MsgDropRate), addSet(p.MsgDropCounter, st.MsgDropCounter)
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
		sum.MsgDropRate, sum.MsgDropCounter = addSet(sum.MsgDropRate, sub.MsgDropRate), addSet(sum.MsgDropCounter, sub.MsgDropCounter)
		p.Subscriptions[name] = sum
	}
}

// addSet sums stats fields that only non-persistent topics set: nil
// while neither is set.
func addSet[T int64 | float64](sum, v *T) *T {
	if v == nil {
		return sum
	}
	out := *v
	if sum != nil {
		out += *sum
	}
	return &out
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
			if out[pn.String()], err = s.fetchJSON(r.Context(), redirect.withPath(adminPath(pn)+"/"+what)); err != nil {
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
func (s *Server) lookupREST(ctx context.Context, n topicname.Name) (map[string]string, error) {
	if n.PartitionIndex() < 0 {
		if parts, err := s.md.partitions(ctx, n); err != nil {
			return nil, err
		} else if parts > 0 {
			return nil, fmt.Errorf("%w: %s has %d partitions; look up each (%s ...)", ErrPartitionedTopic, n, parts, n.Partition(0))
		}
	}
	owner, err := s.lookup(ctx, n)
	if err != nil {
		return nil, err
	}
	httpAddr := s.AdvertisedHTTPAddr()
	if owner != s.id {
		brokers, err := s.liveBrokers(ctx)
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
	paddr, ptls, err := s.pulsarAddrOf(ctx, owner)
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

// rawEntry is the stored entry at p, as Pulsar's admin API returns a
// message (admin.Topics.Entry).
func (t *topic) rawEntry(ctx context.Context, p mledger.Position) (mledger.Entry, error) {
	if !t.ml.Owns(p.Ledger) || t.ml.LastConfirmed().Before(p) || p.Before(t.ml.First()) {
		return mledger.Entry{}, errorf(ErrNotFound, "%s has no message %v", t.name, p)
	}
	es, err := t.ml.Read(ctx, p, 1)
	if err != nil {
		return mledger.Entry{}, err
	}
	if len(es) == 0 || es[0].Pos != p {
		return mledger.Entry{}, errorf(ErrNotFound, "%s has no message %v", t.name, p)
	}
	return es[0], nil
}
