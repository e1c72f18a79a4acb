package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// metadata is the broker's access to tenants, namespaces and partitioned
// topics in the metastore.
type metadata struct {
	store *metastore.Store
	cfg   *Config
}

func getProto(ctx context.Context, s *metastore.Store, key string, m proto.Message) (int64, error) {
	kv, err := s.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if err := proto.Unmarshal(kv.Value, m); err != nil {
		return 0, fmt.Errorf("corrupt metadata at %s: %w", key, err)
	}
	return kv.ModRevision, nil
}

func marshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err) // only our own well-formed messages are marshalled
	}
	return b
}

// ensureDefaults creates tenant "public" and namespace "public/default".
func (md *metadata) ensureDefaults(ctx context.Context) error {
	if _, err := md.store.Create(ctx, metastore.TenantKey(topicname.DefaultTenant), marshal(&metapb.TenantInfo{})); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
		return err
	}
	ns := topicname.DefaultTenant + "/" + topicname.DefaultNamespace
	if _, err := md.store.Create(ctx, metastore.NamespaceKey(ns), marshal(&metapb.NamespacePolicies{})); err != nil && !errors.Is(err, metastore.ErrBadVersion) {
		return err
	}
	return nil
}

func (md *metadata) listChildren(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	err := md.store.ListAll(ctx, prefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		out = append(out, strings.TrimPrefix(kv.Key, prefix))
		return nil
	})
	return out, err
}

func (md *metadata) tenants(ctx context.Context) ([]string, error) {
	return md.listChildren(ctx, metastore.TenantsPrefix)
}

func (md *metadata) createTenant(ctx context.Context, tenant string, info *metapb.TenantInfo) error {
	if err := topicname.CheckSegment("tenant", tenant); err != nil {
		return errorf(ErrInvalidArgument, "%v", err)
	}
	if _, err := md.store.Create(ctx, metastore.TenantKey(tenant), marshal(info)); errors.Is(err, metastore.ErrBadVersion) {
		return errorf(ErrConflict, "tenant %s already exists", tenant)
	} else if err != nil {
		return err
	}
	return nil
}

// tenant returns a tenant's details; ErrNotFound if it does not exist.
func (md *metadata) tenant(ctx context.Context, tenant string) (*metapb.TenantInfo, error) {
	if err := topicname.CheckSegment("tenant", tenant); err != nil {
		return nil, errorf(ErrInvalidArgument, "%v", err)
	}
	info := &metapb.TenantInfo{}
	if _, err := getProto(ctx, md.store, metastore.TenantKey(tenant), info); errors.Is(err, metastore.ErrNotFound) {
		return nil, errorf(ErrNotFound, "tenant %s does not exist", tenant)
	} else if err != nil {
		return nil, err
	}
	return info, nil
}

// updateTenant replaces an existing tenant's details.
func (md *metadata) updateTenant(ctx context.Context, tenant string, info *metapb.TenantInfo) error {
	for {
		rev, err := getProto(ctx, md.store, metastore.TenantKey(tenant), &metapb.TenantInfo{})
		if errors.Is(err, metastore.ErrNotFound) {
			return errorf(ErrNotFound, "tenant %s does not exist", tenant)
		} else if err != nil {
			return err
		}
		_, err = md.store.CompareAndSwap(ctx, metastore.TenantKey(tenant), marshal(info), rev)
		if !errors.Is(err, metastore.ErrBadVersion) {
			return err
		}
	}
}

func (md *metadata) tenantExists(ctx context.Context, tenant string) error {
	if _, err := md.store.Get(ctx, metastore.TenantKey(tenant)); errors.Is(err, metastore.ErrNotFound) {
		return errorf(ErrNotFound, "tenant %s does not exist", tenant)
	} else if err != nil {
		return err
	}
	return nil
}

func (md *metadata) deleteTenant(ctx context.Context, tenant string) error {
	if err := md.tenantExists(ctx, tenant); err != nil {
		return err
	}
	nss, err := md.namespaces(ctx, tenant)
	if err != nil {
		return err
	}
	if len(nss) > 0 {
		return errorf(ErrNotEmpty, "tenant %s still has namespaces %v", tenant, nss)
	}
	return md.store.Delete(ctx, metastore.TenantKey(tenant))
}

func (md *metadata) namespaces(ctx context.Context, tenant string) ([]string, error) {
	names, err := md.listChildren(ctx, metastore.NamespaceKey(tenant+"/"))
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		names[i] = tenant + "/" + n
	}
	return names, nil
}

func splitNamespace(ns string) (string, string, error) {
	t, n, ok := strings.Cut(ns, "/")
	if !ok || strings.Contains(n, "/") {
		return "", "", errorf(ErrInvalidArgument, "namespace %q: want tenant/namespace", ns)
	}
	if err := topicname.CheckSegment("tenant", t); err != nil {
		return "", "", errorf(ErrInvalidArgument, "%v", err)
	}
	if err := topicname.CheckSegment("namespace", n); err != nil {
		return "", "", errorf(ErrInvalidArgument, "%v", err)
	}
	return t, n, nil
}

// createNamespace creates a namespace with policies p.
func (md *metadata) createNamespace(ctx context.Context, ns string, p *metapb.NamespacePolicies) error {
	t, _, err := splitNamespace(ns)
	if err != nil {
		return err
	}
	if err := md.tenantExists(ctx, t); err != nil {
		return err
	}
	if _, err := md.store.Create(ctx, metastore.NamespaceKey(ns), marshal(p)); errors.Is(err, metastore.ErrBadVersion) {
		return errorf(ErrConflict, "namespace %s already exists", ns)
	} else if err != nil {
		return err
	}
	return nil
}

func (md *metadata) deleteNamespace(ctx context.Context, ns string) error {
	if _, err := md.policies(ctx, ns); err != nil {
		return err
	}
	for _, d := range []topicname.Domain{topicname.Persistent, topicname.NonPersistent} {
		topics, err := md.topics(ctx, ns, d)
		if err != nil {
			return err
		}
		if len(topics) > 0 {
			return errorf(ErrNotEmpty, "namespace %s still has topics %v", ns, topics)
		}
	}
	return md.store.Delete(ctx, metastore.NamespaceKey(ns))
}

// policies returns a namespace's policies; ErrNotFound if it does not
// exist.
func (md *metadata) policies(ctx context.Context, ns string) (*metapb.NamespacePolicies, error) {
	if _, _, err := splitNamespace(ns); err != nil {
		return nil, err
	}
	p := &metapb.NamespacePolicies{}
	if _, err := getProto(ctx, md.store, metastore.NamespaceKey(ns), p); errors.Is(err, metastore.ErrNotFound) {
		return nil, errorf(ErrNotFound, "namespace %s does not exist", ns)
	} else if err != nil {
		return nil, err
	}
	return p, nil
}

// updatePolicies applies fn to a namespace's policies with a CAS.
func (md *metadata) updatePolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error {
	for {
		p := &metapb.NamespacePolicies{}
		rev, err := getProto(ctx, md.store, metastore.NamespaceKey(ns), p)
		if errors.Is(err, metastore.ErrNotFound) {
			return errorf(ErrNotFound, "namespace %s does not exist", ns)
		}
		if err != nil {
			return err
		}
		if err := fn(p); err != nil {
			return err
		}
		_, err = md.store.CompareAndSwap(ctx, metastore.NamespaceKey(ns), marshal(p), rev)
		if !errors.Is(err, metastore.ErrBadVersion) {
			return err
		}
	}
}

// settings are a namespace's effective policies.
type settings struct {
	ensemble, writeQuorum, ackQuorum int
	retention                        mledger.Retention
	messageTTL                       time.Duration
	dedup                            bool
	// quotas are the backlog quotas by type (quotaStorage, quotaAge).
	quotas map[string]backlogQuota
}

func (md *metadata) settings(p *metapb.NamespacePolicies) settings {
	s := settings{
		ensemble: md.cfg.Ensemble, writeQuorum: md.cfg.WriteQuorum, ackQuorum: md.cfg.AckQuorum,
		retention:  mledger.Retention{Time: md.cfg.RetentionTime, Size: md.cfg.RetentionSize},
		messageTTL: md.cfg.MessageTTL,
		dedup:      md.cfg.Deduplication,
	}
	if p.HasPersistence {
		s.ensemble, s.writeQuorum, s.ackQuorum = int(p.Ensemble), int(p.WriteQuorum), int(p.AckQuorum)
	}
	if p.HasRetention {
		s.retention = mledger.Retention{Time: time.Duration(p.RetentionMinutes) * time.Minute, Size: p.RetentionSizeMb << 20}
		if p.RetentionMinutes < 0 {
			s.retention.Time = -1
		}
		if p.RetentionSizeMb < 0 {
			s.retention.Size = -1
		}
	}
	if p.HasMessageTtl {
		s.messageTTL = time.Duration(p.MessageTtlSeconds) * time.Second
	}
	if p.HasDeduplication {
		s.dedup = p.Deduplication
	}
	for typ, q := range p.BacklogQuotas {
		if q.GetLimit() > 0 {
			if s.quotas == nil {
				s.quotas = map[string]backlogQuota{}
			}
			s.quotas[typ] = backlogQuota{limit: q.GetLimit(), policy: q.GetPolicy()}
		}
	}
	return s
}

// topicPath is the form of a topic's name used in keys (topicname.Name.Path):
// "tenant/namespace/topic", or "tenant/namespace/non-persistent/topic".
func topicPath(n topicname.Name) string { return n.Path() }

// partitions returns the partition count of a partitioned topic, 0 for
// others.
func (md *metadata) partitions(ctx context.Context, n topicname.Name) (int, error) {
	var pt metapb.PartitionedTopic
	if _, err := getProto(ctx, md.store, metastore.PartitionedKey(topicPath(n)), &pt); errors.Is(err, metastore.ErrNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	return int(pt.Partitions), nil
}

// MaxPartitions bounds a partitioned topic.
const MaxPartitions = 1024

func (md *metadata) createPartitioned(ctx context.Context, n topicname.Name, partitions int) error {
	if partitions < 1 || partitions > MaxPartitions {
		return errorf(ErrInvalidArgument, "partitions %d must be in 1..%d", partitions, MaxPartitions)
	}
	if err := checkPartitionedTopicName(n); err != nil {
		return err
	}
	if _, err := md.policies(ctx, n.NamespaceName()); err != nil {
		return err
	}
	if exists, err := md.topicExists(ctx, n); err != nil {
		return err
	} else if exists {
		return errorf(ErrConflict, "non-partitioned topic %s already exists", n)
	}
	if _, err := md.store.Create(ctx, metastore.PartitionedKey(topicPath(n)), marshal(&metapb.PartitionedTopic{Partitions: int32(partitions)})); errors.Is(err, metastore.ErrBadVersion) {
		return errorf(ErrConflict, "partitioned topic %s already exists", n)
	} else if err != nil {
		return err
	}
	return nil
}

// topicExists reports whether a (non-partitioned) topic or partition has
// storage; a non-persistent one, whether a broker has it loaded.
func (md *metadata) topicExists(ctx context.Context, n topicname.Name) (bool, error) {
	key := metastore.ManagedLedgerKey(topicPath(n))
	if !n.Persistent() {
		key = metastore.OwnerKey(topicPath(n))
	}
	_, err := md.store.Get(ctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// topics lists a namespace's topics of domain d: partitioned ones by their
// base name, others by name. Persistent topics are those with storage;
// non-persistent ones, those a broker has loaded.
func (md *metadata) topics(ctx context.Context, ns string, d topicname.Domain) ([]string, error) {
	out, err := md.partitionedTopics(ctx, ns, d)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, n := range out {
		seen[n] = true
	}
	if d == topicname.NonPersistent {
		prefix := metastore.OwnersPrefix + ns + "/"
		err := md.store.ListAll(ctx, prefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
			n, err := topicname.ParsePath(ns + "/" + strings.TrimPrefix(kv.Key, prefix))
			if err != nil || n.Persistent() || n.PartitionIndex() >= 0 && seen[n.Base().String()] {
				return nil
			}
			out = append(out, n.String())
			return nil
		})
		return out, err
	}
	err = md.store.ListAll(ctx, metastore.TopicsPrefix+ns+"/", metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		rest := strings.TrimPrefix(kv.Key, metastore.TopicsPrefix+ns+"/")
		local, what, ok := strings.Cut(rest, "/")
		if !ok || what != "ledgers" {
			return nil
		}
		name, err := topicname.Parse(ns + "/" + local)
		if err != nil {
			return nil
		}
		if base := name.Base().String(); name.PartitionIndex() >= 0 && seen[base] {
			return nil
		}
		out = append(out, name.String())
		return nil
	})
	return out, err
}
