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

// metadata is a MessageMetadata with room for its scalar fields, so that
// decodeMetadata allocates them with it, once.
type metadata struct {
	md                                     pulsarpb.MessageMetadata
	sequenceID, publishTime, eventTime, hi uint64
	uncompressedSize                       uint32
	numMessages                            int32
	deliverAt                              int64
	compression                            pulsarpb.CompressionType
	keyB64, nullValue, nullKey             bool
	producerName, partitionKey             string
	sawProducer, sawSequence, sawPublish   bool
	sawPartitionKey                        bool
}

// decodeMetadata decodes a MessageMetadata made of the fields most
// messages carry (those above) in one allocation, plus one per string or
// bytes field, where proto.Unmarshal makes one per field set, through
// reflection; or returns nil for proto.Unmarshal to decode it: any other
// field (properties among them), a wire type not the field's, a
// compression this version does not know (what an enum keeps of an
// unknown or oversized value is left to proto.Unmarshal: protobuf-go
// stores it truncated in the field today), a required field missing,
// anything malformed. What it returns
// equals what proto.Unmarshal gives (FuzzDecodeMetadata compares them).
// Strings and bytes are copied, as proto.Unmarshal copies them.
func decodeMetadata(b []byte) *pulsarpb.MessageMetadata {
	m := &metadata{}
	md := &m.md
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			switch num {
			case mdSequenceID:
				m.sequenceID, md.SequenceId, m.sawSequence = v, &m.sequenceID, true
			case mdPublishTime:
				m.publishTime, md.PublishTime, m.sawPublish = v, &m.publishTime, true
			case mdCompression:
				if _, known := pulsarpb.CompressionType_name[int32(v)]; !known || v > math.MaxInt32 {
					return nil
				}
				m.compression, md.Compression = pulsarpb.CompressionType(int32(v)), &m.compression
			case mdUncompressedSize:
				m.uncompressedSize, md.UncompressedSize = uint32(v), &m.uncompressedSize
			case mdNumMessagesInBatch:
				m.numMessages, md.NumMessagesInBatch = int32(v), &m.numMessages
			case mdEventTime:
				m.eventTime, md.EventTime = v, &m.eventTime
			case mdPartitionKeyB64:
				m.keyB64, md.PartitionKeyB64Encoded = protowire.DecodeBool(v), &m.keyB64
			case mdDeliverAtTime:
				m.deliverAt, md.DeliverAtTime = int64(v), &m.deliverAt
			case mdHighestSequenceID:
				m.hi, md.HighestSequenceId = v, &m.hi
			case mdNullValue:
				m.nullValue, md.NullValue = protowire.DecodeBool(v), &m.nullValue
			case mdNullPartitionKey:
				m.nullKey, md.NullPartitionKey = protowire.DecodeBool(v), &m.nullKey
			default:
				return nil
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			switch num {
			case mdProducerName:
				m.producerName, m.sawProducer = string(v), true
			case mdPartitionKey:
				m.partitionKey, m.sawPartitionKey = string(v), true
			case mdSchemaVersion:
				md.SchemaVersion = append(make([]byte, 0, len(v)), v...)
			case mdOrderingKey:
				md.OrderingKey = append(make([]byte, 0, len(v)), v...)
			default:
				return nil
			}
		default:
			return nil
		}
	}
	if !m.sawProducer || !m.sawSequence || !m.sawPublish {
		return nil // required: proto.Unmarshal says which is missing
	}
	md.ProducerName = &m.producerName
	if m.sawPartitionKey {
		md.PartitionKey = &m.partitionKey
	}
	return md
}
