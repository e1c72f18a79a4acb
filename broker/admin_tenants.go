package broker

import (
	"context"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

// The tenants resource of the admin API (broker/admin/tenants.go).

func (b adminBackend) Tenants(ctx context.Context) ([]string, error) { return b.s.md.tenants(ctx) }

func (b adminBackend) CreateTenant(ctx context.Context, tenant string, info *metapb.TenantInfo) error {
	return b.s.md.createTenant(ctx, tenant, info)
}

func (b adminBackend) UpdateTenant(ctx context.Context, tenant string, info *metapb.TenantInfo) error {
	return b.s.md.updateTenant(ctx, tenant, info)
}

func (b adminBackend) Tenant(ctx context.Context, tenant string) (*metapb.TenantInfo, error) {
	return b.s.md.tenant(ctx, tenant)
}

func (b adminBackend) DeleteTenant(ctx context.Context, tenant string) error {
	return b.s.md.deleteTenant(ctx, tenant)
}
