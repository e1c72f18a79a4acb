package broker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
)

// Non-persistent topics (non-persistent://tenant/namespace/topic), as
// Pulsar's: a message is handed, when it is published, to one consumer of
// each subscription that can take it (has the permits), and dropped for a
// subscription whose consumers cannot; nothing is stored, so nothing is
// redelivered, and a broker that stops loses what it had not sent.
//
// Such a topic is a topic (topic.go) with no managed ledger: ownership,
// lookups, producers (access modes, schemas, the size limit), the four
// subscription types and their consumers, flow control and stats are the
// persistent topics' own. What differs:
//   - publish: the producer is answered once the message is handed to the
//     consumers (publishNonPersistent), under publishMu, so every
//     subscription sees the topic's messages in one order. No
//     deduplication (Pulsar has none there either).
//   - subscriptions have no cursor and no dispatcher goroutine
//     (subscription.cur is nil): deliverNow picks the consumer. Acks and
//     redelivery requests are accepted and do nothing. A subscription
//     goes with its last consumer if it is not durable (a reader's);
//     durable ones stay, empty, until unsubscribed or the topic unloads,
//     as Pulsar's.
//   - what needs stored messages is refused with ErrNonPersistent: seek,
//     the last message id, peek, skip, expiry, reset, termination.
//     (Pulsar answers a seek there with success and does nothing; the
//     last message id with an error.)
//   - a topic exists while a broker has it loaded: its owner key is what
//     lists it. One without producers and subscriptions at two retention
//     checks in a row is unloaded (retainNonPersistent), as Pulsar
//     deletes inactive topics.
//   - message ids: see npState.

// npState numbers a non-persistent topic's messages. Their ids are never
// looked up, but Pulsar's clients compare them: pulsar-client-go skips a
// message whose id is still waiting in its acknowledgement batch, every
// one not after a cumulative acknowledgement, and, in a reader
// reconnecting, every one not after the last it received. Pulsar gives
// every message of a non-persistent topic the id 0:0, so those clients
// drop messages there; these ids are distinct and grow. Ledger is the
// time the topic was loaded (milliseconds; above this broker's previous
// load of any topic), entry counts from 0: ids grow within a load, and
// across loads as long as brokers' clocks agree better than a topic
// takes to move.
type npState struct {
	ledger, next int64
}

// npLastEpoch is the last npState.ledger given out by this process.
var npLastEpoch atomic.Int64

func newNPState() npState {
	for {
		last := npLastEpoch.Load()
		e := max(time.Now().UnixMilli(), last+1)
		if npLastEpoch.CompareAndSwap(last, e) {
			return npState{ledger: e}
		}
	}
}

// publishNonPersistent is publishEntry's end for a non-persistent topic,
// called under publishMu: the entry goes to each subscription
// (deliverNow), and its position, never stored, is returned.
func (t *topic) publishNonPersistent(data []byte, msgs int, md *pulsarpb.MessageMetadata) mledger.Position {
	pos := mledger.Position{Ledger: t.np.ledger, Entry: t.np.next}
	t.np.next++
	t.traffic.published(msgs, len(data))
	t.s.traffic.published(msgs, len(data))
	t.entrySize.add(int64(len(data)))
	for _, s := range t.subscriptions() {
		s.deliverNow(pos, data, msgs, md)
	}
	return pos
}

// deliverNow gives an entry of a non-persistent topic to the consumer the
// subscription's type picks, if it has the permits for it now (take);
// otherwise the entry is dropped for this subscription and counted
// (msgDropRate), as Pulsar's non-persistent dispatchers do: nothing is
// kept to be sent later.
//   - Exclusive, Failover: the active consumer.
//   - Shared: the next consumer in turn that can take it.
//   - Key_Shared: the consumer of its key's hash (none: dropped).
func (s *subscription) deliverNow(pos mledger.Position, data []byte, msgs int, md *pulsarpb.MessageMetadata) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c *consumer
	m := s.mu.multi
	switch {
	case s.mu.closed || s.mu.dropping:
	case s.mu.typ == brokerpb.SubscriptionType_KEY_SHARED && m != nil && m.selector != nil:
		if cand := m.selector.pick(stickyKeyHash(stickyKey(md))); cand != nil && cand.take(msgs) {
			c = cand
		}
	case s.mu.typ == brokerpb.SubscriptionType_SHARED && m != nil:
		for i := range s.mu.consumers {
			cand := s.mu.consumers[(m.rr+i)%len(s.mu.consumers)]
			if cand.take(msgs) {
				c = cand
				m.rr = (m.rr + i + 1) % len(s.mu.consumers)
				break
			}
		}
	case !isMulti(s.mu.typ) && s.mu.active != nil:
		if s.mu.active.take(msgs) {
			c = s.mu.active
		}
	}
	if c == nil {
		s.traffic.dropped(msgs)
		s.t.traffic.dropped(msgs)
		return
	}
	c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Message{Message: &brokerpb.Message{
		MessageId: s.t.messageID(pos, -1, 0), Entry: data,
	}}})
	s.sent(len(data))
}

// retainNonPersistent is retain for a non-persistent topic: one that had
// no producer and no subscription at this check and the one before is
// unloaded. It holds nothing worth keeping; a producer or consumer that
// comes as it goes is disconnected and loads it again.
func (t *topic) retainNonPersistent(ctx context.Context) {
	t.mu.Lock()
	idle := len(t.mu.producers) == 0 && len(t.mu.subs) == 0 && len(t.mu.waiters) == 0
	unload := idle && t.mu.npIdle
	t.mu.npIdle = idle
	t.mu.Unlock()
	if !unload {
		return
	}
	t.s.mu.Lock()
	mine := t.s.mu.topics[t.path] == t
	if mine {
		delete(t.s.mu.topics, t.path)
	}
	t.s.mu.Unlock()
	if !mine {
		return
	}
	t.s.metrics.ownership.WithLabelValues("released").Inc()
	t.log.Info("idle non-persistent topic unloaded")
	t.close(ctx)
}
