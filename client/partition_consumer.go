package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// deliverer takes decoded messages from a partition consumer.
type deliverer interface {
	deliver(m *message, stop <-chan struct{}) bool
}

// partitionConsumer consumes one partition over one Consume stream.
//
// It grants the broker permits for ReceiverQueueSize messages and grants
// them again as the application takes messages. On a broken stream it
// reconnects with backoff and subscribes again (a reader resumes after the
// last message it received); what was received and not yet taken is
// dropped, the broker delivers it again.
//
// Goroutines: run (connects, receives and decodes) and pump (hands
// messages to the application), both stopped by close.
type partitionConsumer struct {
	c         *client
	parent    deliverer
	topic     string
	partition int32
	sub       *brokerpb.Subscribe
	queueSize int
	nackDelay time.Duration
	baseTopic string        // the topic as subscribed (of a partition: its partitioned topic)
	tm        *topicMetrics // baseTopic's; nil without metrics
	// multi: Shared or Key_Shared, where nacks and ack timeouts redeliver
	// the messages concerned only.
	multi       bool
	nackBackoff func(uint32) time.Duration
	ackTimeout  time.Duration
	dlq         *DLQPolicy

	signal chan struct{} // wakes pump
	stop   chan struct{}
	done   chan struct{}
	// reachedEnd: the broker said the topic is terminated and every
	// message of the subscription is acknowledged.
	reachedEnd atomic.Bool

	sendMu sync.Mutex // serializes stream.Send

	mu struct {
		sync.Mutex
		stream   brokerpb.Broker_ConsumeClient
		gen      int                   // bumps when what was received before must be dropped
		queue    []*message            // received, not yet handed over
		consumed int                   // taken by the application since the last Flow
		last     *messageID            // last message handed over (readers resume after it)
		waiters  []chan error          // seek and unsubscribe waiting for their answer
		acks     []*brokerpb.MessageId // grouped individual acknowledgements
		maxBatch int                   // largest batch received (see window)
		nackAt   time.Time             // a redelivery is due then (zero: none)
		// multi: nacked entries and when they are due for redelivery.
		nacks map[entryPos]time.Time
		// tracked: messages handed over and not acknowledged, with their
		// ack deadline (AckTimeout).
		tracked map[msgKey]time.Time
		// recvSeq numbers the entries received; redelivered[p] is the
		// number of the last one received before entry p was asked for
		// again: copies of p up to it that still wait in the channel are
		// skipped by Receive (multi).
		recvSeq     uint64
		redelivered map[entryPos]uint64
		closed      bool
	}
}

func newPartitionConsumer(ctx context.Context, c *client, parent deliverer, baseTopic, topic string, partition int32, sub *brokerpb.Subscribe, queueSize int) (*partitionConsumer, error) {
	pc := &partitionConsumer{c: c, parent: parent, topic: topic, partition: partition, sub: sub, queueSize: queueSize,
		signal: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	pc.baseTopic = baseTopic
	pc.tm = c.metrics.forTopic(baseTopic)
	if cons, ok := parent.(*consumer); ok {
		pc.nackDelay = cons.opts.NackRedeliveryDelay
		pc.nackBackoff = cons.opts.NackBackoffPolicy
		pc.ackTimeout = cons.opts.AckTimeout
		pc.dlq = cons.opts.DLQ
		pc.multi = cons.opts.Type == Shared || cons.opts.Type == KeyShared
	}
	pc.mu.nacks = map[entryPos]time.Time{}
	pc.mu.tracked = map[msgKey]time.Time{}
	pc.mu.redelivered = map[entryPos]uint64{}
	var stream brokerpb.Broker_ConsumeClient
	var cancel context.CancelFunc
	err := c.retryConnect(ctx, func(ctx context.Context) error {
		var err error
		stream, cancel, err = pc.connect(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	pc.mu.stream = stream
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pc.run(stream, cancel) }()
	go func() { defer wg.Done(); pc.pump() }()
	go func() { wg.Wait(); close(pc.done) }()
	return pc, nil
}

// connect subscribes on a new stream and grants the first permits. The
// stream lives until cancel is called.
func (pc *partitionConsumer) connect(ctx context.Context) (brokerpb.Broker_ConsumeClient, context.CancelFunc, error) {
	bc, err := pc.c.lookup(ctx, pc.topic)
	if err != nil {
		return nil, nil, err
	}
	sctx, scancel := context.WithCancel(context.Background())
	stream, err := bc.Consume(sctx)
	if err != nil {
		scancel()
		return nil, nil, fromStatus(err)
	}
	sub := pc.sub
	pc.mu.Lock()
	if last := pc.mu.last; last != nil && !sub.Durable {
		// A reader resumes after the last message it handed over.
		cp := proto.Clone(sub).(*brokerpb.Subscribe)
		cp.StartMessageId, cp.StartInclusive = last.proto(), false
		if last.batchIdx >= 0 && last.batchIdx < last.batchSize-1 {
			cp.StartInclusive = true // the rest of that batch is still to come
		}
		sub = cp
	}
	pc.mu.Unlock()
	fail := func(err error) (brokerpb.Broker_ConsumeClient, context.CancelFunc, error) {
		scancel()
		return nil, nil, err
	}
	if err := stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Subscribe{Subscribe: sub}}); err != nil {
		return fail(fromStatus(err))
	}
	type res struct {
		r   *brokerpb.ConsumeResponse
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := stream.Recv()
		ch <- res{r, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return fail(fromStatus(r.err))
		}
		if r.r.GetSubscribed() == nil {
			return fail(fmt.Errorf("%w: broker answered %T to Subscribe", ErrUnavailable, r.r.Response))
		}
	case <-ctx.Done():
		return fail(fmt.Errorf("%w: subscribing to %s: %v", ErrUnavailable, pc.topic, ctx.Err()))
	}
	pc.mu.Lock()
	window := pc.window()
	pc.mu.Unlock()
	if err := stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: uint32(window)}}}); err != nil {
		return fail(fromStatus(err))
	}
	return stream, scancel, nil
}

// send writes a request to the current stream.
func (pc *partitionConsumer) send(r *brokerpb.ConsumeRequest) error {
	pc.mu.Lock()
	stream, closed := pc.mu.stream, pc.mu.closed
	pc.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if stream == nil {
		return fmt.Errorf("%w: reconnecting to %s", ErrUnavailable, pc.topic)
	}
	pc.sendMu.Lock()
	defer pc.sendMu.Unlock()
	if err := stream.Send(r); err != nil {
		return fromStatus(err)
	}
	return nil
}

// run receives on the stream and reconnects when it breaks.
func (pc *partitionConsumer) run(stream brokerpb.Broker_ConsumeClient, cancel context.CancelFunc) {
	var bo backoff
	nack := time.NewTicker(ackGroupingTime) // also sends grouped acks
	defer nack.Stop()
	for {
		err := pc.receive(stream, nack.C)
		pc.mu.Lock()
		pc.mu.stream = nil
		pc.mu.gen++ // drop what was received: it comes again
		pc.mu.queue = nil
		pc.mu.consumed = 0
		// Whatever was unacknowledged is delivered again after the
		// reconnection: nothing left to redeliver or time out.
		clear(pc.mu.nacks)
		clear(pc.mu.tracked)
		clear(pc.mu.redelivered) // the generation changed: all stale anyway
		pc.mu.nackAt = time.Time{}
		closed := pc.mu.closed
		waiters := pc.mu.waiters
		pc.mu.waiters = nil
		pc.mu.Unlock()
		for _, w := range waiters {
			w <- err
		}
		pc.sendMu.Lock() // gRPC forbids CloseSend concurrent with Send
		stream.CloseSend()
		pc.sendMu.Unlock()
		cancel()
		if closed || errors.Is(err, errUnsubscribed) {
			return
		}
		for {
			select {
			case <-time.After(bo.next()):
			case <-pc.stop:
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), reconnectTimeout)
			s, c, err := pc.connect(ctx)
			cancel()
			if err != nil {
				continue
			}
			stream, cancel = s, c
			pc.mu.Lock()
			pc.mu.stream = s
			pc.mu.Unlock()
			bo.reset()
			break
		}
	}
}

var errUnsubscribed = errors.New("client: unsubscribed")

type recvResult struct {
	r   *brokerpb.ConsumeResponse
	err error
}

// receive handles what the broker sends until the stream breaks.
func (pc *partitionConsumer) receive(stream brokerpb.Broker_ConsumeClient, nack <-chan time.Time) error {
	ch := make(chan recvResult, 64)
	go func() {
		for {
			r, err := stream.Recv()
			ch <- recvResult{r, err}
			if err != nil {
				close(ch)
				return
			}
		}
	}()
	defer func() {
		go func() {
			for r := range ch {
				if r.err != nil {
					return
				}
			}
		}()
	}()
	for {
		select {
		case <-pc.stop:
			pc.closeStream(stream, ch)
			return ErrClosed
		case <-nack:
			pc.flushAcks() // before redeliveries, so that they skip what was acknowledged
			pc.maybeRedeliver()
			continue
		case r := <-ch:
			if r.err != nil {
				if r.err == io.EOF {
					return ErrUnavailable
				}
				return fromStatus(r.err)
			}
			switch resp := r.r.Response.(type) {
			case *brokerpb.ConsumeResponse_Message:
				pc.received(resp.Message)
			case *brokerpb.ConsumeResponse_SeekDone:
				pc.reachedEnd.Store(false) // told again once acknowledged to the end
				pc.reset(nil)
			case *brokerpb.ConsumeResponse_Unsubscribed:
				pc.reset(nil)
				return errUnsubscribed
			case *brokerpb.ConsumeResponse_Error:
				// A refused acknowledgement: nothing to do but report it to
				// a waiter if there is one.
				pc.reset(reasonError(resp.Error.Reason, resp.Error.Message))
			case *brokerpb.ConsumeResponse_ActiveChange:
				// Failover: the broker decides what to send; nothing to do.
			case *brokerpb.ConsumeResponse_ReachedEndOfTopic:
				pc.reachedEnd.Store(true)
			}
		}
	}
}

// closeStream ends a consumer's stream gracefully: it sends the grouped
// acknowledgements, half-closes, and waits (a bounded time) for the broker
// to end the stream, which it does after handling everything sent before:
// acknowledgements given before Close are not lost to a cancelled stream.
func (pc *partitionConsumer) closeStream(stream brokerpb.Broker_ConsumeClient, ch <-chan recvResult) {
	pc.mu.Lock()
	acks := pc.mu.acks
	pc.mu.acks = nil
	pc.mu.Unlock()
	pc.sendMu.Lock()
	if len(acks) > 0 {
		stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{MessageIds: acks}}})
	}
	stream.CloseSend()
	pc.sendMu.Unlock()
	timeout := time.NewTimer(min(pc.c.opts.OperationTimeout, 10*time.Second))
	defer timeout.Stop()
	for {
		select {
		case r := <-ch:
			if r.err != nil {
				return
			}
			// Messages after Close are dropped: not acknowledged, they are
			// delivered again to the next consumer.
		case <-timeout.C:
			return
		}
	}
}

// reset drops what was received before a seek's (or an unsubscribe's)
// answer, and wakes the one waiting for it with err.
func (pc *partitionConsumer) reset(err error) {
	pc.mu.Lock()
	var w chan error
	if len(pc.mu.waiters) > 0 {
		w = pc.mu.waiters[0]
		pc.mu.waiters = pc.mu.waiters[1:]
	}
	if err == nil {
		pc.dropLocked()
		// Delivery restarted: nothing handed over before is to time out
		// or be redelivered.
		clear(pc.mu.nacks)
		clear(pc.mu.tracked)
		clear(pc.mu.redelivered)
		pc.mu.nackAt = time.Time{}
	}
	pc.mu.Unlock()
	if w != nil {
		w <- err
	}
}

// dropLocked forgets what is queued and grants its permits again.
func (pc *partitionConsumer) dropLocked() {
	pc.mu.gen++
	pc.mu.consumed += len(pc.mu.queue)
	pc.mu.queue = nil
	pc.mu.last = nil
}

// received decodes an entry into messages and queues them.
func (pc *partitionConsumer) received(m *brokerpb.Message) {
	msgs, err := decodeEntry(pc.topic, pc.partition, m)
	if err != nil {
		// An entry this client cannot read is not delivered. Its permits
		// are given back, as many as the broker took for it: it leaves a
		// consumer owing what an entry larger than the receive queue
		// takes, and one given back for 50 taken would leave it owing for
		// good. The pump, if idle, gives them back at once.
		pc.consumed(entryPermits(m.GetEntry()))
		pc.unreadable(m, err)
		select {
		case pc.signal <- struct{}{}:
		default:
		}
		return
	}
	pc.mu.Lock()
	// A reader starting (or resuming) inside a batch gets the whole entry
	// and skips the messages before its start.
	if !pc.sub.Durable {
		var from *messageID // the first message of its entry to keep
		if last := pc.mu.last; last != nil {
			from = &messageID{ledger: last.ledger, entry: last.entry, batchIdx: last.batchIdx + 1}
		} else if start := pc.sub.StartMessageId; start != nil && start.BatchIndex >= 0 {
			from = &messageID{ledger: start.LedgerId, entry: start.EntryId, batchIdx: start.BatchIndex + btoi(!pc.sub.StartInclusive)}
		}
		for from != nil && len(msgs) > 0 && msgs[0].id.ledger == from.ledger && msgs[0].id.entry == from.entry &&
			msgs[0].id.batchIdx >= 0 && msgs[0].id.batchIdx < from.batchIdx {
			msgs = msgs[1:]
			pc.mu.consumed++
		}
	}
	// The broker sends a batch only when it has permits for all of it: to
	// keep a batch in flight while the application works through another,
	// the window grows to twice the largest batch seen.
	grow := 0
	if w := 2 * len(msgs); w > pc.window() && w <= maxWindow {
		grow = w - pc.window()
		pc.mu.maxBatch = len(msgs)
	}
	skip := map[int32]bool{}
	for _, i := range m.AckedBatchIndexes {
		skip[i] = true
	}
	pc.mu.recvSeq++
	for _, msg := range msgs {
		msg.recvSeq = pc.mu.recvSeq
		if skip[msg.id.batchIdx] {
			pc.mu.consumed++ // acknowledged before: not delivered again
			continue
		}
		msg.consumer = pc
		pc.mu.queue = append(pc.mu.queue, msg)
	}
	pc.mu.Unlock()
	if grow > 0 {
		pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: uint32(grow)}}})
	}
	select {
	case pc.signal <- struct{}{}:
	default:
	}
}

// unreadable handles an entry decodeEntry could not read. A corrupt one
// is dropped as pulsar-client-go drops it: acknowledged, with the reason
// (the broker logs and counts it), so that it no longer holds back the
// subscription (its backlog, the end of a terminated topic, the unacked
// limits of a shared one), and logged. One that another client may read
// (encrypted: this client does not decrypt; a chunk: it does not join
// them; or over its limits: entry.ErrUnsupported) is not acknowledged, as
// pulsar-client-go's default (ConsumerCryptoFailureAction FAIL) leaves an
// entry it cannot decrypt: dropping it would lose a message another
// client can read. On Shared and Key_Shared it is nacked, as
// pulsar-client-go nacks it, so that it is delivered again (on Shared
// maybe to another consumer; Key_Shared sends it to its key's consumer);
// it never goes to the dead-letter topic. On Exclusive and Failover it
// stays until a cumulative acknowledgement of a later message covers it.
// Logged as an error when first delivered, at debug level after.
func (pc *partitionConsumer) unreadable(m *brokerpb.Message, err error) {
	id := m.GetMessageId()
	log := pc.c.logger().With("topic", pc.topic, "subscription", pc.sub.GetSubscription(),
		"ledger", id.GetLedgerId(), "entry", id.GetEntryId(), "redelivery-count", m.GetRedeliveryCount(), "error", err)
	level := slog.LevelError
	if m.GetRedeliveryCount() > 0 {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	var bad *unreadableEntry
	switch {
	case !pc.sub.Durable: // a reader: acknowledges nothing
		log.Log(ctx, level, "magnetar: a message could not be read and was skipped")
	case !errors.As(err, &bad):
		log.Log(ctx, level, "magnetar: a message could not be read by this client and was not delivered")
		if pc.multi {
			pc.nack(messageID{ledger: id.GetLedgerId(), entry: id.GetEntryId(), batchIdx: -1, partition: pc.partition}, m.GetRedeliveryCount())
		}
	default:
		err := pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{
			MessageIds: []*brokerpb.MessageId{{LedgerId: id.GetLedgerId(), EntryId: id.GetEntryId(), Partition: pc.partition, BatchIndex: -1}},
			Discarded:  bad.reason,
		}}})
		if err != nil {
			log.Log(ctx, level, "magnetar: a message could not be read and was dropped; its acknowledgement failed (it comes again)", "ack-error", err)
			return
		}
		log.Log(ctx, level, "magnetar: a message could not be read and was dropped (acknowledged)")
	}
}

// unreadableEntry is an entry that cannot be read by anyone: dropped with
// reason (see unreadable).
type unreadableEntry struct {
	reason brokerpb.DiscardReason
	err    error
}

func (e *unreadableEntry) Error() string { return e.err.Error() }
func (e *unreadableEntry) Unwrap() error { return e.err }

// corrupt is err as an unreadableEntry, unless it is only beyond this
// client's limits (entry.ErrUnsupported): another reader may read that.
func corrupt(reason brokerpb.DiscardReason, err error) error {
	if errors.Is(err, entry.ErrUnsupported) {
		return err
	}
	return &unreadableEntry{reason, err}
}

// errEncrypted: the entry's producer encrypted it; this client does not
// decrypt. errChunked: the entry is a chunk of a message a Pulsar producer
// split; this client does not join chunks (it would deliver each chunk as
// a message).
var (
	errEncrypted = fmt.Errorf("%w: the message is encrypted (end-to-end encryption is not supported by this client)", entry.ErrUnsupported)
	errChunked   = fmt.Errorf("%w: the message is a chunk of a larger one (chunked messages are not supported by this client)", entry.ErrUnsupported)
)

// maxWindow bounds the permits a partition consumer grants.
const maxWindow = 100000

// window is the permits granted in all: the receiver queue, or twice the
// largest batch seen. Called with mu held.
func (pc *partitionConsumer) window() int { return max(pc.queueSize, 2*pc.mu.maxBatch) }

func btoi(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// pump hands queued messages to the application, in order.
func (pc *partitionConsumer) pump() {
	for {
		pc.mu.Lock()
		if pc.mu.closed {
			pc.mu.Unlock()
			return
		}
		var m *message
		gen := pc.mu.gen
		if len(pc.mu.queue) > 0 {
			m = pc.mu.queue[0]
		}
		pc.mu.Unlock()
		if m == nil {
			// Idle: give back every permit used, so that the broker can
			// send a batch as large as the whole window.
			pc.returnPermits()
			select {
			case <-pc.signal:
			case <-pc.stop:
				return
			}
			continue
		}
		pc.mu.Lock()
		stale := pc.mu.gen != gen
		if !stale {
			pc.mu.queue = pc.mu.queue[1:]
		}
		pc.mu.Unlock()
		if stale {
			continue
		}
		m.gen = gen
		if pc.dlq != nil && m.redeliveryCount >= pc.dlq.MaxDeliveries {
			if cons, ok := pc.parent.(*consumer); ok {
				cons.toDeadLetter(pc, m)
				pc.consumed(1)
				continue
			}
		}
		if !pc.parent.deliver(m, pc.stop) {
			return
		}
		pc.tm.delivered(m)
		pc.mu.Lock()
		if pc.mu.gen == gen {
			id := m.id
			pc.mu.last = &id
			if pc.ackTimeout > 0 {
				pc.mu.tracked[m.id.key()] = time.Now().Add(pc.ackTimeout)
			}
		}
		pc.mu.Unlock()
		pc.consumed(1)
	}
}

// stale reports whether m was handed over before a seek, redelivery or
// reconnection (it is delivered again); its permit is granted again.
func (pc *partitionConsumer) stale(m *message) bool {
	pc.mu.Lock()
	stale := m.gen != pc.mu.gen
	seq, again := pc.mu.redelivered[entryPos{m.id.ledger, m.id.entry}]
	pc.mu.Unlock()
	if stale {
		pc.consumed(0)
		return true
	}
	// Its entry was asked for again (nack, ack timeout) after this copy
	// arrived: the new copy is the one to process.
	return again && m.recvSeq <= seq
}

// grant sends Flows for n permits, none over maxWindow: the broker caps
// one Flow there, and an entry claiming more messages (the broker takes
// what it claims) must be given back whole, or the consumer stays owing.
func (pc *partitionConsumer) grant(n int) {
	for n > 0 {
		k := min(n, maxWindow)
		pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: uint32(k)}}})
		n -= k
	}
}

// returnPermits grants again the permits of every message taken.
func (pc *partitionConsumer) returnPermits() {
	pc.mu.Lock()
	grant := pc.mu.consumed
	pc.mu.consumed = 0
	pc.mu.Unlock()
	if grant > 0 {
		pc.grant(grant)
	}
}

// consumed counts messages taken and grants permits again once half the
// queue was taken.
func (pc *partitionConsumer) consumed(n int) {
	pc.mu.Lock()
	pc.mu.consumed += n
	grant := 0
	if pc.mu.consumed >= max(pc.window()/2, 1) {
		grant, pc.mu.consumed = pc.mu.consumed, 0
	}
	pc.mu.Unlock()
	if grant > 0 {
		pc.grant(grant)
	}
}

// Acknowledgements are grouped: sent at most ackGroupingTime after the
// first, or once maxAckGroup are waiting (cumulative ones at once).
const (
	ackGroupingTime = 100 * time.Millisecond
	maxAckGroup     = 1000
)

func (pc *partitionConsumer) ack(id messageID, cumulative bool) error {
	pc.mu.Lock()
	if pc.mu.closed {
		pc.mu.Unlock()
		return ErrClosed
	}
	if len(pc.mu.tracked) > 0 {
		if cumulative {
			for k := range pc.mu.tracked {
				if !id.key().before(k) {
					delete(pc.mu.tracked, k)
				}
			}
		} else {
			delete(pc.mu.tracked, id.key())
		}
	}
	if !cumulative {
		pc.mu.acks = append(pc.mu.acks, id.proto())
		full := len(pc.mu.acks) >= maxAckGroup
		pc.mu.Unlock()
		if full {
			return pc.flushAcks()
		}
		return nil
	}
	pc.mu.Unlock()
	if err := pc.flushAcks(); err != nil {
		return err
	}
	return pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{
		MessageIds: []*brokerpb.MessageId{id.proto()}, Cumulative: true}}})
}

// flushAcks sends the grouped acknowledgements.
func (pc *partitionConsumer) flushAcks() error {
	pc.mu.Lock()
	acks := pc.mu.acks
	pc.mu.acks = nil
	pc.mu.Unlock()
	if len(acks) == 0 {
		return nil
	}
	return pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{MessageIds: acks}}})
}

// nack schedules a redelivery: of id's entry (Shared, Key_Shared), after
// the nack delay or the backoff policy's delay for its redelivery count;
// of everything unacknowledged otherwise.
func (pc *partitionConsumer) nack(id messageID, redeliveries uint32) {
	pc.tm.nacked()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	delay := pc.nackDelay
	if pc.nackBackoff != nil {
		delay = max(pc.nackBackoff(redeliveries), 0)
	}
	delete(pc.mu.tracked, id.key())
	if pc.multi {
		p := entryPos{id.ledger, id.entry}
		at := time.Now().Add(delay)
		if due, ok := pc.mu.nacks[p]; !ok || at.Before(due) {
			pc.mu.nacks[p] = at
		}
		return
	}
	if pc.mu.nackAt.IsZero() {
		pc.mu.nackAt = time.Now().Add(delay)
	}
}

// maybeRedeliver asks for the redeliveries that are due: nacked messages
// and messages past their ack timeout.
func (pc *partitionConsumer) maybeRedeliver() {
	now := time.Now()
	pc.mu.Lock()
	var ids []*brokerpb.MessageId
	all := !pc.mu.nackAt.IsZero() && now.After(pc.mu.nackAt)
	for p, at := range pc.mu.nacks {
		if now.After(at) {
			delete(pc.mu.nacks, p)
			ids = append(ids, &brokerpb.MessageId{LedgerId: p.ledger, EntryId: p.entry, BatchIndex: -1, Partition: pc.partition})
		}
	}
	if len(pc.mu.tracked) > 0 {
		expired := map[entryPos]bool{}
		for k, at := range pc.mu.tracked {
			if now.After(at) {
				expired[entryPos{k.ledger, k.entry}] = true
			}
		}
		for k := range pc.mu.tracked {
			if expired[entryPos{k.ledger, k.entry}] {
				delete(pc.mu.tracked, k)
			}
		}
		for p := range expired {
			if !pc.multi {
				all = true
				break
			}
			if _, nacked := pc.mu.nacks[p]; !nacked {
				ids = append(ids, &brokerpb.MessageId{LedgerId: p.ledger, EntryId: p.entry, BatchIndex: -1, Partition: pc.partition})
			}
		}
	}
	if all {
		pc.mu.nackAt = time.Time{}
		clear(pc.mu.tracked)
		pc.dropLocked() // what is queued comes again anyway
	}
	pc.mu.Unlock()
	if all {
		pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Redeliver{Redeliver: &brokerpb.Redeliver{}}})
		pc.consumed(0)
	}
	if len(ids) > 0 {
		pc.mu.Lock()
		if len(pc.mu.redelivered) > 100000 {
			clear(pc.mu.redelivered) // bounded; at worst a copy is processed twice
		}
		for _, id := range ids {
			pc.mu.redelivered[entryPos{id.LedgerId, id.EntryId}] = pc.mu.recvSeq
		}
		pc.mu.Unlock()
		pc.send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Redeliver{Redeliver: &brokerpb.Redeliver{MessageIds: ids}}})
	}
}

// request sends r and waits for the broker's answer (SeekDone,
// Unsubscribed or an error).
func (pc *partitionConsumer) request(ctx context.Context, r *brokerpb.ConsumeRequest) error {
	pc.flushAcks() // acknowledgements made before count before the request
	w := make(chan error, 1)
	pc.mu.Lock()
	pc.mu.waiters = append(pc.mu.waiters, w)
	pc.mu.Unlock()
	if err := pc.send(r); err != nil {
		pc.mu.Lock()
		for i, x := range pc.mu.waiters {
			if x == w {
				pc.mu.waiters = append(pc.mu.waiters[:i], pc.mu.waiters[i+1:]...)
			}
		}
		pc.mu.Unlock()
		return err
	}
	select {
	case err := <-w:
		if errors.Is(err, errUnsubscribed) {
			return nil
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (pc *partitionConsumer) seek(ctx context.Context, s *brokerpb.Seek) error {
	return pc.request(ctx, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Seek{Seek: s}})
}

func (pc *partitionConsumer) unsubscribe(ctx context.Context) error {
	return pc.request(ctx, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Unsubscribe{Unsubscribe: &brokerpb.Unsubscribe{}}})
}

func (pc *partitionConsumer) close() {
	pc.mu.Lock()
	if pc.mu.closed {
		pc.mu.Unlock()
		<-pc.done
		return
	}
	pc.mu.closed = true
	pc.mu.Unlock()
	close(pc.stop)
	<-pc.done
}

// entryPermits is how many permits the broker takes for an entry: the
// messages its metadata says it holds (read without checking the
// checksum, as the broker reads it), 1 if it says none or cannot be read.
func entryPermits(data []byte) int {
	md, _, err := entry.DecodeUnchecked(data)
	if err != nil || md.NumMessagesInBatch == nil || md.GetNumMessagesInBatch() < 1 {
		return 1
	}
	return int(md.GetNumMessagesInBatch())
}

// decodeEntry turns a delivered entry into its messages.
func decodeEntry(topic string, partition int32, m *brokerpb.Message) ([]*message, error) {
	md, payload, err := entry.Decode(m.Entry)
	if err != nil {
		return nil, corrupt(brokerpb.DiscardReason_DISCARD_REASON_CHECKSUM_MISMATCH, err)
	}
	if len(md.GetEncryptionKeys()) > 0 {
		return nil, errEncrypted
	}
	if md.GetNumChunksFromMsg() > 1 {
		return nil, errChunked
	}
	if md.GetCompression() != pulsarpb.CompressionType_NONE {
		if payload, err = entry.Decompress(md.GetCompression(), payload, int(md.GetUncompressedSize())); err != nil {
			return nil, corrupt(brokerpb.DiscardReason_DISCARD_REASON_DECOMPRESSION_ERROR, err)
		}
	}
	id := messageID{ledger: m.MessageId.LedgerId, entry: m.MessageId.EntryId, batchIdx: -1, partition: partition}
	props := func(kvs []*pulsarpb.KeyValue) map[string]string {
		if len(kvs) == 0 {
			return nil
		}
		out := make(map[string]string, len(kvs))
		for _, kv := range kvs {
			out[kv.GetKey()] = kv.GetValue()
		}
		return out
	}
	ms := func(v uint64) time.Time {
		if v == 0 {
			return time.Time{}
		}
		return time.UnixMilli(int64(v))
	}
	base := message{topic: topic, publishTime: ms(md.GetPublishTime()), producerName: md.GetProducerName(), redeliveryCount: m.RedeliveryCount}
	if md.NumMessagesInBatch == nil {
		msg := base
		msg.id, msg.payload, msg.key, msg.orderingKey = id, payload, md.GetPartitionKey(), string(md.GetOrderingKey())
		msg.props, msg.eventTime = props(md.Properties), ms(md.GetEventTime())
		return []*message{&msg}, nil
	}
	singles, err := entry.SplitBatch(payload, int(md.GetNumMessagesInBatch()))
	if err != nil {
		return nil, corrupt(brokerpb.DiscardReason_DISCARD_REASON_BATCH_ERROR, err)
	}
	out := make([]*message, len(singles))
	for i, s := range singles {
		msg := base
		msg.id = id
		msg.id.batchIdx, msg.id.batchSize = int32(i), int32(len(singles))
		msg.payload, msg.key, msg.orderingKey = s.Payload, s.Meta.GetPartitionKey(), string(s.Meta.GetOrderingKey())
		msg.props, msg.eventTime = props(s.Meta.Properties), ms(s.Meta.GetEventTime())
		out[i] = &msg
	}
	return out, nil
}
