package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Namespaces is what the namespaces resource asks of the broker: the
// namespaces and their policies kept in etcd, and the calls that reach
// their topics.
type Namespaces interface {
	// ClusterName is the deployment's cluster (Clusters).
	ClusterName() string
	// Namespaces lists a tenant's namespaces (an error if the tenant
	// does not exist).
	Namespaces(ctx context.Context, tenant string) ([]string, error)
	// CreateNamespace creates namespace ns with policies p.
	CreateNamespace(ctx context.Context, ns string, p *metapb.NamespacePolicies) error
	// DeleteNamespace deletes an empty namespace.
	DeleteNamespace(ctx context.Context, ns string) error
	// Policies are a namespace's stored policies (errs.ErrNotFound if it
	// does not exist).
	Policies(ctx context.Context, ns string) (*metapb.NamespacePolicies, error)
	// Settings are what policies p mean: p over the broker's defaults.
	Settings(p *metapb.NamespacePolicies) Settings
	// SetPolicies changes a namespace's policies with fn and applies them
	// to its loaded topics.
	SetPolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error
	// TopicList is Pulsar's topic list of a namespace: the
	// non-partitioned topics and every partition of the partitioned ones.
	TopicList(ctx context.Context, ns string, d topicname.Domain) ([]string, error)
	// UnloadNamespace unloads the namespace's topics this broker owns,
	// and says how many.
	UnloadNamespace(ctx context.Context, ns string) (int, error)
	// ClearNamespaceBacklog acknowledges everything published so far on
	// subscription sub (every durable subscription if sub is "") of every
	// topic of namespace ns; r is the request, sent on to the owners of
	// the topics other brokers own.
	ClearNamespaceBacklog(r *http.Request, ns, sub string) error
	// UnsubscribeNamespace deletes subscription sub from every topic of
	// namespace ns, as ClearNamespaceBacklog reaches them.
	UnsubscribeNamespace(r *http.Request, ns, sub string) error
	// SchemaStrategies are the schema compatibility strategies the broker
	// checks, by Pulsar's names.
	SchemaStrategies() []string
}

// Settings are a namespace's effective settings: its policies over the
// broker's defaults. A negative retention is no limit.
type Settings struct {
	Ensemble, WriteQuorum, AckQuorum int
	RetentionTime                    time.Duration
	RetentionSize                    int64
	MessageTTL                       time.Duration
	Deduplication                    bool
}

// unsupportedNamespacePolicies are namespace policies of Pulsar's admin
// API that Magnetar does not have: every method on them is answered 501
// (docs/pulsar-compatibility.md), never accepted and ignored.
var unsupportedNamespacePolicies = []string{
	"antiAffinity", "autoSubscriptionCreation", "autoTopicCreation", "compactionThreshold",
	"delayedDelivery", "dispatchRate", "inactiveTopicPolicies", "isAllowAutoUpdateSchema",
	"maxConsumersPerSubscription", "maxConsumersPerTopic", "maxProducersPerTopic",
	"maxSubscriptionsPerTopic", "maxTopicsPerNamespace", "maxUnackedMessagesPerConsumer",
	"maxUnackedMessagesPerSubscription", "offloadDeletionLagMs", "offloadPolicies",
	"offloadThreshold", "offloadThresholdInSeconds", "properties", "publishRate", "replication",
	"replicatorDispatchRate", "resourcegroup", "schemaAutoUpdateCompatibilityStrategy",
	"subscribeRate", "subscriptionDispatchRate", "subscriptionExpirationTime",
}

// schemaUndefined is Pulsar's name of a namespace's schema compatibility
// strategy left to the broker's.
const schemaUndefined = "UNDEFINED"

// strategyJSON is a namespace's schema compatibility strategy as Pulsar
// shows it.
func strategyJSON(p *metapb.NamespacePolicies) string {
	if p.SchemaCompatibilityStrategy == "" {
		return schemaUndefined
	}
	return p.SchemaCompatibilityStrategy
}

// checkStrategy checks a schema compatibility strategy's name and
// returns what is stored for it ("" for UNDEFINED).
func checkStrategy(b Namespaces, s string) (string, error) {
	if s == schemaUndefined {
		return "", nil
	}
	if !slices.Contains(b.SchemaStrategies(), s) {
		return "", errorf(errs.ErrInvalidArgument, "schema compatibility strategy %q: want %s or one of %s", s, schemaUndefined, strings.Join(b.SchemaStrategies(), ", "))
	}
	return s, nil
}

// Backlog quota types and policies, Pulsar's names.
const (
	// QuotaStorage limits a backlog's size (bytes).
	QuotaStorage = "destination_storage"
	// QuotaAge limits a backlog's age (seconds).
	QuotaAge = "message_age"

	// QuotaHold holds producers' messages while over the quota.
	QuotaHold = "producer_request_hold"
	// QuotaException refuses producers while over the quota.
	QuotaException = "producer_exception"
	// QuotaEviction acknowledges the oldest messages of the backlog.
	QuotaEviction = "consumer_backlog_eviction"
)

// namespaceRoutes serves namespaces and their policies under Pulsar's
// /admin/v2/namespaces. A namespace has one bundle, bundleRange: the bundle
// calls take that one and find no other.
func namespaceRoutes(h route, z Rules, b Namespaces) {
	const nsBase = "/admin/v2/namespaces/{tenant}/{ns}"
	const bundleBase = nsBase + "/" + bundleRange
	h("GET /admin/v2/namespaces/{tenant}", z.TenantAdmin, func(r *http.Request) (any, error) {
		return nonNil(b.Namespaces(r.Context(), r.PathValue("tenant")))
	})
	h("PUT "+nsBase, z.TenantAdmin, func(r *http.Request) (any, error) {
		p, err := readNamespacePolicies(b, r)
		if err != nil {
			return nil, err
		}
		return nil, b.CreateNamespace(r.Context(), nsOf(r), p)
	})
	h("GET "+nsBase, z.TenantAdmin, func(r *http.Request) (any, error) {
		p, err := b.Policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return policiesJSON(b.ClusterName(), nsOf(r), p), nil
	})
	h("DELETE "+nsBase, z.TenantAdmin, func(r *http.Request) (any, error) {
		return nil, b.DeleteNamespace(r.Context(), nsOf(r))
	})
	// Pulsar's mode: PERSISTENT (the default), NON_PERSISTENT or ALL.
	h("GET "+nsBase+"/topics", z.NamespaceLookup, func(r *http.Request) (any, error) {
		mode := r.URL.Query().Get("mode")
		want, ok := topicname.DomainsOfMode(mode)
		if !ok {
			return nil, errorf(errs.ErrInvalidArgument, "mode %q: want PERSISTENT, NON_PERSISTENT or ALL", mode)
		}
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		out := []string{}
		for _, d := range want {
			list, err := b.TopicList(r.Context(), nsOf(r), d)
			if err != nil {
				return nil, err
			}
			out = append(out, list...)
		}
		return out, nil
	})

	// Retention.
	h("GET "+nsBase+"/retention", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return retentionJSON{Minutes: durationMinutes(st.RetentionTime), SizeMB: sizeMB(st.RetentionSize)}
	}))
	h("POST "+nsBase+"/retention", z.TenantAdmin, func(r *http.Request) (any, error) {
		var body retentionJSON
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		if body.Minutes < -1 || body.SizeMB < -1 {
			return nil, errorf(errs.ErrInvalidArgument, "retention values must be -1 (no limit) or more")
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = true, body.Minutes, body.SizeMB
			return checkQuotasFit(b, p)
		})
	})
	h("DELETE "+nsBase+"/retention", z.TenantAdmin, removePolicy(b, func(p *metapb.NamespacePolicies) {
		p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = false, 0, 0
	}))

	// Message TTL.
	h("GET "+nsBase+"/messageTTL", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return int64(st.MessageTTL / time.Second)
	}))
	h("POST "+nsBase+"/messageTTL", z.TenantAdmin, func(r *http.Request) (any, error) {
		var ttl int32
		if err := readJSON(r, &ttl, false); err != nil {
			return nil, err
		}
		if ttl < 0 {
			return nil, errorf(errs.ErrInvalidArgument, "message TTL %d must not be negative", ttl)
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasMessageTtl, p.MessageTtlSeconds = true, ttl
			return nil
		})
	})
	h("DELETE "+nsBase+"/messageTTL", z.TenantAdmin, removePolicy(b, func(p *metapb.NamespacePolicies) {
		p.HasMessageTtl, p.MessageTtlSeconds = false, 0
	}))

	// Persistence.
	h("GET "+nsBase+"/persistence", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return persistenceJSON{Ensemble: st.Ensemble, WriteQuorum: st.WriteQuorum, AckQuorum: st.AckQuorum}
	}))
	h("POST "+nsBase+"/persistence", z.TenantAdmin, func(r *http.Request) (any, error) {
		var body persistenceJSON
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		if err := body.check(); err != nil {
			return nil, err
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasPersistence, p.Ensemble, p.WriteQuorum, p.AckQuorum = true, int32(body.Ensemble), int32(body.WriteQuorum), int32(body.AckQuorum)
			return nil
		})
	})
	h("DELETE "+nsBase+"/persistence", z.TenantAdmin, removePolicy(b, func(p *metapb.NamespacePolicies) {
		p.HasPersistence, p.Ensemble, p.WriteQuorum, p.AckQuorum = false, 0, 0, 0
	}))
	for _, m := range []string{"GET", "POST", "DELETE"} {
		h(m+" "+nsBase+"/persistence/bookieAffinity", z.TenantAdmin, func(r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: bookie affinity groups (bookies are placed by rack and zone: --rack, --zone)", errs.ErrNotImplemented)
		})
	}

	// Deduplication.
	h("GET "+nsBase+"/deduplication", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return st.Deduplication
	}))
	h("POST "+nsBase+"/deduplication", z.TenantAdmin, func(r *http.Request) (any, error) {
		var on bool
		if err := readJSON(r, &on, false); err != nil {
			return nil, err
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasDeduplication, p.Deduplication = true, on
			return nil
		})
	})
	h("DELETE "+nsBase+"/deduplication", z.TenantAdmin, removePolicy(b, func(p *metapb.NamespacePolicies) {
		p.HasDeduplication, p.Deduplication = false, false
	}))

	// Schema policies.
	h("GET "+nsBase+"/schemaCompatibilityStrategy", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return strategyJSON(p)
	}))
	h("PUT "+nsBase+"/schemaCompatibilityStrategy", z.TenantAdmin, func(r *http.Request) (any, error) {
		var name string
		if err := readJSON(r, &name, false); err != nil {
			return nil, err
		}
		stored, err := checkStrategy(b, name)
		if err != nil {
			return nil, err
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.SchemaCompatibilityStrategy = stored
			return nil
		})
	})
	h("GET "+nsBase+"/schemaValidationEnforced", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return p.SchemaValidationEnforced
	}))
	h("POST "+nsBase+"/schemaValidationEnforced", z.TenantAdmin, func(r *http.Request) (any, error) {
		var on bool
		if err := readJSON(r, &on, false); err != nil {
			return nil, err
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.SchemaValidationEnforced = on
			return nil
		})
	})

	// Backlog quotas.
	h("GET "+nsBase+"/backlogQuotaMap", z.TenantAdmin, getPolicy(b, func(p *metapb.NamespacePolicies, st Settings) any {
		return backlogQuotaMapJSON(p.BacklogQuotas)
	}))
	h("POST "+nsBase+"/backlogQuota", z.TenantAdmin, func(r *http.Request) (any, error) {
		typ, err := quotaType(r)
		if err != nil {
			return nil, err
		}
		var body struct {
			LimitSize *lenientInt `json:"limitSize"`
			LimitTime *lenientInt `json:"limitTime"`
			Limit     *lenientInt `json:"limit"` // Pulsar's older name of limitSize
			Policy    string      `json:"policy"`
		}
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		q := &metapb.BacklogQuota{Policy: body.Policy}
		switch {
		case typ == QuotaStorage && body.LimitSize != nil:
			q.Limit = int64(*body.LimitSize)
		case typ == QuotaStorage && body.Limit != nil:
			q.Limit = int64(*body.Limit)
		case typ == QuotaAge && body.LimitTime != nil:
			q.Limit = int64(*body.LimitTime)
		}
		if q.Limit <= 0 {
			what := map[string]string{QuotaStorage: "limitSize (bytes)", QuotaAge: "limitTime (seconds)"}[typ]
			return nil, errorf(errs.ErrInvalidArgument, "a %s quota needs a positive %s (remove the quota for no limit)", typ, what)
		}
		switch q.Policy {
		case QuotaHold, QuotaException, QuotaEviction:
		default:
			return nil, errorf(errs.ErrInvalidArgument, "backlog quota policy %q: want %s, %s or %s", q.Policy, QuotaHold, QuotaException, QuotaEviction)
		}
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if p.BacklogQuotas == nil {
				p.BacklogQuotas = map[string]*metapb.BacklogQuota{}
			}
			p.BacklogQuotas[typ] = q
			return checkQuotasFit(b, p)
		})
	})
	h("DELETE "+nsBase+"/backlogQuota", z.TenantAdmin, func(r *http.Request) (any, error) {
		typ, err := quotaType(r)
		if err != nil {
			return nil, err
		}
		return removePolicy(b, func(p *metapb.NamespacePolicies) { delete(p.BacklogQuotas, typ) })(r)
	})

	// Encryption: Magnetar's brokers never require it.
	h("POST "+nsBase+"/encryptionRequired", z.TenantAdmin, func(r *http.Request) (any, error) {
		// A JSON boolean, or one in a string (what pulsaradmin sends).
		var v any
		if err := readJSON(r, &v, false); err != nil {
			return nil, err
		}
		on, err := strconv.ParseBool(fmt.Sprint(v))
		if err != nil {
			return nil, errorf(errs.ErrInvalidArgument, "request body %v: want true or false", v)
		}
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		if on {
			return nil, fmt.Errorf("%w: requiring end-to-end encryption", errs.ErrNotImplemented)
		}
		return nil, nil
	})
	// Subscription permissions: none are kept (any role allowed to consume
	// may use any subscription, within --subscription auth mode Prefix).
	h("GET "+nsBase+"/permissions/subscription", z.TenantAdmin, func(r *http.Request) (any, error) {
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return map[string][]string{}, nil
	})
	h("POST "+nsBase+"/permissions/subscription/{sub}", z.TenantAdmin, func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: subscription permissions (use subscriptionAuthMode Prefix)", errs.ErrNotImplemented)
	})
	h("DELETE "+nsBase+"/permissions/{sub}/{role}", z.TenantAdmin, func(r *http.Request) (any, error) {
		if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nil, errorf(errs.ErrNotFound, "role %q has no permission on subscription %q: none are kept", r.PathValue("role"), r.PathValue("sub"))
	})

	// Bundles: the one there is.
	for _, p := range []string{"PUT " + nsBase + "/unload", "PUT " + bundleBase + "/unload"} {
		h(p, z.TenantAdmin, func(r *http.Request) (any, error) {
			if _, err := b.Policies(r.Context(), nsOf(r)); err != nil {
				return nil, err
			}
			n, err := b.UnloadNamespace(r.Context(), nsOf(r))
			return map[string]int{"unloaded": n}, err
		})
	}
	h("PUT "+bundleBase+"/split", z.TenantAdmin, func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: splitting bundles (brokers own partitions one by one)", errs.ErrNotImplemented)
	})
	h("DELETE "+bundleBase, z.TenantAdmin, func(r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: deleting a bundle (delete the namespace's topics, or the namespace)", errs.ErrNotImplemented)
	})

	// Clearing backlogs and removing subscriptions across the namespace.
	for _, base := range []string{nsBase, bundleBase} {
		h("POST "+base+"/clearBacklog", z.TenantAdmin, func(r *http.Request) (any, error) {
			return nil, b.ClearNamespaceBacklog(r, nsOf(r), "")
		})
		h("POST "+base+"/clearBacklog/{sub}", z.TenantAdmin, func(r *http.Request) (any, error) {
			return nil, b.ClearNamespaceBacklog(r, nsOf(r), r.PathValue("sub"))
		})
		h("POST "+base+"/unsubscribe/{sub}", z.TenantAdmin, func(r *http.Request) (any, error) {
			return nil, b.UnsubscribeNamespace(r, nsOf(r), r.PathValue("sub"))
		})
	}

	// What Magnetar does not have.
	for _, name := range unsupportedNamespacePolicies {
		for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
			h(m+" "+nsBase+"/"+name, z.TenantAdmin, func(r *http.Request) (any, error) {
				return nil, fmt.Errorf("%w: the namespace policy %s", errs.ErrNotImplemented, name)
			})
		}
	}
}

// getPolicy answers a policy's GET from the namespace's effective
// settings.
func getPolicy(b Namespaces, fn func(*metapb.NamespacePolicies, Settings) any) handler {
	return func(r *http.Request) (any, error) {
		p, err := b.Policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return fn(p, b.Settings(p)), nil
	}
}

// removePolicy answers a policy's DELETE: the namespace goes back to the
// broker's default.
func removePolicy(b Namespaces, fn func(*metapb.NamespacePolicies)) handler {
	return func(r *http.Request) (any, error) {
		return nil, b.SetPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			fn(p)
			return nil
		})
	}
}

// quotaType reads ?backlogQuotaType (destination_storage by default).
func quotaType(r *http.Request) (string, error) {
	switch t := r.URL.Query().Get("backlogQuotaType"); t {
	case "", QuotaStorage:
		return QuotaStorage, nil
	case QuotaAge:
		return QuotaAge, nil
	default:
		return "", errorf(errs.ErrInvalidArgument, "backlogQuotaType %q: want %s or %s", t, QuotaStorage, QuotaAge)
	}
}

// checkQuotasFit refuses, as Pulsar (412), a backlog quota at or over the
// retention limit of the same kind: the backlog would be deleted first.
func checkQuotasFit(b Namespaces, p *metapb.NamespacePolicies) error {
	st := b.Settings(p)
	if q := p.BacklogQuotas[QuotaStorage]; q != nil && st.RetentionSize > 0 && q.Limit >= st.RetentionSize {
		return errorf(errs.ErrNotAllowed, "backlog quota %d bytes exceeds the retention size %d bytes", q.Limit, st.RetentionSize)
	}
	if q := p.BacklogQuotas[QuotaAge]; q != nil && st.RetentionTime > 0 && time.Duration(q.Limit)*time.Second >= st.RetentionTime {
		return errorf(errs.ErrNotAllowed, "backlog quota %ds exceeds the retention time %v", q.Limit, st.RetentionTime)
	}
	return nil
}

// backlogQuotaMapJSON is Pulsar's backlog quota map.
func backlogQuotaMapJSON(qs map[string]*metapb.BacklogQuota) map[string]any {
	out := map[string]any{}
	for typ, q := range qs {
		size, age := int64(-1), int64(-1)
		if typ == QuotaStorage {
			size = q.Limit
		} else {
			age = q.Limit
		}
		out[typ] = map[string]any{"limitSize": size, "limitTime": age, "policy": q.Policy}
	}
	return out
}

// policiesJSON is Pulsar's Policies for what Magnetar has. A policy that
// is not set is null, as in Pulsar (the broker's default applies).
func policiesJSON(cluster, ns string, p *metapb.NamespacePolicies) map[string]any {
	var persistence, retention, ttl, dedup any
	if p.HasPersistence {
		persistence = persistenceJSON{Ensemble: int(p.Ensemble), WriteQuorum: int(p.WriteQuorum), AckQuorum: int(p.AckQuorum)}
	}
	if p.HasRetention {
		retention = retentionJSON{Minutes: p.RetentionMinutes, SizeMB: p.RetentionSizeMb}
	}
	if p.HasMessageTtl {
		ttl = p.MessageTtlSeconds
	}
	if p.HasDeduplication {
		dedup = p.Deduplication
	}
	destination := map[string]any{}
	for topic, tp := range p.TopicPermissions {
		if n, err := topicname.ParsePath(ns + "/" + topic); err == nil {
			destination[n.String()] = actionsJSON(tp.GetRoles())
		}
	}
	mode := "None"
	if p.SubscriptionPrefix {
		mode = "Prefix"
	}
	return map[string]any{
		"auth_policies": map[string]any{"namespace_auth": actionsJSON(p.NamespacePermissions),
			"destination_auth": destination, "subscription_auth_roles": map[string]any{}},
		"replication_clusters":          []string{cluster},
		"bundles":                       map[string]any{"boundaries": strings.Split(bundleRange, "_"), "numBundles": 1},
		"backlog_quota_map":             backlogQuotaMapJSON(p.BacklogQuotas),
		"persistence":                   persistence,
		"retention_policies":            retention,
		"message_ttl_in_seconds":        ttl,
		"deduplicationEnabled":          dedup,
		"subscription_auth_mode":        mode,
		"schema_compatibility_strategy": strategyJSON(p),
		"schema_validation_enforced":    p.SchemaValidationEnforced,
		"deleted":                       false,
		"encryption_required":           false,
	}
}

// readNamespacePolicies reads the optional body of a namespace's
// creation: Pulsar's Policies (or only its bundles, as
// CreateNsWithNumBundles sends). The policies Magnetar has are kept; one
// Magnetar does not have, set to anything but its zero value or null, is
// refused (501), not ignored.
func readNamespacePolicies(b Namespaces, r *http.Request) (*metapb.NamespacePolicies, error) {
	p := &metapb.NamespacePolicies{}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, errorf(errs.ErrInvalidArgument, "request body: %v", err)
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || string(trimmed) == "null" {
		return p, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, errorf(errs.ErrInvalidArgument, "request body: want Pulsar's namespace policies: %v", err)
	}
	decode := func(name string, v any) (bool, error) {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return false, nil
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return false, errorf(errs.ErrInvalidArgument, "%s: %v", name, err)
		}
		return true, nil
	}
	var pers persistenceJSON
	if ok, err := decode("persistence", &pers); err != nil {
		return nil, err
	} else if ok {
		if err := pers.check(); err != nil {
			return nil, err
		}
		p.HasPersistence, p.Ensemble, p.WriteQuorum, p.AckQuorum = true, int32(pers.Ensemble), int32(pers.WriteQuorum), int32(pers.AckQuorum)
	}
	var ret retentionJSON
	if ok, err := decode("retention_policies", &ret); err != nil {
		return nil, err
	} else if ok {
		if ret.Minutes < -1 || ret.SizeMB < -1 {
			return nil, errorf(errs.ErrInvalidArgument, "retention values must be -1 (no limit) or more")
		}
		p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = true, ret.Minutes, ret.SizeMB
	}
	var ttl int32
	if ok, err := decode("message_ttl_in_seconds", &ttl); err != nil {
		return nil, err
	} else if ok {
		if ttl < 0 {
			return nil, errorf(errs.ErrInvalidArgument, "message TTL %d must not be negative", ttl)
		}
		p.HasMessageTtl, p.MessageTtlSeconds = true, ttl
	}
	if ok, err := decode("deduplicationEnabled", &p.Deduplication); err != nil {
		return nil, err
	} else if ok {
		p.HasDeduplication = true
	}
	var strategy string
	if ok, err := decode("schema_compatibility_strategy", &strategy); err != nil {
		return nil, err
	} else if ok && strategy != "" {
		if p.SchemaCompatibilityStrategy, err = checkStrategy(b, strategy); err != nil {
			return nil, err
		}
	}
	if _, err := decode("schema_validation_enforced", &p.SchemaValidationEnforced); err != nil {
		return nil, err
	}
	var mode string
	if ok, err := decode("subscription_auth_mode", &mode); err != nil {
		return nil, err
	} else if ok && mode != "" && mode != "None" {
		if mode != "Prefix" {
			return nil, errorf(errs.ErrInvalidArgument, "subscription_auth_mode %q: want None or Prefix", mode)
		}
		p.SubscriptionPrefix = true
	}
	var clusters []string
	if _, err := decode("replication_clusters", &clusters); err != nil {
		return nil, err
	}
	for _, c := range clusters {
		if c != b.ClusterName() {
			return nil, fmt.Errorf("%w: replication to cluster %q (this one is %q)", errs.ErrNotImplemented, c, b.ClusterName())
		}
	}
	var quotas map[string]struct {
		LimitSize lenientInt `json:"limitSize"`
		LimitTime lenientInt `json:"limitTime"`
		Policy    string     `json:"policy"`
	}
	if _, err := decode("backlog_quota_map", &quotas); err != nil {
		return nil, err
	}
	for typ, q := range quotas {
		limit := int64(q.LimitSize)
		switch typ {
		case QuotaStorage:
		case QuotaAge:
			limit = int64(q.LimitTime)
		default:
			return nil, errorf(errs.ErrInvalidArgument, "backlog quota type %q: want %s or %s", typ, QuotaStorage, QuotaAge)
		}
		switch q.Policy {
		case QuotaHold, QuotaException, QuotaEviction:
		default:
			return nil, errorf(errs.ErrInvalidArgument, "backlog quota policy %q", q.Policy)
		}
		if limit > 0 {
			if p.BacklogQuotas == nil {
				p.BacklogQuotas = map[string]*metapb.BacklogQuota{}
			}
			p.BacklogQuotas[typ] = &metapb.BacklogQuota{Limit: limit, Policy: q.Policy}
		}
	}
	if err := checkQuotasFit(b, p); err != nil {
		return nil, err
	}
	// Grants go through .../permissions, where they are checked.
	var auth struct {
		Namespace   map[string]json.RawMessage `json:"namespace_auth"`
		Destination map[string]json.RawMessage `json:"destination_auth"`
		Sub         map[string]json.RawMessage `json:"subscription_auth_roles"`
	}
	if _, err := decode("auth_policies", &auth); err != nil {
		return nil, err
	}
	if len(auth.Namespace)+len(auth.Destination)+len(auth.Sub) > 0 {
		return nil, errorf(errs.ErrInvalidArgument, "auth_policies: grant permissions with POST .../permissions/{role} once the namespace exists")
	}
	// Policies Magnetar does not have must be absent, null or zero.
	for name, raw := range fields {
		switch name {
		case "persistence", "retention_policies", "message_ttl_in_seconds", "deduplicationEnabled", "subscription_auth_mode",
			"replication_clusters", "backlog_quota_map", "auth_policies", "bundles", "deleted",
			"schema_compatibility_strategy", "schema_validation_enforced":
			continue
		}
		switch strings.TrimSpace(string(raw)) {
		case "null", "false", "0", `""`, "{}", "[]", `"UNDEFINED"`, `"Undefined"`:
			continue
		}
		return nil, fmt.Errorf("%w: the namespace policy %s", errs.ErrNotImplemented, name)
	}
	return p, nil
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
		return errorf(errs.ErrInvalidArgument, "persistence %d/%d/%d: need 64 >= ensemble >= write quorum >= ack quorum >= 1", p.Ensemble, p.WriteQuorum, p.AckQuorum)
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

// lenientInt is an integer of a request body given as a JSON number or as
// a string holding one: Pulsar's broker (Jackson) takes both, and clients
// send both (pulsar-client-go's own tests post {"limit": "10240"}).
type lenientInt int64

func (v *lenientInt) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil // as for an int64: left as it is
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("want an integer: %s", b)
		}
		*v = lenientInt(n)
		return nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return fmt.Errorf("want an integer: %q", s)
	}
	*v = lenientInt(n)
	return nil
}
