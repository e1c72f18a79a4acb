package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// Schemas, as Pulsar's clients register them. A topic's versions are kept
// at metastore.SchemaKey(base name), so a partitioned topic's partitions
// share them. A producer's or consumer's schema (or GET_OR_CREATE_SCHEMA)
// gets the version equal to it, or becomes a new version when its type is
// the latest version's (a struct schema that changed: its compatibility
// is not checked, as with Pulsar's ALWAYS_COMPATIBLE strategy); another
// type is refused (IncompatibleSchema), as Pulsar refuses it. The bytes
// schema (None) is no schema. Versions are 8 bytes, big endian, from 0,
// as Pulsar's brokers give them.

const (
	// maxSchemaVersions caps a topic's versions.
	maxSchemaVersions = 100
	// maxSchemasSize caps a topic's versions marshalled (one etcd value).
	maxSchemasSize = 1 << 20
)

// ErrNoSchema: the topic has no schema (or not the version asked for).
var ErrNoSchema = errors.New("no schema")

func schemaVersion(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

func schemaInfo(sc *pulsarpb.Schema) *metapb.SchemaInfo {
	info := &metapb.SchemaInfo{Type: int32(sc.GetType()), Data: sc.GetSchemaData(), Name: sc.GetName()}
	if len(sc.GetProperties()) > 0 {
		info.Properties = make(map[string]string, len(sc.GetProperties()))
		for _, kv := range sc.GetProperties() {
			info.Properties[kv.GetKey()] = kv.GetValue()
		}
	}
	return info
}

func sameSchema(a, b *metapb.SchemaInfo) bool {
	return a.GetType() == b.GetType() && string(a.GetData()) == string(b.GetData()) && maps.Equal(a.GetProperties(), b.GetProperties())
}

// registerSchema returns sc's version for topic n, adding it if no
// version equals it; nil for no schema (nil or None).
func (s *Server) registerSchema(ctx context.Context, n topicname.Name, sc *pulsarpb.Schema) ([]byte, error) {
	if sc == nil || sc.GetType() == pulsarpb.Schema_None {
		return nil, nil
	}
	if _, ok := pulsarpb.Schema_Type_name[int32(sc.GetType())]; !ok {
		return nil, errorf(ErrIncompatibleSchema, "schema type %d is not one of Pulsar's", sc.GetType())
	}
	key := metastore.SchemaKey(topicPath(n.Base()))
	info := schemaInfo(sc)
	for range 10 { // compare-and-swap rounds against concurrent registrations
		var all metapb.TopicSchemas
		rev, err := getProto(ctx, s.store, key, &all)
		switch {
		case errors.Is(err, metastore.ErrNotFound):
			rev = metastore.MustNotExist
		case err != nil:
			return nil, err
		}
		if i := slices.IndexFunc(all.Versions, func(v *metapb.SchemaInfo) bool { return sameSchema(v, info) }); i >= 0 {
			return schemaVersion(i), nil
		}
		if n := len(all.Versions); n > 0 && all.Versions[n-1].GetType() != info.GetType() {
			return nil, errorf(ErrIncompatibleSchema, "schema %s: the topic's schema is %s", sc.GetType(), pulsarpb.Schema_Type(all.Versions[n-1].GetType()))
		}
		if len(all.Versions) >= maxSchemaVersions {
			return nil, errorf(ErrIncompatibleSchema, "the topic has %d schema versions, the most kept", len(all.Versions))
		}
		all.Versions = append(all.Versions, info)
		b := marshal(&all)
		if len(b) > maxSchemasSize {
			return nil, errorf(ErrIncompatibleSchema, "the topic's schemas would take %d bytes, over the %d kept", len(b), maxSchemasSize)
		}
		_, err = s.store.CompareAndSwap(ctx, key, b, rev)
		if err == nil {
			return schemaVersion(len(all.Versions) - 1), nil
		}
		if !errors.Is(err, metastore.ErrBadVersion) {
			return nil, err
		}
	}
	return nil, errorf(ErrServiceNotReady, "the schemas of %s change too often to add one", n)
}

// schemaAt returns topic n's schema at version (the latest if version is
// empty) and that version; ErrNoSchema if there is none.
func (s *Server) schemaAt(ctx context.Context, n topicname.Name, version []byte) (*pulsarpb.Schema, []byte, error) {
	var all metapb.TopicSchemas
	if _, err := getProto(ctx, s.store, metastore.SchemaKey(topicPath(n.Base())), &all); errors.Is(err, metastore.ErrNotFound) {
		return nil, nil, errorf(ErrNoSchema, "%s has no schema", n)
	} else if err != nil {
		return nil, nil, err
	}
	i := len(all.Versions) - 1
	if len(version) > 0 {
		if len(version) != 8 {
			return nil, nil, errorf(ErrInvalidArgument, "schema version of %d bytes, not 8", len(version))
		}
		v := binary.BigEndian.Uint64(version)
		if v >= uint64(len(all.Versions)) {
			return nil, nil, errorf(ErrNoSchema, "%s has no schema version %d", n, v)
		}
		i = int(v)
	}
	if i < 0 {
		return nil, nil, errorf(ErrNoSchema, "%s has no schema", n)
	}
	info := all.Versions[i]
	sc := &pulsarpb.Schema{Name: proto.String(info.GetName()), SchemaData: info.GetData(), Type: pulsarpb.Schema_Type(info.GetType()).Enum()}
	if sc.SchemaData == nil {
		sc.SchemaData = []byte{}
	}
	for _, k := range slices.Sorted(maps.Keys(info.GetProperties())) {
		sc.Properties = append(sc.Properties, &pulsarpb.KeyValue{Key: proto.String(k), Value: proto.String(info.GetProperties()[k])})
	}
	return sc, schemaVersion(i), nil
}
