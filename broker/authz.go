package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Authorization follows Pulsar's model (its PulsarAuthorizationProvider):
//
//   - a superuser role (--superuser-roles) may do anything;
//   - a tenant's admin roles (TenantInfo.admin_roles) administer the
//     tenant: its namespaces, their policies and grants, its topics and
//     subscriptions; they may also produce and consume there;
//   - any other role may do on a topic what the grants of its namespace,
//     or of the topic itself, allow: "produce" to publish, "consume" to
//     subscribe and manage subscriptions, either to look it up and read
//     its stats;
//   - cluster-wide calls (tenants, brokers, bookies, owners) are for
//     superusers.
//
// The rule is decide, a pure function of the role and what etcd holds;
// the checks at the edges (gRPC handlers, admin routes) name the resource
// the request actually touches, parsed the same way the handler parses it.

// ErrUnauthorized: the caller's role may not do this.
var ErrUnauthorized = errors.New("not authorized")

// topicOp is an operation on a topic, Pulsar's TopicOperation reduced to
// what decides it.
type topicOp int

const (
	// opLookup: lookup, partitioned metadata, stats. Needs produce or
	// consume.
	opLookup topicOp = iota
	// opProduce: publish.
	opProduce
	// opConsume: subscribe, read, acknowledge, peek, skip, reset a
	// cursor, create or delete a subscription.
	opConsume
	// opAdmin: create, delete, unload topics; namespaces, their policies
	// and grants. Tenant admins only.
	opAdmin
)

func (op topicOp) String() string {
	return [...]string{"look up", "produce to", "consume from", "administer"}[op]
}

// access is what decide needs to know about the resource.
type access struct {
	role         string
	superuser    bool
	tenantAdmins []string
	policies     *metapb.NamespacePolicies // nil: the namespace does not exist
	topic        string                    // local name, partition suffix removed; "" for a namespace
	op           topicOp
	// subscription is the durable subscription the operation touches
	// ("" for none): the prefix rule applies to it.
	subscription string
}

// decide is the authorization rule; nil allows.
func decide(a access) error {
	if a.superuser || slices.Contains(a.tenantAdmins, a.role) {
		return nil
	}
	what := "the namespace"
	if a.topic != "" {
		what = "topic " + a.topic
	}
	deny := func(why string) error {
		return fmt.Errorf("%w: role %q may not %s %s%s", ErrUnauthorized, a.role, a.op, what, why)
	}
	if a.op == opAdmin || a.policies == nil {
		return deny("")
	}
	granted := func(action string) bool {
		if slices.Contains(a.policies.NamespacePermissions[a.role].GetActions(), action) {
			return true
		}
		return a.topic != "" && slices.Contains(a.policies.TopicPermissions[a.topic].GetRoles()[a.role].GetActions(), action)
	}
	var ok bool
	switch a.op {
	case opLookup:
		ok = granted("produce") || granted("consume")
	case opProduce:
		ok = granted("produce")
	case opConsume:
		ok = granted("consume")
		if ok && a.subscription != "" && a.policies.SubscriptionPrefix && !strings.HasPrefix(a.subscription, a.role+"-") {
			return deny(fmt.Sprintf(" with subscription %q: the namespace requires subscription names prefixed by the role, as %q", a.subscription, a.role+"-..."))
		}
	}
	if !ok {
		return deny("")
	}
	return nil
}

// authorizer applies decide at the edges. Its zero value (authorization
// off) allows everything.
type authorizer struct {
	on         bool
	superusers []string
	md         *metadata
}

// check decides for the caller in ctx on a resource of tenant: a
// namespace ns ("" for the tenant itself) and a topic in it (zero Name for
// none).
func (z *authorizer) check(ctx context.Context, tenant, ns string, topic topicname.Name, op topicOp, subscription string) error {
	if !z.on {
		return nil
	}
	role := auth.Role(ctx)
	if role == "" { // cannot happen with authentication on; never allow
		return fmt.Errorf("%w: no role", auth.ErrUnauthenticated)
	}
	a := access{role: role, superuser: slices.Contains(z.superusers, role), op: op, subscription: subscription}
	if a.superuser {
		return nil
	}
	if tenant == "" {
		return decide(a)
	}
	info := &metapb.TenantInfo{}
	if _, err := getProto(ctx, z.md.store, metastore.TenantKey(tenant), info); err != nil && !errors.Is(err, metastore.ErrNotFound) {
		return err
	}
	a.tenantAdmins = info.AdminRoles
	if ns != "" && !slices.Contains(a.tenantAdmins, role) {
		p, err := z.md.policies(ctx, ns)
		switch {
		case err == nil:
			a.policies = p
		case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalidArgument):
			return err
		}
	}
	if topic.Local != "" {
		a.topic = topic.Base().LocalPath()
	}
	return decide(a)
}

// checkTopic decides for an operation on topic n.
func (z *authorizer) checkTopic(ctx context.Context, n topicname.Name, op topicOp, subscription string) error {
	return z.check(ctx, n.Tenant, n.NamespaceName(), n, op, subscription)
}

// adminRules are the admin API's authorization rules: every route names
// one (broker/admin).
func (s *Server) adminRules() admin.Rules {
	return admin.Rules{
		Superuser:       s.superuserOnly,
		TenantAdmin:     s.tenantAdmin,
		NamespaceLookup: s.onNamespace(opLookup),
		TopicLookup:     s.onTopic(opLookup),
		TopicConsume:    s.onTopic(opConsume),
		TopicAdmin:      s.onTopic(opAdmin),
	}
}

// superuserOnly is the rule of cluster-wide calls.
func (s *Server) superuserOnly(r *http.Request) error {
	return s.authz.check(r.Context(), "", "", topicname.Name{}, opAdmin, "")
}

// tenantAdmin is the rule of calls on a tenant ({tenant}) or one of its
// namespaces ({tenant}/{ns}).
func (s *Server) tenantAdmin(r *http.Request) error {
	ns := ""
	if r.PathValue("ns") != "" {
		ns = r.PathValue("tenant") + "/" + r.PathValue("ns")
	}
	return s.authz.check(r.Context(), r.PathValue("tenant"), ns, topicname.Name{}, opAdmin, "")
}

// onNamespace is the rule of a non-admin call on a namespace ({tenant}/{ns}):
// listing its topics needs a grant on the namespace.
func (s *Server) onNamespace(op topicOp) admin.Rule {
	return func(r *http.Request) error {
		return s.authz.check(r.Context(), r.PathValue("tenant"), r.PathValue("tenant")+"/"+r.PathValue("ns"), topicname.Name{}, op, "")
	}
}

// onTopic is the rule of a call on the topic of the path (and its
// subscription {sub}, if the route has one).
func (s *Server) onTopic(op topicOp) admin.Rule {
	return func(r *http.Request) error {
		if !s.authz.on {
			return nil
		}
		n, err := admin.TopicOf(r)
		if err != nil {
			return err
		}
		return s.authz.checkTopic(r.Context(), n, op, r.PathValue("sub"))
	}
}
