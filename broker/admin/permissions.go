package admin

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/broker/internal/naming"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Permissions is what the grants of namespaces and topics ask of the
// broker: they are kept in the namespace's policies.
type Permissions interface {
	// Policies are a namespace's stored policies (Namespaces).
	Policies(ctx context.Context, ns string) (*metapb.NamespacePolicies, error)
	// UpdatePolicies changes a namespace's stored policies with fn.
	UpdatePolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error
}

// The actions a grant may hold: Pulsar's AuthAction. Only produce and
// consume mean something to Magnetar (broker/authz.go); the others are
// stored for tools that set them.
var grantActions = []string{"produce", "consume", "functions", "sources", "sinks", "packages"}

// maxGrants bounds the grants one namespace holds (namespace and topic
// ones together): they live in one etcd value.
const maxGrants = 10000

// permissionRoutes serves the grants of namespaces and topics, under Pulsar's paths and shapes.
func permissionRoutes(h route, z Rules, b Permissions) {
	h("GET /admin/v2/namespaces/{tenant}/{ns}/permissions", z.TenantAdmin, func(r *http.Request) (any, error) {
		p, err := b.Policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return actionsJSON(p.NamespacePermissions), nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", z.TenantAdmin, func(r *http.Request) (any, error) {
		actions, err := readGrant(r)
		if err != nil {
			return nil, err
		}
		return nil, b.UpdatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if p.NamespacePermissions == nil {
				p.NamespacePermissions = map[string]*metapb.Actions{}
			}
			p.NamespacePermissions[r.PathValue("role")] = &metapb.Actions{Actions: actions}
			return checkGrantCount(p)
		})
	})
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", z.TenantAdmin, func(r *http.Request) (any, error) {
		return nil, b.UpdatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if _, ok := p.NamespacePermissions[r.PathValue("role")]; !ok {
				return errorf(errs.ErrNotFound, "role %q has no grant on %s", r.PathValue("role"), nsOf(r))
			}
			delete(p.NamespacePermissions, r.PathValue("role"))
			return nil
		})
	})
	for _, d := range topicname.Domains {
		topicBase := "/admin/v2/" + d.String() + "/{tenant}/{ns}/{topic}"
		// A topic's permissions: its own grants merged with its namespace's,
		// as Pulsar answers.
		h("GET "+topicBase+"/permissions", z.TopicAdmin, func(r *http.Request) (any, error) {
			n, err := grantTopic(r)
			if err != nil {
				return nil, err
			}
			p, err := b.Policies(r.Context(), nsOf(r))
			if err != nil {
				return nil, err
			}
			out := actionsJSON(p.NamespacePermissions)
			for role, a := range p.TopicPermissions[n.LocalPath()].GetRoles() {
				for _, act := range a.GetActions() {
					if !slices.Contains(out[role], act) {
						out[role] = append(out[role], act)
					}
				}
			}
			return out, nil
		})
		h("POST "+topicBase+"/permissions/{role}", z.TopicAdmin, func(r *http.Request) (any, error) {
			n, err := grantTopic(r)
			if err != nil {
				return nil, err
			}
			actions, err := readGrant(r)
			if err != nil {
				return nil, err
			}
			return nil, b.UpdatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
				if p.TopicPermissions == nil {
					p.TopicPermissions = map[string]*metapb.RolePermissions{}
				}
				tp := p.TopicPermissions[n.LocalPath()]
				if tp == nil {
					tp = &metapb.RolePermissions{Roles: map[string]*metapb.Actions{}}
					p.TopicPermissions[n.LocalPath()] = tp
				}
				tp.Roles[r.PathValue("role")] = &metapb.Actions{Actions: actions}
				return checkGrantCount(p)
			})
		})
		h("DELETE "+topicBase+"/permissions/{role}", z.TopicAdmin, func(r *http.Request) (any, error) {
			n, err := grantTopic(r)
			if err != nil {
				return nil, err
			}
			role := r.PathValue("role")
			return nil, b.UpdatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
				tp := p.TopicPermissions[n.LocalPath()]
				if _, ok := tp.GetRoles()[role]; !ok {
					return errorf(errs.ErrNotFound, "role %q has no grant on %s", role, n)
				}
				delete(tp.Roles, role)
				if len(tp.Roles) == 0 {
					delete(p.TopicPermissions, n.LocalPath())
				}
				return nil
			})
		})
	}
	h("GET /admin/v2/namespaces/{tenant}/{ns}/subscriptionAuthMode", z.TenantAdmin, func(r *http.Request) (any, error) {
		p, err := b.Policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		if p.SubscriptionPrefix {
			return "Prefix", nil
		}
		return "None", nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/subscriptionAuthMode", z.TenantAdmin, func(r *http.Request) (any, error) {
		var mode string
		if err := readJSON(r, &mode, false); err != nil {
			return nil, err
		}
		if mode != "Prefix" && mode != "None" {
			return nil, errorf(errs.ErrInvalidArgument, "subscription auth mode %q: want \"None\" or \"Prefix\"", mode)
		}
		return nil, b.UpdatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.SubscriptionPrefix = mode == "Prefix"
			return nil
		})
	})
}

// readGrant reads the {role} of the path and the actions of the body (a
// JSON list, as pulsar-admin sends).
func readGrant(r *http.Request) ([]string, error) {
	if err := naming.CheckRole(r.PathValue("role")); err != nil {
		return nil, err
	}
	var actions []string
	if err := readJSON(r, &actions, false); err != nil {
		return nil, err
	}
	if len(actions) == 0 {
		return nil, errorf(errs.ErrInvalidArgument, "no actions: grant some of %v", grantActions)
	}
	out := []string{}
	for _, a := range actions {
		if !slices.Contains(grantActions, a) {
			return nil, errorf(errs.ErrInvalidArgument, "action %q: want some of %v", a, grantActions)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out, nil
}

// grantTopic is the topic a grant of the path is about: grants are kept
// per topic, a partitioned topic's covering its partitions, so a
// partition's name is refused.
func grantTopic(r *http.Request) (topicname.Name, error) {
	n, err := TopicOf(r)
	if err != nil {
		return n, err
	}
	if n.PartitionIndex() >= 0 {
		return n, errorf(errs.ErrInvalidArgument, "%s is a partition: grant on its partitioned topic %s", n, n.Base())
	}
	return n, nil
}

func checkGrantCount(p *metapb.NamespacePolicies) error {
	n := len(p.NamespacePermissions)
	for _, tp := range p.TopicPermissions {
		n += len(tp.Roles)
	}
	if n > maxGrants {
		return errorf(errs.ErrNotAllowed, "a namespace holds at most %d grants", maxGrants)
	}
	return nil
}

func actionsJSON(m map[string]*metapb.Actions) map[string][]string {
	out := make(map[string][]string, len(m))
	for _, role := range slices.Sorted(maps.Keys(m)) {
		out[role] = slices.Clone(m[role].GetActions())
	}
	return out
}
