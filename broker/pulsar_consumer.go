package broker

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/broker/internal/cursor"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/broker/internal/naming"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// The consumer side of Pulsar's protocol. A consumer is the broker's own
// consumer (the gRPC stream's): the subscription dispatches to it within
// the permits FLOW grants, and its pump turns what is queued for it into
// frames. MESSAGE carries the stored entry as it is (Pulsar's layout).

// pulsarConsumer is a consumer of the connection.
type pulsarConsumer struct {
	id  uint64
	c   *consumer
	t   *topic
	sub *subscription
	// subscribeRequest is answered (SUCCESS) when the consumer's Subscribed
	// comes out of its queue. seek holds the request id of the seek in
	// flight, answered when its SeekDone does: one at a time, since a seek
	// closes the consumer. A request id goes in only while the consumer is
	// on the connection (both under pulsarConn.mu), and the pump takes it
	// out only once it has taken the consumer off: no seek is left
	// unanswered.
	subscribeRequest uint64
	seek             chan uint64

	// active holds back ACTIVE_CONSUMER_CHANGE until the consumer's first
	// FLOW, or activeNoticeDelay after the first notice held, whichever
	// comes first: pulsar-client-go registers a consumer on its connection
	// only after SUBSCRIBE's SUCCESS, and drops a notification that comes
	// before, so one sent at subscribe time would be lost (Pulsar's broker
	// sends it a second later, activeConsumerFailoverDelayTimeMillis). The
	// client's first FLOW comes once it is registered; the delay covers a
	// consumer that sends no FLOW before it receives (Java's zero receiver
	// queue). Only the latest state is held.
	active struct {
		sync.Mutex
		released bool        // notices go out at once
		gone     bool        // the consumer went: nothing more is sent
		held     *bool       // the one held back
		timer    *time.Timer // releases after activeNoticeDelay; stopped when the consumer goes
	}
}

// activeNoticeDelay is Pulsar's activeConsumerFailoverDelayTimeMillis
// default.
const activeNoticeDelay = time.Second

// notifyActive sends ACTIVE_CONSUMER_CHANGE, or holds it until release.
func (pcons *pulsarConsumer) notifyActive(pc *pulsarConn, isActive bool) {
	pcons.active.Lock()
	defer pcons.active.Unlock() // held while sending: notifications stay in order
	if pcons.active.gone {
		return
	}
	if !pcons.active.released {
		pcons.active.held = &isActive
		if pcons.active.timer == nil {
			pcons.active.timer = time.AfterFunc(activeNoticeDelay, func() { pcons.releaseActive(pc) })
		}
		return
	}
	pc.send(activeConsumerChange(pcons.id, isActive), nil)
}

// releaseActive lets notices go out at once from now on, and sends the one
// held back (at the consumer's first FLOW, or after activeNoticeDelay).
func (pcons *pulsarConsumer) releaseActive(pc *pulsarConn) {
	pcons.active.Lock()
	defer pcons.active.Unlock()
	if pcons.active.released || pcons.active.gone {
		return
	}
	pcons.active.released = true
	if pcons.active.timer != nil {
		pcons.active.timer.Stop()
	}
	if held := pcons.active.held; held != nil {
		pcons.active.held = nil
		pc.send(activeConsumerChange(pcons.id, *held), nil)
	}
}

// stopActive stops the release timer of a consumer that goes.
func (pcons *pulsarConsumer) stopActive() {
	pcons.active.Lock()
	defer pcons.active.Unlock()
	pcons.active.gone = true
	pcons.active.held = nil
	if pcons.active.timer != nil {
		pcons.active.timer.Stop()
	}
}

func activeConsumerChange(id uint64, isActive bool) *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACTIVE_CONSUMER_CHANGE.Enum(), ActiveConsumerChange: &pulsarpb.CommandActiveConsumerChange{
		ConsumerId: proto.Uint64(id), IsActive: proto.Bool(isActive)}}
}

// topicNameOrRaw is a topic's full name, or s itself when it does not
// parse.
func topicNameOrRaw(s string) string {
	if n, err := parseTopic(s); err == nil {
		return n.String()
	}
	return s
}

// subscribeRequest turns SUBSCRIBE into the broker's Subscribe.
func subscribeRequest(c *pulsarpb.CommandSubscribe) (*brokerpb.Subscribe, error) {
	req := &brokerpb.Subscribe{Topic: c.GetTopic(), Subscription: c.GetSubscription(), ConsumerName: c.GetConsumerName(),
		PriorityLevel: c.GetPriorityLevel(), Durable: c.GetDurable(), ReceiverQueueSize: defaultReceiverQueue}
	switch c.GetSubType() {
	case pulsarpb.CommandSubscribe_Exclusive:
		req.Type = brokerpb.SubscriptionType_EXCLUSIVE
	case pulsarpb.CommandSubscribe_Shared:
		req.Type = brokerpb.SubscriptionType_SHARED
	case pulsarpb.CommandSubscribe_Failover:
		req.Type = brokerpb.SubscriptionType_FAILOVER
	case pulsarpb.CommandSubscribe_Key_Shared:
		req.Type = brokerpb.SubscriptionType_KEY_SHARED
		ks := &brokerpb.KeySharedMeta{}
		if m := c.GetKeySharedMeta(); m != nil {
			if m.GetKeySharedMode() == pulsarpb.KeySharedMode_STICKY {
				ks.Mode = brokerpb.KeySharedMode_STICKY
			}
			for _, r := range m.GetHashRanges() {
				ks.HashRanges = append(ks.HashRanges, &brokerpb.HashRange{Start: r.GetStart(), End: r.GetEnd()})
			}
		}
		req.KeyShared = ks
	}
	if c.GetInitialPosition() == pulsarpb.CommandSubscribe_Earliest {
		req.InitialPosition = brokerpb.InitialPosition_EARLIEST
	}
	// A reader starts at the entry of the id given, included: Pulsar's
	// broker positions a non-durable cursor one entry before it, and the
	// client drops the messages it does not want (those before its start,
	// or up to it when not inclusive, inside a batch too). -1:-1 is the
	// earliest, the largest id the latest.
	if id := c.GetStartMessageId(); id != nil && !req.Durable {
		l, e := int64(id.GetLedgerId()), int64(id.GetEntryId())
		switch {
		case l < 0 || e < 0 && l <= 0:
			req.InitialPosition = brokerpb.InitialPosition_EARLIEST
		case l == math.MaxInt64:
			req.InitialPosition = brokerpb.InitialPosition_LATEST
		default:
			req.StartMessageId = &brokerpb.MessageId{LedgerId: l, EntryId: e, Partition: id.GetPartition(), BatchIndex: -1}
			req.StartInclusive = true
		}
	}
	// Subscription properties and replicated state are not kept.
	return req, nil
}

// subscribe handles SUBSCRIBE.
func (pc *pulsarConn) subscribe(c *pulsarpb.CommandSubscribe) {
	id := c.GetConsumerId()
	pc.mu.Lock()
	delete(pc.mu.seekClosed, id) // the client has handled the close
	pc.mu.Unlock()
	pcons, err := func() (*pulsarConsumer, error) {
		pc.mu.Lock()
		existing := pc.mu.consumers[id]
		pc.mu.Unlock()
		if existing != nil {
			// Asked again (the first answer was late): as Pulsar, answered
			// again when it is the same subscription.
			if existing.t.name.String() == topicNameOrRaw(c.GetTopic()) && existing.sub.name == c.GetSubscription() {
				return existing, errAlreadyOpen
			}
			return nil, errorf(ErrConsumerBusy, "consumer id %d is in use on this connection", id)
		}
		req, err := subscribeRequest(c)
		if err != nil {
			return nil, err
		}
		n, err := parseTopic(req.Topic)
		if err != nil {
			return nil, err
		}
		if err := naming.Check("subscription", req.Subscription); err != nil {
			return nil, err
		}
		// Checked before anything is created for the consumer.
		client, err := newClientInfo(c.GetMetadata(), pc.clientVersion, pc.conn.RemoteAddr().String())
		if err != nil {
			return nil, err
		}
		if req.Type == brokerpb.SubscriptionType_KEY_SHARED && req.KeyShared.GetMode() == brokerpb.KeySharedMode_STICKY {
			if _, err := checkHashRanges(req.KeyShared); err != nil {
				return nil, err
			}
		}
		durableSub := ""
		if req.Durable {
			durableSub = req.Subscription
		}
		if err := pc.s.authz.checkTopic(pc.ctx, n, opConsume, durableSub); err != nil {
			return nil, err
		}
		t, err := pc.s.getTopic(pc.ctx, n, c.GetForceTopicCreation())
		if err != nil {
			return nil, err
		}
		// A consumer's schema: added to a topic that has none, checked
		// otherwise (as Pulsar).
		if err := pc.s.checkConsumerSchema(pc.ctx, n, c.GetSchema()); err != nil {
			return nil, err
		}
		// Pulsar dispatches an entry whenever the consumer has a permit,
		// however many messages it holds (its clients count permits by
		// message and may ask for fewer than a batch): a receive queue of
		// one lets any entry go once a permit is there.
		cons := newConsumer(req, 1)
		cons.maxOutstanding = pulsarConsumerMaxOutstanding
		cons.client = client
		cons.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Subscribed{Subscribed: &brokerpb.Subscribed{}}})
		sub, err := t.subscribe(pc.ctx, req, cons)
		if err != nil {
			return nil, err
		}
		return &pulsarConsumer{id: id, c: cons, t: t, sub: sub, subscribeRequest: c.GetRequestId(), seek: make(chan uint64, 1)}, nil
	}()
	if errors.Is(err, errAlreadyOpen) {
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(c.GetRequestId())}}, nil)
		return
	}
	if err != nil {
		pc.send(errorCommand(c.GetRequestId(), err), nil)
		return
	}
	pc.mu.Lock()
	if pc.ctx.Err() != nil { // the connection ended meanwhile
		pc.mu.Unlock()
		pc.dropConsumer(pcons, false)
		return
	}
	pc.mu.consumers[id] = pcons
	pc.mu.Unlock()
	pc.wg.Add(1)
	go pc.consumerPump(pcons)
}

// pulsarConsumerMaxOutstanding bounds the bytes dispatched to a Pulsar
// client's consumer and not yet handed to its connection's writer (plus
// one entry): with the connection's high-water mark, what a client that
// grants permits and does not read costs the broker.
const pulsarConsumerMaxOutstanding = 1 << 20

// consumerPump turns what is queued for a consumer into frames. When the
// broker disconnects the consumer (its topic unloads, a seek), the client
// is told to close it; it subscribes again.
func (pc *pulsarConn) consumerPump(pcons *pulsarConsumer) {
	defer pc.wg.Done()
	for {
		q, err := pcons.c.next()
		for _, r := range q {
			switch r := r.Response.(type) {
			case *brokerpb.ConsumeResponse_Subscribed:
				pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(pcons.subscribeRequest)}}, nil)
			case *brokerpb.ConsumeResponse_Message:
				// Not more than the high-water mark queued behind a
				// client that does not read (whatever permits it gave);
				// while the pump waits, the consumer's own bound
				// (maxOutstanding) stops the dispatch to it.
				if !pc.waitWritable() {
					return // the connection ended: serve drops the consumer
				}
				pc.sendMessage(pcons.id, r.Message)
				pcons.c.sent(r.Message)
			case *brokerpb.ConsumeResponse_ActiveChange:
				pcons.notifyActive(pc, r.ActiveChange.GetIsActive())
			case *brokerpb.ConsumeResponse_SeekDone:
				// As Pulsar, whose subscription disconnects its consumers
				// before it resets the cursor and answers: the consumer
				// is closed (CLOSE_CONSUMER) and then the seek answered,
				// and nothing more is sent for it (what was dispatched to
				// it from the new position is the next consumer's). So
				// what the client asks once its seek has returned (a
				// reader's HasNext: GET_LAST_MESSAGE_ID) is refused until
				// it has subscribed again from the new position, and then
				// asked again; answered by the consumer being closed, it
				// was compared with the client's start from before the
				// seek.
				pc.closeConsumerOf(pcons, true)
				return
			case *brokerpb.ConsumeResponse_ReachedEndOfTopic:
				pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_REACHED_END_OF_TOPIC.Enum(), ReachedEndOfTopic: &pulsarpb.CommandReachedEndOfTopic{
					ConsumerId: proto.Uint64(pcons.id)}}, nil)
			case *brokerpb.ConsumeResponse_Error:
				pc.log.Debug("consumer error (Pulsar's protocol has no frame for it)")
			}
		}
		if err != nil {
			pc.closeConsumerOf(pcons, false)
			return
		}
	}
}

// closeConsumerOf takes a consumer the broker disconnected off the
// connection, tells the client (CLOSE_CONSUMER), and then answers the
// seek in flight: SUCCESS if seekDone, an error if the consumer went
// before its seek was done. A consumer the client closed meanwhile, or
// whose connection ended, was dropped already; its seek is still
// answered (on a connection that ended, the answer goes nowhere).
func (pc *pulsarConn) closeConsumerOf(pcons *pulsarConsumer, seekDone bool) {
	pc.mu.Lock()
	mine := pc.mu.consumers[pcons.id] == pcons
	if mine {
		delete(pc.mu.consumers, pcons.id)
		if seekDone {
			if len(pc.mu.seekClosed) >= maxClosedProducers {
				for id := range pc.mu.seekClosed {
					delete(pc.mu.seekClosed, id)
					break
				}
			}
			pc.mu.seekClosed[pcons.id] = seekClosedSub{pcons.t, pcons.sub}
		}
	}
	pc.mu.Unlock()
	if mine {
		pc.dropConsumer(pcons, seekDone)
		if pc.ctx.Err() == nil {
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pulsarpb.CommandCloseConsumer{
				ConsumerId: proto.Uint64(pcons.id), RequestId: proto.Uint64(noRequestID)}}, nil)
		}
	}
	// Off the connection: no seek comes in any more.
	select {
	case id := <-pcons.seek:
		if seekDone {
			pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(id)}}, nil)
		} else {
			pc.send(errorCommand(id, errorf(ErrServiceNotReady, "consumer %d closed before its seek was done", pcons.id)), nil)
		}
	default:
	}
}

// sendMessage sends one delivered entry as a MESSAGE frame; the batch's
// messages already acknowledged are left out of its ack_set.
func (pc *pulsarConn) sendMessage(consumerID uint64, m *brokerpb.Message) {
	id := m.GetMessageId()
	cmd := &pulsarpb.CommandMessage{ConsumerId: proto.Uint64(consumerID), RedeliveryCount: proto.Uint32(m.GetRedeliveryCount()),
		MessageId: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(uint64(id.GetLedgerId())), EntryId: proto.Uint64(uint64(id.GetEntryId())),
			Partition: proto.Int32(id.GetPartition())}}
	if acked := m.GetAckedBatchIndexes(); len(acked) > 0 {
		if md, _, err := entry.DecodeUnchecked(m.GetEntry()); err == nil && md.GetNumMessagesInBatch() > 0 {
			cmd.AckSet = unackedSet(min(int(md.GetNumMessagesInBatch()), cursor.MaxBatchSize), acked)
		}
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_MESSAGE.Enum(), Message: cmd}, m.GetEntry())
}

// batchSize is the number of messages of the stored entry at id (1 for a
// single message), at most cursor.MaxBatchSize.
func (pcons *pulsarConsumer) batchSize(ctx context.Context, id *brokerpb.MessageId) (int, error) {
	p := mledger.Position{Ledger: id.LedgerId, Entry: id.EntryId}
	es, err := pcons.t.ml.Read(ctx, p, 1)
	if err != nil {
		return 0, err
	}
	if len(es) == 0 || es[0].Pos != p {
		return 0, errorf(ErrInvalidArgument, "no entry %v to acknowledge messages of", p)
	}
	md, _, err := entry.DecodeUnchecked(es[0].Data)
	if err != nil {
		return 0, errorf(ErrInvalidMessage, "entry %v: %v", p, err)
	}
	n := int(md.GetNumMessagesInBatch())
	if n < 1 {
		n = 1
	}
	return min(n, cursor.MaxBatchSize), nil
}

// unackedSet is Pulsar's ack set of a batch of n: bit i set while message
// i is not acknowledged, in 64-bit words.
func unackedSet(n int, acked []int32) []int64 {
	words := make([]uint64, (n+63)/64)
	for i := 0; i < n; i++ {
		words[i/64] |= 1 << (i % 64)
	}
	for _, i := range acked {
		if i >= 0 && int(i) < n {
			words[i/64] &^= 1 << (i % 64)
		}
	}
	out := make([]int64, len(words))
	for i, w := range words {
		out[i] = int64(w)
	}
	return out
}

// ackedIndexes are the batch indexes an ack set marks acknowledged (bit
// clear) among size messages.
func ackedIndexes(set []int64, size int) []int32 {
	var out []int32
	for i := 0; i < size && i/64 < len(set); i++ {
		if uint64(set[i/64])&(1<<(i%64)) == 0 {
			out = append(out, int32(i))
		}
	}
	return out
}

// dropConsumer removes a consumer from its subscription (a reader's
// subscription goes with it, unless a seek closed the consumer: it is kept
// for the consumer to come back) and ends its pump.
func (pc *pulsarConn) dropConsumer(pcons *pulsarConsumer, seeked bool) {
	if seeked {
		pcons.t.keepNonDurable(pcons.sub) // before the consumer goes: never found without both
	}
	pcons.stopActive()
	pcons.sub.removeConsumer(pcons.c)
	pcons.t.dropNonDurable(pcons.sub)
	pcons.c.disconnect(io.EOF)
}

func (pc *pulsarConn) consumerOf(id uint64) *pulsarConsumer {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.mu.consumers[id]
}

// flow adds a FLOW's permits, all of them: a Pulsar client asks for more
// only once it has received half of its receive queue, so a FLOW cut short
// (at the SDK's cap on a receive queue, say) left a client with a queue
// over twice that waiting for good. What a consumer holds is bounded
// anyway: its permits at 2^30, the bytes queued for it by
// pulsarConsumerMaxOutstanding.
func (pc *pulsarConn) flow(c *pulsarpb.CommandFlow) {
	if pcons := pc.consumerOf(c.GetConsumerId()); pcons != nil {
		pcons.releaseActive(pc)
		pcons.c.addPermits(int(min(c.GetMessagePermits(), 1<<30)))
	}
}

// ack handles ACK: individual (an ack set acknowledges some messages of a
// batch) or cumulative. With a request id (ack receipts), ACK_RESPONSE
// answers it.
func (pc *pulsarConn) ack(c *pulsarpb.CommandAck) {
	pcons := pc.consumerOf(c.GetConsumerId())
	var err error
	if pcons == nil {
		err = errorf(ErrNotAllowed, "no consumer %d on this connection", c.GetConsumerId())
	} else {
		cumulative := c.GetAckType() == pulsarpb.CommandAck_Cumulative
		var ids []*brokerpb.MessageId
		for _, id := range c.GetMessageId() {
			base := &brokerpb.MessageId{LedgerId: int64(id.GetLedgerId()), EntryId: int64(id.GetEntryId()), Partition: id.GetPartition(), BatchIndex: -1}
			set := id.GetAckSet()
			if len(set) == 0 || pcons.t.ml == nil { // non-persistent: sub.ack does nothing with them
				ids = append(ids, base)
				continue
			}
			// Some messages of a batch (batch index acknowledgement). The
			// client does not say the batch's size: the stored entry does.
			size, serr := pcons.batchSize(pc.ctx, base)
			if serr != nil {
				err = serr
				break
			}
			if len(set) > (size+63)/64 {
				err = errorf(ErrInvalidArgument, "ack set of %d words for a batch of %d", len(set), size)
				break
			}
			acked := ackedIndexes(set, size)
			if cumulative {
				// Up to the last acknowledged index of the leading run.
				k := -1
				for _, i := range acked {
					if int(i) != k+1 {
						break
					}
					k = int(i)
				}
				if k < 0 {
					continue // nothing of this batch yet
				}
				base.BatchIndex, base.BatchSize = int32(k), int32(size)
				ids = append(ids, base)
				continue
			}
			for _, i := range acked {
				one := proto.Clone(base).(*brokerpb.MessageId)
				one.BatchIndex, one.BatchSize = i, int32(size)
				ids = append(ids, one)
			}
		}
		if err == nil {
			var applied []*brokerpb.MessageId
			applied, err = pcons.sub.ack(ids, cumulative)
			if c.ValidationError != nil {
				pcons.sub.discarded(pcons.c.name, applied, discardedLabel(discardReason(c.GetValidationError()))) // what applied
			}
		}
	}
	if c.RequestId != nil {
		resp := &pulsarpb.CommandAckResponse{ConsumerId: c.ConsumerId, RequestId: c.RequestId}
		if err != nil {
			resp.Error, resp.Message = serverError(err).Enum(), proto.String(err.Error())
		}
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: resp}, nil)
	}
}

// discardReason is a Pulsar client's reason for dropping a message unread
// as Ack.discarded gives it.
func discardReason(v pulsarpb.CommandAck_ValidationError) brokerpb.DiscardReason {
	switch v {
	case pulsarpb.CommandAck_UncompressedSizeCorruption, pulsarpb.CommandAck_DecompressionError:
		return brokerpb.DiscardReason_DISCARD_REASON_DECOMPRESSION_ERROR
	case pulsarpb.CommandAck_ChecksumMismatch:
		return brokerpb.DiscardReason_DISCARD_REASON_CHECKSUM_MISMATCH
	case pulsarpb.CommandAck_BatchDeSerializeError:
		return brokerpb.DiscardReason_DISCARD_REASON_BATCH_ERROR
	case pulsarpb.CommandAck_DecryptionError:
		return brokerpb.DiscardReason_DISCARD_REASON_DECRYPTION_ERROR
	}
	return brokerpb.DiscardReason_DISCARD_REASON_UNSPECIFIED
}

func (pc *pulsarConn) redeliver(c *pulsarpb.CommandRedeliverUnacknowledgedMessages) {
	pcons := pc.consumerOf(c.GetConsumerId())
	if pcons == nil {
		return
	}
	var ids []*brokerpb.MessageId
	for _, id := range c.GetMessageIds() {
		ids = append(ids, &brokerpb.MessageId{LedgerId: int64(id.GetLedgerId()), EntryId: int64(id.GetEntryId()), Partition: id.GetPartition(), BatchIndex: -1})
	}
	pcons.sub.redeliver(pcons.c, ids)
}

// seek handles SEEK to a message id or a publish time.
func (pc *pulsarConn) seek(c *pulsarpb.CommandSeek) {
	pc.mu.Lock()
	pcons := pc.mu.consumers[c.GetConsumerId()]
	closed, wasClosed := pc.mu.seekClosed[c.GetConsumerId()]
	pc.mu.Unlock()
	t := closed.t
	switch {
	case pcons != nil:
		t = pcons.t
	case !wasClosed:
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrNotAllowed, "no consumer %d on this connection", c.GetConsumerId())), nil)
		return
	}
	if t.ml == nil {
		// Refused (Pulsar answers success and does nothing).
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrNonPersistent, "seek: %s stores no messages to go back to", t.name)), nil)
		return
	}
	var target mledger.Position
	switch {
	case c.MessagePublishTime != nil:
		p, err := t.findByTime(pc.ctx, int64(c.GetMessagePublishTime()))
		if err != nil {
			pc.send(errorCommand(c.GetRequestId(), err), nil)
			return
		}
		target = p
	case c.MessageId != nil:
		l, e := int64(c.GetMessageId().GetLedgerId()), int64(c.GetMessageId().GetEntryId())
		switch {
		case l < 0 || e < -1: // earliest
			target = t.ml.First()
		case l == math.MaxInt64: // latest
			target = t.ml.Next(t.ml.LastConfirmed())
		default:
			target = mledger.Position{Ledger: l, Entry: e}
		}
	default:
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrInvalidArgument, "SEEK without a message id or a publish time")), nil)
		return
	}
	if pcons == nil {
		// A consumer a seek closed, not subscribed again yet (see
		// seekClosed): its subscription, if it is still the topic's and
		// no consumer is on it (Pulsar refuses them all).
		if sub, err := t.subscription(closed.sub.name); err != nil || sub != closed.sub || !closed.sub.seekIdle(target) {
			pc.send(errorCommand(c.GetRequestId(), errorf(ErrNotAllowed, "no consumer %d on this connection", c.GetConsumerId())), nil)
			return
		}
		pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(c.GetRequestId())}}, nil)
		return
	}
	// Under mu, so that a seek is taken only while the consumer is on the
	// connection (the pump answers it once it has taken the consumer off).
	pc.mu.Lock()
	var err error
	if pc.mu.consumers[pcons.id] != pcons {
		err = errorf(ErrNotAllowed, "no consumer %d on this connection", c.GetConsumerId())
	} else {
		select {
		case pcons.seek <- c.GetRequestId():
		default:
			err = errorf(ErrServiceNotReady, "consumer %d has a seek in flight", pcons.id)
		}
	}
	pc.mu.Unlock()
	if err != nil {
		pc.send(errorCommand(c.GetRequestId(), err), nil)
		return
	}
	pcons.sub.seek(target, pcons.c) // SeekDone answers it, through the pump
}

func (pc *pulsarConn) lastMessageID(c *pulsarpb.CommandGetLastMessageId) {
	pcons := pc.consumerOf(c.GetConsumerId())
	if pcons == nil {
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrNotAllowed, "no consumer %d on this connection", c.GetConsumerId())), nil)
		return
	}
	if pcons.t.ml == nil { // as Pulsar
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrNonPersistent, "%s stores no messages: it has no last message id", pcons.t.name)), nil)
		return
	}
	last := pcons.t.ml.LastConfirmed()
	md := pcons.sub.cur.MarkDelete()
	part := int32(pcons.t.name.PartitionIndex())
	lastID := &pulsarpb.MessageIdData{LedgerId: proto.Uint64(uint64(last.Ledger)), EntryId: proto.Uint64(uint64(last.Entry)), Partition: proto.Int32(part)}
	// As Pulsar: the last message of a batch, not the entry.
	if last.Entry >= 0 {
		if n, err := pcons.batchSize(pc.ctx, &brokerpb.MessageId{LedgerId: last.Ledger, EntryId: last.Entry}); err == nil && n > 1 {
			lastID.BatchIndex = proto.Int32(int32(n - 1))
		}
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(), GetLastMessageIdResponse: &pulsarpb.CommandGetLastMessageIdResponse{
		RequestId:                  proto.Uint64(c.GetRequestId()),
		LastMessageId:              lastID,
		ConsumerMarkDeletePosition: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(uint64(md.Ledger)), EntryId: proto.Uint64(uint64(md.Entry)), Partition: proto.Int32(part)},
	}}, nil)
}

// closeConsumer handles the client's CLOSE_CONSUMER.
func (pc *pulsarConn) closeConsumer(c *pulsarpb.CommandCloseConsumer) {
	pc.mu.Lock()
	pcons := pc.mu.consumers[c.GetConsumerId()]
	delete(pc.mu.consumers, c.GetConsumerId())
	delete(pc.mu.seekClosed, c.GetConsumerId())
	pc.mu.Unlock()
	if pcons != nil {
		pc.dropConsumer(pcons, false)
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(c.GetRequestId())}}, nil)
}

// unsubscribe deletes the consumer's subscription; refused while other
// consumers are on it (Pulsar's ConsumerBusy), unless forced.
func (pc *pulsarConn) unsubscribe(c *pulsarpb.CommandUnsubscribe) {
	pcons := pc.consumerOf(c.GetConsumerId())
	if pcons == nil {
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrNotAllowed, "no consumer %d on this connection", c.GetConsumerId())), nil)
		return
	}
	if n := pcons.sub.consumerCount(); n > 1 && !c.GetForce() {
		pc.send(errorCommand(c.GetRequestId(), errorf(ErrConsumerBusy, "subscription %s has %d other consumers", pcons.sub.name, n-1)), nil)
		return
	}
	pc.mu.Lock()
	delete(pc.mu.consumers, pcons.id)
	pc.mu.Unlock()
	pcons.sub.removeConsumer(pcons.c)
	pcons.c.disconnect(io.EOF)
	if err := pcons.t.removeSubscription(pc.ctx, pcons.sub.name, true); err != nil {
		pc.send(errorCommand(c.GetRequestId(), err), nil)
		return
	}
	pc.send(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUCCESS.Enum(), Success: &pulsarpb.CommandSuccess{RequestId: proto.Uint64(c.GetRequestId())}}, nil)
}
