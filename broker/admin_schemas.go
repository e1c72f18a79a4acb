package broker

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// schemaResponse is Pulsar's GetSchemaResponse.
type schemaResponse struct {
	Version    int64             `json:"version"`
	Type       string            `json:"type"`
	Timestamp  int64             `json:"timestamp"`
	Data       string            `json:"data"`
	Properties map[string]string `json:"properties"`
}

func schemaResponseOf(v int64, info *metapb.SchemaInfo) schemaResponse {
	props := info.GetProperties()
	if props == nil {
		props = map[string]string{}
	}
	return schemaResponse{Version: v, Type: schemaTypeName(info.GetType()), Timestamp: info.GetTimestamp(),
		Data: string(info.GetData()), Properties: props}
}

// schemaPayload is Pulsar's PostSchemaPayload.
type schemaPayload struct {
	Type       string            `json:"type"`
	Schema     string            `json:"schema"`
	Properties map[string]string `json:"properties"`
}

func (p schemaPayload) info() (*metapb.SchemaInfo, error) {
	t, err := schemaTypeOf(p.Type)
	if err != nil {
		return nil, err
	}
	info := &metapb.SchemaInfo{Type: t, Data: []byte(p.Schema), Properties: p.Properties}
	if len(info.Properties) == 0 {
		info.Properties = nil
	}
	return info, nil
}

// schemaRoutes serves Pulsar's /admin/v2/schemas: a topic's schema
// versions (kept in etcd, so any broker answers), read by whoever may look
// the topic up, added and deleted by the tenant's admins.
func (s *Server) schemaRoutes(h route) {
	const base = "/admin/v2/schemas/{tenant}/{ns}/{topic}"
	versions := func(r *http.Request) (topicname.Name, topicSchemas, error) {
		n, err := topicOf(r)
		if err != nil {
			return n, topicSchemas{}, errorf(ErrInvalidArgument, "%v", err)
		}
		all, _, err := s.schemas(r.Context(), n)
		return n, all, err
	}
	h("GET "+base+"/schema", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, all, err := versions(r)
		if err != nil {
			return nil, err
		}
		v, ok := all.latest()
		if !ok {
			return nil, errorf(ErrNoSchema, "%s has no schema", n)
		}
		info, _ := all.at(v)
		return schemaResponseOf(v, info), nil
	})
	h("GET "+base+"/schema/{version}", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		v, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
		if err != nil || v < 0 {
			return nil, errorf(ErrInvalidArgument, "schema version %q: not a number of 0 or more", r.PathValue("version"))
		}
		n, all, err := versions(r)
		if err != nil {
			return nil, err
		}
		info, ok := all.at(v)
		if !ok {
			return nil, errorf(ErrNoSchema, "%s has no schema version %d", n, v)
		}
		return schemaResponseOf(v, info), nil
	})
	h("GET "+base+"/schemas", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, all, err := versions(r)
		if err != nil {
			return nil, err
		}
		if len(all.Versions) == 0 {
			return nil, errorf(ErrNoSchema, "%s has no schema", n)
		}
		out := make([]schemaResponse, len(all.Versions))
		for i, info := range all.Versions {
			out[i] = schemaResponseOf(all.First+int64(i), info)
		}
		return map[string]any{"getSchemaResponses": out}, nil
	})
	// Deleting removes every version (their numbers stay used): producers
	// and consumers that come next register theirs anew.
	h("DELETE "+base+"/schema", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, err := topicOf(r)
		if err != nil {
			return nil, errorf(ErrInvalidArgument, "%v", err)
		}
		v, err := s.deleteSchemas(r.Context(), n)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"version": v}, nil
	})
	payload := func(r *http.Request) (topicname.Name, *metapb.SchemaInfo, error) {
		n, err := topicOf(r)
		if err != nil {
			return n, nil, errorf(ErrInvalidArgument, "%v", err)
		}
		var p schemaPayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			return n, nil, errorf(ErrInvalidArgument, "schema payload: %v", err)
		}
		info, err := p.info()
		return n, info, err
	}
	h("POST "+base+"/schema", s.tenantAdmin, func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, info, err := payload(r)
		if err != nil {
			return nil, err
		}
		v, err := s.registerSchemaInfo(r.Context(), n, info)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"version": v}, nil
	})
	// withVersions: a payload and the topic's versions.
	withVersions := func(r *http.Request) (topicname.Name, *metapb.SchemaInfo, topicSchemas, error) {
		n, info, err := payload(r)
		if err != nil {
			return n, nil, topicSchemas{}, err
		}
		all, _, err := s.schemas(r.Context(), n)
		return n, info, all, err
	}
	h("POST "+base+"/version", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		n, info, all, err := withVersions(r)
		if err != nil {
			return nil, err
		}
		v, ok := all.find(info)
		if !ok {
			return nil, errorf(ErrNoSchema, "%s has no version equal to this schema", n)
		}
		return map[string]int64{"version": v}, nil
	})
	h("POST "+base+"/compatibility", s.onTopic(opLookup), func(w http.ResponseWriter, r *http.Request) (any, error) {
		_, info, all, err := withVersions(r)
		if err != nil {
			return nil, err
		}
		return map[string]any{"compatibility": all.compatible(info) == nil, "schemaCompatibilityStrategy": "ALWAYS_COMPATIBLE"}, nil
	})
}
