package broker

import (
	"errors"
	"testing"

	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// A new Avro or JSON schema version is taken or refused as the strategy
// says, Pulsar's way: BACKWARD (new readers read old data), FORWARD (old
// readers read new data), FULL (both), against the latest version or,
// _TRANSITIVE, every version kept.
func TestSchemaCompatibilityStrategies(t *testing.T) {
	const (
		v1 = `{"type":"record","name":"order","fields":[{"name":"id","type":"int"}]}`
		// v1 plus an optional field: both ways.
		optional = `{"type":"record","name":"order","fields":[{"name":"id","type":"int"},{"name":"note","type":["null","string"],"default":null}]}`
		// v1 plus a required field: old readers ignore it (forward);
		// new readers cannot fill it from old data (not backward).
		required = `{"type":"record","name":"order","fields":[{"name":"id","type":"int"},{"name":"qty","type":"int"}]}`
		// v1's field removed: new readers read old data (backward); old
		// readers miss id (not forward).
		removed = `{"type":"record","name":"order","fields":[]}`
	)
	avro := func(def string) *metapb.SchemaInfo {
		return &metapb.SchemaInfo{Type: int32(pulsarpb.Schema_Avro), Data: []byte(def)}
	}
	ok := func(err error) bool { return err == nil }
	for _, tc := range []struct {
		kept     []string
		next     string
		strategy string
		want     bool
	}{
		{[]string{v1}, optional, SchemaFull, true},
		{[]string{v1}, required, SchemaFull, false},
		{[]string{v1}, required, SchemaForward, true},
		{[]string{v1}, required, SchemaBackward, false},
		{[]string{v1}, removed, SchemaBackward, true},
		{[]string{v1}, removed, SchemaForward, false},
		{[]string{v1}, required, SchemaAlwaysCompatible, true},
		{[]string{v1}, optional, SchemaAlwaysIncompatible, false},
		{[]string{v1}, `{"type":"record"`, SchemaFull, false}, // not Avro
		// Transitive: v1 then removed (backward-compatible with v1); next
		// re-adds id with a default, fine against the latest, and against
		// v1 too (backward: new readers read v1's data).
		{[]string{v1, removed}, `{"type":"record","name":"order","fields":[{"name":"id","type":"int","default":0}]}`, SchemaBackward + transitive, true},
		// next requires qty: against the latest (removed) it is not
		// backward; neither transitively.
		{[]string{v1, removed}, required, SchemaBackward + transitive, false},
		// FORWARD_TRANSITIVE: readers of v1 (needing id) cannot read the
		// latest-compatible empty record, though readers of "removed" can.
		{[]string{v1, removed}, `{"type":"record","name":"order","fields":[{"name":"x","type":["null","int"],"default":null}]}`, SchemaForward, true},
		{[]string{v1, removed}, `{"type":"record","name":"order","fields":[{"name":"x","type":["null","int"],"default":null}]}`, SchemaForward + transitive, false},
	} {
		all := topicSchemas{&metapb.TopicSchemas{}}
		for _, d := range tc.kept {
			all.Versions = append(all.Versions, avro(d))
		}
		err := all.compatible(avro(tc.next), tc.strategy)
		if ok(err) != tc.want {
			t.Errorf("%s: %v after %v: %v, want compatible=%v", tc.strategy, tc.next, tc.kept, err, tc.want)
		}
		if err != nil && !errors.Is(err, ErrIncompatibleSchema) {
			t.Errorf("%s: %v: want ErrIncompatibleSchema", tc.strategy, err)
		}
	}
	// A consumer's schema, as Pulsar checks it: it must read the latest
	// version's data (BACKWARD) under FULL; the transitive strategies
	// apply as they are.
	one := topicSchemas{&metapb.TopicSchemas{Versions: []*metapb.SchemaInfo{avro(v1)}}}
	if err := one.compatible(avro(removed), consumerStrategy(SchemaFull)); err != nil {
		t.Errorf("a consumer reading v1 with fewer fields under FULL: %v", err)
	}
	if err := one.compatible(avro(required), consumerStrategy(SchemaFull)); !errors.Is(err, ErrIncompatibleSchema) {
		t.Errorf("a consumer needing a field v1 lacks under FULL: %v, want ErrIncompatibleSchema", err)
	}
	if got := consumerStrategy(SchemaFull + transitive); got != SchemaFull+transitive {
		t.Errorf("consumer strategy for FULL_TRANSITIVE: %s", got)
	}
	// Other types carry no definition: a same-type version is taken, another
	// type never (whatever the strategy).
	str := topicSchemas{&metapb.TopicSchemas{Versions: []*metapb.SchemaInfo{{Type: int32(pulsarpb.Schema_String)}}}}
	if err := str.compatible(&metapb.SchemaInfo{Type: int32(pulsarpb.Schema_String), Properties: map[string]string{"a": "b"}}, SchemaFull); err != nil {
		t.Errorf("a STRING version after a STRING one: %v", err)
	}
	if err := str.compatible(avro(v1), SchemaAlwaysCompatible); !errors.Is(err, ErrIncompatibleSchema) {
		t.Errorf("AVRO after STRING: %v, want ErrIncompatibleSchema", err)
	}
}
