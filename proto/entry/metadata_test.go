package entry

import (
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// What pulsar-client-go sends for an unbatched message, and a batch with
// every field decodeMetadata decodes.
func commonMetadata() []*pulsarpb.MessageMetadata {
	return []*pulsarpb.MessageMetadata{
		{ProducerName: proto.String("standalone-0-1"), SequenceId: proto.Uint64(41), PublishTime: proto.Uint64(1764720000123),
			UncompressedSize: proto.Uint32(1024)},
		{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1 << 40), PublishTime: proto.Uint64(1), PartitionKey: proto.String("key-7"),
			Compression: pulsarpb.CompressionType_LZ4.Enum(), UncompressedSize: proto.Uint32(1 << 20), NumMessagesInBatch: proto.Int32(1000),
			EventTime: proto.Uint64(99), SchemaVersion: []byte{0, 0, 0, 0, 0, 0, 0, 2}, PartitionKeyB64Encoded: proto.Bool(true),
			OrderingKey: []byte("ok"), DeliverAtTime: proto.Int64(-5), HighestSequenceId: proto.Uint64(1<<40 + 999),
			NullValue: proto.Bool(false), NullPartitionKey: proto.Bool(true)},
		{ProducerName: proto.String(""), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(0), SchemaVersion: []byte{}, OrderingKey: []byte{},
			PartitionKey: proto.String(""), NumMessagesInBatch: proto.Int32(-1)},
	}
}

func TestDecodeMetadataCommon(t *testing.T) {
	for i, md := range commonMetadata() {
		b, err := proto.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		got := decodeMetadata(b)
		if got == nil {
			t.Fatalf("%d: not decoded by hand: %v", i, md)
		}
		if !proto.Equal(got, md) {
			t.Fatalf("%d: decoded %v, want %v", i, got, md)
		}
		clear(b) // what was decoded does not alias the input
		if !proto.Equal(got, md) {
			t.Fatalf("%d: decoded %v, changed with its input, want %v", i, got, md)
		}
	}
	// Fields given twice (the last wins, an empty one still present), and
	// varints wider than their field (truncated, as proto.Unmarshal does).
	b := twiceAndWide()
	want := &pulsarpb.MessageMetadata{}
	if err := proto.Unmarshal(b, want); err != nil {
		t.Fatal(err)
	}
	if got := decodeMetadata(b); got == nil || !proto.Equal(got, want) {
		t.Fatalf("fields twice and wide varints: decoded %v, want %v", got, want)
	}
	if want.GetUncompressedSize() != 7 || want.GetNumMessagesInBatch() != 7 || want.SchemaVersion == nil || len(want.SchemaVersion) != 0 {
		t.Fatalf("proto.Unmarshal gave %v: the cases above test nothing", want)
	}
	// The one pulsar-client-go sends unbatched: the message and its
	// producer name, where proto.Unmarshal makes one object per field.
	b, _ = proto.Marshal(commonMetadata()[0])
	if n := testing.AllocsPerRun(100, func() { decodeMetadata(b) }); n > 2 {
		t.Fatalf("%v allocations to decode an unbatched message's metadata, want 2", n)
	}
}

// What decodeMetadata leaves to proto.Unmarshal: other fields, a wire
// type not the field's, an unknown compression, a required field missing.
func TestDecodeMetadataFallsBack(t *testing.T) {
	base := commonMetadata()[0]
	withProps := proto.Clone(base).(*pulsarpb.MessageMetadata)
	withProps.Properties = []*pulsarpb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}
	noPublish := proto.Clone(base).(*pulsarpb.MessageMetadata)
	noPublish.PublishTime = nil
	noProducer := proto.Clone(base).(*pulsarpb.MessageMetadata)
	noProducer.ProducerName = nil
	noSequence := proto.Clone(base).(*pulsarpb.MessageMetadata)
	noSequence.SequenceId = nil
	mustMarshal := func(md *pulsarpb.MessageMetadata) []byte {
		b, err := proto.MarshalOptions{AllowPartial: true}.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	baseBytes := mustMarshal(base)
	for name, b := range map[string][]byte{
		"properties":            mustMarshal(withProps),
		"publish time missing":  mustMarshal(noPublish),
		"producer name missing": mustMarshal(noProducer),
		"sequence id missing":   mustMarshal(noSequence),
		"a fixed32 field":       protowire.AppendFixed32(protowire.AppendTag(append([]byte(nil), baseBytes...), 100, protowire.Fixed32Type), 1),
		"a group":               protowire.AppendTag(protowire.AppendTag(append([]byte(nil), baseBytes...), 101, protowire.StartGroupType), 101, protowire.EndGroupType),
		"unknown compression":   protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), baseBytes...), mdCompression, protowire.VarintType), 9),
		"sequence id as bytes":  protowire.AppendBytes(protowire.AppendTag(append([]byte(nil), baseBytes...), mdSequenceID, protowire.BytesType), []byte{1}),
		"unknown field":         protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), baseBytes...), 200, protowire.VarintType), 1),
		"truncated":             baseBytes[:len(baseBytes)-1],
	} {
		if got := decodeMetadata(b); got != nil {
			t.Errorf("%s: decoded by hand (%v); proto.Unmarshal should", name, got)
		}
	}
	// Falling back costs nothing before proto.Unmarshal does the work
	// (messages with properties are common).
	props := mustMarshal(withProps)
	if n := testing.AllocsPerRun(100, func() { decodeMetadata(props) }); n != 0 {
		t.Fatalf("%v allocations before falling back, want 0", n)
	}
	// Through DecodeUnchecked: the same as proto.Unmarshal gives, error
	// included.
	if _, _, err := DecodeUnchecked(entryOf(mustMarshal(noPublish))); err == nil {
		t.Fatal("metadata without its publish time decoded")
	}
	md, _, err := DecodeUnchecked(entryOf(mustMarshal(withProps)))
	if err != nil || !proto.Equal(md, withProps) {
		t.Fatalf("metadata with properties: %v %v", md, err)
	}
}

// entryOf lays out an entry around metadata bytes as they are.
func entryOf(mb []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, Magic)
	b = append(b, 0, 0, 0, 0) // checksum: not checked
	b = binary.BigEndian.AppendUint32(b, uint32(len(mb)))
	return append(b, mb...)
}

// twiceAndWide is metadata with its string and bytes fields given twice,
// the second time empty, and varints wider than their fields.
func twiceAndWide() []byte {
	var b []byte
	b = protowire.AppendTag(b, mdProducerName, protowire.BytesType)
	b = protowire.AppendString(b, "first")
	for _, f := range []protowire.Number{mdProducerName, mdPartitionKey, mdSchemaVersion, mdOrderingKey} {
		b = protowire.AppendTag(b, f, protowire.BytesType)
		b = protowire.AppendBytes(b, []byte("x"))
		b = protowire.AppendTag(b, f, protowire.BytesType)
		b = protowire.AppendBytes(b, nil)
	}
	for _, f := range []protowire.Number{mdSequenceID, mdPublishTime, mdUncompressedSize, mdNumMessagesInBatch, mdDeliverAtTime} {
		b = protowire.AppendTag(b, f, protowire.VarintType)
		b = protowire.AppendVarint(b, 1<<32|7)
	}
	return b
}

func FuzzDecodeMetadata(f *testing.F) {
	for _, md := range commonMetadata() {
		b, _ := proto.Marshal(md)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x01, 'p', 0x10, 0x01, 0x18, 0x02, 0x0a, 0x01, 'q'}) // producer name twice
	f.Add(twiceAndWide())
	f.Fuzz(func(t *testing.T, b []byte) {
		got := decodeMetadata(b)
		if got == nil {
			return
		}
		want := &pulsarpb.MessageMetadata{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("decoded by hand what proto.Unmarshal refuses (%v): %v", err, got)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, proto.Unmarshal %v", got, want)
		}
	})
}
