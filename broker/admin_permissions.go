package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The grants of namespaces and topics (broker/admin/permissions.go): kept
// in the namespace's policies.

func (b adminBackend) Policies(ctx context.Context, ns string) (*metapb.NamespacePolicies, error) {
	return b.s.md.policies(ctx, ns)
}

func (b adminBackend) UpdatePolicies(ctx context.Context, ns string, fn func(*metapb.NamespacePolicies) error) error {
	return b.s.md.updatePolicies(ctx, ns, fn)
}

// dropTopicGrants removes the grants on a deleted topic, so that a topic
// created later under its name does not inherit them.
func (s *Server) dropTopicGrants(ctx context.Context, n topicname.Name) error {
	p, err := s.md.policies(ctx, n.NamespaceName())
	if err != nil || p.TopicPermissions[n.LocalPath()] == nil {
		return err
	}
	return s.md.updatePolicies(ctx, n.NamespaceName(), func(p *metapb.NamespacePolicies) error {
		delete(p.TopicPermissions, n.LocalPath())
		return nil
	})
}
