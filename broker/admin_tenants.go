package broker

import (
	"net/http"
	"slices"

	"github.com/magnetar-io/magnetar/proto/metapb"
)

// tenantRoutes serves tenants under Pulsar's /admin/v2/tenants.
func (s *Server) tenantRoutes(h route) {
	h("GET /admin/v2/tenants", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nonNil(s.md.tenants(r.Context()))
	})
	h("PUT /admin/v2/tenants/{tenant}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		info, err := s.readTenant(r, true)
		if err != nil {
			return nil, err
		}
		return nil, s.md.createTenant(r.Context(), r.PathValue("tenant"), info)
	})
	h("POST /admin/v2/tenants/{tenant}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		info, err := s.readTenant(r, false)
		if err != nil {
			return nil, err
		}
		return nil, s.md.updateTenant(r.Context(), r.PathValue("tenant"), info)
	})
	h("GET /admin/v2/tenants/{tenant}", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		info, err := s.md.tenant(r.Context(), r.PathValue("tenant"))
		if err != nil {
			return nil, err
		}
		return tenantJSON{AdminRoles: nonNilRoles(info.AdminRoles), AllowedClusters: nonNilRoles(info.AllowedClusters)}, nil
	})
	h("DELETE /admin/v2/tenants/{tenant}", s.superuserOnly, func(w http.ResponseWriter, r *http.Request) (any, error) {
		return nil, s.md.deleteTenant(r.Context(), r.PathValue("tenant"))
	})
}

type tenantJSON struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

// readTenant reads a tenant's details. As Pulsar, the allowed clusters
// must exist (412): here, a deployment is one cluster.
func (s *Server) readTenant(r *http.Request, optional bool) (*metapb.TenantInfo, error) {
	var body tenantJSON
	if err := readJSON(r, &body, optional); err != nil {
		return nil, err
	}
	for _, role := range body.AdminRoles {
		if err := checkRole(role); err != nil {
			return nil, err
		}
	}
	for _, c := range body.AllowedClusters {
		if c != s.cfg.ClusterName {
			return nil, errorf(ErrNotAllowed, "cluster %q in allowedClusters does not exist (this one is %q)", c, s.cfg.ClusterName)
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
