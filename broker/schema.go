package broker

import (
	"strings"

	"context"
	"encoding/binary"
	"errors"
	"github.com/hamba/avro/v2"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/admin"
	"github.com/magnetar-io/magnetar/broker/internal/errs"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// ErrNoSchema: the topic has no schema (or not the version asked for).
var ErrNoSchema = errs.ErrNoSchema

// schemaPath keys a topic's schemas: the path of its base name in the
// persistent domain. Pulsar keys them by name without the domain
// (TopicName.getSchemaName), so persistent://t/ns/x and
// non-persistent://t/ns/x have one schema, and the admin API's
// /admin/v2/schemas/t/ns/x reaches both.
func schemaPath(n topicname.Name) string {
	b := n.Base()
	b.Domain = topicname.Persistent
	return b.Path()
}

// Schemas, as Pulsar's clients register them. A topic's versions are kept
// at metastore.SchemaKey(schemaPath), so a partitioned topic's partitions
// share them, and so do a topic's persistent and non-persistent forms. A producer's or consumer's schema (or GET_OR_CREATE_SCHEMA,
// or the admin REST) gets the version equal to it, or becomes a new
// version when its type is the latest version's and, for a struct schema
// (Avro, JSON), its definition is compatible with the versions kept as
// --schema-compatibility-strategy says (FULL by default, as Pulsar's
// broker); another type is refused
// (IncompatibleSchema), as Pulsar refuses it. The bytes schema (None) is
// no schema. Versions count from 0 and are never reused while the topic
// lives (a deletion through the admin REST moves the first one past the
// deleted ones); on Pulsar's protocol they are 8 bytes, big endian, as
// Pulsar's brokers give them.

const (
	// maxSchemaVersions caps a topic's versions kept.
	maxSchemaVersions = 100
	// maxSchemasSize caps a topic's versions marshalled (one etcd value).
	maxSchemasSize = 1 << 20
)

func schemaVersion(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

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
		return nil, s.checkSchemaless(ctx, n)
	}
	v, err := s.registerSchemaInfo(ctx, n, schemaInfo(sc))
	if err != nil {
		return nil, err
	}
	return schemaVersion(v), nil
}

// checkConsumerSchema takes a consumer's schema as Pulsar does: added to
// a topic without one, else checked against the topic's (not added: a
// consumer does not change what producers write).
func (s *Server) checkConsumerSchema(ctx context.Context, n topicname.Name, sc *pulsarpb.Schema) error {
	if sc == nil || sc.GetType() == pulsarpb.Schema_None {
		return nil
	}
	all, _, err := s.schemas(ctx, n)
	if err != nil {
		return err
	}
	if len(all.Versions) == 0 {
		_, err := s.registerSchema(ctx, n, sc)
		return err
	}
	info := schemaInfo(sc)
	if _, ok := all.find(info); ok {
		return nil
	}
	strategy, err := s.schemaStrategy(ctx, n)
	if err != nil {
		return err
	}
	return all.compatible(info, consumerStrategy(strategy))
}

// schemaStrategy is how topic n's new schema versions are checked: its
// namespace's strategy, or the broker's if the namespace has none
// (Pulsar's UNDEFINED).
func (s *Server) schemaStrategy(ctx context.Context, n topicname.Name) (string, error) {
	p, err := s.md.policies(ctx, n.NamespaceName())
	if err != nil {
		return "", err
	}
	if p.SchemaCompatibilityStrategy != "" {
		return p.SchemaCompatibilityStrategy, nil
	}
	return s.cfg.SchemaCompatibilityStrategy, nil
}

// checkSchemaless admits a producer without a schema to topic n, unless
// its namespace enforces schema validation and the topic has a schema
// (Pulsar's schema_validation_enforced; Pulsar's message).
func (s *Server) checkSchemaless(ctx context.Context, n topicname.Name) error {
	p, err := s.md.policies(ctx, n.NamespaceName())
	if err != nil || !p.SchemaValidationEnforced {
		return err
	}
	all, _, err := s.schemas(ctx, n)
	if err != nil {
		return err
	}
	if len(all.GetVersions()) > 0 {
		return errorf(ErrIncompatibleSchema, "producers cannot connect or send message without a schema to topics with a schema (%s enforces schema validation)", n.NamespaceName())
	}
	return nil
}

// consumerStrategy is how a consumer's schema is checked, as Pulsar checks
// it: the consumer must read what the latest version writes (BACKWARD)
// under BACKWARD, FORWARD, FORWARD_TRANSITIVE and FULL; the others apply
// as they are.
func consumerStrategy(strategy string) string {
	switch strategy {
	case SchemaBackward, SchemaForward, SchemaForward + transitive, SchemaFull:
		return SchemaBackward
	}
	return strategy
}

// registerSchemaInfo returns info's version for topic n, adding it if no
// version equals it.
func (s *Server) registerSchemaInfo(ctx context.Context, n topicname.Name, info *metapb.SchemaInfo) (int64, error) {
	if _, ok := pulsarpb.Schema_Type_name[info.GetType()]; !ok || info.GetType() == int32(pulsarpb.Schema_None) {
		return 0, errorf(ErrInvalidArgument, "schema type %s: not a schema Magnetar keeps", admin.SchemaTypeName(info.GetType()))
	}
	// Only an existing topic gets schemas (as Pulsar answers
	// TopicNotFound): they go with it when it is deleted.
	if ok, err := s.topicOrPartitionedExists(ctx, n); err != nil {
		return 0, err
	} else if !ok {
		return 0, errorf(ErrTopicNotFound, "%s", n)
	}
	for range 10 { // compare-and-swap rounds against concurrent registrations
		all, rev, err := s.schemas(ctx, n)
		if err != nil {
			return 0, err
		}
		if v, ok := all.find(info); ok {
			return v, nil
		}
		strategy, err := s.schemaStrategy(ctx, n)
		if err != nil {
			return 0, err
		}
		if err := all.compatible(info, strategy); err != nil {
			return 0, err
		}
		if len(all.Versions) >= maxSchemaVersions {
			return 0, errorf(ErrIncompatibleSchema, "the topic has %d schema versions, the most kept", len(all.Versions))
		}
		added := proto.Clone(info).(*metapb.SchemaInfo)
		added.Timestamp = time.Now().UnixMilli()
		all.Versions = append(all.Versions, added)
		b := marshal(all.TopicSchemas)
		if len(b) > maxSchemasSize {
			return 0, errorf(ErrIncompatibleSchema, "the topic's schemas would take %d bytes, over the %d kept", len(b), maxSchemasSize)
		}
		_, err = s.store.CompareAndSwap(ctx, metastore.SchemaKey(schemaPath(n)), b, rev)
		if err == nil {
			return all.First + int64(len(all.Versions)) - 1, nil
		}
		if !errors.Is(err, metastore.ErrBadVersion) {
			return 0, err
		}
	}
	return 0, errorf(ErrServiceNotReady, "the schemas of %s change too often to add one", n)
}

// topicOrPartitionedExists reports whether topic n exists, or the
// partitioned topic it is (or is a partition of), in either domain: the
// two share their schemas (schemaPath).
func (s *Server) topicOrPartitionedExists(ctx context.Context, n topicname.Name) (bool, error) {
	for _, d := range []topicname.Domain{topicname.Persistent, topicname.NonPersistent} {
		n.Domain = d
		if ok, err := s.md.topicExists(ctx, n); err != nil || ok {
			return ok, err
		}
		if parts, err := s.md.partitions(ctx, n.Base()); err != nil || parts > 0 {
			return parts > 0, err
		}
	}
	return false, nil
}

// deleteSchemas removes topic n's versions, keeping their numbers used;
// it returns the latest deleted.
func (s *Server) deleteSchemas(ctx context.Context, n topicname.Name) (int64, error) {
	for range 10 {
		all, rev, err := s.schemas(ctx, n)
		if err != nil {
			return 0, err
		}
		latest, ok := all.latest()
		if !ok {
			return 0, errorf(ErrNoSchema, "%s has no schema", n)
		}
		next := &metapb.TopicSchemas{First: latest + 1}
		_, err = s.store.CompareAndSwap(ctx, metastore.SchemaKey(schemaPath(n)), marshal(next), rev)
		if err == nil {
			return latest, nil
		}
		if !errors.Is(err, metastore.ErrBadVersion) {
			return 0, err
		}
	}
	return 0, errorf(ErrServiceNotReady, "the schemas of %s change too often to delete them", n)
}

// topicSchemas is a topic's stored versions with their helpers.
type topicSchemas struct{ *metapb.TopicSchemas }

// schemas returns topic n's versions and the revision to compare-and-swap
// them at (metastore.MustNotExist when there are none yet).
func (s *Server) schemas(ctx context.Context, n topicname.Name) (topicSchemas, int64, error) {
	all := &metapb.TopicSchemas{}
	rev, err := getProto(ctx, s.store, metastore.SchemaKey(schemaPath(n)), all)
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		return topicSchemas{all}, metastore.MustNotExist, nil
	case err != nil:
		return topicSchemas{}, 0, err
	}
	return topicSchemas{all}, rev, nil
}

// find returns the version equal to info.
func (t topicSchemas) find(info *metapb.SchemaInfo) (int64, bool) {
	i := slices.IndexFunc(t.Versions, func(v *metapb.SchemaInfo) bool { return sameSchema(v, info) })
	return t.First + int64(i), i >= 0
}

// latest returns the latest version's number; false if there is none.
func (t topicSchemas) latest() (int64, bool) {
	return t.First + int64(len(t.Versions)) - 1, len(t.Versions) > 0
}

// at returns version v; false if it is not kept.
func (t topicSchemas) at(v int64) (*metapb.SchemaInfo, bool) {
	if v < t.First || v-t.First >= int64(len(t.Versions)) {
		return nil, false
	}
	return t.Versions[v-t.First], true
}

// Schema compatibility strategies, Pulsar's names (--schema-compatibility
// -strategy): how a new version of a topic's struct schema (Avro, or JSON
// defined in Avro) must relate to the versions kept. BACKWARD: readers of
// the new version can read what the latest was written with; FORWARD:
// readers of the latest can read what the new one writes; FULL: both;
// _TRANSITIVE: against every version kept, not only the latest.
// ALWAYS_COMPATIBLE checks nothing, ALWAYS_INCOMPATIBLE takes no new
// version. Schemas of other types (STRING, INT64, ...) carry no
// definition: a new version of the same type is always taken.
const (
	SchemaAlwaysCompatible   = "ALWAYS_COMPATIBLE"
	SchemaAlwaysIncompatible = "ALWAYS_INCOMPATIBLE"
	SchemaBackward           = "BACKWARD"
	SchemaForward            = "FORWARD"
	SchemaFull               = "FULL"
	transitive               = "_TRANSITIVE"
)

// SchemaStrategies lists the strategies --schema-compatibility-strategy
// takes.
var SchemaStrategies = []string{SchemaAlwaysCompatible, SchemaAlwaysIncompatible, SchemaBackward, SchemaForward, SchemaFull,
	SchemaBackward + transitive, SchemaForward + transitive, SchemaFull + transitive}

// compatible reports whether info may follow the versions under strategy:
// never another type than the latest version's; for Avro and JSON, the
// definitions as strategy says.
func (t topicSchemas) compatible(info *metapb.SchemaInfo, strategy string) error {
	n := len(t.Versions)
	if n == 0 {
		return nil
	}
	if t.Versions[n-1].GetType() != info.GetType() {
		return errorf(ErrIncompatibleSchema, "schema %s: the topic's schema is %s",
			admin.SchemaTypeName(info.GetType()), admin.SchemaTypeName(t.Versions[n-1].GetType()))
	}
	typ := pulsarpb.Schema_Type(info.GetType())
	if strategy == SchemaAlwaysCompatible || (typ != pulsarpb.Schema_Avro && typ != pulsarpb.Schema_Json) {
		return nil
	}
	if strategy == SchemaAlwaysIncompatible {
		return errorf(ErrIncompatibleSchema, "the schema compatibility strategy is %s: no new version is taken", strategy)
	}
	next, err := avro.ParseBytes(info.GetData())
	if err != nil {
		if typ == pulsarpb.Schema_Json {
			return nil // a JSON schema not defined in Avro: nothing to compare
		}
		return errorf(ErrIncompatibleSchema, "not an Avro schema: %v", err)
	}
	base, all := strings.CutSuffix(strategy, transitive)
	against := t.Versions[n-1:]
	if all {
		against = t.Versions
	}
	check := avro.NewSchemaCompatibility()
	for i := len(against) - 1; i >= 0; i-- {
		v := t.First + int64(n-len(against)+i)
		prev, err := avro.ParseBytes(against[i].GetData())
		if err != nil {
			continue // a version that is not Avro: nothing to compare
		}
		if base == SchemaBackward || base == SchemaFull {
			if err := check.Compatible(next, prev); err != nil {
				return errorf(ErrIncompatibleSchema, "%s: readers of the new schema cannot read data of version %d: %v", strategy, v, err)
			}
		}
		if base == SchemaForward || base == SchemaFull {
			if err := check.Compatible(prev, next); err != nil {
				return errorf(ErrIncompatibleSchema, "%s: readers of version %d cannot read data of the new schema: %v", strategy, v, err)
			}
		}
	}
	return nil
}

// schemaAt returns topic n's schema at version (the latest if version is
// empty) and that version; ErrNoSchema if there is none.
func (s *Server) schemaAt(ctx context.Context, n topicname.Name, version []byte) (*pulsarpb.Schema, []byte, error) {
	all, _, err := s.schemas(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	v, ok := all.latest()
	if !ok {
		return nil, nil, errorf(ErrNoSchema, "%s has no schema", n)
	}
	if len(version) > 0 {
		if len(version) != 8 {
			return nil, nil, errorf(ErrInvalidArgument, "schema version of %d bytes, not 8", len(version))
		}
		v = int64(binary.BigEndian.Uint64(version))
	}
	info, ok := all.at(v)
	if !ok {
		return nil, nil, errorf(ErrNoSchema, "%s has no schema version %d", n, v)
	}
	sc := &pulsarpb.Schema{Name: proto.String(info.GetName()), SchemaData: info.GetData(), Type: pulsarpb.Schema_Type(info.GetType()).Enum()}
	if sc.SchemaData == nil {
		sc.SchemaData = []byte{}
	}
	for _, k := range slices.Sorted(maps.Keys(info.GetProperties())) {
		sc.Properties = append(sc.Properties, &pulsarpb.KeyValue{Key: proto.String(k), Value: proto.String(info.GetProperties()[k])})
	}
	return sc, schemaVersion(v), nil
}
