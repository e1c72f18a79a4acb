package broker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/broker/internal/cursor"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
)

// subscription is a cursor and its consumers. Exclusive and failover
// subscriptions have one active consumer; a dispatcher goroutine reads from
// the cursor's read position and sends entries to it, never more messages
// than it granted permits for. Shared and Key_Shared subscriptions deliver
// to all their consumers (dispatch_shared.go). A non-persistent topic's
// subscriptions have no cursor and no dispatcher: the publisher hands
// them each entry (deliverNow, nonpersistent.go).
type subscription struct {
	t       *topic
	name    string
	cur     *cursor.Cursor // nil on a non-persistent topic
	durable bool
	log     *zap.Logger

	wake chan struct{} // wakes the dispatcher: permits, consumers, rewinds
	// avgBatch is the mean messages per entry seen (owned by dispatch).
	avgBatch float64
	stop     chan struct{}
	done     chan struct{}

	// discardLog spaces the log lines of discarded.
	discardLog struct {
		sync.Mutex
		at       time.Time // of the last line
		unlogged int       // entries dropped since, not in a line
	}

	// traffic counts what was dispatched to the subscription; win is its
	// last stats window (metrics).
	traffic traffic
	win     window

	mu struct {
		sync.Mutex
		typ       brokerpb.SubscriptionType
		consumers []*consumer // sorted by priority, then name
		active    *consumer
		// gen changes whenever delivery restarts (rewind, new active
		// consumer): the dispatcher drops what it read before.
		gen    int64
		closed bool
		// waitingFor is the message count of the entry the dispatcher last
		// stopped at for lack of permits (for stats).
		waitingFor int
		// multi is the delivery state of Shared and Key_Shared; nil for the
		// other types.
		multi *multiState
		// keepUntil: a non-durable subscription whose consumer a seek
		// closed (Pulsar's protocol) is kept until then for it to
		// subscribe again, at the position sought (zero: not kept).
		keepUntil time.Time
		// dropping: a non-durable subscription being dropped (no consumer
		// may join; close follows).
		dropping bool
	}
}

func newSubscription(t *topic, name string, cur *cursor.Cursor, durable bool) *subscription {
	s := &subscription{t: t, name: name, cur: cur, durable: durable,
		log:  t.log.With(zap.String("subscription", name)),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if cur == nil {
		close(s.done) // non-persistent: no dispatcher
		return s
	}
	go s.dispatch()
	return s
}

func (s *subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscription) consumerCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.consumers)
}

// addConsumer attaches a consumer, checking the subscription type.
func (s *subscription) addConsumer(c *consumer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed || s.mu.dropping {
		return errorf(ErrTopicClosed, "subscription %s is closing", s.name)
	}
	if len(s.mu.consumers) > 0 && s.mu.typ != c.typ {
		return errorf(ErrConsumerBusy, "subscription %s is %s, cannot subscribe as %s", s.name,
			strings.ToLower(s.mu.typ.String()), strings.ToLower(c.typ.String()))
	}
	if c.typ == brokerpb.SubscriptionType_EXCLUSIVE && len(s.mu.consumers) > 0 {
		return errorf(ErrConsumerBusy, "exclusive subscription %s already has a consumer", s.name)
	}
	if len(s.mu.consumers) == 0 && s.mu.typ != c.typ {
		// A new type: what the previous consumers were given is delivered
		// again from the first unacknowledged entry.
		s.mu.multi = nil
		s.mu.typ = c.typ
		s.rewindLocked()
	}
	if isMulti(c.typ) {
		if err := s.addMultiConsumerLocked(c); err != nil {
			return err
		}
	}
	s.mu.consumers = append(s.mu.consumers, c)
	s.mu.keepUntil = time.Time{}
	slices.SortStableFunc(s.mu.consumers, func(a, b *consumer) int {
		if a.priority != b.priority {
			return int(a.priority - b.priority)
		}
		return strings.Compare(a.name, b.name)
	})
	c.sub = s
	if !s.electLocked() && s.mu.typ == brokerpb.SubscriptionType_FAILOVER && s.mu.active != c {
		// The active consumer stays: the new one is told it is not (as
		// Pulsar does); a change told every consumer already.
		c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_ActiveChange{ActiveChange: &brokerpb.ActiveChange{IsActive: false}}})
	}
	s.signal()
	return nil
}

// removeConsumer detaches a consumer; if it was active, delivery restarts
// from the first unacknowledged entry for the next one. A Shared or
// Key_Shared consumer's unacknowledged entries go to the others.
func (s *subscription) removeConsumer(c *consumer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.mu.consumers, c)
	if i < 0 {
		return
	}
	s.mu.consumers = slices.Delete(s.mu.consumers, i, i+1)
	if isMulti(s.mu.typ) {
		s.removeMultiConsumerLocked(c)
		s.signal()
		return
	}
	if s.mu.active == c {
		s.mu.active = nil
	}
	s.electLocked()
}

// activeIndex is the position of the active consumer among n (sorted)
// consumers of an exclusive or failover subscription: the first for
// exclusive; for failover, the partition index modulo n (a partitioned
// topic's partitions spread over the consumers; a topic that is not
// partitioned, index -1, counts as partition 0), as Pulsar does.
func activeIndex(typ brokerpb.SubscriptionType, partition, n int) int {
	if typ != brokerpb.SubscriptionType_FAILOVER {
		return 0
	}
	return max(partition, 0) % n
}

// electLocked picks the active consumer: the first for exclusive; for
// failover, the one at the partition index modulo the count. A
// change rewinds delivery and tells every consumer whether it is active;
// changed reports one. Shared and Key_Shared have none.
func (s *subscription) electLocked() (changed bool) {
	if isMulti(s.mu.typ) {
		return false
	}
	var next *consumer
	if n := len(s.mu.consumers); n > 0 {
		next = s.mu.consumers[activeIndex(s.mu.typ, s.t.name.PartitionIndex(), n)]
	}
	if next == s.mu.active {
		return false
	}
	s.mu.active = next
	s.rewindLocked()
	if s.mu.typ == brokerpb.SubscriptionType_FAILOVER {
		for _, c := range s.mu.consumers {
			c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_ActiveChange{ActiveChange: &brokerpb.ActiveChange{IsActive: c == next}}})
		}
	}
	return true
}

// rewindLocked restarts delivery after the mark-delete position: every
// unacknowledged message is sent again.
func (s *subscription) rewindLocked() {
	s.mu.gen++
	if s.cur != nil {
		s.cur.SetReadPosition(s.t.ml.Next(s.cur.MarkDelete()))
	}
	s.signal()
}

// redeliver resends what c has not acknowledged: for exclusive and
// failover subscriptions everything unacknowledged, if c is active; for
// Shared and Key_Shared the entries listed (all c holds if none is).
func (s *subscription) redeliver(c *consumer, ids []*brokerpb.MessageId) {
	if s.cur == nil {
		return // non-persistent: nothing is kept to deliver again
	}
	s.mu.Lock()
	if isMulti(s.mu.typ) {
		s.mu.Unlock()
		s.redeliverMulti(c, ids)
		return
	}
	defer s.mu.Unlock()
	if s.mu.active == c {
		s.rewindLocked()
	}
}

// discarded records entries a consumer could not read and acknowledges
// unread (Ack.discarded; Pulsar's CommandAck.validation_error): messages
// no application received, counted
// (magnetar_broker_entries_discarded_total) and logged, one line per
// subscription every discardLogEvery at most (a consumer dropping a whole
// backlog sends an ACK per entry), naming the first few entries and how
// many went unnamed since the last line. They are acknowledged as any
// other.
func (s *subscription) discarded(consumer string, ids []*brokerpb.MessageId, reason string) {
	if len(ids) == 0 {
		return
	}
	s.t.s.metrics.discarded.WithLabelValues(reason).Add(float64(len(ids)))
	s.discardLog.Lock()
	now := time.Now()
	if !s.discardLog.at.IsZero() && now.Sub(s.discardLog.at) < discardLogEvery {
		s.discardLog.unlogged += len(ids)
		s.discardLog.Unlock()
		return
	}
	unlogged := s.discardLog.unlogged
	s.discardLog.at, s.discardLog.unlogged = now, 0
	s.discardLog.Unlock()
	named := ids[:min(len(ids), 10)]
	pos := make([]string, len(named))
	for i, id := range named {
		pos[i] = fmt.Sprintf("%d:%d", id.GetLedgerId(), id.GetEntryId())
	}
	s.log.Warn("a consumer could not read entries and dropped them", zap.String("consumer", consumer),
		zap.String("reason", reason), zap.Int("count", len(ids)), zap.Strings("entries", pos),
		zap.Int("dropped-since-last-line", unlogged))
}

// discardLogEvery spaces a subscription's lines about dropped entries.
const discardLogEvery = 10 * time.Second

// ack applies acknowledgements: a bad id is reported (the first error),
// and the others are applied all the same (they arrived together, grouped
// by the client). applied are the ids applied (ids itself when all were).
func (s *subscription) ack(ids []*brokerpb.MessageId, cumulative bool) (applied []*brokerpb.MessageId, err error) {
	s.mu.Lock()
	multi := isMulti(s.mu.typ)
	s.mu.Unlock()
	if cumulative && multi {
		return nil, errorf(ErrNotAllowed, "cumulative acknowledgement is not allowed on shared and key_shared subscriptions: acknowledge each message")
	}
	if s.cur == nil {
		return ids, nil // non-persistent: nothing to acknowledge, as Pulsar
	}
	last := s.t.ml.LastConfirmed()
	var acked []mledger.Position
	var firstErr error
	for i, id := range ids {
		p := mledger.Position{Ledger: id.LedgerId, Entry: id.EntryId}
		stands, err := s.ackOne(id, p, last, cumulative)
		if err != nil && firstErr == nil {
			firstErr = err
			applied = append(make([]*brokerpb.MessageId, 0, len(ids)-1), ids[:i]...)
		}
		if stands {
			acked = append(acked, p)
			if firstErr != nil {
				applied = append(applied, id)
			}
		}
	}
	if firstErr == nil {
		applied = ids
	}
	if multi {
		s.mu.Lock()
		if s.mu.multi != nil {
			s.ackedMultiLocked(acked)
		}
		s.mu.Unlock()
	}
	if len(acked) > 0 {
		s.checkEnd() // the backlog of a terminated topic may be empty now
	}
	return applied, firstErr
}

// ackOne applies one acknowledgement of the message at p (last is the
// topic's last entry); stands if it applied, even with an error (a
// cumulative one up to a batch index, whose entries before stand).
func (s *subscription) ackOne(id *brokerpb.MessageId, p, last mledger.Position, cumulative bool) (stands bool, err error) {
	if last.Before(p) || p.Entry < 0 {
		return false, errorf(ErrInvalidArgument, "acknowledgement of %v, after the last message %v", p, last)
	}
	batch := id.BatchIndex >= 0 && id.BatchSize > 1
	switch {
	case cumulative && batch && id.BatchIndex < id.BatchSize-1:
		// Everything before this entry, and this batch up to the index.
		s.cur.AckCumulative(mledger.Position{Ledger: p.Ledger, Entry: p.Entry - 1})
		for i := int32(0); i <= id.BatchIndex; i++ {
			if err := s.cur.AckBatchIndex(p, int(i), int(id.BatchSize)); err != nil {
				return true, errorf(ErrInvalidArgument, "%v", err)
			}
		}
	case cumulative:
		s.cur.AckCumulative(p)
	case batch:
		if err := s.cur.AckBatchIndex(p, int(id.BatchIndex), int(id.BatchSize)); err != nil {
			return false, errorf(ErrInvalidArgument, "%v", err)
		}
	default:
		s.cur.Ack(p)
	}
	return true, nil
}

// checkEnd tells every consumer that it reached the end of the topic
// (Pulsar's REACHED_END_OF_TOPIC) once the topic is terminated and every
// message of the subscription is acknowledged, as Pulsar does. Called
// after acknowledgements, and by the dispatcher when it finds nothing
// more to read.
//
// It decides and queues under mu, as seek resets and queues SeekDone: a
// notice decided before a seek is queued before its SeekDone (which the
// SDK takes as "not at the end"), never after it.
func (s *subscription) checkEnd() {
	if s.t.ml == nil || !s.t.ml.Terminated() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backlog() > 0 {
		return
	}
	if h := testHookEndDecided.Load(); h != nil {
		(*h)()
	}
	for _, c := range s.mu.consumers {
		c.reachedEnd()
	}
}

// testHookEndDecided, if set, runs when checkEnd has decided to tell the
// consumers that they reached the end, before it tells them.
var testHookEndDecided atomic.Pointer[func()]

// seek resets the cursor so that delivery restarts at p. On Shared and
// Key_Shared subscriptions the consumers other than by (nil: all) are
// disconnected, as Pulsar does: what they had received before the seek
// would otherwise be processed next to its redelivery to others. They
// reconnect and receive from p on.
//
// by (if not nil) is sent SeekDone, queued under mu with the new
// generation: the client drops what it received before SeekDone, so every
// message from before the seek must be queued before it and every message
// from p on after it (see advance; the Shared dispatcher queues under mu).
func (s *subscription) seek(p mledger.Position, by *consumer) {
	s.mu.Lock()
	s.resetLocked(p)
	if by != nil {
		by.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_SeekDone{SeekDone: &brokerpb.SeekDone{}}})
	}
	var others []*consumer
	if isMulti(s.mu.typ) {
		for _, c := range s.mu.consumers {
			if c != by {
				others = append(others, c)
			}
		}
	}
	s.mu.Unlock()
	for _, c := range others {
		c.disconnect(errorf(ErrTopicClosed, "subscription %s was reset: reconnect", s.name))
	}
}

// resetLocked resets the cursor so that delivery restarts at p (seek's
// part under mu).
func (s *subscription) resetLocked(p mledger.Position) {
	if s.cur == nil {
		return // non-persistent: seeks are refused before they get here
	}
	s.cur.Reset(mledger.Position{Ledger: p.Ledger, Entry: p.Entry - 1})
	s.resetMultiLocked()
	s.rewindLocked()
	for _, c := range s.mu.consumers {
		c.rearmEnd() // told again once acknowledged to the end
	}
}

// seekIdle resets the subscription to p, as seek does, only while no
// consumer is on it and it is neither closed nor being dropped (one step
// under mu: none joins meanwhile); a reader's is then kept as long again
// as keepNonDurable keeps it. For a SEEK through a consumer a seek has
// just closed (pulsarConn.mu.seekClosed): false if anything came between.
func (s *subscription) seekIdle(p mledger.Position) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed || s.mu.dropping || len(s.mu.consumers) > 0 {
		return false
	}
	if !s.durable {
		s.mu.keepUntil = time.Now().Add(seekReattachGrace)
	}
	s.resetLocked(p)
	return true
}

// expire acknowledges, up to a bounded number, the entries published
// before cutoff (message TTL).
func (s *subscription) expire(ctx context.Context, cutoff int64) {
	p := s.t.ml.Next(s.cur.MarkDelete())
	var lastExpired *mledger.Position
	for scanned := 0; scanned < 10000; {
		es, err := s.t.ml.Read(ctx, p, 200)
		if err != nil || len(es) == 0 {
			break
		}
		done := false
		for _, e := range es {
			md, _, err := entry.Decode(e.Data)
			if err != nil || int64(md.GetPublishTime()) >= cutoff {
				done = true
				break
			}
			pos := e.Pos
			lastExpired = &pos
			p = s.t.ml.Next(e.Pos)
			scanned++
		}
		if done {
			break
		}
	}
	if lastExpired != nil {
		s.cur.AckCumulative(*lastExpired)
		s.mu.Lock()
		s.refreshPendingLocked()
		s.mu.Unlock()
		s.log.Debug("expired messages past their TTL", zap.Stringer("up-to", *lastExpired))
	}
}

// backlog counts the entries not acknowledged.
//
// It does not wait for the cursor's persist (checkEnd calls it under mu).
func (s *subscription) backlog() int64 {
	if s.cur == nil {
		return 0 // non-persistent
	}
	md, after := s.cur.Acked()
	return max(s.t.ml.EntriesBetween(md, s.t.ml.LastConfirmed())-after, 0)
}

// close stops the dispatcher, disconnects the consumers and persists the
// cursor.
func (s *subscription) close(ctx context.Context) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	consumers := slices.Clone(s.mu.consumers)
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	for _, c := range consumers {
		c.disconnect(errorf(ErrTopicClosed, "subscription %s is closing", s.name))
	}
	if s.cur == nil {
		return nil
	}
	return s.cur.Close(ctx)
}

// dispatch is the subscription's delivery loop.
func (s *subscription) dispatch() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	backoff := 10 * time.Millisecond
	for {
		s.mu.Lock()
		c, gen, multi := s.mu.active, s.mu.gen, isMulti(s.mu.typ)
		s.mu.Unlock()
		if multi {
			progressed, wait, err := s.dispatchMultiOnce(ctx)
			if err != nil {
				if !s.backOff(ctx, err, &backoff) {
					return
				}
				continue
			}
			backoff = 10 * time.Millisecond
			if !progressed {
				var timer *time.Timer
				var due <-chan time.Time
				if at := s.nextDelayed(); at > 0 {
					timer = time.NewTimer(time.Until(dueAt(at)))
					due = timer.C
				}
				select {
				case <-wait.moved: // nil (never ready) unless waiting for new entries
				case <-due:
				case <-s.wake:
				case <-s.stop:
					return
				}
				if timer != nil {
					timer.Stop()
				}
			}
			continue
		}
		if c == nil || c.available() == 0 {
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		moved := s.t.ml.Moved()
		pos := s.cur.ReadPosition()
		// Read about as many entries as the permits cover: entries hold
		// avgBatch messages on average.
		want := max(1, min(c.available()/max(int(s.avgBatch), 1), 100))
		es, err := s.t.ml.Read(ctx, pos, want)
		if err != nil {
			if !s.backOff(ctx, err, &backoff) {
				return
			}
			continue
		}
		backoff = 10 * time.Millisecond
		if len(es) == 0 {
			s.checkEnd()
			select {
			case <-moved:
			case <-s.wake:
			case <-s.stop:
				return
			}
			continue
		}
		if s.deliver(c, gen, es) {
			// Too few permits for the next entry: wait for more.
			select {
			case <-s.wake:
			case <-s.stop:
				return
			}
		}
	}
}

// backOff waits after a failed read, longer each time (up to 2 s); it
// reports false when the dispatcher is to stop.
func (s *subscription) backOff(ctx context.Context, err error, backoff *time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	s.log.Warn("dispatch read failed", zap.Error(err))
	select {
	case <-time.After(*backoff):
		*backoff = min(2**backoff, 2*time.Second)
		return true
	case <-s.stop:
		return false
	}
}

// deliver sends entries to c in order; it reports whether it stopped for
// lack of permits.
func (s *subscription) deliver(c *consumer, gen int64, es []mledger.Entry) (blocked bool) {
	for _, e := range es {
		if s.cur.IsAcked(e.Pos) {
			if !s.advance(gen, e.Pos, c, nil) {
				return false
			}
			continue
		}
		n, _, err := entryMessages(e.Data)
		if err != nil {
			s.log.Error("corrupt entry; delivering it for the client to reject", zap.Stringer("position", e.Pos), zap.Error(err))
			n = 1
		}
		s.avgBatch = 0.9*s.avgBatch + 0.1*float64(n)
		if !c.take(n) {
			s.mu.Lock()
			s.mu.waitingFor = n
			s.mu.Unlock()
			return true
		}
		msg := &brokerpb.Message{MessageId: s.t.messageID(e.Pos, -1, 0), Entry: e.Data}
		if n > 1 {
			msg.AckedBatchIndexes = s.cur.AckedBatchIndexes(e.Pos)
		}
		if !s.advance(gen, e.Pos, c, &brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Message{Message: msg}}) {
			c.give(n)
			return false
		}
		s.sent(len(e.Data))
	}
	return false
}

// sent counts the bytes of an entry sent to a consumer.
func (s *subscription) sent(bytes int) {
	s.traffic.sent(bytes)
	s.t.traffic.sent(bytes)
	s.t.s.traffic.sent(bytes)
}

// advance moves the read position past p and queues r (if not nil) for c,
// unless delivery restarted meanwhile (then it reports false and the
// entries read are dropped). Both happen under mu, in the same critical
// section as the generation check: a message of an older generation is
// never queued after what a rewind or seek queued (SeekDone), and one of
// the new generation never before it.
func (s *subscription) advance(gen int64, p mledger.Position, c *consumer, r *brokerpb.ConsumeResponse) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.gen != gen {
		return false
	}
	s.cur.SetReadPosition(s.t.ml.Next(p))
	if r != nil {
		c.push(r)
	}
	return true
}

// subscriptionStats are what admin reports.
type subscriptionStats struct {
	Type               string          `json:"type"`
	MsgBacklog         int64           `json:"msgBacklog"`
	MarkDeletePosition string          `json:"markDeletePosition"`
	ReadPosition       string          `json:"readPosition"`
	AckHoles           int             `json:"nonContiguousDeletedMessagesRanges"`
	IndividuallyAcked  int64           `json:"individuallyDeletedMessages"`
	Durable            bool            `json:"isDurable"`
	Consumers          []consumerStats `json:"consumers"`
	ActiveConsumerName string          `json:"activeConsumerName,omitempty"`
	CursorLedger       int64           `json:"cursorLedger,omitempty"`
	WaitingForPermits  int             `json:"waitingForPermits,omitempty"`
	// Shared and Key_Shared:
	UnackedMessages int   `json:"unackedMessages"`
	Blocked         bool  `json:"blockedSubscriptionOnUnackedMsgs"`
	MsgRedelivered  int64 `json:"msgRedeliverCounter"`
	// MsgRateRedeliver: entries delivered again per second, over the last
	// minute.
	MsgRateRedeliver float64 `json:"msgRateRedeliver"`
	Replay           int     `json:"entriesToReplay"`
	// Delayed messages indexed in memory, and whether more are spilled
	// (to be found again by scanning the partition).
	MsgDelayed     int  `json:"msgDelayed"`
	DelayedSpilled bool `json:"delayedSpilled"`
	// Non-persistent topics only: messages dropped because no consumer
	// could take them, over the last stats window (per second, Pulsar's)
	// and since the subscription was created.
	MsgDropRate    *float64 `json:"msgDropRate,omitempty"`
	MsgDropCounter *int64   `json:"msgDropCounter,omitempty"`
}

// pulsarSubType names subscription types as Pulsar's stats do.
var pulsarSubType = map[brokerpb.SubscriptionType]string{
	brokerpb.SubscriptionType_EXCLUSIVE: "Exclusive", brokerpb.SubscriptionType_SHARED: "Shared",
	brokerpb.SubscriptionType_FAILOVER: "Failover", brokerpb.SubscriptionType_KEY_SHARED: "Key_Shared",
}

func (s *subscription) stats() subscriptionStats {
	var st subscriptionStats
	if s.cur == nil {
		r, _, _ := s.win.get()
		dropped := s.traffic.msgDropped.Load()
		st = subscriptionStats{Durable: s.durable, MsgDropRate: &r.MsgDropped, MsgDropCounter: &dropped}
	} else {
		cs := s.cur.Stats()
		st = subscriptionStats{
			MsgBacklog: s.backlog(), MarkDeletePosition: cs.MarkDelete.String(), ReadPosition: cs.ReadPos.String(),
			AckHoles: cs.Holes, IndividuallyAcked: cs.AckedAfterMarkDelete, Durable: s.durable, CursorLedger: cs.CursorLedger,
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st.Type = pulsarSubType[s.mu.typ]
	st.Consumers = []consumerStats{}
	st.WaitingForPermits = s.mu.waitingFor
	for _, c := range s.mu.consumers {
		cst := c.stats()
		s.multiConsumerStatsLocked(c, &cst)
		st.Consumers = append(st.Consumers, cst)
	}
	if m := s.mu.multi; m != nil {
		st.UnackedMessages = m.unacked
		st.Blocked = m.blocked
		st.MsgRedelivered = m.redelivered
		st.MsgRateRedeliver = m.redeliveries1m.perSecond(time.Now())
		st.Replay = m.replay.Len()
		st.MsgDelayed = m.delayed.len()
		st.DelayedSpilled = m.delayed.spilled || m.delayed.scanning
	}
	if s.mu.active != nil {
		st.ActiveConsumerName = s.mu.active.name
	}
	return st
}
