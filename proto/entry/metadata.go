package entry

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Field numbers of MessageMetadata (Pulsar's PulsarApi.proto) that
// decodeMetadata decodes.
const (
	mdProducerName       = 1
	mdSequenceID         = 2
	mdPublishTime        = 3
	mdPartitionKey       = 6
	mdCompression        = 8
	mdUncompressedSize   = 9
	mdNumMessagesInBatch = 11
	mdEventTime          = 12
	mdSchemaVersion      = 16
	mdPartitionKeyB64    = 17
	mdOrderingKey        = 18
	mdDeliverAtTime      = 19
	mdHighestSequenceID  = 24
	mdNullValue          = 25
	mdNullPartitionKey   = 30
)

// metadata is a MessageMetadata with room for its scalar fields and
// strings, so that decodeMetadata allocates them with it, once.
type metadata struct {
	md                         pulsarpb.MessageMetadata
	v                          metadataValues
	producerName, partitionKey string
}

// metadataValues are the scalar fields decodeMetadata decodes.
type metadataValues struct {
	sequenceID, publishTime, eventTime, hi uint64
	uncompressedSize                       uint32
	numMessages                            int32
	deliverAt                              int64
	compression                            pulsarpb.CompressionType
	keyB64, nullValue, nullKey             bool
}

// decodeMetadata decodes a MessageMetadata made of the fields most
// messages carry (those above) in one allocation, plus one per string or
// bytes field, where proto.Unmarshal makes one per field set, through
// reflection; or returns nil for proto.Unmarshal to decode it: any other
// field (properties among them), a wire type not the field's, a
// compression this version does not know (what an enum keeps of an
// unknown or oversized value is left to proto.Unmarshal: protobuf-go
// stores it truncated in the field today), a required field missing,
// anything malformed. What it returns equals what proto.Unmarshal gives
// (FuzzDecodeMetadata compares them). It allocates nothing until it has
// read the whole message: falling back costs no more than
// proto.Unmarshal. Strings and bytes are copied, as proto.Unmarshal
// copies them.
func decodeMetadata(b []byte) *pulsarpb.MessageMetadata {
	var v metadataValues
	var set uint32 // bit n: field n seen
	var producer, key, schema, ordering []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			switch num {
			case mdSequenceID:
				v.sequenceID = x
			case mdPublishTime:
				v.publishTime = x
			case mdCompression:
				if _, known := pulsarpb.CompressionType_name[int32(x)]; !known || x > math.MaxInt32 {
					return nil
				}
				v.compression = pulsarpb.CompressionType(int32(x))
			case mdUncompressedSize:
				v.uncompressedSize = uint32(x)
			case mdNumMessagesInBatch:
				v.numMessages = int32(x)
			case mdEventTime:
				v.eventTime = x
			case mdPartitionKeyB64:
				v.keyB64 = protowire.DecodeBool(x)
			case mdDeliverAtTime:
				v.deliverAt = int64(x)
			case mdHighestSequenceID:
				v.hi = x
			case mdNullValue:
				v.nullValue = protowire.DecodeBool(x)
			case mdNullPartitionKey:
				v.nullKey = protowire.DecodeBool(x)
			default:
				return nil
			}
		case protowire.BytesType:
			x, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			switch num {
			case mdProducerName:
				producer = x
			case mdPartitionKey:
				key = x
			case mdSchemaVersion:
				schema = x
			case mdOrderingKey:
				ordering = x
			default:
				return nil
			}
		default:
			return nil
		}
		set |= 1 << num // num < 32: any other returned above
	}
	has := func(n protowire.Number) bool { return set&(1<<n) != 0 }
	if !has(mdProducerName) || !has(mdSequenceID) || !has(mdPublishTime) {
		return nil // required: proto.Unmarshal says which is missing
	}
	m := &metadata{v: v, producerName: string(producer)}
	md, p := &m.md, &m.v
	md.ProducerName, md.SequenceId, md.PublishTime = &m.producerName, &p.sequenceID, &p.publishTime
	if has(mdPartitionKey) {
		m.partitionKey = string(key)
		md.PartitionKey = &m.partitionKey
	}
	if has(mdCompression) {
		md.Compression = &p.compression
	}
	if has(mdUncompressedSize) {
		md.UncompressedSize = &p.uncompressedSize
	}
	if has(mdNumMessagesInBatch) {
		md.NumMessagesInBatch = &p.numMessages
	}
	if has(mdEventTime) {
		md.EventTime = &p.eventTime
	}
	if has(mdSchemaVersion) {
		md.SchemaVersion = append(make([]byte, 0, len(schema)), schema...)
	}
	if has(mdPartitionKeyB64) {
		md.PartitionKeyB64Encoded = &p.keyB64
	}
	if has(mdOrderingKey) {
		md.OrderingKey = append(make([]byte, 0, len(ordering)), ordering...)
	}
	if has(mdDeliverAtTime) {
		md.DeliverAtTime = &p.deliverAt
	}
	if has(mdHighestSequenceID) {
		md.HighestSequenceId = &p.hi
	}
	if has(mdNullValue) {
		md.NullValue = &p.nullValue
	}
	if has(mdNullPartitionKey) {
		md.NullPartitionKey = &p.nullKey
	}
	return md
}
