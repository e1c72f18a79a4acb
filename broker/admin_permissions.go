package broker

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// maxGrants bounds the grants one namespace holds (namespace and topic
// ones together): they live in one etcd value.
const maxGrants = 10000

// permissionRoutes serves the grants of namespaces and topics, under Pulsar's paths and shapes.
func (s *Server) permissionRoutes(h route) {
	h("GET /admin/v2/namespaces/{tenant}/{ns}/permissions", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		return actionsJSON(p.NamespacePermissions), nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		actions, err := readGrant(r)
		if err != nil {
			return nil, err
		}
		return nil, s.md.updatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if p.NamespacePermissions == nil {
				p.NamespacePermissions = map[string]*metapb.Actions{}
			}
			p.NamespacePermissions[r.PathValue("role")] = &metapb.Actions{Actions: actions}
			return checkGrantCount(p)
		})
	})
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.md.updatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if _, ok := p.NamespacePermissions[r.PathValue("role")]; !ok {
				return errorf(ErrNotFound, "role %q has no grant on %s", r.PathValue("role"), nsOf(r))
			}
			delete(p.NamespacePermissions, r.PathValue("role"))
			return nil
		})
	})
	// A topic's permissions: its own grants merged with its namespace's,
	// as Pulsar answers.
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := grantTopic(r)
		if err != nil {
			return nil, err
		}
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		out := actionsJSON(p.NamespacePermissions)
		for role, a := range p.TopicPermissions[n.Local].GetRoles() {
			for _, act := range a.GetActions() {
				if !slices.Contains(out[role], act) {
					out[role] = append(out[role], act)
				}
			}
		}
		return out, nil
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := grantTopic(r)
		if err != nil {
			return nil, err
		}
		actions, err := readGrant(r)
		if err != nil {
			return nil, err
		}
		return nil, s.md.updatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			if p.TopicPermissions == nil {
				p.TopicPermissions = map[string]*metapb.RolePermissions{}
			}
			tp := p.TopicPermissions[n.Local]
			if tp == nil {
				tp = &metapb.RolePermissions{Roles: map[string]*metapb.Actions{}}
				p.TopicPermissions[n.Local] = tp
			}
			tp.Roles[r.PathValue("role")] = &metapb.Actions{Actions: actions}
			return checkGrantCount(p)
		})
	})
	h("DELETE /admin/v2/persistent/{tenant}/{ns}/{topic}/permissions/{role}", s.onTopic(opAdmin), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := grantTopic(r)
		if err != nil {
			return nil, err
		}
		role := r.PathValue("role")
		return nil, s.md.updatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			tp := p.TopicPermissions[n.Local]
			if _, ok := tp.GetRoles()[role]; !ok {
				return errorf(ErrNotFound, "role %q has no grant on %s", role, n)
			}
			delete(tp.Roles, role)
			if len(tp.Roles) == 0 {
				delete(p.TopicPermissions, n.Local)
			}
			return nil
		})
	})
	h("GET /admin/v2/namespaces/{tenant}/{ns}/subscriptionAuthMode", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		p, err := s.md.policies(r.Context(), nsOf(r))
		if err != nil {
			return nil, err
		}
		if p.SubscriptionPrefix {
			return "Prefix", nil
		}
		return "None", nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/subscriptionAuthMode", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		var mode string
		if err := readJSON(r, &mode, false); err != nil {
			return nil, err
		}
		if mode != "Prefix" && mode != "None" {
			return nil, errorf(ErrInvalidArgument, "subscription auth mode %q: want \"None\" or \"Prefix\"", mode)
		}
		return nil, s.md.updatePolicies(r.Context(), nsOf(r), func(p *metapb.NamespacePolicies) error {
			p.SubscriptionPrefix = mode == "Prefix"
			return nil
		})
	})
}

// checkRole checks a role named in a grant or a tenant's admins.
func checkRole(role string) error {
	if role == "" || len(role) > maxNameLength || !utf8.ValidString(role) {
		return errorf(ErrInvalidArgument, "role %q: 1 to %d bytes of UTF-8", role, maxNameLength)
	}
	return nil
}

// readGrant reads the {role} of the path and the actions of the body (a
// JSON list, as pulsar-admin sends).
func readGrant(r *http.Request) ([]string, error) {
	if err := checkRole(r.PathValue("role")); err != nil {
		return nil, err
	}
	var actions []string
	if err := readJSON(r, &actions, false); err != nil {
		return nil, err
	}
	if len(actions) == 0 {
		return nil, errorf(ErrInvalidArgument, "no actions: grant some of %v", grantActions)
	}
	out := []string{}
	for _, a := range actions {
		if !slices.Contains(grantActions, a) {
			return nil, errorf(ErrInvalidArgument, "action %q: want some of %v", a, grantActions)
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
	n, err := topicOf(r)
	if err != nil {
		return n, err
	}
	if n.PartitionIndex() >= 0 {
		return n, errorf(ErrInvalidArgument, "%s is a partition: grant on its partitioned topic %s", n, n.Base())
	}
	return n, nil
}

func checkGrantCount(p *metapb.NamespacePolicies) error {
	n := len(p.NamespacePermissions)
	for _, tp := range p.TopicPermissions {
		n += len(tp.Roles)
	}
	if n > maxGrants {
		return errorf(ErrNotAllowed, "a namespace holds at most %d grants", maxGrants)
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

// dropTopicGrants removes the grants on a deleted topic, so that a topic
// created later under its name does not inherit them.
func (s *Server) dropTopicGrants(ctx context.Context, n topicname.Name) error {
	p, err := s.md.policies(ctx, n.NamespaceName())
	if err != nil || p.TopicPermissions[n.Local] == nil {
		return err
	}
	return s.md.updatePolicies(ctx, n.NamespaceName(), func(p *metapb.NamespacePolicies) error {
		delete(p.TopicPermissions, n.Local)
		return nil
	})
}
