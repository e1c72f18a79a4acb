package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// ReaderOptions configure a reader: a consumer that keeps no subscription
// and starts where it is told.
type ReaderOptions struct {
	// Topic to read: a non-partitioned topic or one partition. Required.
	Topic string
	// StartMessageID: EarliestMessageID(), LatestMessageID() or the id of
	// a message (the reader starts after it, or at it with
	// StartMessageIDInclusive). Required.
	StartMessageID          MessageID
	StartMessageIDInclusive bool
	// ReceiverQueueSize: messages fetched ahead. Default 1000.
	ReceiverQueueSize int
	// Name of the reader. Default: random.
	Name string
}

// Reader reads a topic from a given position.
type Reader interface {
	Topic() string
	// Next returns the next message, waiting up to ctx.
	Next(ctx context.Context) (Message, error)
	// HasNext reports whether a message is available now or stored after
	// the last one returned.
	HasNext() bool
	Close()
}

type reader struct {
	c    *client
	opts ReaderOptions
	ch   chan *message
	pc   *partitionConsumer
	last *messageID
	mu   sync.Mutex
	once sync.Once
	// closed by Close: Next returns ErrClosed.
	closed chan struct{}
}

func (c *client) CreateReader(opts ReaderOptions) (Reader, error) {
	if opts.Topic == "" {
		return nil, fmt.Errorf("%w: reader topic is required", ErrInvalidOptions)
	}
	if opts.StartMessageID == nil {
		return nil, fmt.Errorf("%w: StartMessageID is required (EarliestMessageID(), LatestMessageID() or a message id)", ErrInvalidOptions)
	}
	if opts.ReceiverQueueSize == 0 {
		opts.ReceiverQueueSize = 1000
	}
	if opts.ReceiverQueueSize < 1 || opts.ReceiverQueueSize > 100000 {
		return nil, fmt.Errorf("%w: ReceiverQueueSize %d must be in 1..100000", ErrInvalidOptions, opts.ReceiverQueueSize)
	}
	if opts.Name == "" {
		var b [5]byte
		rand.Read(b[:])
		opts.Name = "reader-" + hex.EncodeToString(b[:])
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.OperationTimeout)
	defer cancel()
	names, n, err := c.partitions(ctx, opts.Topic)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		return nil, fmt.Errorf("%w: %s is partitioned: read one of its partitions (%s)", ErrNotAllowed, opts.Topic, names[0])
	}
	sub := &brokerpb.Subscribe{Topic: names[0], Subscription: opts.Name, Type: brokerpb.SubscriptionType_EXCLUSIVE,
		ConsumerName: opts.Name, Durable: false, ReceiverQueueSize: uint32(opts.ReceiverQueueSize)}
	switch start := opts.StartMessageID; {
	case isEarliest(start):
		sub.InitialPosition = brokerpb.InitialPosition_EARLIEST
	case isLatest(start):
		sub.InitialPosition = brokerpb.InitialPosition_LATEST
	default:
		sub.StartMessageId = toMessageID(start).proto()
		sub.StartInclusive = opts.StartMessageIDInclusive
	}
	r := &reader{c: c, opts: opts, ch: make(chan *message, opts.ReceiverQueueSize), closed: make(chan struct{})}
	if r.pc, err = newPartitionConsumer(ctx, c, r, opts.Topic, names[0], -1, sub, opts.ReceiverQueueSize); err != nil {
		return nil, err
	}
	r.pc.tm.opened(false, 1, true)
	if err := c.register(r); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *reader) deliver(m *message, stop <-chan struct{}) bool {
	select {
	case r.ch <- m:
		return true
	case <-stop:
		return false
	}
}

func (r *reader) Topic() string { return r.opts.Topic }

func (r *reader) Next(ctx context.Context) (Message, error) {
	select {
	case <-r.closed:
		return nil, ErrClosed
	default:
	}
	select {
	case m := <-r.ch:
		r.mu.Lock()
		id := m.id
		r.last = &id
		r.mu.Unlock()
		return m, nil
	case <-r.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *reader) HasNext() bool {
	if len(r.ch) > 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.c.opts.OperationTimeout)
	defer cancel()
	bc, err := r.c.lookup(ctx, r.pc.topic)
	if err != nil {
		return false
	}
	resp, err := bc.GetLastMessageId(ctx, &brokerpb.GetLastMessageIdRequest{Topic: r.pc.topic})
	if err != nil || resp.MessageId.EntryId < 0 {
		return false
	}
	last := messageID{ledger: resp.MessageId.LedgerId, entry: resp.MessageId.EntryId, batchIdx: -1}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		start := toMessageID(r.opts.StartMessageID)
		if isEarliest(r.opts.StartMessageID) {
			return true
		}
		if isLatest(r.opts.StartMessageID) {
			return false
		}
		return start.ledger < last.ledger || start.ledger == last.ledger && (start.entry < last.entry || r.opts.StartMessageIDInclusive && start.entry == last.entry)
	}
	cur := *r.last
	if cur.batchIdx >= 0 && cur.batchIdx < cur.batchSize-1 {
		return true
	}
	return cur.ledger < last.ledger || cur.ledger == last.ledger && cur.entry < last.entry
}

func (r *reader) Close() {
	r.once.Do(func() {
		close(r.closed)
		r.pc.close()
		r.pc.tm.closed(false, 1, true)
		r.c.unregister(r)
	})
}
