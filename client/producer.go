package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// CompressionType of message payloads.
type CompressionType int

const (
	NoCompression CompressionType = iota
	LZ4
	ZLib
	ZSTD
	Snappy
)

func (c CompressionType) proto() (pulsarpb.CompressionType, bool) {
	switch c {
	case NoCompression:
		return pulsarpb.CompressionType_NONE, true
	case LZ4:
		return pulsarpb.CompressionType_LZ4, true
	case ZLib:
		return pulsarpb.CompressionType_ZLIB, true
	case ZSTD:
		return pulsarpb.CompressionType_ZSTD, true
	case Snappy:
		return pulsarpb.CompressionType_SNAPPY, true
	}
	return 0, false
}

// TopicMetadata describes the topic a MessageRouter routes for.
type TopicMetadata interface {
	NumPartitions() uint32
}

type topicMetadata uint32

func (n topicMetadata) NumPartitions() uint32 { return uint32(n) }

// ProducerOptions configure a producer. Zero values take the defaults
// noted.
type ProducerOptions struct {
	// Topic to publish to. Required.
	Topic string
	// Name of the producer; empty: the broker picks one. Deduplication keys
	// on it: reuse the name to resume a sequence.
	Name string
	// Properties attached to the producer.
	Properties map[string]string
	// SendTimeout fails a message not acknowledged within it. Default 30s;
	// negative disables the timeout.
	SendTimeout time.Duration
	// MaxPendingMessages bounds the messages sent and not yet
	// acknowledged; Send waits for room. Default 1000.
	MaxPendingMessages int
	// DisableBatching sends every message as its own entry.
	DisableBatching bool
	// BatchingMaxPublishDelay is how long a batch waits for more messages.
	// Default 10ms.
	BatchingMaxPublishDelay time.Duration
	// BatchingMaxMessages and BatchingMaxSize cap a batch. Defaults 1000
	// messages and 128 KiB.
	BatchingMaxMessages uint
	BatchingMaxSize     uint
	// BatcherBuilderType: DefaultBatchBuilder, or KeyBasedBatchBuilder for
	// Key_Shared subscriptions: a batch then holds messages of one key
	// only (a message with another key starts a new batch), so that the
	// broker can give each batch to the consumer of its key.
	BatcherBuilderType BatcherBuilderType
	// CompressionType of batches (or single messages). Default none.
	CompressionType CompressionType
	// MessageRouter picks the partition of a message for partitioned
	// topics. Default: by the hash of the key, round-robin (per batch) for
	// messages without a key.
	MessageRouter func(*ProducerMessage, TopicMetadata) int
}

// BatcherBuilderType says how messages are grouped into batches.
type BatcherBuilderType int

const (
	// DefaultBatchBuilder: messages in send order, whatever their keys.
	DefaultBatchBuilder BatcherBuilderType = iota
	// KeyBasedBatchBuilder: a batch holds messages of a single key.
	KeyBasedBatchBuilder
)

func (o *ProducerOptions) fill(maxMessageSize int) error {
	if o.Topic == "" {
		return fmt.Errorf("%w: producer topic is required", ErrInvalidOptions)
	}
	if o.SendTimeout == 0 {
		o.SendTimeout = 30 * time.Second
	}
	if o.MaxPendingMessages == 0 {
		o.MaxPendingMessages = 1000
	}
	if o.MaxPendingMessages < 0 {
		return fmt.Errorf("%w: MaxPendingMessages %d", ErrInvalidOptions, o.MaxPendingMessages)
	}
	if o.BatchingMaxPublishDelay == 0 {
		o.BatchingMaxPublishDelay = 10 * time.Millisecond
	}
	if o.BatchingMaxPublishDelay < 0 {
		return fmt.Errorf("%w: negative BatchingMaxPublishDelay", ErrInvalidOptions)
	}
	if o.BatchingMaxMessages == 0 {
		o.BatchingMaxMessages = 1000
	}
	if o.BatchingMaxSize == 0 {
		o.BatchingMaxSize = 128 << 10
	}
	if maxMessageSize > 0 && int(o.BatchingMaxSize) > maxMessageSize {
		return fmt.Errorf("%w: BatchingMaxSize %d exceeds the maximum message size %d", ErrInvalidOptions, o.BatchingMaxSize, maxMessageSize)
	}
	if o.BatcherBuilderType != DefaultBatchBuilder && o.BatcherBuilderType != KeyBasedBatchBuilder {
		return fmt.Errorf("%w: unknown batcher builder type %d", ErrInvalidOptions, o.BatcherBuilderType)
	}
	if _, ok := o.CompressionType.proto(); !ok {
		return fmt.Errorf("%w: unknown compression type %d", ErrInvalidOptions, o.CompressionType)
	}
	if len(o.Name) > 256 {
		return fmt.Errorf("%w: producer name of %d bytes", ErrInvalidOptions, len(o.Name))
	}
	return nil
}

// Producer publishes messages to a topic.
type Producer interface {
	Topic() string
	Name() string
	// Send publishes a message and waits for it to be stored.
	Send(ctx context.Context, msg *ProducerMessage) (MessageID, error)
	// SendAsync publishes a message; callback gets the outcome, in send
	// order per partition.
	SendAsync(ctx context.Context, msg *ProducerMessage, callback func(MessageID, *ProducerMessage, error))
	// LastSequenceID is the sequence id of the last message stored.
	LastSequenceID() int64
	// Flush sends what is batched and waits until every message sent so
	// far is acknowledged.
	Flush() error
	// Close sends what is batched and waits (up to the send timeout) for
	// what is pending to be acknowledged; what is not fails with
	// ErrClosed. Then it returns once the broker has let go of the
	// producer (or, if the broker does not answer, after a further
	// operation timeout, at most 10 s): a topic deleted or a producer
	// name reused right after Close does not find it still connected.
	Close()
}

// producer routes messages over the partitions of a topic.
type producer struct {
	c     *client
	topic string
	opts  ProducerOptions
	parts []*partitionProducer
	tm    *topicMetrics // nil without metrics
	// metered: counted as opened in the metrics, not yet as closed.
	metered atomic.Bool
	rr      atomic.Uint64
	last    atomic.Int64 // time of the last round-robin switch, unix nanos
}

func (c *client) CreateProducer(opts ProducerOptions) (Producer, error) {
	if err := opts.fill(c.opts.MaxMessageSize); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.OperationTimeout)
	defer cancel()
	names, n, err := c.partitions(ctx, opts.Topic)
	if err != nil {
		return nil, err
	}
	p := &producer{c: c, topic: opts.Topic, opts: opts, tm: c.metrics.forTopic(opts.Topic)}
	for i, name := range names {
		part := int32(-1)
		if n > 0 {
			part = int32(i)
		}
		pp, err := newPartitionProducer(ctx, c, name, part, &p.opts)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.parts = append(p.parts, pp)
	}
	p.tm.opened(true, len(p.parts), false)
	p.metered.Store(true)
	if err := c.register(p); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *producer) Topic() string { return p.topic }
func (p *producer) Name() string  { return p.parts[0].name }

func (p *producer) LastSequenceID() int64 {
	var last int64 = -1
	for _, pp := range p.parts {
		last = max(last, pp.lastSequenceID())
	}
	return last
}

// route picks a partition.
func (p *producer) route(msg *ProducerMessage) int {
	n := len(p.parts)
	if n == 1 {
		return 0
	}
	if p.opts.MessageRouter != nil {
		i := p.opts.MessageRouter(msg, topicMetadata(n))
		if i < 0 || i >= n {
			return 0
		}
		return i
	}
	if k := msg.OrderingKey; k != "" {
		return int(javaStringHash(k) % uint32(n))
	}
	if msg.Key != "" {
		return int(javaStringHash(msg.Key) % uint32(n))
	}
	if p.opts.DisableBatching {
		return int(p.rr.Add(1) % uint64(n))
	}
	// Round-robin per batch: move on once a batch would have gone out.
	now := time.Now().UnixNano()
	if last := p.last.Load(); now-last >= int64(p.opts.BatchingMaxPublishDelay) && p.last.CompareAndSwap(last, now) {
		p.rr.Add(1)
	}
	return int(p.rr.Load() % uint64(n))
}

// javaStringHash is Java's String.hashCode, Pulsar's default key hash, made
// non-negative.
func javaStringHash(s string) uint32 {
	var h int32
	for _, r := range s {
		if r >= 0x10000 { // a UTF-16 surrogate pair
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	return uint32(h) & 0x7fffffff
}

func (p *producer) Send(ctx context.Context, msg *ProducerMessage) (MessageID, error) {
	type res struct {
		id  MessageID
		err error
	}
	ch := make(chan res, 1)
	p.SendAsync(ctx, msg, func(id MessageID, _ *ProducerMessage, err error) { ch <- res{id, err} })
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *producer) SendAsync(ctx context.Context, msg *ProducerMessage, cb func(MessageID, *ProducerMessage, error)) {
	if msg == nil {
		cb(nil, msg, fmt.Errorf("%w: nil message", ErrInvalidOptions))
		return
	}
	p.parts[p.route(msg)].sendAsync(ctx, msg, p.tm.sending(msg, cb))
}

func (p *producer) Flush() error {
	var errs []error
	for _, pp := range p.parts {
		errs = append(errs, pp.flush())
	}
	return errors.Join(errs...)
}

func (p *producer) Close() {
	var wg sync.WaitGroup
	for _, pp := range p.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pp.close()
		}()
	}
	wg.Wait()
	if p.metered.Swap(false) {
		p.tm.closed(true, len(p.parts), false)
	}
	p.c.unregister(p)
}
