package broker

import (
	"sync"
	"sync/atomic"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// consumer is one consumer connection (a Consume stream): the permits it
// granted and the queue of what to send it. The stream handler owns its
// sender goroutine.
type consumer struct {
	name      string
	typ       brokerpb.SubscriptionType
	priority  int32
	queueSize int
	sub       *subscription // set by addConsumer
	keyShared *brokerpb.KeySharedMeta

	// Shared and Key_Shared; guarded by sub.mu.
	unacked int  // messages delivered and not acknowledged
	blocked bool // at the unacked limit, until it acknowledged half

	signal chan struct{} // wakes the sender
	gone   chan struct{} // closed by disconnect
	// maxOutstanding, if not 0, bounds the bytes of the entries queued
	// for the sender and not yet sent (it reports them with sent): past
	// it take refuses whatever the permits, so a client that grants many
	// permits and does not read does not pull the backlog into memory.
	// Set before the consumer joins its subscription.
	maxOutstanding int
	// client describes the consumer's client (Pulsar's protocol); set
	// before the consumer joins its subscription.
	client clientInfo

	mu struct {
		sync.Mutex
		permits     int // negative while owed (see take)
		outstanding int // bytes of entries pushed and not reported sent
		delivered   int64
		queue       []*brokerpb.ConsumeResponse
		err         error // why it was disconnected
		endSent     bool  // ReachedEndOfTopic queued
	}
}

func newConsumer(req *brokerpb.Subscribe, queueSize int) *consumer {
	return &consumer{name: req.ConsumerName, typ: req.Type, priority: req.PriorityLevel, queueSize: queueSize,
		keyShared: req.KeyShared, signal: make(chan struct{}, 1), gone: make(chan struct{})}
}

// available is the number of messages the consumer can take now: 0 while
// it owes permits (see take), or once it is disconnected (take refuses).
func (c *consumer) available() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return 0
	}
	return max(c.mu.permits, 0)
}

// addPermits grants n more messages.
func (c *consumer) addPermits(n int) {
	c.mu.Lock()
	c.mu.permits = min(c.mu.permits+n, 1<<30)
	c.mu.Unlock()
	if c.sub != nil {
		c.sub.signal()
	}
}

// take uses n permits for an entry of n messages. An entry larger than the
// whole receive queue goes when the queue is empty (all permits granted):
// otherwise it could never be delivered. The permits it takes beyond
// those go negative, as Pulsar's do: the consumer is sent nothing more
// until it has granted them back, so what it holds stays within its
// queue and that one entry. (A consumer whose permits were set to 0
// instead is sent an entry per permit granted while it works through the
// big one: pulsar-client-go's connection reader then blocks on the full
// receive queue, and with acknowledgement receipts its connection
// deadlocks.)
func (c *consumer) take(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return false // disconnected: push would drop what it takes
	}
	if c.maxOutstanding > 0 && c.mu.outstanding >= c.maxOutstanding {
		return false // sent reopens it
	}
	switch {
	case c.mu.permits >= n:
		c.mu.permits -= n
	case n > c.queueSize && c.mu.permits >= c.queueSize:
		c.mu.permits -= n // owed: repaid by the permits granted next
	default:
		return false
	}
	c.mu.delivered += int64(n)
	if c.sub != nil {
		c.sub.traffic.dispatched(n)
		c.sub.t.traffic.dispatched(n)
		c.sub.t.s.traffic.dispatched(n)
	}
	return true
}

// give returns permits taken for an entry that was not sent.
func (c *consumer) give(n int) {
	c.mu.Lock()
	c.mu.permits += n
	c.mu.delivered -= int64(n)
	c.mu.Unlock()
	if c.sub != nil {
		c.sub.traffic.dispatched(-n)
		c.sub.t.traffic.dispatched(-n)
		c.sub.t.s.traffic.dispatched(-n)
	}
}

// push queues a response for the sender; never blocks (what is queued is
// bounded by the permits).
func (c *consumer) push(r *brokerpb.ConsumeResponse) {
	c.mu.Lock()
	if c.mu.err == nil {
		if m := r.GetMessage(); m != nil && c.maxOutstanding > 0 {
			c.mu.outstanding += len(m.GetEntry())
		}
		c.mu.queue = append(c.mu.queue, r)
		if h := testHookPushed.Load(); h != nil {
			(*h)(r) // before the sender can take r
		}
	}
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// reachedEnd queues ReachedEndOfTopic, once (until a seek: rearmEnd):
// the topic is terminated and every message of the subscription is
// acknowledged.
func (c *consumer) reachedEnd() {
	c.mu.Lock()
	sent := c.mu.endSent
	c.mu.endSent = true
	c.mu.Unlock()
	if !sent {
		c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_ReachedEndOfTopic{ReachedEndOfTopic: &brokerpb.ReachedEndOfTopic{}}})
	}
}

// rearmEnd lets reachedEnd tell the consumer again (its subscription was
// reset).
func (c *consumer) rearmEnd() {
	c.mu.Lock()
	c.mu.endSent = false
	c.mu.Unlock()
}

// sent reports a message pushed earlier as sent (or dropped), for
// maxOutstanding; below the bound again, the subscription may dispatch
// to the consumer again.
func (c *consumer) sent(m *brokerpb.Message) {
	if c.maxOutstanding == 0 {
		return
	}
	c.mu.Lock()
	was := c.mu.outstanding
	c.mu.outstanding -= len(m.GetEntry())
	reopened := was >= c.maxOutstanding && c.mu.outstanding < c.maxOutstanding
	c.mu.Unlock()
	if reopened && c.sub != nil {
		c.sub.signal()
	}
}

// testHookPushed, when set by a test, runs when a response is queued for
// any consumer, with the consumer's mu held (it must not block).
var testHookPushed atomic.Pointer[func(*brokerpb.ConsumeResponse)]

// next returns what is queued, waiting for something; nil and the reason
// once disconnected.
func (c *consumer) next() ([]*brokerpb.ConsumeResponse, error) {
	for {
		c.mu.Lock()
		q, err := c.mu.queue, c.mu.err
		c.mu.queue = nil
		c.mu.Unlock()
		if len(q) > 0 {
			return q, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-c.signal:
		case <-c.gone:
		}
	}
}

// disconnect ends the consumer's stream with err.
func (c *consumer) disconnect(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.err != nil {
		return
	}
	c.mu.err = err
	close(c.gone)
}

type consumerStats struct {
	Name             string `json:"consumerName"`
	AvailablePermits int    `json:"availablePermits"`
	MsgDelivered     int64  `json:"msgOutCounter"`
	PriorityLevel    int32  `json:"priorityLevel"`
	// Shared and Key_Shared:
	UnackedMessages  int  `json:"unackedMessages"`
	BlockedOnUnacked bool `json:"blockedConsumerOnUnackedMsgs"`
	// Key_Shared: the hashes given to the consumer, and the entries that
	// would go to it but wait for their key to drain from another consumer.
	KeyHashRanges           []string `json:"keyHashRanges,omitempty"`
	HeldBackForDrainingKeys int      `json:"heldBackForDrainingKeys,omitempty"`
	// What the client told about itself (Pulsar's protocol): the
	// consumer's metadata, the client's version, its address.
	Metadata      map[string]string `json:"metadata"`
	ClientVersion string            `json:"clientVersion,omitempty"`
	Address       string            `json:"address,omitempty"`
}

func (c *consumer) stats() consumerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return consumerStats{Name: c.name, AvailablePermits: c.mu.permits, MsgDelivered: c.mu.delivered, PriorityLevel: c.priority,
		Metadata: c.client.metadataJSON(), ClientVersion: c.client.version, Address: c.client.address}
}
