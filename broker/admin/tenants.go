package admin

import (
	"context"
	"net/http"
	"slices"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/broker/internal/naming"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Tenants is what the tenants resource asks of the broker: the tenants
// kept in etcd.
type Tenants interface {
	// ClusterName is the deployment's cluster (Clusters).
	ClusterName() string
	// Tenants lists the tenants.
	Tenants(ctx context.Context) ([]string, error)
	// CreateTenant creates a tenant (errs.ErrConflict if it exists).
	CreateTenant(ctx context.Context, tenant string, info *metapb.TenantInfo) error
	// UpdateTenant replaces an existing tenant's details.
	UpdateTenant(ctx context.Context, tenant string, info *metapb.TenantInfo) error
	// Tenant is a tenant's details.
	Tenant(ctx context.Context, tenant string) (*metapb.TenantInfo, error)
	// DeleteTenant deletes a tenant without namespaces.
	DeleteTenant(ctx context.Context, tenant string) error
}

// tenantRoutes serves tenants under Pulsar's /admin/v2/tenants.
func tenantRoutes(h route, z Rules, b Tenants) {
	h("GET /admin/v2/tenants", z.Superuser, func(r *http.Request) (any, error) {
		return nonNil(b.Tenants(r.Context()))
	})
	h("PUT /admin/v2/tenants/{tenant}", z.Superuser, func(r *http.Request) (any, error) {
		info, err := readTenant(b, r, true)
		if err != nil {
			return nil, err
		}
		return nil, b.CreateTenant(r.Context(), r.PathValue("tenant"), info)
	})
	h("POST /admin/v2/tenants/{tenant}", z.Superuser, func(r *http.Request) (any, error) {
		info, err := readTenant(b, r, false)
		if err != nil {
			return nil, err
		}
		return nil, b.UpdateTenant(r.Context(), r.PathValue("tenant"), info)
	})
	h("GET /admin/v2/tenants/{tenant}", z.Superuser, func(r *http.Request) (any, error) {
		info, err := b.Tenant(r.Context(), r.PathValue("tenant"))
		if err != nil {
			return nil, err
		}
		return tenantJSON{AdminRoles: nonNilRoles(info.AdminRoles), AllowedClusters: nonNilRoles(info.AllowedClusters)}, nil
	})
	h("DELETE /admin/v2/tenants/{tenant}", z.Superuser, func(r *http.Request) (any, error) {
		return nil, b.DeleteTenant(r.Context(), r.PathValue("tenant"))
	})
}

type tenantJSON struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// readTenant reads a tenant's details. As Pulsar, the allowed clusters
// must exist (412): here, a deployment is one cluster.
func readTenant(b Tenants, r *http.Request, optional bool) (*metapb.TenantInfo, error) {
	var body tenantJSON
	if err := readJSON(r, &body, optional); err != nil {
		return nil, err
	}
	for _, role := range body.AdminRoles {
		if err := naming.CheckRole(role); err != nil {
			return nil, err
		}
	}
	for _, c := range body.AllowedClusters {
		if c != b.ClusterName() {
			return nil, errorf(errs.ErrNotAllowed, "cluster %q in allowedClusters does not exist (this one is %q)", c, b.ClusterName())
		}
	}
	slices.Sort(body.AllowedClusters)
	return &metapb.TenantInfo{AdminRoles: body.AdminRoles, AllowedClusters: slices.Compact(body.AllowedClusters)}, nil
}

func nonNilRoles(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}
