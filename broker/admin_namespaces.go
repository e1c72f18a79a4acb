package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

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
	"schemaCompatibilityStrategy", "schemaValidationEnforced", "subscribeRate",
	"subscriptionDispatchRate", "subscriptionExpirationTime",
}

// Backlog quota types and policies, Pulsar's names.
const (
	quotaStorage = "destination_storage"
	quotaAge     = "message_age"

	quotaHold      = "producer_request_hold"
	quotaException = "producer_exception"
	quotaEviction  = "consumer_backlog_eviction"
)

// namespaceRoutes serves namespaces and their policies under Pulsar's
// /admin/v2/namespaces. A namespace has one bundle, bundleRange: the bundle
// calls take that one and find no other.
func (s *Server) namespaceRoutes(h route) {
	const nsBase = "/admin/v2/namespaces/{tenant}/{ns}"
	const bundleBase = nsBase + "/" + bundleRange
	h("GET /admin/v2/namespaces/{tenant}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if err := s.md.tenantExists(r.Context(), r.PathValue("tenant")); err != nil {
			return nil, err
		}
		return nonNil(s.md.namespaces(r.Context(), r.PathValue("tenant")))
	})
	h("PUT "+nsBase, s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.readNamespacePolicies(r)
		if err != nil {
			return nil, err
		}
		return nil, s.md.createNamespace(r.Context(), nsOf(r), p)
	})
	h("GET "+nsBase, s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return s.policiesJSON(nsOf(r), p), nil
	})
	h("DELETE "+nsBase, s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.md.deleteNamespace(r.Context(), nsOf(r))
	})
	h("GET "+nsBase+"/topics", s.onNamespace(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nonNil(s.md.topicList(r.Context(), nsOf(r)))
	})

	// Retention.
	h("GET "+nsBase+"/retention", s.tenantAdmin, s.getPolicy(func(p *metapb.NamespacePolicies, st settings) any {
		return retentionJSON{Minutes: durationMinutes(st.retention.Time), SizeMB: sizeMB(st.retention.Size)}
	}))
	h("POST "+nsBase+"/retention", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var body retentionJSON
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		if body.Minutes < -1 || body.SizeMB < -1 {
			return nil, errorf(ErrInvalidArgument, "retention values must be -1 (no limit) or more")
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = true, body.Minutes, body.SizeMB
			return s.checkQuotasFit(p)
		})
	})
	h("DELETE "+nsBase+"/retention", s.tenantAdmin, s.removePolicy(func(p *metapb.NamespacePolicies) {
		p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = false, 0, 0
	}))

	// Message TTL.
	h("GET "+nsBase+"/messageTTL", s.tenantAdmin, s.getPolicy(func(p *metapb.NamespacePolicies, st settings) any {
		return int64(st.messageTTL / time.Second)
	}))
	h("POST "+nsBase+"/messageTTL", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var ttl int32
		if err := readJSON(r, &ttl, false); err != nil {
			return nil, err
		}
		if ttl < 0 {
			return nil, errorf(ErrInvalidArgument, "message TTL %d must not be negative", ttl)
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasMessageTtl, p.MessageTtlSeconds = true, ttl
			return nil
		})
	})
	h("DELETE "+nsBase+"/messageTTL", s.tenantAdmin, s.removePolicy(func(p *metapb.NamespacePolicies) {
		p.HasMessageTtl, p.MessageTtlSeconds = false, 0
	}))

	// Persistence.
	h("GET "+nsBase+"/persistence", s.tenantAdmin, s.getPolicy(func(p *metapb.NamespacePolicies, st settings) any {
		return persistenceJSON{Ensemble: st.ensemble, WriteQuorum: st.writeQuorum, AckQuorum: st.ackQuorum}
	}))
	h("POST "+nsBase+"/persistence", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var body persistenceJSON
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		if err := body.check(); err != nil {
			return nil, err
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasPersistence, p.Ensemble, p.WriteQuorum, p.AckQuorum = true, int32(body.Ensemble), int32(body.WriteQuorum), int32(body.AckQuorum)
			return nil
		})
	})
	h("DELETE "+nsBase+"/persistence", s.tenantAdmin, s.removePolicy(func(p *metapb.NamespacePolicies) {
		p.HasPersistence, p.Ensemble, p.WriteQuorum, p.AckQuorum = false, 0, 0, 0
	}))
	for _, m := range []string{"GET", "POST", "DELETE"} {
		h(m+" "+nsBase+"/persistence/bookieAffinity", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, fmt.Errorf("%w: bookie affinity groups (bookies are placed by rack and zone: --rack, --zone)", ErrNotImplemented)
		})
	}

	// Deduplication.
	h("GET "+nsBase+"/deduplication", s.tenantAdmin, s.getPolicy(func(p *metapb.NamespacePolicies, st settings) any {
		return st.dedup
	}))
	h("POST "+nsBase+"/deduplication", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var on bool
		if err := readJSON(r, &on, false); err != nil {
			return nil, err
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.HasDeduplication, p.Deduplication = true, on
			return nil
		})
	})
	h("DELETE "+nsBase+"/deduplication", s.tenantAdmin, s.removePolicy(func(p *metapb.NamespacePolicies) {
		p.HasDeduplication, p.Deduplication = false, false
	}))

	// Backlog quotas.
	h("GET "+nsBase+"/backlogQuotaMap", s.tenantAdmin, s.getPolicy(func(p *metapb.NamespacePolicies, st settings) any {
		return backlogQuotaMapJSON(p.BacklogQuotas)
	}))
	h("POST "+nsBase+"/backlogQuota", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		typ, err := quotaType(r)
		if err != nil {
			return nil, err
		}
		var body struct {
			LimitSize *int64 `json:"limitSize"`
			LimitTime *int64 `json:"limitTime"`
			Limit     *int64 `json:"limit"` // Pulsar's older name of limitSize
			Policy    string `json:"policy"`
		}
		if err := readJSON(r, &body, false); err != nil {
			return nil, err
		}
		q := &metapb.BacklogQuota{Policy: body.Policy}
		switch {
		case typ == quotaStorage && body.LimitSize != nil:
			q.Limit = *body.LimitSize
		case typ == quotaStorage && body.Limit != nil:
			q.Limit = *body.Limit
		case typ == quotaAge && body.LimitTime != nil:
			q.Limit = *body.LimitTime
		}
		if q.Limit <= 0 {
			what := map[string]string{quotaStorage: "limitSize (bytes)", quotaAge: "limitTime (seconds)"}[typ]
			return nil, errorf(ErrInvalidArgument, "a %s quota needs a positive %s (remove the quota for no limit)", typ, what)
		}
		switch q.Policy {
		case quotaHold, quotaException, quotaEviction:
		default:
			return nil, errorf(ErrInvalidArgument, "backlog quota policy %q: want %s, %s or %s", q.Policy, quotaHold, quotaException, quotaEviction)
		}
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if p.BacklogQuotas == nil {
				p.BacklogQuotas = map[string]*metapb.BacklogQuota{}
			}
			p.BacklogQuotas[typ] = q
			return s.checkQuotasFit(p)
		})
	})
	h("DELETE "+nsBase+"/backlogQuota", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		typ, err := quotaType(r)
		if err != nil {
			return nil, err
		}
		return s.removePolicy(func(p *metapb.NamespacePolicies) { delete(p.BacklogQuotas, typ) })(w, r)
	})

	// Encryption: Magnetar's brokers never require it.
	h("POST "+nsBase+"/encryptionRequired", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		// A JSON boolean, or one in a string (what pulsaradmin sends).
		var v any
		if err := readJSON(r, &v, false); err != nil {
			return nil, err
		}
		on, err := strconv.ParseBool(fmt.Sprint(v))
		if err != nil {
			return nil, errorf(ErrInvalidArgument, "request body %v: want true or false", v)
		}
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		if on {
			return nil, fmt.Errorf("%w: requiring end-to-end encryption", ErrNotImplemented)
		}
		return nil, nil
	})
	// Subscription permissions: none are kept (any role allowed to consume
	// may use any subscription, within --subscription auth mode Prefix).
	h("GET "+nsBase+"/permissions/subscription", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return map[string][]string{}, nil
	})
	h("POST "+nsBase+"/permissions/subscription/{sub}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: subscription permissions (use subscriptionAuthMode Prefix)", ErrNotImplemented)
	})
	h("DELETE "+nsBase+"/permissions/{sub}/{role}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
			return nil, err
		}
		return nil, errorf(ErrNotFound, "role %q has no permission on subscription %q: none are kept", r.PathValue("role"), r.PathValue("sub"))
	})

	// Bundles: the one there is.
	for _, p := range []string{"PUT " + nsBase + "/unload", "PUT " + bundleBase + "/unload"} {
		h(p, s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
			if _, err := s.md.policies(r.Context(), nsOf(r)); err != nil {
				return nil, err
			}
			n, err := s.unloadNamespace(r.Context(), nsOf(r))
			return map[string]int{"unloaded": n}, err
		})
	}
	h("PUT "+bundleBase+"/split", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: splitting bundles (brokers own partitions one by one)", ErrNotImplemented)
	})
	h("DELETE "+bundleBase, s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, fmt.Errorf("%w: deleting a bundle (delete the namespace's topics, or the namespace)", ErrNotImplemented)
	})

	// Clearing backlogs and removing subscriptions across the namespace.
	for _, base := range []string{nsBase, bundleBase} {
		h("POST "+base+"/clearBacklog", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, s.forNamespaceSubscriptions(r, "", "/skip_all", http.MethodPost, func(t *topic, sub *subscription) error {
				sub.skipAll(t)
				return nil
			})
		})
		h("POST "+base+"/clearBacklog/{sub}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, s.forNamespaceSubscriptions(r, r.PathValue("sub"), "/skip_all", http.MethodPost, func(t *topic, sub *subscription) error {
				sub.skipAll(t)
				return nil
			})
		})
		h("POST "+base+"/unsubscribe/{sub}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
			return nil, s.forNamespaceSubscriptions(r, r.PathValue("sub"), "", http.MethodDelete, func(t *topic, sub *subscription) error {
				return t.removeSubscription(r.Context(), sub.name, false)
			})
		})
	}

	// What Magnetar does not have.
	for _, name := range unsupportedNamespacePolicies {
		for _, m := range []string{"GET", "PUT", "POST", "DELETE"} {
			h(m+" "+nsBase+"/"+name, s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
				return nil, fmt.Errorf("%w: the namespace policy %s", ErrNotImplemented, name)
			})
		}
	}
}

// getPolicy answers a policy's GET from the namespace's effective
// settings.
func (s *Server) getPolicy(fn func(*metapb.NamespacePolicies, settings) any) func(w http.ResponseWriter, r *http.Request) (any, error) {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return fn(p, s.md.settings(p)), nil
	}
}

// removePolicy answers a policy's DELETE: the namespace goes back to the
// broker's default.
func (s *Server) removePolicy(fn func(*metapb.NamespacePolicies)) func(w http.ResponseWriter, r *http.Request) (any, error) {
	return func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.setPolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			fn(p)
			return nil
		})
	}
}

// quotaType reads ?backlogQuotaType (destination_storage by default).
func quotaType(r *http.Request) (string, error) {
	switch t := r.URL.Query().Get("backlogQuotaType"); t {
	case "", quotaStorage:
		return quotaStorage, nil
	case quotaAge:
		return quotaAge, nil
	default:
		return "", errorf(ErrInvalidArgument, "backlogQuotaType %q: want %s or %s", t, quotaStorage, quotaAge)
	}
}

// checkQuotasFit refuses, as Pulsar (412), a backlog quota at or over the
// retention limit of the same kind: the backlog would be deleted first.
func (s *Server) checkQuotasFit(p *metapb.NamespacePolicies) error {
	st := s.md.settings(p)
	if q := p.BacklogQuotas[quotaStorage]; q != nil && st.retention.Size > 0 && q.Limit >= st.retention.Size {
		return errorf(ErrNotAllowed, "backlog quota %d bytes exceeds the retention size %d bytes", q.Limit, st.retention.Size)
	}
	if q := p.BacklogQuotas[quotaAge]; q != nil && st.retention.Time > 0 && time.Duration(q.Limit)*time.Second >= st.retention.Time {
		return errorf(ErrNotAllowed, "backlog quota %ds exceeds the retention time %v", q.Limit, st.retention.Time)
	}
	return nil
}

// backlogQuotaMapJSON is Pulsar's backlog quota map.
func backlogQuotaMapJSON(qs map[string]*metapb.BacklogQuota) map[string]any {
	out := map[string]any{}
	for typ, q := range qs {
		size, age := int64(-1), int64(-1)
		if typ == quotaStorage {
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
func (s *Server) policiesJSON(ns string, p *metapb.NamespacePolicies) map[string]any {
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
		destination["persistent://"+ns+"/"+topic] = actionsJSON(tp.GetRoles())
	}
	mode := "None"
	if p.SubscriptionPrefix {
		mode = "Prefix"
	}
	return map[string]any{
		"auth_policies": map[string]any{"namespace_auth": actionsJSON(p.NamespacePermissions),
			"destination_auth": destination, "subscription_auth_roles": map[string]any{}},
		"replication_clusters":   []string{s.cfg.ClusterName},
		"bundles":                map[string]any{"boundaries": strings.Split(bundleRange, "_"), "numBundles": 1},
		"backlog_quota_map":      backlogQuotaMapJSON(p.BacklogQuotas),
		"persistence":            persistence,
		"retention_policies":     retention,
		"message_ttl_in_seconds": ttl,
		"deduplicationEnabled":   dedup,
		"subscription_auth_mode": mode,
		"deleted":                false,
		"encryption_required":    false,
	}
}

// readNamespacePolicies reads the optional body of a namespace's
// creation: Pulsar's Policies (or only its bundles, as
// CreateNsWithNumBundles sends). The policies Magnetar has are kept; one
// Magnetar does not have, set to anything but its zero value or null, is
// refused (501), not ignored.
func (s *Server) readNamespacePolicies(r *http.Request) (*metapb.NamespacePolicies, error) {
	p := &metapb.NamespacePolicies{}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, errorf(ErrInvalidArgument, "request body: %v", err)
	}
	if b := bytes.TrimSpace(body); len(b) == 0 || string(b) == "null" {
		return p, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, errorf(ErrInvalidArgument, "request body: want Pulsar's namespace policies: %v", err)
	}
	decode := func(name string, v any) (bool, error) {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return false, nil
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return false, errorf(ErrInvalidArgument, "%s: %v", name, err)
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
			return nil, errorf(ErrInvalidArgument, "retention values must be -1 (no limit) or more")
		}
		p.HasRetention, p.RetentionMinutes, p.RetentionSizeMb = true, ret.Minutes, ret.SizeMB
	}
	var ttl int32
	if ok, err := decode("message_ttl_in_seconds", &ttl); err != nil {
		return nil, err
	} else if ok {
		if ttl < 0 {
			return nil, errorf(ErrInvalidArgument, "message TTL %d must not be negative", ttl)
		}
		p.HasMessageTtl, p.MessageTtlSeconds = true, ttl
	}
	if ok, err := decode("deduplicationEnabled", &p.Deduplication); err != nil {
		return nil, err
	} else if ok {
		p.HasDeduplication = true
	}
	var mode string
	if ok, err := decode("subscription_auth_mode", &mode); err != nil {
		return nil, err
	} else if ok && mode != "" && mode != "None" {
		if mode != "Prefix" {
			return nil, errorf(ErrInvalidArgument, "subscription_auth_mode %q: want None or Prefix", mode)
		}
		p.SubscriptionPrefix = true
	}
	var clusters []string
	if _, err := decode("replication_clusters", &clusters); err != nil {
		return nil, err
	}
	for _, c := range clusters {
		if c != s.cfg.ClusterName {
			return nil, fmt.Errorf("%w: replication to cluster %q (this one is %q)", ErrNotImplemented, c, s.cfg.ClusterName)
		}
	}
	var quotas map[string]struct {
		LimitSize int64  `json:"limitSize"`
		LimitTime int64  `json:"limitTime"`
		Policy    string `json:"policy"`
	}
	if _, err := decode("backlog_quota_map", &quotas); err != nil {
		return nil, err
	}
	for typ, q := range quotas {
		limit := q.LimitSize
		switch typ {
		case quotaStorage:
		case quotaAge:
			limit = q.LimitTime
		default:
			return nil, errorf(ErrInvalidArgument, "backlog quota type %q: want %s or %s", typ, quotaStorage, quotaAge)
		}
		switch q.Policy {
		case quotaHold, quotaException, quotaEviction:
		default:
			return nil, errorf(ErrInvalidArgument, "backlog quota policy %q", q.Policy)
		}
		if limit > 0 {
			if p.BacklogQuotas == nil {
				p.BacklogQuotas = map[string]*metapb.BacklogQuota{}
			}
			p.BacklogQuotas[typ] = &metapb.BacklogQuota{Limit: limit, Policy: q.Policy}
		}
	}
	if err := s.checkQuotasFit(p); err != nil {
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
		return nil, errorf(ErrInvalidArgument, "auth_policies: grant permissions with POST .../permissions/{role} once the namespace exists")
	}
	// Policies Magnetar does not have must be absent, null or zero.
	for name, raw := range fields {
		switch name {
		case "persistence", "retention_policies", "message_ttl_in_seconds", "deduplicationEnabled", "subscription_auth_mode",
			"replication_clusters", "backlog_quota_map", "auth_policies", "bundles", "deleted":
			continue
		}
		switch strings.TrimSpace(string(raw)) {
		case "null", "false", "0", `""`, "{}", "[]", `"UNDEFINED"`, `"Undefined"`:
			continue
		}
		return nil, fmt.Errorf("%w: the namespace policy %s", ErrNotImplemented, name)
	}
	return p, nil
}

// withPath is the redirect's URL with another path (and no query).
func (e *redirectError) withPath(path string) string {
	u, err := url.Parse(e.url)
	if err != nil {
		return e.url
	}
	// Path is unescaped; String escapes it.
	u.Path, u.RawPath, u.RawQuery = path, "", ""
	return u.String()
}

// forNamespaceSubscriptions runs fn on a subscription (or, with sub "",
// every durable subscription) of every topic of a namespace: here for the
// partitions this broker owns or nobody owns, by sending the same call
// (method, .../subscription/{sub}+suffix) to the owner of the others.
func (s *Server) forNamespaceSubscriptions(r *http.Request, sub, suffix, method string, fn func(*topic, *subscription) error) error {
	ctx := r.Context()
	ns := nsOf(r)
	if _, err := s.md.policies(ctx, ns); err != nil {
		return err
	}
	names, err := s.md.topicList(ctx, ns)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		n, err := topicname.Parse(name)
		if err != nil {
			continue
		}
		if exists, err := s.md.topicExists(ctx, n); err != nil {
			return err
		} else if !exists {
			continue // a partition never used
		}
		if err := s.onSubscriptionsOf(ctx, r, n, sub, suffix, method, fn); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d topics failed: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// onSubscriptionsOf is forNamespaceSubscriptions for one topic.
func (s *Server) onSubscriptionsOf(ctx context.Context, r *http.Request, n topicname.Name, sub, suffix, method string, fn func(*topic, *subscription) error) error {
	base := "/admin/v2/persistent/" + n.NamespaceName() + "/" + n.Local
	err := s.ownedElsewhere(ctx, topicPath(n), r)
	var redirect *redirectError
	if errors.As(err, &redirect) {
		subs := []string{sub}
		if sub == "" {
			raw, err := s.fetchJSON(ctx, redirect.withPath(base+"/subscriptions"))
			if err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &subs); err != nil {
				return errorf(ErrServiceNotReady, "subscriptions from the owner: %v", err)
			}
		}
		for _, name := range subs {
			err := s.peerSend(ctx, method, redirect.withPath(base+"/subscription/"+name+suffix), nil)
			if err != nil && !errors.Is(err, ErrSubscriptionNotFound) { // a topic without it
				return err
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	t, err := s.getTopic(ctx, n, false)
	if err != nil {
		return err
	}
	for _, one := range t.subscriptions() {
		if !one.durable || (sub != "" && one.name != sub) {
			continue
		}
		if err := fn(t, one); err != nil {
			return err
		}
	}
	return nil
}
