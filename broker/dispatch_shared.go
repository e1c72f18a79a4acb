package broker

import (
	"context"
	"time"

	"github.com/google/btree"

	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// Shared and Key_Shared dispatch.
//
// Every consumer of the subscription gets messages at once. The
// subscription keeps, under its lock:
//
//   - pending: the entries delivered and not yet wholly acknowledged, each
//     with the consumer holding it;
//   - replay: entries to deliver again (nacked, timed out, held by a
//     consumer that left) or held back (Key_Shared), delivered before any
//     new entry, in position order;
//   - redeliveries: how often each entry was delivered again.
//
// Invariants: an entry is in at most one of pending and replay; both lie
// between the mark-delete position and the read position; a consumer's
// unacked count is the sum of the unacknowledged messages of its pending
// entries.
//
// Shared gives each entry to the next consumer, round-robin, that has
// permits for all of its messages and is under its unacked limit.
//
// Key_Shared gives an entry to the consumer its key hash selects, with
// one more rule that keeps each key's order when consumers come and go: a
// key's entry goes to a consumer only while no other consumer holds
// unacknowledged entries of that key, and only when no older entry of the
// key waits in replay. Entries that cannot go yet are held back in
// replay, up to maxReplay, and reading carries on for the other keys.

// maxReplay bounds the entries held in replay: past it, no new entry is
// read until some of them are delivered.
const maxReplay = 10000

type pendingEntry struct {
	c       *consumer
	msgs    int   // messages in the entry
	unacked int   // of them, not acknowledged
	hash    int32 // key hash (Key_Shared), else -1
}

type replayItem struct {
	pos  mledger.Position
	hash int32
}

func replayLess(a, b replayItem) bool { return a.pos.Before(b.pos) }

// hashHold is the consumer holding unacknowledged entries of a key hash.
type hashHold struct {
	c *consumer
	n int // entries
}

// multiState is a Shared or Key_Shared subscription's delivery state.
// Guarded by subscription.mu.
type multiState struct {
	pending        map[mledger.Position]*pendingEntry
	replay         *btree.BTreeG[replayItem]
	redeliveries   map[mledger.Position]uint32
	rr             int // next consumer to try (Shared)
	unacked        int // messages pending over all consumers
	blocked        bool
	redelivered    int64 // deliveries of entries again, ever
	redeliveries1m rateWindow

	delayed *delayedIndex

	// Key_Shared:
	selector     keySelector
	holds        map[int32]*hashHold
	replayHashes map[int32]int // entries in replay per hash
}

func newMultiState(maxDelayed int) *multiState {
	return &multiState{
		delayed:      newDelayedIndex(maxDelayed),
		pending:      map[mledger.Position]*pendingEntry{},
		replay:       btree.NewG(32, replayLess),
		redeliveries: map[mledger.Position]uint32{},
		holds:        map[int32]*hashHold{},
		replayHashes: map[int32]int{},
	}
}

func isMulti(t brokerpb.SubscriptionType) bool {
	return t == brokerpb.SubscriptionType_SHARED || t == brokerpb.SubscriptionType_KEY_SHARED
}

// addMultiConsumerLocked registers a Shared or Key_Shared consumer.
func (s *subscription) addMultiConsumerLocked(c *consumer) error {
	if s.mu.multi == nil {
		s.mu.multi = newMultiState(s.t.s.cfg.DelayedDeliveryMaxIndexed)
	}
	m := s.mu.multi
	if c.typ == brokerpb.SubscriptionType_KEY_SHARED {
		if m.selector == nil || len(s.mu.consumers) == 0 {
			m.selector = newKeySelector(c.keyShared.GetMode(), s.t.s.cfg.KeySharedSelector)
		}
		if err := m.selector.add(c); err != nil {
			return err
		}
	}
	return nil
}

// removeMultiConsumerLocked sends what c held back to replay.
func (s *subscription) removeMultiConsumerLocked(c *consumer) {
	m := s.mu.multi
	if m == nil {
		return
	}
	if m.selector != nil {
		m.selector.remove(c)
	}
	for p, pe := range m.pending {
		if pe.c == c {
			s.toReplayLocked(p, pe)
		}
	}
}

// toReplayLocked moves a pending entry to replay, counting a redelivery.
func (s *subscription) toReplayLocked(p mledger.Position, pe *pendingEntry) {
	m := s.mu.multi
	s.unpendLocked(p, pe)
	s.addReplayLocked(p, pe.hash)
	m.redeliveries[p]++
	m.redelivered++
	m.redeliveries1m.add(time.Now(), 1)
	s.signal()
}

// unpendLocked forgets a pending entry: its consumer's unacked messages
// and its key hold.
func (s *subscription) unpendLocked(p mledger.Position, pe *pendingEntry) {
	m := s.mu.multi
	delete(m.pending, p)
	s.adjustUnackedLocked(pe.c, -pe.unacked)
	if pe.hash >= 0 {
		if h := m.holds[pe.hash]; h != nil {
			if h.n--; h.n <= 0 {
				delete(m.holds, pe.hash)
			}
		}
	}
}

// adjustUnackedLocked changes c's unacked count by d and the blocked flags
// with it: blocked at the limit, unblocked at half of it.
func (s *subscription) adjustUnackedLocked(c *consumer, d int) {
	m := s.mu.multi
	c.unacked += d
	m.unacked += d
	cfg := s.t.s.cfg
	if lim := cfg.MaxUnackedMessagesPerConsumer; lim > 0 {
		if c.unacked >= lim {
			c.blocked = true
		} else if c.blocked && c.unacked <= lim/2 {
			c.blocked = false
			s.signal()
		}
	}
	if lim := cfg.MaxUnackedMessagesPerSubscription; lim > 0 {
		if m.unacked >= lim {
			m.blocked = true
		} else if m.blocked && m.unacked <= lim/2 {
			m.blocked = false
			s.signal()
		}
	}
}

// redeliverMulti sends the listed entries that c holds (all it holds when
// none is listed) to replay.
func (s *subscription) redeliverMulti(c *consumer, ids []*brokerpb.MessageId) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mu.multi
	if m == nil {
		return
	}
	if len(ids) == 0 {
		for p, pe := range m.pending {
			if pe.c == c {
				s.toReplayLocked(p, pe)
			}
		}
		return
	}
	for _, id := range ids {
		p := mledger.Position{Ledger: id.LedgerId, Entry: id.EntryId}
		if pe := m.pending[p]; pe != nil && pe.c == c {
			s.toReplayLocked(p, pe)
		}
	}
}

// ackedMultiLocked updates pending entries after acknowledgements of ps.
func (s *subscription) ackedMultiLocked(ps []mledger.Position) {
	m := s.mu.multi
	if m == nil {
		return
	}
	for _, p := range ps {
		pe := m.pending[p]
		if pe == nil {
			continue
		}
		left := 0
		if !s.cur.IsAcked(p) {
			left = max(pe.msgs-len(s.cur.AckedBatchIndexes(p)), 0)
		}
		if left == 0 {
			s.unpendLocked(p, pe)
			delete(m.redeliveries, p)
			s.signal() // a key hold may be gone
			continue
		}
		s.adjustUnackedLocked(pe.c, left-pe.unacked)
		pe.unacked = left
	}
}

// refreshPendingLocked updates every pending entry after acknowledgements
// made by the broker itself (message TTL, admin skip).
func (s *subscription) refreshPendingLocked() {
	m := s.mu.multi
	if m == nil {
		return
	}
	ps := make([]mledger.Position, 0, len(m.pending))
	for p := range m.pending {
		ps = append(ps, p)
	}
	s.ackedMultiLocked(ps)
}

// resetMultiLocked forgets every delivery (seek, change of type).
func (s *subscription) resetMultiLocked() {
	m := s.mu.multi
	if m == nil {
		return
	}
	sel := m.selector
	for _, c := range s.mu.consumers {
		c.unacked, c.blocked = 0, false
	}
	s.mu.multi = newMultiState(s.t.s.cfg.DelayedDeliveryMaxIndexed)
	s.mu.multi.selector = sel
}

// offer results.
type offerResult int

const (
	offerSent    offerResult = iota // delivered to a consumer
	offerDropped                    // acknowledged or delivered already: skipped
	offerHeld                       // Key_Shared: held back in replay
	offerNoRoom                     // no consumer can take it now
	offerStale                      // delivery restarted meanwhile
)

// multiWait is what an idle Shared or Key_Shared dispatcher waits for,
// besides a wake-up and the next delayed entry's time: new entries.
type multiWait struct {
	moved <-chan struct{}
}

// nextDelayed is when a delayed entry is due or a spilled one needs a
// scan (unix ms; 0: none).
func (s *subscription) nextDelayed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.multi == nil {
		return 0
	}
	return s.mu.multi.delayed.next()
}

// dispatchMultiOnce delivers what it can: due delayed entries go to
// replay, replay is served first, then new entries. It reports whether it
// made progress; if not, what to wait for.
func (s *subscription) dispatchMultiOnce(ctx context.Context) (progressed bool, wait multiWait, err error) {
	s.mu.Lock()
	m := s.mu.multi
	if m == nil || m.blocked || !s.anyRoomLocked() {
		s.mu.Unlock()
		return false, wait, nil
	}
	gen := s.mu.gen
	keyShared := s.mu.typ == brokerpb.SubscriptionType_KEY_SHARED
	cutoff := dueBy(time.Now())
	for _, it := range m.delayed.due(cutoff) {
		s.addReplayLocked(it.pos, it.hash)
	}
	scan := m.delayed.wantScan(cutoff)
	if scan {
		m.delayed.startScan()
	}
	replay := s.replayCandidatesLocked(keyShared, 200)
	full := m.replay.Len() >= maxReplay
	s.mu.Unlock()

	if scan {
		more, err := s.scanDelayed(ctx, gen, cutoff)
		if err != nil {
			return progressed, wait, err
		}
		progressed = more // come back at once for the rest
	}
	blocked := map[int32]bool{} // hashes that must wait this pass
	if len(replay) > 0 {
		es, err := s.readPositions(ctx, gen, replay)
		if err != nil {
			return progressed, wait, err
		}
		for _, e := range es {
			switch s.offer(gen, e, true, blocked) {
			case offerStale:
				return true, wait, nil
			case offerSent, offerDropped:
				progressed = true
			case offerNoRoom:
				// Nobody can take more (Shared), or the subscription is at
				// its unacked limit: later entries must not overtake this one.
				return progressed, wait, nil
			}
		}
		if !keyShared {
			s.mu.Lock()
			stale := s.mu.multi == nil || s.mu.gen != gen
			left := 0
			if !stale {
				left = s.mu.multi.replay.Len()
			}
			s.mu.Unlock()
			if stale {
				return true, wait, nil
			}
			if left > 0 {
				return progressed, wait, nil // new entries wait behind replay
			}
		}
	}
	if full {
		return progressed, wait, nil
	}
	moved := s.t.ml.Moved()
	pos := s.cur.ReadPosition()
	want := max(1, min(s.totalPermits()/max(int(s.avgBatch), 1), 100))
	es, err := s.t.ml.Read(ctx, pos, want)
	if err != nil {
		return progressed, wait, err
	}
	if len(es) == 0 {
		s.checkEnd()
		wait.moved = moved
		return progressed, wait, nil
	}
	for _, e := range es {
		switch s.offer(gen, e, false, blocked) {
		case offerStale:
			return true, wait, nil
		case offerNoRoom:
			return progressed, wait, nil
		default:
			progressed = true
		}
	}
	return progressed, wait, nil
}

// replayCandidatesLocked lists, in position order, up to n replay entries
// to offer now. For Key_Shared it passes over the entries whose consumer
// cannot take them now (none, no permits, another consumer holds the key),
// and every later entry of their keys, so that entries held back for some
// keys never stall the others.
func (s *subscription) replayCandidatesLocked(keyShared bool, n int) []mledger.Position {
	m := s.mu.multi
	var out []mledger.Position
	skipped := map[int32]bool{}
	m.replay.Ascend(func(it replayItem) bool {
		if keyShared {
			if skipped[it.hash] {
				return true
			}
			c := m.selector.pick(it.hash)
			if h := m.holds[it.hash]; c == nil || c.blocked || c.available() == 0 || (h != nil && h.c != c) {
				skipped[it.hash] = true
				return true
			}
		}
		out = append(out, it.pos)
		return len(out) < n
	})
	return out
}

// addReplayLocked queues an entry for (re)delivery.
func (s *subscription) addReplayLocked(p mledger.Position, hash int32) {
	m := s.mu.multi
	if _, ok := m.replay.ReplaceOrInsert(replayItem{p, hash}); !ok && hash >= 0 {
		m.replayHashes[hash]++
	}
}

// maxScan bounds the entries one pass of a delayed-index scan reads.
const maxScan = 1000

// scanDelayed looks again, from where it stopped, for the delayed entries
// the index spilled: up to maxScan entries, stopping at the read position.
// It reports whether the scan is to go on.
func (s *subscription) scanDelayed(ctx context.Context, gen int64, cutoff int64) (more bool, err error) {
	s.mu.Lock()
	from := s.mu.multi.delayed.scanAt
	s.mu.Unlock()
	for read := 0; read < maxScan; {
		end := s.cur.ReadPosition()
		if !from.Before(end) {
			break
		}
		es, err := s.t.ml.Read(ctx, from, min(100, maxScan-read))
		if err != nil {
			return false, err
		}
		if len(es) == 0 {
			break
		}
		s.mu.Lock()
		m := s.mu.multi
		if s.mu.gen != gen || m == nil || !m.delayed.scanning {
			s.mu.Unlock()
			return false, nil
		}
		for _, e := range es {
			if !e.Pos.Before(end) {
				break
			}
			// Past e first: if adding e spills it, the spill is recorded
			// for the next scan rather than left to this one.
			from = s.t.ml.Next(e.Pos)
			m.delayed.scanned(from)
			read++
			_, pending := m.pending[e.Pos]
			_, queued := m.replay.Get(replayItem{pos: e.Pos})
			if pending || queued || m.delayed.has(e.Pos) || s.cur.IsAcked(e.Pos) {
				continue
			}
			_, md, err := entryMessages(e.Data)
			if err != nil || md.GetDeliverAtTime() == 0 {
				continue
			}
			hash := int32(-1)
			if s.mu.typ == brokerpb.SubscriptionType_KEY_SHARED {
				hash = stickyKeyHash(stickyKey(md))
			}
			if at := md.GetDeliverAtTime(); at > cutoff {
				m.delayed.add(delayedItem{at: at, pos: e.Pos, hash: hash})
			} else {
				s.addReplayLocked(e.Pos, hash)
			}
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mu.multi
	if m == nil || s.mu.gen != gen || !m.delayed.scanning {
		return false, nil
	}
	if !from.Before(s.cur.ReadPosition()) {
		m.delayed.endScan()
		return false, nil
	}
	return true, nil
}

// anyRoomLocked reports whether some consumer could take a message.
func (s *subscription) anyRoomLocked() bool {
	for _, c := range s.mu.consumers {
		if !c.blocked && c.available() > 0 {
			return true
		}
	}
	return false
}

func (s *subscription) totalPermits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.mu.consumers {
		if !c.blocked {
			n += c.available()
		}
	}
	return n
}

// readPositions reads the entries at ps (sorted), in runs of consecutive
// entries. Positions that no longer exist leave replay.
func (s *subscription) readPositions(ctx context.Context, gen int64, ps []mledger.Position) ([]mledger.Entry, error) {
	var out []mledger.Entry
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && ps[j].Ledger == ps[i].Ledger && ps[j].Entry == ps[j-1].Entry+1 {
			j++
		}
		es, err := s.t.ml.Read(ctx, ps[i], j-i)
		if err != nil {
			return out, err
		}
		k := 0
		for _, e := range es {
			if k == j-i || e.Pos != ps[i+k] {
				break
			}
			out = append(out, e)
			k++
		}
		if k == 0 {
			s.mu.Lock()
			if s.mu.gen == gen {
				s.dropReplayLocked(ps[i])
				delete(s.mu.multi.redeliveries, ps[i])
			}
			s.mu.Unlock()
			k = 1
		}
		i += k
	}
	return out, nil
}

func (s *subscription) dropReplayLocked(p mledger.Position) {
	m := s.mu.multi
	if it, ok := m.replay.Delete(replayItem{pos: p}); ok && it.hash >= 0 {
		if m.replayHashes[it.hash]--; m.replayHashes[it.hash] <= 0 {
			delete(m.replayHashes, it.hash)
		}
	}
}

// offer tries to deliver entry e: from replay, or new at the read
// position (then the read position moves past it unless nobody can take
// it). blocked collects the Key_Shared hashes that must wait this pass so
// that a key's later entries do not overtake its earlier ones.
func (s *subscription) offer(gen int64, e mledger.Entry, fromReplay bool, blocked map[int32]bool) offerResult {
	n, md, err := entryMessages(e.Data)
	if err != nil {
		n = 1 // delivered for the client to reject
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mu.multi
	if s.mu.gen != gen || m == nil {
		return offerStale
	}
	skip := s.cur.IsAcked(e.Pos)
	if !fromReplay {
		_, pending := m.pending[e.Pos]
		_, queued := m.replay.Get(replayItem{pos: e.Pos})
		skip = skip || pending || queued || m.delayed.has(e.Pos)
	}
	if skip {
		if fromReplay {
			s.dropReplayLocked(e.Pos)
			delete(m.redeliveries, e.Pos)
		} else {
			s.cur.SetReadPosition(s.t.ml.Next(e.Pos))
		}
		return offerDropped
	}
	hash := int32(-1)
	if s.mu.typ == brokerpb.SubscriptionType_KEY_SHARED {
		hash = stickyKeyHash(stickyKey(md))
	}
	if at := md.GetDeliverAtTime(); !fromReplay && at > dueBy(time.Now()) {
		// Delayed: indexed (or spilled) until due, then replayed.
		m.delayed.add(delayedItem{at: at, pos: e.Pos, hash: hash})
		s.cur.SetReadPosition(s.t.ml.Next(e.Pos))
		return offerHeld
	}
	if m.blocked {
		return offerNoRoom
	}
	var c *consumer
	if s.mu.typ == brokerpb.SubscriptionType_KEY_SHARED {
		c = m.selector.pick(hash)
		hold := m.holds[hash]
		wait := blocked[hash] || c == nil || c.blocked ||
			(hold != nil && hold.c != c) || (!fromReplay && m.replayHashes[hash] > 0)
		if wait || !c.take(n) {
			blocked[hash] = true
			if fromReplay {
				return offerHeld
			}
			if m.replay.Len() >= maxReplay {
				return offerNoRoom
			}
			s.addReplayLocked(e.Pos, hash)
			s.cur.SetReadPosition(s.t.ml.Next(e.Pos))
			return offerHeld
		}
	} else {
		for i := range s.mu.consumers {
			cand := s.mu.consumers[(m.rr+i)%len(s.mu.consumers)]
			if !cand.blocked && cand.take(n) {
				c = cand
				m.rr = (m.rr + i + 1) % len(s.mu.consumers)
				break
			}
		}
		if c == nil {
			return offerNoRoom
		}
	}
	s.avgBatch = 0.9*s.avgBatch + 0.1*float64(n)
	var acked []int32
	if n > 1 {
		acked = s.cur.AckedBatchIndexes(e.Pos)
	}
	pe := &pendingEntry{c: c, msgs: n, unacked: max(n-len(acked), 1), hash: hash}
	m.pending[e.Pos] = pe
	s.adjustUnackedLocked(c, pe.unacked)
	if hash >= 0 {
		h := m.holds[hash]
		if h == nil {
			h = &hashHold{c: c}
			m.holds[hash] = h
		}
		h.n++
	}
	if fromReplay {
		s.dropReplayLocked(e.Pos)
	} else {
		s.cur.SetReadPosition(s.t.ml.Next(e.Pos))
	}
	c.push(&brokerpb.ConsumeResponse{Response: &brokerpb.ConsumeResponse_Message{Message: &brokerpb.Message{
		MessageId: s.t.messageID(e.Pos, -1, 0), Entry: e.Data,
		RedeliveryCount: m.redeliveries[e.Pos], AckedBatchIndexes: acked,
	}}})
	s.sent(len(e.Data))
	return offerSent
}

// multiConsumerStats adds Shared and Key_Shared figures to c's stats.
func (s *subscription) multiConsumerStatsLocked(c *consumer, st *consumerStats) {
	m := s.mu.multi
	if m == nil {
		return
	}
	st.UnackedMessages = c.unacked
	st.BlockedOnUnacked = c.blocked
	if m.selector == nil || s.mu.typ != brokerpb.SubscriptionType_KEY_SHARED {
		return
	}
	for _, r := range m.selector.ranges(c) {
		st.KeyHashRanges = append(st.KeyHashRanges, r.String())
	}
	// Entries held back because their key is still held by another
	// consumer (draining), that would go to c.
	m.replay.Ascend(func(it replayItem) bool {
		if h := m.holds[it.hash]; h != nil && h.c != c && m.selector.pick(it.hash) == c {
			st.HeldBackForDrainingKeys++
		}
		return true
	})
}

// rateWindow counts events per second over the last minute.
type rateWindow struct {
	secs   [60]int64 // the unix second each bucket counts
	counts [60]int64
}

func (r *rateWindow) add(now time.Time, n int64) {
	sec := now.Unix()
	i := sec % 60
	if r.secs[i] != sec {
		r.secs[i], r.counts[i] = sec, 0
	}
	r.counts[i] += n
}

// perSecond is the mean rate over the minute before now.
func (r *rateWindow) perSecond(now time.Time) float64 {
	sec := now.Unix()
	var sum int64
	for i := range r.secs {
		if sec-r.secs[i] < 60 {
			sum += r.counts[i]
		}
	}
	return float64(sum) / 60
}
