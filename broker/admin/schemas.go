package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Schemas is what the schemas resource asks of the broker: a topic's
// schema versions, kept in etcd (broker/schema.go says how they are
// numbered and compared).
type Schemas interface {
	// SchemaVersions are the versions kept of topic n's schema: the
	// first one's number and each version from it.
	SchemaVersions(ctx context.Context, n topicname.Name) (first int64, versions []*metapb.SchemaInfo, err error)
	// FindSchema returns the version equal to info; false if there is
	// none.
	FindSchema(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (int64, bool, error)
	// SchemaCompatible reports whether info may follow the versions, and
	// under which strategy (Pulsar's name).
	SchemaCompatible(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (bool, string, error)
	// RegisterSchema returns the version equal to info, adding it if
	// there is none.
	RegisterSchema(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (int64, error)
	// DeleteSchemas deletes every version, and returns the last one's
	// number.
	DeleteSchemas(ctx context.Context, n topicname.Name) (int64, error)
}

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
	return schemaResponse{Version: v, Type: SchemaTypeName(info.GetType()), Timestamp: info.GetTimestamp(),
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
func schemaRoutes(h route, z Rules, b Schemas) {
	const base = "/admin/v2/schemas/{tenant}/{ns}/{topic}"
	type versions struct {
		first int64
		all   []*metapb.SchemaInfo
	}
	// at returns version v; false if it is not kept.
	at := func(vs versions, v int64) (*metapb.SchemaInfo, bool) {
		if v < vs.first || v-vs.first >= int64(len(vs.all)) {
			return nil, false
		}
		return vs.all[v-vs.first], true
	}
	topicVersions := func(r *http.Request) (topicname.Name, versions, error) {
		n, err := TopicOf(r)
		if err != nil {
			return n, versions{}, errorf(errs.ErrInvalidArgument, "%v", err)
		}
		first, all, err := b.SchemaVersions(r.Context(), n)
		return n, versions{first, all}, err
	}
	h("GET "+base+"/schema", z.TopicLookup, func(r *http.Request) (any, error) {
		n, vs, err := topicVersions(r)
		if err != nil {
			return nil, err
		}
		if len(vs.all) == 0 {
			return nil, errorf(errs.ErrNoSchema, "%s has no schema", n)
		}
		v := vs.first + int64(len(vs.all)) - 1
		return schemaResponseOf(v, vs.all[len(vs.all)-1]), nil
	})
	h("GET "+base+"/schema/{version}", z.TopicLookup, func(r *http.Request) (any, error) {
		v, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
		if err != nil || v < 0 {
			return nil, errorf(errs.ErrInvalidArgument, "schema version %q: not a number of 0 or more", r.PathValue("version"))
		}
		n, vs, err := topicVersions(r)
		if err != nil {
			return nil, err
		}
		info, ok := at(vs, v)
		if !ok {
			return nil, errorf(errs.ErrNoSchema, "%s has no schema version %d", n, v)
		}
		return schemaResponseOf(v, info), nil
	})
	h("GET "+base+"/schemas", z.TopicLookup, func(r *http.Request) (any, error) {
		n, vs, err := topicVersions(r)
		if err != nil {
			return nil, err
		}
		if len(vs.all) == 0 {
			return nil, errorf(errs.ErrNoSchema, "%s has no schema", n)
		}
		out := make([]schemaResponse, len(vs.all))
		for i, info := range vs.all {
			out[i] = schemaResponseOf(vs.first+int64(i), info)
		}
		return map[string]any{"getSchemaResponses": out}, nil
	})
	// Deleting removes every version (their numbers stay used): producers
	// and consumers that come next register theirs anew.
	h("DELETE "+base+"/schema", z.TenantAdmin, func(r *http.Request) (any, error) {
		n, err := TopicOf(r)
		if err != nil {
			return nil, errorf(errs.ErrInvalidArgument, "%v", err)
		}
		v, err := b.DeleteSchemas(r.Context(), n)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"version": v}, nil
	})
	payload := func(r *http.Request) (topicname.Name, *metapb.SchemaInfo, error) {
		n, err := TopicOf(r)
		if err != nil {
			return n, nil, errorf(errs.ErrInvalidArgument, "%v", err)
		}
		var p schemaPayload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			return n, nil, errorf(errs.ErrInvalidArgument, "schema payload: %v", err)
		}
		info, err := p.info()
		return n, info, err
	}
	h("POST "+base+"/schema", z.TenantAdmin, func(r *http.Request) (any, error) {
		n, info, err := payload(r)
		if err != nil {
			return nil, err
		}
		v, err := b.RegisterSchema(r.Context(), n, info)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"version": v}, nil
	})
	h("POST "+base+"/version", z.TopicLookup, func(r *http.Request) (any, error) {
		n, info, err := payload(r)
		if err != nil {
			return nil, err
		}
		v, ok, err := b.FindSchema(r.Context(), n, info)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errorf(errs.ErrNoSchema, "%s has no version equal to this schema", n)
		}
		return map[string]int64{"version": v}, nil
	})
	h("POST "+base+"/compatibility", z.TopicLookup, func(r *http.Request) (any, error) {
		n, info, err := payload(r)
		if err != nil {
			return nil, err
		}
		ok, strategy, err := b.SchemaCompatible(r.Context(), n, info)
		if err != nil {
			return nil, err
		}
		return map[string]any{"compatibility": ok, "schemaCompatibilityStrategy": strategy}, nil
	})
}

// schemaTypeNames are Pulsar's names of the schema types, as its admin
// REST spells them, by the protocol's numbers.
var schemaTypeNames = map[int32]string{
	0: "NONE", 1: "STRING", 2: "JSON", 3: "PROTOBUF", 4: "AVRO", 5: "BOOLEAN", 6: "INT8", 7: "INT16", 8: "INT32",
	9: "INT64", 10: "FLOAT", 11: "DOUBLE", 12: "DATE", 13: "TIME", 14: "TIMESTAMP", 15: "KEY_VALUE", 16: "INSTANT",
	17: "LOCAL_DATE", 18: "LOCAL_TIME", 19: "LOCAL_DATE_TIME", 20: "PROTOBUF_NATIVE",
}

// SchemaTypeName is Pulsar's name of the schema type numbered t (its
// number, for a type Pulsar does not name).
func SchemaTypeName(t int32) string {
	if name, ok := schemaTypeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("TYPE_%d", t)
}

// schemaTypeOf is the protocol's number of a type named as Pulsar's admin
// REST names it.
func schemaTypeOf(name string) (int32, error) {
	for t, n := range schemaTypeNames {
		if n == name {
			return t, nil
		}
	}
	return 0, errorf(errs.ErrInvalidArgument, "schema type %q is not one of Pulsar's", name)
}
