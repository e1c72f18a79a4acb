package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// partitionProducer publishes to one partition (or a non-partitioned
// topic) over one Produce stream.
//
// Messages get increasing sequence ids, are packed into batches, and each
// batch is sent and kept in pending until its receipt comes. When the
// stream breaks (or the broker reports a send error) the producer
// reconnects with backoff and sends everything pending again, in order;
// the broker refuses everything after a failed send until then, so that
// the topic keeps the producer's order.
//
// Goroutines: run (connects, then receives) and send (writes batches to the
// stream), both owned by the producer and stopped by close.
type partitionProducer struct {
	c         *client
	topic     string
	partition int32
	opts      *ProducerOptions
	compress  pulsarpb.CompressionType
	name      string // set at the first connection, then fixed
	// limit is the largest message the broker takes, from its answer at
	// each connection (setLimit).
	limit atomic.Int64

	sem     chan struct{} // MaxPendingMessages
	signal  chan struct{} // wakes the sender
	stop    chan struct{}
	done    chan struct{}
	idle    *sync.Cond // on mu: pending and batch became empty
	timeout *time.Ticker
	// sendMu orders the sender's Send with run's CloseSend on a stream,
	// which gRPC forbids to run concurrently.
	sendMu sync.Mutex

	mu struct {
		sync.Mutex
		batch      []*pendingMsg
		batchBytes int
		batchTimer *time.Timer
		pending    []*pendingBatch // sent or to send, in sequence order
		outbox     []*pendingBatch // to write to the stream
		nextSeq    int64
		lastSeq    int64 // highest sequence id acknowledged
		stream     brokerpb.Broker_ProduceClient
		// together: stream's broker takes several sends in one request
		// (ProducerOpened.sends_together).
		together bool
		closed   bool
		// cause is why the last attempt failed (a refused send, a broken
		// stream, a failed reconnection), nil since a receipt came: a
		// send that times out is told it.
		cause error
		// terminated, once the broker said the topic was terminated
		// (ErrTopicTerminated): every send fails with it, nothing is
		// resent, no reconnection is tried.
		terminated error
	}
}

type pendingMsg struct {
	ctx  context.Context
	msg  *ProducerMessage
	seq  int64
	size int
	cb   func(MessageID, *ProducerMessage, error)
	// deliverAt: delayed delivery, unix ms (0: none).
	deliverAt int64
}

type pendingBatch struct {
	msgs    []*pendingMsg
	req     *brokerpb.Send
	created time.Time
	// buf, if set, is req's payload, from batchBufs: it goes back there
	// once the batch is done (acknowledged or failed) and not being
	// written to a stream. Under the producer's mu, as are sending and
	// done.
	buf []byte
	// sending: the sender is writing req to a stream (gRPC copies it
	// before Send returns).
	sending bool
	// done: acknowledged or failed; a done batch is not sent again.
	done bool
	// wire is req's size as one of the sends of a Sends request.
	wire int
}

// finishLocked marks b done (acknowledged or failed) and gives its
// payload buffer back unless the sender is writing it. Under pp.mu.
func (b *pendingBatch) finishLocked() {
	b.done = true
	b.releaseLocked()
}

func (b *pendingBatch) releaseLocked() {
	if b.buf == nil || b.sending || !b.done {
		return
	}
	putBatchBuf(b.buf)
	b.buf, b.req.Payload = nil, nil
}

func newPartitionProducer(ctx context.Context, c *client, topic string, partition int32, opts *ProducerOptions) (*partitionProducer, error) {
	ct, _ := opts.CompressionType.proto()
	pp := &partitionProducer{
		c: c, topic: topic, partition: partition, opts: opts, compress: ct, name: opts.Name,
		sem: make(chan struct{}, opts.MaxPendingMessages), signal: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	pp.idle = sync.NewCond(&pp.mu)
	pp.limit.Store(int64(c.opts.MaxMessageSize))
	if c.opts.MaxMessageSize == 0 {
		pp.limit.Store(defaultMaxMessageSize)
	}
	// The first connection is made here so that errors (a bad topic, a
	// busy name) reach the caller.
	var stream brokerpb.Broker_ProduceClient
	var abort context.CancelFunc
	var opened *brokerpb.ProducerOpened
	err := c.retryConnect(ctx, func(ctx context.Context) error {
		var err error
		stream, abort, opened, err = pp.connect(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	pp.name = opened.ProducerName
	pp.mu.lastSeq = opened.LastSequenceId
	pp.mu.nextSeq = opened.LastSequenceId + 1
	pp.mu.stream, pp.mu.together = stream, opened.SendsTogether
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pp.run(stream, abort) }()
	go func() { defer wg.Done(); pp.sendLoop() }()
	go func() { wg.Wait(); close(pp.done) }()
	return pp, nil
}

// connect opens a Produce stream and waits for ProducerOpened.
//
// abort ends the stream at once, without waiting for the broker to answer
// what was sent on it (closing it with CloseSend waits).
func (pp *partitionProducer) connect(ctx context.Context) (_ brokerpb.Broker_ProduceClient, abort context.CancelFunc, _ *brokerpb.ProducerOpened, _ error) {
	bc, err := pp.c.lookup(ctx, pp.topic)
	if err != nil {
		return nil, nil, nil, err
	}
	sctx, scancel := context.WithCancel(context.Background())
	stream, err := bc.Produce(sctx)
	if err != nil {
		scancel()
		return nil, nil, nil, fromStatus(err)
	}
	fail := func(err error) (brokerpb.Broker_ProduceClient, context.CancelFunc, *brokerpb.ProducerOpened, error) {
		scancel()
		return nil, nil, nil, err
	}
	if err := stream.Send(&brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Open{Open: &brokerpb.ProducerOpen{
		Topic: pp.topic, ProducerName: pp.name, Properties: pp.opts.Properties, ReceiptsTogether: true}}}); err != nil {
		return fail(fromStatus(err))
	}
	type res struct {
		r   *brokerpb.ProduceResponse
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
		opened := r.r.GetOpened()
		if opened == nil {
			return fail(fmt.Errorf("%w: broker answered %T to ProducerOpen", ErrUnavailable, r.r.Response))
		}
		pp.setLimit(int64(opened.MaxMessageSize))
		go func() { <-stream.Context().Done(); scancel() }()
		return stream, scancel, opened, nil
	case <-ctx.Done():
		return fail(fmt.Errorf("%w: opening the producer on %s: %v", ErrUnavailable, pp.topic, ctx.Err()))
	}
}

// setLimit takes the broker's message size limit (0: it did not say): the
// client's MaxMessageSize if set and lower, else the broker's.
func (pp *partitionProducer) setLimit(broker int64) {
	limit := broker
	if limit <= 0 {
		limit = defaultMaxMessageSize
	}
	if o := int64(pp.c.opts.MaxMessageSize); o > 0 && (broker <= 0 || o < limit) {
		limit = o
	}
	pp.limit.Store(limit)
}

// batchedOverhead bounds what a message adds to a batch besides its
// payload, key and properties: its SingleMessageMetadata framing (length
// prefix, sequence id, event time, sizes, field tags).
func batchedOverhead(m *ProducerMessage) int {
	return 48 + 8*len(m.Properties)
}

// entryOverhead is room left under the broker's limit for what the entry
// adds to the messages: its MessageMetadata (producer name, sequence ids,
// times, sizes; the keys and properties are counted with each message).
// The broker's limit applies to the whole entry, so a message that passes
// the SDK's check is never refused by the broker for its size.
const entryOverhead = 512

// batchLimit is the size at which a batch is sent: BatchingMaxSize, or the
// message size limit if lower.
func (pp *partitionProducer) batchLimit() int {
	return int(min(int64(pp.opts.BatchingMaxSize), pp.limit.Load()-entryOverhead))
}

func (pp *partitionProducer) lastSequenceID() int64 {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.mu.lastSeq
}

// sendAsync queues a message into the current batch.
func (pp *partitionProducer) sendAsync(ctx context.Context, msg *ProducerMessage, cb func(MessageID, *ProducerMessage, error)) {
	size := len(msg.Payload) + len(msg.Key) + len(msg.OrderingKey)
	for k, v := range msg.Properties {
		size += len(k) + len(v)
	}
	if limit := pp.limit.Load() - entryOverhead; int64(size) > limit {
		cb(nil, msg, fmt.Errorf("%w: message of %d bytes, the maximum is %d", ErrMessageTooLarge, size, limit))
		return
	}
	select {
	case pp.sem <- struct{}{}:
	case <-ctx.Done():
		cb(nil, msg, ctx.Err())
		return
	case <-pp.stop:
		cb(nil, msg, ErrClosed)
		return
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.mu.closed {
		<-pp.sem
		go cb(nil, msg, ErrClosed)
		return
	}
	if err := pp.mu.terminated; err != nil {
		<-pp.sem
		go cb(nil, msg, err)
		return
	}
	seq := pp.mu.nextSeq
	if msg.SequenceID != nil {
		seq = *msg.SequenceID
	}
	pp.mu.nextSeq = max(pp.mu.nextSeq, seq+1)
	// A message that does not fit the current batch starts a new one, as
	// does, with key-based batching, a message of another key.
	// In a batch each message also carries its own metadata.
	batched := size + batchedOverhead(msg)
	if n := len(pp.mu.batch); n > 0 && (pp.mu.batchBytes+batched > pp.batchLimit() ||
		pp.opts.BatcherBuilderType == KeyBasedBatchBuilder && !sameKey(pp.mu.batch[0].msg, msg)) {
		pp.flushLocked()
	}
	at := msg.deliverAt(time.Now())
	if at > 0 {
		pp.flushLocked() // a delayed message is an entry of its own
	}
	pp.mu.batch = append(pp.mu.batch, &pendingMsg{ctx: ctx, msg: msg, seq: seq, size: size, cb: cb, deliverAt: at})
	pp.mu.batchBytes += batched
	switch {
	case at > 0:
		pp.flushLocked()
	case pp.opts.DisableBatching, len(pp.mu.batch) >= int(pp.opts.BatchingMaxMessages), pp.mu.batchBytes >= pp.batchLimit():
		pp.flushLocked()
	case pp.mu.batchTimer == nil:
		pp.mu.batchTimer = time.AfterFunc(pp.opts.BatchingMaxPublishDelay, func() {
			pp.mu.Lock()
			defer pp.mu.Unlock()
			pp.mu.batchTimer = nil
			pp.flushLocked()
		})
	}
}

// flushLocked turns the current batch into a pending Send.
func (pp *partitionProducer) flushLocked() {
	if pp.mu.batchTimer != nil {
		pp.mu.batchTimer.Stop()
		pp.mu.batchTimer = nil
	}
	msgs := pp.mu.batch
	if len(msgs) == 0 {
		return
	}
	pp.mu.batch, pp.mu.batchBytes = nil, 0
	req, buf, err := pp.encode(msgs)
	if err != nil {
		go func() { // not under the lock: callbacks may send again
			for _, m := range msgs {
				<-pp.sem
				m.cb(nil, m.msg, err)
			}
		}()
		return
	}
	// Its size in a Sends: field 1, the length, the Send.
	wire := protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(req))
	b := &pendingBatch{msgs: msgs, req: req, created: time.Now(), buf: buf, wire: wire}
	pp.mu.pending = append(pp.mu.pending, b)
	pp.mu.outbox = append(pp.mu.outbox, b)
	select {
	case pp.signal <- struct{}{}:
	default:
	}
}

// encode builds the Send of a batch: a single message as itself (batching
// disabled), otherwise Pulsar's batch layout, compressed. buf, if not nil,
// is the Send's payload, from batchBufs.
func (pp *partitionProducer) encode(msgs []*pendingMsg) (_ *brokerpb.Send, buf []byte, _ error) {
	md := &pulsarpb.MessageMetadata{}
	var payload []byte
	props := func(m map[string]string) []*pulsarpb.KeyValue {
		var kvs []*pulsarpb.KeyValue
		for k, v := range m {
			kvs = append(kvs, &pulsarpb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
		}
		return kvs
	}
	if pp.opts.DisableBatching && len(msgs) == 1 {
		m := msgs[0].msg
		md.Properties = props(m.Properties)
		if m.Key != "" {
			md.PartitionKey = proto.String(m.Key)
		}
		if m.OrderingKey != "" {
			md.OrderingKey = []byte(m.OrderingKey)
		}
		if !m.EventTime.IsZero() {
			md.EventTime = proto.Uint64(uint64(m.EventTime.UnixMilli()))
		}
		payload = m.Payload
	} else {
		md.NumMessagesInBatch = proto.Int32(int32(len(msgs)))
		// A batch whose messages share a key carries it, so that Key_Shared
		// dispatches it by that key.
		if first := msgs[0].msg; !slices.ContainsFunc(msgs, func(pm *pendingMsg) bool { return !sameKey(first, pm.msg) }) {
			if first.Key != "" {
				md.PartitionKey = proto.String(first.Key)
			}
			if first.OrderingKey != "" {
				md.OrderingKey = []byte(first.OrderingKey)
			}
		}
		// One allocation for the batch: each message takes its payload,
		// a length and its metadata (sequence id, size; more with keys,
		// properties or an event time, which append may still grow into).
		size := 0
		for _, pm := range msgs {
			size += len(pm.msg.Payload) + 4 + 16
		}
		pooled := getBatchBuf(size)
		payload = pooled
		for _, pm := range msgs {
			m := pm.msg
			if len(m.Properties) == 0 && m.Key == "" && m.OrderingKey == "" && m.EventTime.IsZero() {
				// Only a sequence id: the same bytes, without building
				// and marshaling the metadata.
				payload = entry.AppendSingleSeq(payload, uint64(pm.seq), m.Payload)
				continue
			}
			smm := &pulsarpb.SingleMessageMetadata{Properties: props(m.Properties), SequenceId: proto.Uint64(uint64(pm.seq))}
			if m.Key != "" {
				smm.PartitionKey = proto.String(m.Key)
			}
			if m.OrderingKey != "" {
				smm.OrderingKey = []byte(m.OrderingKey)
			}
			if !m.EventTime.IsZero() {
				smm.EventTime = proto.Uint64(uint64(m.EventTime.UnixMilli()))
			}
			var err error
			if payload, err = entry.AppendSingle(payload, smm, m.Payload); err != nil {
				putBatchBuf(pooled)
				return nil, nil, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
			}
		}
		buf = payload
	}
	if pp.compress != pulsarpb.CompressionType_NONE {
		md.Compression = pp.compress.Enum()
		md.UncompressedSize = proto.Uint32(uint32(len(payload)))
		c, err := entry.Compress(pp.compress, payload)
		if buf != nil {
			putBatchBuf(buf) // compressed into c
			buf = nil
		}
		if err != nil {
			return nil, nil, err
		}
		payload = c
	}
	if at := msgs[0].deliverAt; at > 0 && len(msgs) == 1 {
		md.DeliverAtTime = proto.Int64(at)
	}
	// The broker fills in the producer name, sequence id and publish time.
	md.ProducerName = proto.String("")
	md.SequenceId = proto.Uint64(0)
	md.PublishTime = proto.Uint64(0)
	first, last := msgs[0].seq, msgs[len(msgs)-1].seq
	send := &brokerpb.Send{SequenceId: uint64(first), Metadata: md, Payload: payload}
	if last != first {
		send.HighestSequenceId = uint64(last)
	}
	return send, buf, nil
}

// sendLoop writes queued batches to the current stream: to a broker
// that takes them together, every batch queued (up to maxSendsTogether,
// and maxSendsTogetherBytes encoded unless the first alone is larger) in
// one request, as the messages of a binary protocol share a TCP write.
func (pp *partitionProducer) sendLoop() {
	var taken []*pendingBatch
	for {
		select {
		case <-pp.signal:
		case <-pp.stop:
			return
		}
		for {
			pp.mu.Lock()
			stream, together := pp.mu.stream, pp.mu.together
			taken = taken[:0]
			size := 0
			for stream != nil && len(pp.mu.outbox) > 0 {
				b := pp.mu.outbox[0]
				if len(taken) > 0 && (!together || len(taken) == maxSendsTogether || size+b.wire > maxSendsTogetherBytes) {
					break
				}
				pp.mu.outbox = pp.mu.outbox[1:]
				if b.done { // failed (timed out) while queued
					continue
				}
				b.sending = true
				taken = append(taken, b)
				size += b.wire
			}
			pp.mu.Unlock()
			if len(taken) == 0 {
				break
			}
			req := &brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Send{Send: taken[0].req}}
			if len(taken) > 1 {
				sends := make([]*brokerpb.Send, len(taken))
				for i, b := range taken {
					sends[i] = b.req
				}
				req = &brokerpb.ProduceRequest{Request: &brokerpb.ProduceRequest_Sends{Sends: &brokerpb.Sends{Sends: sends}}}
			}
			pp.sendMu.Lock()
			err := stream.Send(req)
			pp.sendMu.Unlock()
			pp.mu.Lock()
			for _, b := range taken {
				b.sending = false
				b.releaseLocked()
			}
			pp.mu.Unlock()
			clear(taken) // no batch kept alive until the next send
			if err != nil {
				break // run notices the broken stream and reconnects
			}
		}
	}
}

// Caps on the sends of one request to a broker that takes them together:
// the broker takes at most 1024 (wirecodec.MaxSends), and its transport
// its maximum message size plus 1 MiB, so sends of at most 1 MiB
// encoded together, or a larger one alone (within the maximum message
// size), always pass.
const (
	maxSendsTogether      = 1024
	maxSendsTogetherBytes = 1 << 20
)

// run receives on the stream; when it breaks, it reconnects and queues
// every pending batch again.
func (pp *partitionProducer) run(stream brokerpb.Broker_ProduceClient, abort context.CancelFunc) {
	var bo backoff
	var busySince time.Time // when reconnections started to find the name busy
	timeout := time.NewTicker(max(pp.opts.SendTimeout/10, 10*time.Millisecond))
	defer timeout.Stop()
	for {
		recvEnded := make(chan struct{})
		progressed, err := pp.receive(stream, timeout.C, recvEnded)
		if progressed {
			// Backoff grows only while nothing gets through: a send refused
			// at once after each reconnection (not enough bookies, say)
			// is not resent in a tight loop.
			bo.reset()
		}
		pp.mu.Lock()
		pp.mu.stream = nil
		pp.mu.outbox = nil
		closed := pp.mu.closed
		if retriable(err) {
			pp.mu.cause = err
		}
		pp.mu.Unlock()
		pp.sendMu.Lock()
		stream.CloseSend()
		pp.sendMu.Unlock()
		if !errors.Is(err, ErrClosed) {
			// A broken or stalled stream is abandoned at once: the broker
			// lets go of the producer (its name) without waiting for the
			// appends in flight, and the re-sends on the next stream wait
			// for those appends there (deduplication).
			abort()
		}
		if closed || errors.Is(err, ErrClosed) {
			if errors.Is(err, ErrClosed) {
				// Closed by Close: wait, bounded, for the broker to end
				// the stream. It does so after answering what was sent
				// and letting go of the producer, so a topic deleted or
				// a name reused right after Close finds it gone (as
				// Pulsar's client waits for CloseProducer's answer).
				wait := time.NewTimer(min(pp.c.opts.OperationTimeout, 10*time.Second))
				select {
				case <-recvEnded:
				case <-wait.C:
				}
				wait.Stop()
				abort()
			}
			pp.failAll(ErrClosed)
			return
		}
		if errors.Is(err, ErrTopicTerminated) {
			pp.terminated(err)
			return
		}
		for {
			pp.expire()
			select {
			case <-time.After(bo.next()):
			case <-pp.stop:
				pp.failAll(ErrClosed)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), reconnectTimeout)
			s, a, opened, err := pp.connect(ctx)
			cancel()
			if err != nil {
				if errors.Is(err, ErrTopicTerminated) {
					pp.terminated(err)
					return
				}
				if retriable(err) {
					pp.mu.Lock()
					pp.mu.cause = err
					pp.mu.Unlock()
				}
				// Busy is at first most likely the broker not having let
				// go of this producer's previous stream yet; after
				// busyGiveUp the name is taken.
				busy := errors.Is(err, ErrProducerBusy)
				if busy && busySince.IsZero() {
					busySince = time.Now()
				}
				if !busy {
					busySince = time.Time{}
				}
				if !retriable(err) && !errors.Is(err, ErrTopicNotFound) && (!busy || time.Since(busySince) > busyGiveUp) {
					// A permanent refusal (the name is taken, the topic
					// deleted): give the messages back.
					pp.failAll(err)
					busySince = time.Time{}
				}
				continue
			}
			stream, abort = s, a
			pp.mu.Lock()
			pp.mu.stream, pp.mu.together = s, opened.SendsTogether
			pp.mu.lastSeq = max(pp.mu.lastSeq, opened.LastSequenceId)
			pp.mu.outbox = append([]*pendingBatch(nil), pp.mu.pending...)
			pp.mu.Unlock()
			select {
			case pp.signal <- struct{}{}:
			default:
			}
			break
		}
	}
}

// terminated ends the producer's life on its topic, which was
// terminated: what is pending fails with err, and every later send.
// Close still has to be called.
func (pp *partitionProducer) terminated(err error) {
	pp.mu.Lock()
	pp.mu.terminated = err
	pp.mu.Unlock()
	pp.failAll(err)
}

// busyGiveUp: reconnections that find the producer's name busy for this
// long fail the pending messages (the name is taken); before, the broker
// is taken to be still letting go of this producer's previous stream.
const busyGiveUp = 30 * time.Second

// receive handles receipts until the stream breaks or a send fails;
// progressed reports whether a receipt came. recvEnded is closed once the
// stream has ended (its Recv failed) and everything received before was
// handled, which may be after receive returns.
//
// After receive returns ErrClosed (Close), the receipts still coming are
// handled: the broker answers every send it took before it ends the
// stream, and a stored message must not be failed. After any other
// return they are dropped: the pending batches go again on a new stream.
func (pp *partitionProducer) receive(stream brokerpb.Broker_ProduceClient, timeouts <-chan time.Time, recvEnded chan<- struct{}) (progressed bool, err error) {
	type res struct {
		r   *brokerpb.ProduceResponse
		err error
	}
	ch := make(chan res, 16)
	go func() {
		for {
			r, err := stream.Recv()
			ch <- res{r, err}
			if err != nil {
				return
			}
		}
	}()
	// Unless the receiver ended (it sent an error), something must take
	// what it still sends until the stream ends, whichever way receive
	// returns: a receiver blocked on a full ch would never end.
	ended := false
	defer func() {
		if ended {
			close(recvEnded)
			return
		}
		closing := errors.Is(err, ErrClosed)
		go func() {
			defer close(recvEnded)
			for r := range ch {
				if r.err != nil {
					return
				}
				if !closing {
					continue
				}
				if rc := r.r.GetReceipt(); rc != nil {
					pp.receipt(rc)
				}
				for _, rc := range r.r.GetReceipts().GetReceipts() {
					pp.receipt(rc)
				}
			}
		}()
	}()
	for {
		select {
		case <-pp.stop:
			return progressed, ErrClosed
		case <-timeouts:
			if pp.expire() > 0 {
				// No receipt in time: the broker may be stalled (paused,
				// cut off). Look the partition up again on a new stream.
				return progressed, fmt.Errorf("%w: sends timed out on %s", ErrUnavailable, pp.topic)
			}
			continue
		case r := <-ch:
			if r.err != nil {
				ended = true
				if r.err == io.EOF {
					return progressed, ErrUnavailable
				}
				err := fromStatus(r.err)
				if errors.Is(err, ErrMessageTooLarge) {
					// The broker could not even read a send (larger than
					// its transport takes): it cannot say which, but the
					// largest pending batch is over the limit if any is.
					pp.failLargest(fmt.Errorf("%w: %v", ErrMessageTooLarge, err))
				}
				return progressed, err
			}
			switch resp := r.r.Response.(type) {
			case *brokerpb.ProduceResponse_Receipt:
				pp.receipt(resp.Receipt)
				progressed = true
			case *brokerpb.ProduceResponse_Receipts:
				for _, rc := range resp.Receipts.GetReceipts() {
					pp.receipt(rc)
				}
				progressed = true
			case *brokerpb.ProduceResponse_Error:
				err := reasonError(resp.Error.Reason, resp.Error.Message)
				if !retriable(err) {
					// This batch can never be stored: fail it, then
					// reconnect for the broker to take the rest again.
					pp.failBatch(resp.Error.SequenceId, err)
				}
				return progressed, err
			}
		}
	}
}

// receipt completes the pending batch it acknowledges.
func (pp *partitionProducer) receipt(r *brokerpb.SendReceipt) {
	pp.mu.Lock()
	if len(pp.mu.pending) == 0 || uint64(pp.mu.pending[0].msgs[0].seq) != r.SequenceId {
		pp.mu.Unlock()
		return // a receipt for a batch that timed out, or of a resend
	}
	b := pp.mu.pending[0]
	pp.mu.pending = pp.mu.pending[1:]
	b.finishLocked()
	pp.mu.lastSeq = max(pp.mu.lastSeq, b.msgs[len(b.msgs)-1].seq)
	pp.mu.cause = nil
	if len(pp.mu.pending) == 0 && len(pp.mu.batch) == 0 {
		pp.idle.Broadcast()
	}
	pp.mu.Unlock()
	id := r.MessageId
	for i, m := range b.msgs {
		mid := messageID{ledger: id.LedgerId, entry: id.EntryId, batchIdx: -1, partition: pp.partition}
		if b.req.Metadata.NumMessagesInBatch != nil {
			mid.batchIdx, mid.batchSize = int32(i), int32(len(b.msgs))
		}
		<-pp.sem
		m.cb(mid, m.msg, nil)
	}
}

// failBatch fails the pending batch starting at seq.
func (pp *partitionProducer) failBatch(seq uint64, err error) {
	pp.mu.Lock()
	var b *pendingBatch
	for i, pb := range pp.mu.pending {
		if uint64(pb.msgs[0].seq) == seq {
			b = pb
			pp.mu.pending = append(pp.mu.pending[:i:i], pp.mu.pending[i+1:]...)
			b.finishLocked()
			break
		}
	}
	pp.idle.Broadcast()
	pp.mu.Unlock()
	if b != nil {
		for _, m := range b.msgs {
			<-pp.sem
			m.cb(nil, m.msg, err)
		}
	}
}

// failLargest fails the largest pending batch.
func (pp *partitionProducer) failLargest(err error) {
	pp.mu.Lock()
	var largest *pendingBatch
	for _, b := range pp.mu.pending {
		if largest == nil || proto.Size(b.req) > proto.Size(largest.req) {
			largest = b
		}
	}
	pp.mu.Unlock()
	if largest != nil {
		pp.failBatch(uint64(largest.msgs[0].seq), err)
	}
}

// expire fails the batches older than SendTimeout.
func (pp *partitionProducer) expire() int {
	if pp.opts.SendTimeout < 0 {
		return 0
	}
	cutoff := time.Now().Add(-pp.opts.SendTimeout)
	pp.mu.Lock()
	n := 0
	for n < len(pp.mu.pending) && pp.mu.pending[n].created.Before(cutoff) {
		n++
	}
	expired := pp.mu.pending[:n:n]
	pp.mu.pending = pp.mu.pending[n:]
	for _, b := range expired {
		b.finishLocked()
	}
	if n > 0 {
		pp.idle.Broadcast()
	}
	cause := pp.mu.cause
	pp.mu.Unlock()
	if n == 0 {
		return 0
	}
	err := fmt.Errorf("%w: no receipt within %v", ErrSendTimeout, pp.opts.SendTimeout)
	if cause != nil {
		// Name why: the send was refused (not enough bookies, say) or
		// the broker could not be reached, as often as it was tried.
		err = fmt.Errorf("%w: no receipt within %v; last failure: %w", ErrSendTimeout, pp.opts.SendTimeout, cause)
	}
	for _, b := range expired {
		for _, m := range b.msgs {
			<-pp.sem
			m.cb(nil, m.msg, err)
		}
	}
	return n
}

// failAll fails everything pending and batched.
func (pp *partitionProducer) failAll(err error) {
	pp.mu.Lock()
	if pp.mu.batchTimer != nil {
		pp.mu.batchTimer.Stop()
		pp.mu.batchTimer = nil
	}
	var msgs []*pendingMsg
	for _, b := range pp.mu.pending {
		msgs = append(msgs, b.msgs...)
		b.finishLocked()
	}
	msgs = append(msgs, pp.mu.batch...)
	pp.mu.pending, pp.mu.batch, pp.mu.outbox, pp.mu.batchBytes = nil, nil, nil, 0
	pp.idle.Broadcast()
	pp.mu.Unlock()
	for _, m := range msgs {
		<-pp.sem
		m.cb(nil, m.msg, err)
	}
}

// flush sends the current batch and waits until nothing is pending.
func (pp *partitionProducer) flush() error {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.flushLocked()
	for len(pp.mu.pending) > 0 && !pp.mu.closed {
		pp.idle.Wait()
	}
	if pp.mu.closed {
		return ErrClosed
	}
	return nil
}

// close flushes (waiting up to the send timeout), then stops.
func (pp *partitionProducer) close() {
	done := make(chan struct{})
	go func() {
		pp.flush()
		close(done)
	}()
	wait := pp.opts.SendTimeout
	if wait < 0 {
		wait = 30 * time.Second
	}
	select {
	case <-done:
	case <-time.After(wait):
	}
	pp.mu.Lock()
	if pp.mu.closed {
		pp.mu.Unlock()
		<-pp.done
		return
	}
	pp.mu.closed = true
	pp.idle.Broadcast()
	pp.mu.Unlock()
	close(pp.stop)
	<-pp.done
	<-done
}

// sameKey reports whether two messages have the same key and ordering key.
func sameKey(a, b *ProducerMessage) bool { return a.Key == b.Key && a.OrderingKey == b.OrderingKey }
