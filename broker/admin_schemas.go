package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// The schemas resource of the admin API (broker/admin/schemas.go): the
// versions schema.go keeps.

func (b adminBackend) SchemaVersions(ctx context.Context, n topicname.Name) (int64, []*metapb.SchemaInfo, error) {
	all, _, err := b.s.schemas(ctx, n)
	return all.GetFirst(), all.GetVersions(), err
}

func (b adminBackend) FindSchema(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (int64, bool, error) {
	all, _, err := b.s.schemas(ctx, n)
	if err != nil {
		return 0, false, err
	}
	v, ok := all.find(info)
	return v, ok, nil
}

func (b adminBackend) SchemaCompatible(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (bool, string, error) {
	all, _, err := b.s.schemas(ctx, n)
	if err != nil {
		return false, "", err
	}
	strategy, err := b.s.schemaStrategy(ctx, n)
	if err != nil {
		return false, "", err
	}
	return all.compatible(info, strategy) == nil, strategy, nil
}

func (b adminBackend) RegisterSchema(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (int64, error) {
	return b.s.registerSchemaInfo(ctx, n, info)
}

func (b adminBackend) DeleteSchemas(ctx context.Context, n topicname.Name) (int64, error) {
	return b.s.deleteSchemas(ctx, n)
}

func (b adminBackend) SchemaStrategies() []string { return SchemaStrategies }
