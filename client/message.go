package client

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// MessageID identifies a message: its entry (ledger, entry), its index in
// a batch and the topic partition.
type MessageID interface {
	LedgerID() int64
	EntryID() int64
	BatchIdx() int32
	BatchSize() int32
	PartitionIdx() int32
	// Serialize encodes the id; DeserializeMessageID reverses it.
	Serialize() []byte
	String() string
}

type messageID struct {
	ledger, entry       int64
	batchIdx, batchSize int32
	partition           int32
}

func (m messageID) LedgerID() int64     { return m.ledger }
func (m messageID) EntryID() int64      { return m.entry }
func (m messageID) BatchIdx() int32     { return m.batchIdx }
func (m messageID) BatchSize() int32    { return m.batchSize }
func (m messageID) PartitionIdx() int32 { return m.partition }

func (m messageID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", m.ledger, m.entry, m.batchIdx, m.partition)
}

func (m messageID) Serialize() []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint64(b, uint64(m.ledger))
	binary.BigEndian.PutUint64(b[8:], uint64(m.entry))
	binary.BigEndian.PutUint32(b[16:], uint32(m.batchIdx))
	binary.BigEndian.PutUint32(b[20:], uint32(m.batchSize))
	binary.BigEndian.PutUint32(b[24:], uint32(m.partition))
	return b
}

// DeserializeMessageID decodes MessageID.Serialize's output.
func DeserializeMessageID(b []byte) (MessageID, error) {
	if len(b) != 28 {
		return nil, fmt.Errorf("%w: serialized message id of %d bytes", ErrInvalidOptions, len(b))
	}
	return messageID{
		ledger:    int64(binary.BigEndian.Uint64(b)),
		entry:     int64(binary.BigEndian.Uint64(b[8:])),
		batchIdx:  int32(binary.BigEndian.Uint32(b[16:])),
		batchSize: int32(binary.BigEndian.Uint32(b[20:])),
		partition: int32(binary.BigEndian.Uint32(b[24:])),
	}, nil
}

// EarliestMessageID is the position before the first message.
func EarliestMessageID() MessageID {
	return messageID{ledger: -1, entry: -1, batchIdx: -1, partition: -1}
}

// LatestMessageID is the position after the last message.
func LatestMessageID() MessageID {
	return messageID{ledger: math.MaxInt64, entry: math.MaxInt64, batchIdx: -1, partition: -1}
}

func isEarliest(id MessageID) bool { return id.LedgerID() == -1 && id.EntryID() == -1 }
func isLatest(id MessageID) bool   { return id.LedgerID() == math.MaxInt64 }

func (m messageID) proto() *brokerpb.MessageId {
	return &brokerpb.MessageId{LedgerId: m.ledger, EntryId: m.entry, Partition: m.partition, BatchIndex: m.batchIdx, BatchSize: m.batchSize}
}

func toMessageID(id MessageID) messageID {
	if m, ok := id.(messageID); ok {
		return m
	}
	return messageID{ledger: id.LedgerID(), entry: id.EntryID(), batchIdx: id.BatchIdx(), batchSize: id.BatchSize(), partition: id.PartitionIdx()}
}

// before reports whether a comes before b in a partition.
func (m messageID) before(o messageID) bool {
	if m.ledger != o.ledger {
		return m.ledger < o.ledger
	}
	if m.entry != o.entry {
		return m.entry < o.entry
	}
	return m.batchIdx < o.batchIdx
}

// Message is a received message.
type Message interface {
	Topic() string
	ID() MessageID
	Payload() []byte
	Key() string
	OrderingKey() string
	Properties() map[string]string
	PublishTime() time.Time
	EventTime() time.Time
	ProducerName() string
	RedeliveryCount() uint32
}

// entryPos names a stored entry of a partition.
type entryPos struct{ ledger, entry int64 }

// msgKey names a message of a partition: its entry and batch index.
type msgKey struct {
	ledger, entry int64
	batchIdx      int32
}

func (k msgKey) before(o msgKey) bool {
	if k.ledger != o.ledger {
		return k.ledger < o.ledger
	}
	if k.entry != o.entry {
		return k.entry < o.entry
	}
	return k.batchIdx < o.batchIdx
}

func (m messageID) key() msgKey { return msgKey{m.ledger, m.entry, m.batchIdx} }

type message struct {
	topic           string
	id              messageID
	payload         []byte
	key             string
	orderingKey     string
	props           map[string]string
	publishTime     time.Time
	eventTime       time.Time
	producerName    string
	redeliveryCount uint32
	consumer        *partitionConsumer
	gen             int    // the partition consumer's generation when handed over
	recvSeq         uint64 // the partition consumer's number of the entry it came in
}

func (m *message) Topic() string                 { return m.topic }
func (m *message) ID() MessageID                 { return m.id }
func (m *message) Payload() []byte               { return m.payload }
func (m *message) Key() string                   { return m.key }
func (m *message) OrderingKey() string           { return m.orderingKey }
func (m *message) Properties() map[string]string { return m.props }
func (m *message) PublishTime() time.Time        { return m.publishTime }
func (m *message) EventTime() time.Time          { return m.eventTime }
func (m *message) ProducerName() string          { return m.producerName }
func (m *message) RedeliveryCount() uint32       { return m.redeliveryCount }

// ProducerMessage is a message to send.
type ProducerMessage struct {
	Payload []byte
	// Key routes the message to a partition (by hash) and is kept with it.
	Key string
	// OrderingKey, if set, is used instead of Key for ordering.
	OrderingKey string
	Properties  map[string]string
	// EventTime is the application's time of the event (zero: none).
	EventTime time.Time
	// SequenceID overrides the producer's next sequence id (it must keep
	// increasing).
	SequenceID *int64
	// DeliverAfter or DeliverAt delays the message: Shared and Key_Shared
	// subscriptions deliver it no earlier than that (Exclusive and
	// Failover ones at once, as Pulsar does). A delayed message is sent
	// in a batch of its own.
	DeliverAfter time.Duration
	DeliverAt    time.Time
}

// deliverAt is the message's deliver_at_time: the unix millisecond the
// time asked for falls in, truncated as Pulsar's clients send it (the
// broker delivers once that millisecond is over: never before the time
// asked for, at most 1 ms after it), 0 for at once.
func (m *ProducerMessage) deliverAt(now time.Time) int64 {
	var t time.Time
	switch {
	case !m.DeliverAt.IsZero():
		t = m.DeliverAt
	case m.DeliverAfter > 0:
		t = now.Add(m.DeliverAfter)
	default:
		return 0
	}
	return t.UnixMilli()
}
