package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// SubscriptionType says how a subscription's messages are spread over its
// consumers.
type SubscriptionType int

const (
	// Exclusive: one consumer; another one is refused.
	Exclusive SubscriptionType = iota
	// Shared: messages spread over the consumers; each message goes to one
	// consumer at a time and is delivered again if it is not acknowledged.
	Shared
	// Failover: one active consumer per partition, the others take over
	// when it leaves.
	Failover
	// KeyShared: like Shared, but the messages of one key go to one
	// consumer at a time, in order.
	KeyShared
)

func (t SubscriptionType) String() string {
	switch t {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Failover:
		return "failover"
	case KeyShared:
		return "key_shared"
	}
	return fmt.Sprintf("SubscriptionType(%d)", int(t))
}

// SubscriptionInitialPosition is where a new subscription starts.
type SubscriptionInitialPosition int

const (
	// SubscriptionPositionLatest: only messages published after the
	// subscription is created.
	SubscriptionPositionLatest SubscriptionInitialPosition = iota
	// SubscriptionPositionEarliest: every message still stored.
	SubscriptionPositionEarliest
)

// ConsumerMessage is a message with the consumer it came from (Chan).
type ConsumerMessage struct {
	Consumer
	Message
}

// ConsumerOptions configure a consumer. Zero values take the defaults
// noted.
type ConsumerOptions struct {
	// Topic, or Topics, to consume (all partitions of partitioned ones).
	Topic  string
	Topics []string
	// SubscriptionName is required.
	SubscriptionName string
	// Type of the subscription. Default Exclusive.
	Type SubscriptionType
	// SubscriptionInitialPosition of a new subscription. Default Latest.
	SubscriptionInitialPosition SubscriptionInitialPosition
	// Name of the consumer (failover orders consumers by name). Default:
	// random.
	Name string
	// ReceiverQueueSize is how many messages are fetched ahead, per
	// partition. Default 1000.
	ReceiverQueueSize int
	// NackRedeliveryDelay is how long a negatively acknowledged message
	// waits before it is delivered again. Default 1 minute.
	NackRedeliveryDelay time.Duration
	// NackBackoffPolicy, if set, gives the delay before a nacked message
	// is delivered again from its redelivery count, instead of
	// NackRedeliveryDelay (Shared and Key_Shared).
	NackBackoffPolicy func(redeliveryCount uint32) time.Duration
	// AckTimeout: a message not acknowledged within it after it was
	// received is delivered again (for Exclusive and Failover: every
	// unacknowledged message is). 0: never; otherwise at least 1s.
	AckTimeout time.Duration
	// KeySharedPolicy (Key_Shared only): consistent hashing over the
	// consumers (default), or the sticky hash ranges given.
	KeySharedPolicy *KeySharedPolicy
	// DLQ, if set, sends a message to a dead-letter topic instead of
	// delivering it again once it was delivered MaxDeliveries times (or,
	// with RetryEnable, reconsumed MaxDeliveries times).
	DLQ *DLQPolicy
	// RetryEnable subscribes to the retry letter topic too, so that
	// ReconsumeLater can send a message back to be received after a delay.
	RetryEnable bool
	retryTopic  string // filled in by fill
	// MessageChannel, if set, receives the messages instead of Chan().
	MessageChannel chan ConsumerMessage
}

// KeySharedPolicyMode is how a Key_Shared consumer gets its key hashes.
type KeySharedPolicyMode int

const (
	// KeySharedPolicyModeAutoSplit: consistent hashing over the consumers.
	KeySharedPolicyModeAutoSplit KeySharedPolicyMode = iota
	// KeySharedPolicyModeSticky: the hash ranges the consumer gives; they
	// may not overlap another consumer's.
	KeySharedPolicyModeSticky
)

// KeySharedPolicy of a Key_Shared consumer. Key hashes are in 0..65535
// (murmur3 of the ordering key, else the key, as Pulsar computes them).
type KeySharedPolicy struct {
	Mode KeySharedPolicyMode
	// HashRanges (sticky): start and end (inclusive) pairs.
	HashRanges []int
}

// NewKeySharedPolicySticky returns a sticky policy for the ranges given as
// start, end pairs.
func NewKeySharedPolicySticky(hashRanges []int) (*KeySharedPolicy, error) {
	p := &KeySharedPolicy{Mode: KeySharedPolicyModeSticky, HashRanges: hashRanges}
	return p, p.validate()
}

func (p *KeySharedPolicy) validate() error {
	switch p.Mode {
	case KeySharedPolicyModeAutoSplit:
		if len(p.HashRanges) > 0 {
			return fmt.Errorf("%w: hash ranges are for sticky key_shared consumers", ErrInvalidOptions)
		}
		return nil
	case KeySharedPolicyModeSticky:
	default:
		return fmt.Errorf("%w: unknown key_shared mode %d", ErrInvalidOptions, p.Mode)
	}
	if len(p.HashRanges) == 0 || len(p.HashRanges)%2 != 0 {
		return fmt.Errorf("%w: sticky hash ranges are start, end pairs; got %d numbers", ErrInvalidOptions, len(p.HashRanges))
	}
	for i := 0; i < len(p.HashRanges); i += 2 {
		start, end := p.HashRanges[i], p.HashRanges[i+1]
		if start < 0 || end < start || end > 65535 {
			return fmt.Errorf("%w: hash range [%d, %d] is not within 0..65535", ErrInvalidOptions, start, end)
		}
	}
	return nil
}

func (p *KeySharedPolicy) proto() *brokerpb.KeySharedMeta {
	if p == nil {
		return nil
	}
	m := &brokerpb.KeySharedMeta{}
	if p.Mode == KeySharedPolicyModeSticky {
		m.Mode = brokerpb.KeySharedMode_STICKY
		for i := 0; i+1 < len(p.HashRanges); i += 2 {
			m.HashRanges = append(m.HashRanges, &brokerpb.HashRange{Start: int32(p.HashRanges[i]), End: int32(p.HashRanges[i+1])})
		}
	}
	return m
}

// DLQPolicy sends messages that keep failing to a dead-letter topic.
type DLQPolicy struct {
	// MaxDeliveries: a message delivered this many times (redelivery count
	// MaxDeliveries-1) and still not acknowledged goes to the dead-letter
	// topic the next time, with its properties plus REAL_TOPIC and
	// ORIGIN_MESSAGE_ID, and is acknowledged. At least 1. An entry this
	// client cannot read (encrypted, chunked; see the package doc) is
	// never delivered, so never moved.
	MaxDeliveries uint32
	// DeadLetterTopic. Default "<topic>-<subscription>-DLQ".
	DeadLetterTopic string
	// RetryLetterTopic receives what ReconsumeLater sends back (with
	// RetryEnable). Default "<topic>-<subscription>-RETRY".
	RetryLetterTopic string
}

func (o *ConsumerOptions) fill() error {
	if o.Topic != "" && len(o.Topics) > 0 {
		return fmt.Errorf("%w: set Topic or Topics, not both", ErrInvalidOptions)
	}
	if o.Topic != "" {
		o.Topics = []string{o.Topic}
	}
	if len(o.Topics) == 0 {
		return fmt.Errorf("%w: a topic is required", ErrInvalidOptions)
	}
	if o.SubscriptionName == "" {
		return fmt.Errorf("%w: SubscriptionName is required", ErrInvalidOptions)
	}
	if o.Type < Exclusive || o.Type > KeyShared {
		return fmt.Errorf("%w: unknown subscription type %d", ErrInvalidOptions, o.Type)
	}
	if o.SubscriptionInitialPosition != SubscriptionPositionLatest && o.SubscriptionInitialPosition != SubscriptionPositionEarliest {
		return fmt.Errorf("%w: unknown initial position %d", ErrInvalidOptions, o.SubscriptionInitialPosition)
	}
	if o.ReceiverQueueSize == 0 {
		o.ReceiverQueueSize = 1000
	}
	if o.ReceiverQueueSize < 1 || o.ReceiverQueueSize > 100000 {
		return fmt.Errorf("%w: ReceiverQueueSize %d must be in 1..100000", ErrInvalidOptions, o.ReceiverQueueSize)
	}
	if o.NackRedeliveryDelay == 0 {
		o.NackRedeliveryDelay = time.Minute
	}
	if o.NackRedeliveryDelay < 0 {
		return fmt.Errorf("%w: negative NackRedeliveryDelay", ErrInvalidOptions)
	}
	if o.AckTimeout != 0 && o.AckTimeout < time.Second {
		return fmt.Errorf("%w: AckTimeout %v: 0 (none) or at least 1s", ErrInvalidOptions, o.AckTimeout)
	}
	if o.KeySharedPolicy != nil {
		if o.Type != KeyShared {
			return fmt.Errorf("%w: KeySharedPolicy is for Key_Shared subscriptions", ErrInvalidOptions)
		}
		if err := o.KeySharedPolicy.validate(); err != nil {
			return err
		}
	}
	if o.DLQ != nil {
		if o.Type != Shared && o.Type != KeyShared {
			return fmt.Errorf("%w: a DLQ policy needs a Shared or Key_Shared subscription (they count redeliveries)", ErrInvalidOptions)
		}
		if o.DLQ.MaxDeliveries < 1 {
			return fmt.Errorf("%w: DLQ.MaxDeliveries must be at least 1", ErrInvalidOptions)
		}
	}
	if o.RetryEnable {
		if len(o.Topics) != 1 {
			return fmt.Errorf("%w: RetryEnable needs a single topic", ErrInvalidOptions)
		}
		if o.Type != Shared && o.Type != KeyShared {
			return fmt.Errorf("%w: RetryEnable needs a Shared or Key_Shared subscription (only they delay delivery)", ErrInvalidOptions)
		}
		retry := o.Topics[0] + "-" + o.SubscriptionName + "-RETRY"
		if o.DLQ != nil && o.DLQ.RetryLetterTopic != "" {
			retry = o.DLQ.RetryLetterTopic
		}
		o.retryTopic = retry
		o.Topics = append(slices.Clip(o.Topics), retry)
	}
	if o.Name == "" {
		var b [5]byte
		rand.Read(b[:])
		o.Name = hex.EncodeToString(b[:])
	}
	return nil
}

// Consumer receives the messages of a subscription.
type Consumer interface {
	Subscription() string
	// Receive returns the next message, waiting up to ctx.
	Receive(ctx context.Context) (Message, error)
	// Chan delivers messages as they come. After Seek or a redelivery it
	// may still hold messages from before (Receive skips those).
	Chan() <-chan ConsumerMessage
	Ack(Message) error
	AckID(MessageID) error
	// AckCumulative acknowledges every message up to this one (of its
	// partition).
	AckCumulative(Message) error
	AckIDCumulative(MessageID) error
	// Nack asks for the message to be delivered again, after
	// NackRedeliveryDelay (for exclusive and failover subscriptions, every
	// unacknowledged message is delivered again).
	Nack(Message)
	NackID(MessageID)
	// Seek moves the subscription to a message id (of a non-partitioned
	// topic), SeekByTime to the first message published at or after t.
	Seek(MessageID) error
	SeekByTime(time.Time) error
	// ReconsumeLater acknowledges msg and publishes a copy to the retry
	// letter topic, delivered after delay (RetryEnable). A message
	// reconsumed more than DLQ.MaxDeliveries times goes to the dead-letter
	// topic instead. On failure msg is nacked and the error returned.
	ReconsumeLater(msg Message, delay time.Duration) error
	// Unsubscribe deletes the subscription.
	Unsubscribe() error
	// HasReachedEndOfTopic reports whether the topic (every partition) was
	// terminated and every message of it acknowledged by the
	// subscription: nothing more will come.
	HasReachedEndOfTopic() bool
	Close()
}

// consumer gathers the partition consumers of all its topics.
type consumer struct {
	c     *client
	opts  ConsumerOptions
	ch    chan ConsumerMessage
	parts []*partitionConsumer
	once  sync.Once

	dlqMu sync.Mutex // guards dlq and retry
	dlq   Producer   // created on the first dead letter
	retry Producer   // created on the first ReconsumeLater

	closed chan struct{} // closed by Close: Receive returns ErrClosed
	// metered: counted as opened in the metrics (by Subscribe), not yet
	// as closed (by Close).
	metered atomic.Bool
}

func (c *client) Subscribe(opts ConsumerOptions) (Consumer, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	cons := &consumer{c: c, opts: opts, closed: make(chan struct{})}
	cons.ch = opts.MessageChannel
	if cons.ch == nil {
		cons.ch = make(chan ConsumerMessage, opts.ReceiverQueueSize)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.OperationTimeout)
	defer cancel()
	for _, topic := range opts.Topics {
		names, n, err := c.partitions(ctx, topic)
		if err != nil {
			cons.Close()
			return nil, err
		}
		for i, name := range names {
			part := int32(-1)
			if n > 0 {
				part = int32(i)
			}
			sub := &brokerpb.Subscribe{
				Topic: name, Subscription: opts.SubscriptionName, Type: brokerpb.SubscriptionType(opts.Type),
				ConsumerName: opts.Name, Durable: true, ReceiverQueueSize: uint32(opts.ReceiverQueueSize),
			}
			if opts.Type == KeyShared {
				sub.KeyShared = opts.KeySharedPolicy.proto()
			}
			if opts.SubscriptionInitialPosition == SubscriptionPositionEarliest {
				sub.InitialPosition = brokerpb.InitialPosition_EARLIEST
			}
			pc, err := newPartitionConsumer(ctx, c, cons, topic, name, part, sub, opts.ReceiverQueueSize)
			if err != nil {
				cons.Close()
				return nil, err
			}
			cons.parts = append(cons.parts, pc)
		}
	}
	cons.meter(true)
	if err := c.register(cons); err != nil {
		cons.Close()
		return nil, err
	}
	return cons, nil
}

func (cons *consumer) Subscription() string         { return cons.opts.SubscriptionName }
func (cons *consumer) Chan() <-chan ConsumerMessage { return cons.ch }

func (cons *consumer) Receive(ctx context.Context) (Message, error) {
	for {
		select {
		case <-cons.closed:
			return nil, ErrClosed
		default:
		}
		select {
		case m, ok := <-cons.ch:
			if !ok {
				return nil, ErrClosed
			}
			if mm, ok := m.Message.(*message); ok && mm.consumer != nil && mm.consumer.stale(mm) {
				continue // received before a seek or redelivery: it comes again
			}
			return m.Message, nil
		case <-cons.closed:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// deliver hands a message to the application (called by partition
// consumers; blocks while the channel is full).
func (cons *consumer) deliver(m *message, stop <-chan struct{}) bool {
	select {
	case cons.ch <- ConsumerMessage{Consumer: cons, Message: m}:
		return true
	case <-stop:
		return false
	}
}

func (cons *consumer) partitionOf(id MessageID) (*partitionConsumer, error) {
	m := toMessageID(id)
	for _, pc := range cons.parts {
		if pc.partition == m.partition {
			return pc, nil
		}
	}
	if len(cons.parts) == 1 {
		return cons.parts[0], nil
	}
	return nil, fmt.Errorf("%w: message id %s is of no partition of this consumer", ErrInvalidOptions, id)
}

func (cons *consumer) ackMessage(msg Message, cumulative bool) error {
	if m, ok := msg.(*message); ok && m.consumer != nil {
		err := m.consumer.ack(m.id, cumulative)
		if err == nil {
			m.consumer.tm.acked()
		}
		return err
	}
	return cons.ackID(msg.ID(), cumulative)
}

func (cons *consumer) ackID(id MessageID, cumulative bool) error {
	pc, err := cons.partitionOf(id)
	if err != nil {
		return err
	}
	if err := pc.ack(toMessageID(id), cumulative); err != nil {
		return err
	}
	pc.tm.acked()
	return nil
}

// meter counts the consumer as opened or closed in the metrics: once per
// topic, with its partitions.
func (cons *consumer) meter(open bool) {
	if open == cons.metered.Load() || cons.c.metrics == nil {
		return
	}
	cons.metered.Store(open)
	n := map[string]int{}
	var first []*partitionConsumer
	for _, pc := range cons.parts {
		if n[pc.baseTopic] == 0 {
			first = append(first, pc)
		}
		n[pc.baseTopic]++
	}
	for _, pc := range first {
		if open {
			pc.tm.opened(false, n[pc.baseTopic], false)
		} else {
			pc.tm.closed(false, n[pc.baseTopic], false)
		}
	}
}

func (cons *consumer) Ack(m Message) error { return cons.ackMessage(m, false) }
func (cons *consumer) AckCumulative(m Message) error {
	if err := cons.cumulativeAllowed(); err != nil {
		return err
	}
	return cons.ackMessage(m, true)
}
func (cons *consumer) AckID(id MessageID) error { return cons.ackID(id, false) }
func (cons *consumer) AckIDCumulative(id MessageID) error {
	if err := cons.cumulativeAllowed(); err != nil {
		return err
	}
	return cons.ackID(id, true)
}

// cumulativeAllowed: a cumulative acknowledgement would acknowledge what
// other consumers of a Shared or Key_Shared subscription hold.
func (cons *consumer) cumulativeAllowed() error {
	if cons.opts.Type == Shared || cons.opts.Type == KeyShared {
		return fmt.Errorf("%w: cumulative acknowledgement on a %s subscription: acknowledge each message", ErrNotAllowed, cons.opts.Type)
	}
	return nil
}

func (cons *consumer) Nack(m Message) {
	if mm, ok := m.(*message); ok && mm.consumer != nil {
		mm.consumer.nack(mm.id, mm.redeliveryCount)
		return
	}
	cons.NackID(m.ID())
}

func (cons *consumer) NackID(id MessageID) {
	pc, err := cons.partitionOf(id)
	if err != nil {
		return
	}
	pc.nack(toMessageID(id), 0)
}

func (cons *consumer) Seek(id MessageID) error {
	if len(cons.parts) != 1 {
		return fmt.Errorf("%w: Seek by message id needs a single non-partitioned topic (use SeekByTime)", ErrNotAllowed)
	}
	return cons.seek(&brokerpb.Seek{Target: &brokerpb.Seek_MessageId{MessageId: toMessageID(id).proto()}})
}

func (cons *consumer) SeekByTime(t time.Time) error {
	return cons.seek(&brokerpb.Seek{Target: &brokerpb.Seek_PublishTimeUnixMs{PublishTimeUnixMs: t.UnixMilli()}})
}

// seek moves every partition, then drops what was received before.
func (cons *consumer) seek(s *brokerpb.Seek) error {
	ctx, cancel := context.WithTimeout(context.Background(), cons.c.opts.OperationTimeout)
	defer cancel()
	var errs []error
	for _, pc := range cons.parts {
		errs = append(errs, pc.seek(ctx, s))
	}
	// Messages from before the seek that still wait in the channel are
	// skipped by Receive (Chan users may see them).
	return errors.Join(errs...)
}

// HasReachedEndOfTopic implements Consumer.
func (cons *consumer) HasReachedEndOfTopic() bool {
	for _, pc := range cons.parts {
		if !pc.reachedEnd.Load() {
			return false
		}
	}
	return len(cons.parts) > 0
}

func (cons *consumer) Unsubscribe() error {
	ctx, cancel := context.WithTimeout(context.Background(), cons.c.opts.OperationTimeout)
	defer cancel()
	var errs []error
	for _, pc := range cons.parts {
		errs = append(errs, pc.unsubscribe(ctx))
	}
	return errors.Join(errs...)
}

func (cons *consumer) Close() {
	cons.once.Do(func() {
		close(cons.closed)
		var wg sync.WaitGroup
		for _, pc := range cons.parts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pc.close()
			}()
		}
		wg.Wait()
		cons.meter(false)
		cons.dlqMu.Lock()
		for _, p := range []Producer{cons.dlq, cons.retry} {
			if p != nil {
				p.Close()
			}
		}
		cons.dlqMu.Unlock()
		cons.c.unregister(cons)
	})
}

// toDeadLetter publishes m to the dead-letter topic with its properties
// plus where it came from, then acknowledges it. On failure m is nacked,
// to be tried again.
func (cons *consumer) toDeadLetter(pc *partitionConsumer, m *message) error {
	topic := cons.opts.DLQ.DeadLetterTopic
	if topic == "" {
		topic = cons.opts.Topics[0] + "-" + cons.opts.SubscriptionName + "-DLQ"
		if cons.opts.retryTopic == "" {
			topic = pc.baseTopic + "-" + cons.opts.SubscriptionName + "-DLQ"
		}
	}
	props := make(map[string]string, len(m.props)+2)
	for k, v := range m.props {
		props[k] = v
	}
	if _, ok := props[PropertyRealTopic]; !ok { // a reconsumed message keeps its origin
		props[PropertyRealTopic] = m.topic
		props[PropertyOriginMessageID] = m.id.String()
	}
	err := cons.sendTo(&cons.dlq, topic, &ProducerMessage{Payload: m.payload, Key: m.key, OrderingKey: m.orderingKey,
		Properties: props, EventTime: m.eventTime})
	if err != nil {
		pc.nack(m.id, m.redeliveryCount)
		return err
	}
	pc.tm.deadLettered()
	return pc.ack(m.id, false)
}

// Properties a dead-lettered or reconsumed message gets (Pulsar's names).
const (
	PropertyRealTopic       = "REAL_TOPIC"
	PropertyOriginMessageID = "ORIGIN_MESSAGE_ID"
	PropertyReconsumeTimes  = "RECONSUMETIMES"
	PropertyDelayTime       = "DELAY_TIME"
)

func (cons *consumer) ReconsumeLater(msg Message, delay time.Duration) error {
	if cons.opts.retryTopic == "" {
		return fmt.Errorf("%w: ReconsumeLater needs RetryEnable", ErrNotAllowed)
	}
	m, ok := msg.(*message)
	if !ok || m.consumer == nil || !slices.Contains(cons.parts, m.consumer) {
		return fmt.Errorf("%w: ReconsumeLater takes a message this consumer received", ErrInvalidOptions)
	}
	times := 1
	if n, err := strconv.Atoi(m.props[PropertyReconsumeTimes]); err == nil {
		times = n + 1
	}
	if dlq := cons.opts.DLQ; dlq != nil && times > int(dlq.MaxDeliveries) {
		return cons.toDeadLetter(m.consumer, m)
	}
	props := make(map[string]string, len(m.props)+4)
	for k, v := range m.props {
		props[k] = v
	}
	if _, ok := props[PropertyRealTopic]; !ok {
		props[PropertyRealTopic] = m.topic
		props[PropertyOriginMessageID] = m.id.String()
	}
	props[PropertyReconsumeTimes] = strconv.Itoa(times)
	props[PropertyDelayTime] = strconv.FormatInt(delay.Milliseconds(), 10)
	err := cons.sendTo(&cons.retry, cons.opts.retryTopic, &ProducerMessage{Payload: m.payload, Key: m.key,
		OrderingKey: m.orderingKey, Properties: props, EventTime: m.eventTime, DeliverAfter: delay})
	if err != nil {
		m.consumer.nack(m.id, m.redeliveryCount)
		return err
	}
	return m.consumer.ack(m.id, false)
}

// sendTo publishes with the producer in *p, creating it for topic first.
func (cons *consumer) sendTo(p *Producer, topic string, msg *ProducerMessage) error {
	cons.dlqMu.Lock()
	defer cons.dlqMu.Unlock()
	if *p == nil {
		np, err := cons.c.CreateProducer(ProducerOptions{Topic: topic})
		if err != nil {
			return err
		}
		*p = np
	}
	ctx, cancel := context.WithTimeout(context.Background(), cons.c.opts.OperationTimeout)
	defer cancel()
	_, err := (*p).Send(ctx, msg)
	return err
}
