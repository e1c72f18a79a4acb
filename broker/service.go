package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/broker/internal/naming"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/wirecodec"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// service implements brokerpb.BrokerServer. Handlers return sentinel
// errors; the interceptors translate them once.
type service struct {
	brokerpb.UnimplementedBrokerServer
	s *Server
}

// Limits of the client protocol.
const (
	defaultReceiverQueue = 1000
	maxReceiverQueue     = 100000
	maxNameLength        = naming.MaxLength
	// maxPendingSends bounds a producer's sends taken and not yet
	// answered on the stream: being stored, or answered and waiting to be
	// written (behind an earlier send, or for a client that does not read
	// its answers). Past it the broker stops reading the stream (flow
	// control holds the client).
	maxPendingSends = 10000
)

func parseTopic(s string) (topicname.Name, error) {
	return topicname.Parse(s)
}

func (v *service) Lookup(ctx context.Context, req *brokerpb.LookupRequest) (*brokerpb.LookupResponse, error) {
	n, err := parseTopic(req.Topic)
	if err != nil {
		return nil, err
	}
	if err := v.s.authz.checkTopic(ctx, n, opLookup, ""); err != nil {
		return nil, err
	}
	start := time.Now()
	addr, err := v.s.lookup(ctx, n)
	v.s.metrics.lookedUp(v.s.id, addr, err, time.Since(start))
	if err != nil {
		return nil, err
	}
	return &brokerpb.LookupResponse{BrokerAddress: addr}, nil
}

func (v *service) PartitionedMetadata(ctx context.Context, req *brokerpb.PartitionedMetadataRequest) (*brokerpb.PartitionedMetadataResponse, error) {
	n, err := parseTopic(req.Topic)
	if err != nil {
		return nil, err
	}
	if err := v.s.authz.checkTopic(ctx, n, opLookup, ""); err != nil {
		return nil, err
	}
	if _, err := v.s.md.policies(ctx, n.NamespaceName()); err != nil {
		return nil, err
	}
	parts, err := v.s.md.partitions(ctx, n)
	if err != nil {
		return nil, err
	}
	return &brokerpb.PartitionedMetadataResponse{Partitions: uint32(parts)}, nil
}

func (v *service) GetLastMessageId(ctx context.Context, req *brokerpb.GetLastMessageIdRequest) (*brokerpb.GetLastMessageIdResponse, error) {
	n, err := parseTopic(req.Topic)
	if err != nil {
		return nil, err
	}
	if err := v.s.authz.checkTopic(ctx, n, opConsume, ""); err != nil {
		return nil, err
	}
	if !n.Persistent() {
		return nil, errorf(ErrNonPersistent, "%s stores no messages: it has no last message id", n)
	}
	t, err := v.s.getTopic(ctx, n, false)
	if err != nil {
		return nil, err
	}
	last := t.ml.LastConfirmed()
	return &brokerpb.GetLastMessageIdResponse{MessageId: t.messageID(last, -1, 0)}, nil
}

// Produce serves one producer.
func (v *service) Produce(stream brokerpb.Broker_ProduceServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return errorf(ErrInvalidArgument, "a producer stream starts with ProducerOpen")
	}
	n, err := parseTopic(open.Topic)
	if err != nil {
		return err
	}
	if open.ProducerName != "" {
		if err := naming.Check("producer", open.ProducerName); err != nil {
			return err
		}
	}
	if err := v.s.authz.checkTopic(ctx, n, opProduce, ""); err != nil {
		return err
	}
	t, err := v.s.getTopic(ctx, n, true)
	if err != nil {
		return err
	}
	if err := v.s.checkSchemaless(ctx, n); err != nil { // the SDK's producers have none
		return err
	}
	p := newProducer(open.ProducerName, maxPendingSends)
	p.t = t
	if err := t.addProducer(p); err != nil {
		return err
	}
	defer t.removeProducer(p)
	p.push(&brokerpb.ProduceResponse{Response: &brokerpb.ProduceResponse_Opened{Opened: &brokerpb.ProducerOpened{
		ProducerName: p.name, LastSequenceId: p.lastSequence, MaxMessageSize: uint32(v.s.cfg.MaxMessageSize),
		SendsTogether: true}}})

	// p.slots holds a slot per send taken, from before it is taken until
	// its answer is written (sendLoop): answers a client does not read
	// stop the broker taking more sends rather than pile up.
	pending := p.slots
	sendDone := make(chan error, 1)
	go func() { sendDone <- p.sendLoop(stream.Send, open.ReceiptsTogether) }()
	recvErr := make(chan error, 1)
	// take publishes one send, or answers it with an error; an error of
	// its own ends the stream (the payload released either way).
	take := func(send *brokerpb.Send) error {
		if !p.acquire(ctx) {
			wirecodec.Release(send.Payload)
			if err := ctx.Err(); err != nil {
				return err
			}
			return io.EOF // disconnected: the handler is returning
		}
		seq := send.SequenceId
		if p.isDisconnected() {
			wirecodec.Release(send.Payload)
			<-pending
			return io.EOF // the handler is returning: take nothing more
		}
		// A send's slot is released only after its answer is written
		// (by the sender): a stream ended by its token's expiry or by
		// the client holds every slot before it disconnects the producer
		// (which drops what is queued after), so every send taken is
		// answered. Released first, a stored send could go unanswered
		// and the client would store it again. (A topic unload does not
		// wait: sends in flight then are resent, deduplicated only with
		// deduplication on, as in Pulsar.)
		//
		// Its answer goes out after those of the sends before it, even
		// when it is decided first (refused here, or by publish at once).
		ticket := p.take()
		if p.hasFailed() {
			wirecodec.Release(send.Payload)
			p.fail(ticket, seq, errorf(ErrServiceNotReady, "an earlier send of this producer failed: reconnect and resend from it"))
			return nil
		}
		if size := len(send.Payload); size > v.s.cfg.MaxMessageSize {
			wirecodec.Release(send.Payload)
			p.fail(ticket, seq, errorf(ErrMessageTooLarge, "message of %d bytes, the maximum is %d", size, v.s.cfg.MaxMessageSize))
			return nil
		}
		t.publish(ctx, p, send, func(pos mledger.Position, dup bool, err error) {
			if err != nil {
				p.fail(ticket, seq, err)
				return
			}
			p.answer(ticket, newReceipt(t, seq, pos, dup))
		})
		// publish copied the payload into the entry before returning
		// (or refused it): the pooled buffer goes back.
		wirecodec.Release(send.Payload)
		return nil
	}
	v.s.wg.Add(1) // under the gRPC server's count: before Close waits
	go func() {
		defer v.s.wg.Done()
		var one [1]*brokerpb.Send
		for {
			req, err := stream.Recv()
			if status.Code(err) == codes.ResourceExhausted {
				// Larger than the transport takes (MaxMessageSize + 1 MiB):
				// not even read. The stream ends with MESSAGE_TOO_LARGE.
				err = errorf(ErrMessageTooLarge, "a send larger than the maximum message size of %d bytes: %v", v.s.cfg.MaxMessageSize, err)
			}
			if err != nil {
				recvErr <- err
				return
			}
			var sends []*brokerpb.Send
			switch r := req.Request.(type) {
			case *brokerpb.ProduceRequest_Send:
				one[0] = r.Send
				sends = one[:]
			case *brokerpb.ProduceRequest_Sends:
				sends = r.Sends.GetSends() // the codec refused more than wirecodec.MaxSends
			}
			if len(sends) == 0 || slices.Contains(sends, nil) {
				for _, send := range sends {
					wirecodec.Release(send.GetPayload())
				}
				recvErr <- errorf(ErrInvalidArgument, "unexpected %T on a producer stream", req.Request)
				return
			}
			for i, send := range sends {
				if err := take(send); err != nil {
					for _, rest := range sends[i+1:] {
						wirecodec.Release(rest.Payload)
					}
					recvErr <- err
					return
				}
			}
		}
	}()
	// A stream ends when its token expires; the client reconnects with a
	// fresh one.
	expired, stopExpiry := auth.ExpiryTimer(ctx)
	defer stopExpiry()
	// answered waits until every send taken is answered on the stream
	// (holding every pending slot stops the receiver taking more), the
	// sender ends (the stream broke, or the topic disconnected the
	// producer: later answers are dropped) or the stream does, then
	// disconnects the producer and returns the sender's error.
	answered := func() error {
		if h := testHookAnswering.Load(); h != nil {
			(*h)()
		}
		for i := 0; i < cap(pending); i++ {
			select {
			case pending <- struct{}{}:
			case err := <-sendDone: // the sender ended: no more answers
				p.disconnect(io.EOF)
				return err
			case <-ctx.Done():
				i = cap(pending)
			}
		}
		p.disconnect(io.EOF)
		return <-sendDone
	}
	select {
	case <-expired:
		// As below: every send taken is answered before the stream ends;
		// what the client sent after is not stored, and it resends it.
		answered()
		return auth.ExpiredError(auth.Expiry(ctx))
	case err := <-recvErr:
		// Answer what was taken before ending the stream.
		if serr := answered(); serr != nil && !errors.Is(serr, io.EOF) && err == io.EOF {
			return serr
		}
		if err == io.EOF {
			return nil
		}
		return err
	case err := <-sendDone:
		// Disconnected (the topic unloads) or broken. Returning ends the
		// stream, which ends the receiving goroutine's Recv (nothing else
		// can: gRPC has no way to interrupt a handler's own Recv); the
		// server waits for it when it stops.
		p.disconnect(io.EOF)
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

// Consume serves one consumer.
func (v *service) Consume(stream brokerpb.Broker_ConsumeServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	req := first.GetSubscribe()
	if req == nil {
		return errorf(ErrInvalidArgument, "a consumer stream starts with Subscribe")
	}
	n, err := parseTopic(req.Topic)
	if err != nil {
		return err
	}
	if err := naming.Check("subscription", req.Subscription); err != nil {
		return err
	}
	switch req.Type {
	case brokerpb.SubscriptionType_EXCLUSIVE, brokerpb.SubscriptionType_FAILOVER, brokerpb.SubscriptionType_SHARED:
	case brokerpb.SubscriptionType_KEY_SHARED:
		if req.KeyShared.GetMode() == brokerpb.KeySharedMode_STICKY {
			if _, err := checkHashRanges(req.KeyShared); err != nil {
				return err
			}
		}
	default:
		return errorf(ErrInvalidArgument, "unknown subscription type %d", req.Type)
	}
	// A reader's subscription is its own and ends with it: the prefix
	// rule is for the durable ones.
	durableSub := ""
	if req.Durable {
		durableSub = req.Subscription
	}
	if err := v.s.authz.checkTopic(ctx, n, opConsume, durableSub); err != nil {
		return err
	}
	queue := int(req.ReceiverQueueSize)
	if queue == 0 {
		queue = defaultReceiverQueue
	}
	if queue < 1 || queue > maxReceiverQueue {
		return errorf(ErrInvalidArgument, "receiver queue size %d must be in 1..%d", queue, maxReceiverQueue)
	}
	t, err := v.s.getTopic(ctx, n, true)
	if err != nil {
		return err
	}
	c := newConsumer(req, queue)
	// Queued first: the subscription may tell the consumer it is active as
	// soon as it joins.
	c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Subscribed{Subscribed: &brokerpb.Subscribed{}}})
	sub, err := t.subscribe(ctx, req, c)
	if err != nil {
		return err
	}
	defer func() {
		sub.removeConsumer(c)
		t.dropNonDurable(sub)
	}()
	sendDone := make(chan error, 1)
	go func() {
		for {
			q, err := c.next()
			if err != nil {
				sendDone <- err
				return
			}
			for _, r := range q {
				if err := stream.Send(r); err != nil {
					sendDone <- err
					return
				}
			}
		}
	}()
	recvDone := make(chan error, 1)
	v.s.wg.Add(1) // ends with the stream; the server waits for it when it stops
	go func() {
		defer v.s.wg.Done()
		recvDone <- v.consumeRequests(ctx, stream, t, sub, c)
	}()
	expired, stopExpiry := auth.ExpiryTimer(ctx)
	defer stopExpiry()
	select {
	case <-expired:
		c.disconnect(io.EOF)
		<-sendDone
		return auth.ExpiredError(auth.Expiry(ctx))
	case err := <-recvDone:
		c.disconnect(io.EOF)
		<-sendDone
		if err == io.EOF {
			return nil
		}
		return err
	case err := <-sendDone:
		c.disconnect(err) // ends nothing more; the receiver ends with the stream
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

// discardedLabel is the metric label of a reason for dropping entries:
// one of a fixed few, whatever a client sends.
func discardedLabel(r brokerpb.DiscardReason) string {
	switch r {
	case brokerpb.DiscardReason_DISCARD_REASON_CHECKSUM_MISMATCH:
		return "checksum_mismatch"
	case brokerpb.DiscardReason_DISCARD_REASON_DECOMPRESSION_ERROR:
		return "decompression_error"
	case brokerpb.DiscardReason_DISCARD_REASON_BATCH_ERROR:
		return "batch_error"
	case brokerpb.DiscardReason_DISCARD_REASON_DECRYPTION_ERROR:
		return "decryption_error"
	}
	return "other"
}

// consumeRequests handles what a consumer sends after subscribing.
func (v *service) consumeRequests(ctx context.Context, stream brokerpb.Broker_ConsumeServer, t *topic, sub *subscription, c *consumer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		switch r := req.Request.(type) {
		case *brokerpb.ConsumeRequest_Flow:
			c.addPermits(int(min(r.Flow.Permits, maxReceiverQueue)))
		case *brokerpb.ConsumeRequest_Ack:
			applied, err := sub.ack(r.Ack.MessageIds, r.Ack.Cumulative)
			if err != nil {
				reason, _, _ := reasonOf(err)
				c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Error{Error: &brokerpb.ConsumerError{Reason: reason, Message: err.Error()}}})
			}
			if r.Ack.Discarded != brokerpb.DiscardReason_DISCARD_REASON_UNSPECIFIED {
				sub.discarded(c.name, applied, discardedLabel(r.Ack.Discarded)) // what applied
			}
		case *brokerpb.ConsumeRequest_Redeliver:
			sub.redeliver(c, r.Redeliver.MessageIds)
		case *brokerpb.ConsumeRequest_Seek:
			if t.ml == nil {
				err := errorf(ErrNonPersistent, "seek: %s stores no messages to go back to", t.name)
				c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Error{Error: &brokerpb.ConsumerError{Reason: brokerpb.ErrorReason_NOT_ALLOWED, Message: err.Error()}}})
				continue
			}
			var target mledger.Position
			switch s := r.Seek.Target.(type) {
			case *brokerpb.Seek_MessageId:
				target = mledger.Position{Ledger: s.MessageId.LedgerId, Entry: s.MessageId.EntryId}
			case *brokerpb.Seek_PublishTimeUnixMs:
				if target, err = t.findByTime(ctx, s.PublishTimeUnixMs); err != nil {
					return err
				}
			default:
				return errorf(ErrInvalidArgument, "seek without a target")
			}
			sub.seek(target, c) // answers SeekDone
			if h := testHookSeekHandled.Load(); h != nil {
				(*h)()
			}
		case *brokerpb.ConsumeRequest_Subscribe:
			return errorf(ErrInvalidArgument, "already subscribed on this stream")
		default:
			return errorf(ErrInvalidArgument, "unexpected %T on a consumer stream", req.Request)
		}
	}
}

// testHookAnswering, when set by a test, runs in a producer stream's
// handler when it starts waiting for the answers of the sends it took,
// before the stream ends.
var testHookAnswering atomic.Pointer[func()]

// testHookSeekHandled, when set by a test, runs in a consumer stream's
// handler after a seek was handled.
var testHookSeekHandled atomic.Pointer[func()]

func unaryErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	return resp, toStatus(err)
}

func streamErrors(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return toStatus(h(srv, ss))
}

func recoverUnary(log *zap.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in handler", zap.String("method", info.FullMethod), zap.Any("panic", p), zap.Stack("stack"))
				err = fmt.Errorf("internal error in %s", info.FullMethod)
			}
		}()
		return h(ctx, req)
	}
}

func recoverStream(log *zap.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in handler", zap.String("method", info.FullMethod), zap.Any("panic", p), zap.Stack("stack"))
				err = fmt.Errorf("internal error in %s", info.FullMethod)
			}
		}()
		return h(srv, ss)
	}
}
