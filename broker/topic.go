package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/broker/internal/cursor"
	"github.com/magnetar-io/magnetar/broker/internal/mledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/entry"
	"github.com/magnetar-io/magnetar/proto/metapb"
	"github.com/magnetar-io/magnetar/proto/pulsarpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// topic is one topic partition (or non-partitioned topic) served by this
// broker: its managed ledger, producers, subscriptions and deduplication
// state. A non-persistent topic (nonpersistent.go) has no managed ledger
// (ml is nil), no cursors and no deduplication: what it is sent goes at
// once to the consumers that can take it.
type topic struct {
	s     *Server
	name  topicname.Name
	path  string // topicPath(name)
	ml    *mledger.ManagedLedger
	guard *metastore.Guard
	log   *zap.Logger

	// publishMu makes publishing one step from taking a publish time to
	// handing the entry to the managed ledger, so that entries are stored
	// in the order of their publish times (seek by time bisects on them)
	// whatever the number of producers. Taken before mu.
	publishMu sync.Mutex
	// subsMu serializes the creation of subscriptions. Taken before mu.
	subsMu sync.Mutex
	// traffic counts what this partition published and dispatched.
	traffic traffic
	// win is the last stats window (metrics); latency and entrySize
	// collect the window's publishes (statsLoop takes them).
	win       window
	latency   *buckets // microseconds
	entrySize *buckets // bytes
	// dedupWriteMu makes deduplication snapshots one write at a time, so
	// that they are stored in the order they were taken. Taken before mu.
	dedupWriteMu sync.Mutex
	// np is a non-persistent topic's message numbering; guarded by
	// publishMu.
	np npState

	mu struct {
		sync.Mutex
		set       settings
		producers map[string]*producer
		subs      map[string]*subscription
		dedup     *dedupTable
		// clock is the time of the deduplication state (producers' idle
		// times, snapshot cadence); tests set another.
		clock       func() time.Time
		lastPublish int64 // publish times are kept increasing
		closed      bool
		// quotaBlock refuses new messages and producers while the
		// backlog is over a quota whose policy blocks producers
		// (ErrBacklogQuotaHeld or ErrBacklogQuotaExceeded); nil otherwise.
		// Set by enforceBacklogQuotas.
		quotaBlock error
		// exclusive is the producer that has the topic to itself (Pulsar's
		// Exclusive access modes), nil if none; waiters wait, in order, for
		// the topic to have no producer (WaitForExclusive); epoch counts
		// the exclusive producers granted (Pulsar's topic epoch; kept in
		// memory only).
		exclusive *producer
		waiters   []*exclusiveWaiter
		epoch     uint64
		// npIdle: a non-persistent topic had no producer and no
		// subscription at the last retention check.
		npIdle bool
	}
}

// applicable is set as this topic applies it: a non-persistent topic does
// not deduplicate (it stores no sequence ids).
func (t *topic) applicable(set settings) settings {
	if !t.name.Persistent() {
		set.dedup = false
	}
	return set
}

// exclusiveWaiter is a WaitForExclusive producer waiting for the topic;
// granted gets nil once it has it, or why it never will.
type exclusiveWaiter struct {
	p       *producer
	granted chan error
}

// loadTopic claims ownership of a topic partition and opens it.
func (s *Server) loadTopic(ctx context.Context, n topicname.Name, create bool) (*topic, error) {
	pol, err := s.md.policies(ctx, n.NamespaceName())
	if err != nil {
		return nil, err
	}
	if parts, err := s.md.partitions(ctx, n); err != nil {
		return nil, err
	} else if parts > 0 {
		return nil, errorf(ErrNotAllowed, "%s is a partitioned topic: use its partitions (%s)", n, n.Partition(0))
	}
	if err := s.md.checkPartitionName(ctx, n); err != nil {
		return nil, err
	}
	exists, err := s.md.topicExists(ctx, n)
	if err != nil {
		return nil, err
	}
	if !exists && (!create || !s.cfg.AllowAutoTopicCreation) {
		return nil, errorf(ErrTopicNotFound, "%s", n)
	}
	path := topicPath(n)
	guard, err := s.claim(ctx, path)
	if err != nil {
		return nil, err
	}
	t := &topic{s: s, name: n, path: path, guard: guard, log: s.log.With(zap.String("topic", n.String())),
		latency: newBuckets(latencyBoundsUs), entrySize: newBuckets(entrySizeBounds)}
	t.mu.set = t.applicable(s.md.settings(pol))
	t.mu.producers = map[string]*producer{}
	t.mu.subs = map[string]*subscription{}
	t.mu.clock = time.Now
	t.mu.dedup = newDedupTable(s.cfg.dedupLimits(), t.mu.clock())
	if !n.Persistent() {
		t.np = newNPState()
		t.log.Info("topic loaded")
		return t, nil
	}
	ml, err := mledger.Open(ctx, path, t.mlConfig(), mledger.Deps{Store: s.store, Ledgers: s.ledgers, Guard: guard, Cache: s.cache,
		StorageReads: &s.storageReads, OnFenced: func() { s.goBackground(func() { s.unloadLost(t) }) }, Log: s.log})
	if err != nil {
		s.release(context.Background(), path, guard)
		return nil, err
	}
	t.ml = ml
	if err := t.loadSubscriptions(ctx); err != nil {
		t.closeBounded()
		return nil, err
	}
	if err := t.loadDedup(ctx); err != nil {
		t.closeBounded()
		return nil, err
	}
	t.log.Info("topic loaded", zap.Int("subscriptions", len(t.mu.subs)))
	return t, nil
}

func (t *topic) mlConfig() mledger.Config {
	c := t.s.cfg
	return mledger.Config{
		Ensemble: t.mu.set.ensemble, WriteQuorum: t.mu.set.writeQuorum, AckQuorum: t.mu.set.ackQuorum,
		MaxEntriesPerLedger: c.MaxEntriesPerLedger, MaxSizePerLedger: c.MaxSizePerLedger,
		MinLedgerAge: c.MinLedgerRollover, MaxLedgerAge: c.MaxLedgerRollover,
	}
}

func (t *topic) cursorDeps() cursor.Deps {
	return cursor.Deps{Store: t.s.store, Ledgers: t.s.ledgers, Guard: t.guard, Log: t.s.log,
		Ensemble: t.mu.set.ensemble, WriteQuorum: t.mu.set.writeQuorum, AckQuorum: t.mu.set.ackQuorum}
}

// loadSubscriptions opens every durable cursor, so that retention knows
// what is still needed even while nobody is connected.
func (t *topic) loadSubscriptions(ctx context.Context) error {
	prefix := metastore.CursorsPrefix(t.path)
	return t.s.store.ListAll(ctx, prefix, metastore.ListOptions{KeysOnly: true}, func(kv metastore.KV) error {
		name := strings.TrimPrefix(kv.Key, prefix)
		c, _, err := cursor.Open(ctx, t.ml, name, mledger.Position{Ledger: -1, Entry: -1}, t.cursorDeps())
		if err != nil {
			return fmt.Errorf("topic %s: open subscription %s: %w", t.name, name, err)
		}
		t.mu.subs[name] = newSubscription(t, name, c, true)
		return nil
	})
}

// close unloads the topic: consumers and producers are disconnected,
// cursors persisted, the managed ledger closed (so that the next owner
// need not recover it), ownership released.
func (t *topic) close(ctx context.Context) error {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil
	}
	t.mu.closed = true
	subs := make([]*subscription, 0, len(t.mu.subs))
	for _, s := range t.mu.subs {
		subs = append(subs, s)
	}
	producers := make([]*producer, 0, len(t.mu.producers))
	for _, p := range t.mu.producers {
		producers = append(producers, p)
	}
	for _, w := range t.mu.waiters { // they look the topic up again
		w.granted <- errorf(ErrTopicClosed, "%s is being unloaded", t.name)
	}
	t.mu.waiters = nil
	t.mu.Unlock()
	for _, p := range producers {
		p.disconnect(errorf(ErrTopicClosed, "%s is being unloaded", t.name))
	}
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.close(ctx))
	}
	errs = append(errs, t.persistDedup(ctx, true))
	if t.ml != nil {
		errs = append(errs, t.ml.Close(ctx))
		t.s.cache.Drop(t.path)
	}
	t.s.release(ctx, t.path, t.guard)
	return errors.Join(errs...)
}

// closeBounded closes a topic that failed to load, within the shutdown
// timeout.
func (t *topic) closeBounded() {
	ctx, cancel := context.WithTimeout(t.s.hardCtx, t.s.cfg.ShutdownTimeout)
	defer cancel()
	t.close(ctx)
}

func (t *topic) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.closed
}

// messageID builds a client message id.
func (t *topic) messageID(p mledger.Position, batchIndex, batchSize int32) *brokerpb.MessageId {
	id := &brokerpb.MessageId{}
	t.setMessageID(id, p, batchIndex, batchSize)
	return id
}

// setMessageID sets id's fields as messageID makes them.
func (t *topic) setMessageID(id *brokerpb.MessageId, p mledger.Position, batchIndex, batchSize int32) {
	id.LedgerId, id.EntryId, id.Partition, id.BatchIndex, id.BatchSize = p.Ledger, p.Entry, int32(t.name.PartitionIndex()), batchIndex, batchSize
}

// ---- producers and publishing ----

// ErrProducerFenced: an Exclusive producer was refused because the topic
// has producers, or a producer was fenced by an ExclusiveWithFencing one
// (Pulsar's ProducerFenced). It is a kind of ErrProducerBusy.
var ErrProducerFenced = fmt.Errorf("%w: fenced", ErrProducerBusy)

func (t *topic) addProducer(p *producer) error {
	_, err := t.addProducerAccess(p, pulsarpb.ProducerAccessMode_Shared)
	return err
}

// addProducerAccess attaches a producer in one of Pulsar's access modes:
// Shared (refused while a producer has the topic exclusively); Exclusive
// (refused while the topic has any producer); ExclusiveWithFencing (the
// producers there are disconnected, fenced); WaitForExclusive (granted
// once the topic has no producer, in order: wait is then not nil, and
// gets nil when granted; cancelExclusiveWait gives up).
func (t *topic) addProducerAccess(p *producer, mode pulsarpb.ProducerAccessMode) (wait <-chan error, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return nil, errorf(ErrTopicClosed, "%s", t.name)
	}
	if p.name == "" {
		var b [6]byte
		rand.Read(b[:])
		p.name = t.s.id + "-" + hex.EncodeToString(b[:])
	}
	if err := t.mu.quotaBlock; err != nil {
		return nil, err
	}
	if t.ml != nil && t.ml.Terminating() { // lock-free: an append's callback takes t.mu under the managed ledger's lock
		return nil, errorf(ErrTopicTerminated, "%s was terminated: it takes no more producers", t.name)
	}
	if _, busy := t.mu.producers[p.name]; busy {
		return nil, errorf(ErrProducerBusy, "a producer named %q is already connected to %s", p.name, t.name)
	}
	switch mode {
	case pulsarpb.ProducerAccessMode_Shared:
		if t.mu.exclusive != nil {
			return nil, errorf(ErrProducerBusy, "%s has an exclusive producer (%s)", t.name, t.mu.exclusive.name)
		}
	case pulsarpb.ProducerAccessMode_Exclusive:
		if n := len(t.mu.producers); n > 0 {
			return nil, errorf(ErrProducerFenced, "%s has %d producers: it cannot be had exclusively", t.name, n)
		}
	case pulsarpb.ProducerAccessMode_ExclusiveWithFencing:
		for name, other := range t.mu.producers {
			delete(t.mu.producers, name)
			t.mu.dedup.disconnect(name, t.mu.clock())
			other.disconnect(errorf(ErrProducerFenced, "fenced by exclusive producer %s", p.name))
		}
		t.mu.exclusive = nil
	case pulsarpb.ProducerAccessMode_WaitForExclusive:
		if len(t.mu.producers) > 0 || len(t.mu.waiters) > 0 {
			w := &exclusiveWaiter{p: p, granted: make(chan error, 1)}
			t.mu.waiters = append(t.mu.waiters, w)
			return w.granted, nil
		}
	default:
		return nil, errorf(ErrInvalidArgument, "producer access mode %d", mode)
	}
	t.attachLocked(p, mode != pulsarpb.ProducerAccessMode_Shared)
	return nil, nil
}

// attachLocked adds a producer admitted by addProducerAccess.
func (t *topic) attachLocked(p *producer, exclusive bool) {
	t.mu.producers[p.name] = p
	if exclusive {
		t.mu.exclusive = p
		t.mu.epoch++
	}
	p.lastSequence = -1
	if t.mu.set.dedup {
		p.lastSequence = t.mu.dedup.connect(p.name, t.mu.clock()).persisted
	}
}

// terminate terminates the topic (Pulsar's terminate): no message is
// stored after the returned position, ever. The producers are
// disconnected (a Pulsar client is told with CLOSE_PRODUCER, and its
// PRODUCER is then refused with TopicTerminatedError; the SDK's stream
// ends with TOPIC_TERMINATED), and so are WaitForExclusive producers
// waiting; new producers are refused. Consumers are told they reached the
// end once they acknowledged everything (subscription.checkEnd). The
// termination is stored with the ledger list, so it survives restarts
// and moves.
func (t *topic) terminate(ctx context.Context) (mledger.Position, error) {
	// Not cut short by the caller (an admin request) going away: the
	// producers are to be disconnected once it is done.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	last, err := t.ml.Terminate(ctx)
	if err != nil {
		return last, err
	}
	if h := testHookTerminated.Load(); h != nil {
		(*h)()
	}
	t.mu.Lock()
	producers := make([]*producer, 0, len(t.mu.producers))
	for _, p := range t.mu.producers {
		producers = append(producers, p)
	}
	for _, w := range t.mu.waiters {
		w.granted <- errorf(ErrTopicTerminated, "%s was terminated", t.name)
	}
	t.mu.waiters = nil
	subs := make([]*subscription, 0, len(t.mu.subs))
	for _, s := range t.mu.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	for _, p := range producers {
		p.disconnect(errorf(ErrTopicTerminated, "%s was terminated at %v", t.name, last))
	}
	for _, s := range subs {
		s.checkEnd()
	}
	t.log.Info("topic terminated", zap.Stringer("last", last))
	return last, nil
}

// testHookTerminated, when set by a test, runs in terminate once the
// managed ledger is terminated, before the producers are disconnected.
var testHookTerminated atomic.Pointer[func()]

// topicEpoch is the number of exclusive producers granted so far.
func (t *topic) topicEpoch() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.epoch
}

// cancelExclusiveWait gives up p's wait; false if it was granted already
// (remove it as a producer then).
func (t *topic) cancelExclusiveWait(p *producer) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, w := range t.mu.waiters {
		if w.p == p {
			t.mu.waiters = slices.Delete(t.mu.waiters, i, i+1)
			return true
		}
	}
	return false
}

func (t *topic) removeProducer(p *producer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.producers[p.name] == p {
		delete(t.mu.producers, p.name)
		t.mu.dedup.disconnect(p.name, t.mu.clock())
	}
	if t.mu.exclusive == p {
		t.mu.exclusive = nil
	}
	// The topic free: the first WaitForExclusive producer has it, unless
	// it is being terminated.
	if len(t.mu.waiters) > 0 && t.ml != nil && t.ml.Terminating() { // lock-free, as in addProducerAccess
		for _, w := range t.mu.waiters {
			w.granted <- errorf(ErrTopicTerminated, "%s was terminated", t.name)
		}
		t.mu.waiters = nil
	}
	if len(t.mu.producers) == 0 && len(t.mu.waiters) > 0 && !t.mu.closed {
		w := t.mu.waiters[0]
		t.mu.waiters = t.mu.waiters[1:]
		t.attachLocked(w.p, true)
		w.granted <- nil
	}
}

// connectedLocked reports whether a producer of this name is connected.
func (t *topic) connectedLocked(name string) bool { return t.mu.producers[name] != nil }

// testHookPublishTimed, when set by a test, runs in publish between taking
// the publish time and handing the entry to the managed ledger.
var testHookPublishTimed atomic.Pointer[func()]

// testHookAppendDone, when set by a test, runs when an append completes,
// before its outcome is recorded and answered.
var testHookAppendDone atomic.Pointer[func()]

// publish stores one message (or batch). cb gets the position, or
// duplicate true when deduplication dropped it, or an error.
func (t *topic) publish(ctx context.Context, p *producer, send *brokerpb.Send, cb func(pos mledger.Position, duplicate bool, err error)) {
	t.publishEntry(ctx, p, send, nil, cb)
}

// maxClientStampAge bounds how far behind the broker's clock a client's
// publish time may be for the broker to keep it (milliseconds): about the
// skew already allowed between brokers' clocks, whose stamps a topic's
// entries carry across moves.
const maxClientStampAge = 1000

// publishEntry is publish given, in raw, the entry the client encoded
// (Pulsar's clients send it in the stored layout, checksum verified;
// send's Metadata and Payload are its decoding). raw is stored as it is
// when its metadata is what the broker would write: the producer's name
// and sequence ids, and a publish time the topic may take (not before
// the topic's last, not after now, at most maxClientStampAge before it):
// no second encoding and checksum.
// Otherwise the entry is encoded again, as for a gRPC send.
func (t *topic) publishEntry(ctx context.Context, p *producer, send *brokerpb.Send, raw []byte, cb func(pos mledger.Position, duplicate bool, err error)) {
	md := send.Metadata
	if md == nil {
		cb(mledger.Position{}, false, errorf(ErrInvalidMessage, "send without metadata"))
		return
	}
	if raw != nil && (md.GetProducerName() != p.name || md.GetSequenceId() != send.SequenceId ||
		send.HighestSequenceId > 0 && md.GetHighestSequenceId() != send.HighestSequenceId) {
		raw = nil
	}
	highest := max(send.SequenceId, send.HighestSequenceId)
	t.publishMu.Lock()
	defer t.publishMu.Unlock()
	t.mu.Lock()
	now := max(time.Now().UnixMilli(), t.mu.lastPublish)
	if stamp := int64(md.GetPublishTime()); raw != nil && stamp >= t.mu.lastPublish && stamp <= now && now-stamp <= maxClientStampAge {
		now = stamp // the client's stamp, as it is in raw
	} else {
		raw = nil
	}
	t.mu.lastPublish = now
	dedup := t.mu.set.dedup
	seq := int64(send.SequenceId)
	var d *dedupState
	if dedup {
		d = t.mu.dedup.get(p.name)
		if w := d.inflightCovering(seq); w != nil {
			w.cbs = append(w.cbs, cb)
			t.mu.Unlock()
			return
		}
		if seq <= d.persisted {
			pos, ok := d.position(seq)
			t.mu.Unlock()
			if !ok {
				pos = mledger.Position{Ledger: -1, Entry: -1}
			}
			cb(pos, true, nil)
			return
		}
	}
	// A new message (a duplicate was answered above).
	if err := t.mu.quotaBlock; err != nil {
		t.mu.Unlock()
		cb(mledger.Position{}, false, err)
		return
	}
	if dedup {
		// Above persisted and not in flight: new, or a re-send of an
		// append that failed.
		d.pushed = max(d.pushed, int64(highest))
		d.inflight[seq] = &dedupWaiters{highest: int64(highest)}
	}
	t.mu.Unlock()
	if h := testHookPublishTimed.Load(); h != nil {
		(*h)()
	}
	data, err := raw, error(nil)
	if raw == nil {
		// Encoded again, with what the broker writes (raw has it already).
		// The fields' values in one allocation.
		v := &struct {
			name                string
			seq, highest, pubAt uint64
		}{p.name, send.SequenceId, send.HighestSequenceId, uint64(now)}
		md.ProducerName, md.SequenceId, md.PublishTime = &v.name, &v.seq, &v.pubAt
		if send.HighestSequenceId > 0 {
			md.HighestSequenceId = &v.highest
		}
		data, err = entry.Encode(md, send.Payload)
	}
	if err != nil {
		err = errorf(ErrInvalidMessage, "%v", err)
		if dedup {
			t.appended(d, seq, int64(highest), mledger.Position{}, err)
		}
		cb(mledger.Position{}, false, err)
		return
	}
	if len(data) > t.s.cfg.MaxMessageSize {
		err := errorf(ErrMessageTooLarge, "message of %d bytes, the maximum is %d", len(data), t.s.cfg.MaxMessageSize)
		if dedup {
			t.appended(d, seq, int64(highest), mledger.Position{}, err)
		}
		cb(mledger.Position{}, false, err)
		return
	}
	msgs := max(int(md.GetNumMessagesInBatch()), 1)
	if t.ml == nil {
		cb(t.publishNonPersistent(data, msgs, md), false, nil)
		return
	}
	start := time.Now()
	t.ml.AppendAsync(ctx, data, func(pos mledger.Position, err error) {
		if err == nil {
			t.traffic.published(msgs, len(data))
			t.s.traffic.published(msgs, len(data))
			t.latency.add(time.Since(start).Microseconds())
			t.entrySize.add(int64(len(data)))
		}
		if h := testHookAppendDone.Load(); h != nil {
			(*h)()
		}
		var waiting []func(mledger.Position, bool, error)
		if dedup {
			waiting = t.appended(d, seq, int64(highest), pos, err)
		}
		cb(pos, false, err)
		for _, w := range waiting {
			w(pos, err == nil, err)
		}
	})
}

// appended records the outcome of a deduplicated append and returns the
// re-sends that waited for it.
func (t *topic) appended(d *dedupState, seq, highest int64, pos mledger.Position, err error) []func(mledger.Position, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := d.inflight[seq]
	delete(d.inflight, seq)
	if err == nil {
		t.mu.dedup.appended(d, seq, highest, pos, t.mu.clock())
	}
	if w == nil {
		return nil
	}
	return w.cbs
}

// ---- deduplication state ----

// loadDedup rebuilds the highest sequence id per producer: the snapshot,
// then every entry after it.
func (t *topic) loadDedup(ctx context.Context) error {
	if !t.mu.set.dedup {
		return nil
	}
	var snap metapb.DedupSnapshot
	from := mledger.Position{Ledger: -1, Entry: -1}
	if _, err := getProto(ctx, t.s.store, metastore.DedupKey(t.path), &snap); err == nil {
		from = mledger.Position{Ledger: snap.LedgerId, Entry: snap.EntryId}
		for k, v := range snap.Sequences {
			t.mu.dedup.get(k).persisted = v
		}
	} else if !errors.Is(err, metastore.ErrNotFound) {
		return err
	}
	last := t.ml.LastConfirmed()
	replayed := 0
	for p := t.ml.Next(from); last.Ledger >= 0 && !last.Before(p); {
		es, err := t.ml.Read(ctx, p, 500)
		if err != nil {
			return fmt.Errorf("topic %s: rebuild deduplication state: %w", t.name, err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			md, _, err := entry.Decode(e.Data)
			if err != nil {
				return fmt.Errorf("topic %s: entry %v: %w", t.name, e.Pos, err)
			}
			d := t.mu.dedup.get(md.GetProducerName())
			d.persisted = max(d.persisted, int64(max(md.GetSequenceId(), md.GetHighestSequenceId())))
			d.stored(int64(md.GetSequenceId()), e.Pos)
			p = t.ml.Next(e.Pos)
			replayed++
		}
	}
	t.mu.dedup.loaded(from, last, replayed, t.mu.clock())
	return nil
}

// persistDedup forgets the producers idle too long and stores the
// deduplication snapshot when the table says one is due (final: the
// partition is being unloaded, store whatever changed).
func (t *topic) persistDedup(ctx context.Context, final bool) error {
	t.dedupWriteMu.Lock()
	defer t.dedupWriteMu.Unlock()
	t.mu.Lock()
	if !t.mu.set.dedup {
		t.mu.Unlock()
		return nil
	}
	tb, now := t.mu.dedup, t.mu.clock()
	purged := tb.purge(now, t.connectedLocked)
	due := tb.due(now, final)
	var snap *metapb.DedupSnapshot
	var mark dedupMark
	if due {
		snap, mark = tb.take(now, t.connectedLocked)
	}
	evicted, omitted, over := tb.overflow(now)
	t.mu.Unlock()
	if purged > 0 {
		t.log.Info("deduplication state of idle producers purged", zap.Int("producers", purged),
			zap.Duration("inactivity-timeout", tb.lim.inactivity))
	}
	if over {
		t.log.Warn("deduplication state over its limits: least recently active producers forgotten",
			zap.Int("forgotten", evicted), zap.Int("connected-not-snapshotted", omitted),
			zap.Int("max-producers", tb.lim.maxProducers), zap.Int("max-bytes", tb.lim.maxBytes))
	}
	if !due {
		return nil
	}
	_, err := t.s.store.Commit(ctx, t.guard, metastore.PutOp(metastore.DedupKey(t.path), marshal(snap), metastore.AnyVersion))
	if err != nil {
		return err
	}
	t.mu.Lock()
	tb.written(mark)
	t.mu.Unlock()
	return nil
}

// ---- subscriptions ----

// subscribe finds or creates the subscription and adds the consumer.
func (t *topic) subscribe(ctx context.Context, req *brokerpb.Subscribe, c *consumer) (*subscription, error) {
	sub, err := t.getOrCreateSubscription(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := sub.addConsumer(c); err != nil {
		return nil, err
	}
	return sub, nil
}

// getOrCreateSubscription returns the named subscription, creating it (a
// durable cursor, or a reader's in-memory one) if needed.
func (t *topic) getOrCreateSubscription(ctx context.Context, req *brokerpb.Subscribe) (*subscription, error) {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return nil, errorf(ErrTopicClosed, "%s", t.name)
	}
	sub := t.mu.subs[req.Subscription]
	t.mu.Unlock()
	if sub == nil {
		// One creation at a time: two consumers subscribing at once to a
		// new subscription must not both create its cursor.
		t.subsMu.Lock()
		defer t.subsMu.Unlock()
		t.mu.Lock()
		sub = t.mu.subs[req.Subscription]
		t.mu.Unlock()
	}
	if sub == nil {
		var cur *cursor.Cursor
		switch {
		case t.ml == nil:
			// Non-persistent: no cursor.
		case req.Durable:
			initial := t.ml.LastConfirmed()
			if req.InitialPosition == brokerpb.InitialPosition_EARLIEST {
				first := t.ml.First()
				initial = mledger.Position{Ledger: first.Ledger, Entry: first.Entry - 1}
			}
			var err error
			if cur, _, err = cursor.Open(ctx, t.ml, req.Subscription, initial, t.cursorDeps()); err != nil {
				return nil, err
			}
		default:
			cur = cursor.NewEphemeral(t.ml, req.Subscription, t.readerStart(req))
		}
		if h := testHookSubscriptionCreating.Load(); h != nil {
			(*h)()
		}
		t.mu.Lock()
		if t.mu.closed { // unloaded meanwhile: close did not see this subscription
			// The client looks the topic up again.
			t.mu.Unlock()
			if cur != nil {
				cur.Close(ctx)
			}
			return nil, errorf(ErrTopicClosed, "%s", t.name)
		}
		if existing := t.mu.subs[req.Subscription]; existing != nil {
			t.mu.Unlock()
			if cur != nil {
				cur.Close(ctx) // lost a race with another subscriber
			}
			sub = existing
		} else {
			sub = newSubscription(t, req.Subscription, cur, req.Durable)
			t.mu.subs[req.Subscription] = sub
			t.mu.Unlock()
		}
	}
	// A reader never joins a durable subscription, nor a durable consumer
	// a reader's: each would move the other's cursor (and a reader is not
	// held to the subscription prefix rule).
	if sub.durable != req.Durable {
		what := "a durable subscription: a reader cannot use its name"
		if !sub.durable {
			what = "a reader's: a durable subscription cannot use its name"
		}
		return nil, errorf(ErrNotAllowed, "subscription %q of %s is %s", req.Subscription, t.name, what)
	}
	return sub, nil
}

// testHookSubscriptionCreating, when set by a test, runs when
// getOrCreateSubscription has made a new subscription's cursor, before it
// adds the subscription to the topic.
var testHookSubscriptionCreating atomic.Pointer[func()]

// readerStart is the mark-delete position of a reader's cursor.
func (t *topic) readerStart(req *brokerpb.Subscribe) mledger.Position {
	id := req.StartMessageId
	switch {
	case id == nil && req.InitialPosition == brokerpb.InitialPosition_EARLIEST:
		first := t.ml.First()
		return mledger.Position{Ledger: first.Ledger, Entry: first.Entry - 1}
	case id == nil:
		return t.ml.LastConfirmed()
	case id.LedgerId < 0 && id.EntryId < 0: // "earliest"
		first := t.ml.First()
		return mledger.Position{Ledger: first.Ledger, Entry: first.Entry - 1}
	}
	p := mledger.Position{Ledger: id.LedgerId, Entry: id.EntryId}
	if req.StartInclusive || (id.BatchIndex >= 0 && id.BatchSize > 0) {
		// Start at the entry itself (the client skips earlier messages of
		// a batch).
		return mledger.Position{Ledger: p.Ledger, Entry: p.Entry - 1}
	}
	return p
}

// removeSubscription deletes a durable subscription (no consumers may be
// connected) or forgets a reader's.
// dropNonDurable removes a non-durable subscription once its last
// consumer has gone: its in-memory cursor keeps nothing worth keeping (a
// consumer joining meanwhile finds it closing and subscribes again).
//
// A subscription kept for a consumer a seek closed (keepNonDurable) stays
// until its time is up; the first retention check after that drops it if
// nobody came back.
func (t *topic) dropNonDurable(sub *subscription) {
	t.mu.Lock()
	sub.mu.Lock()
	// Decided and marked under the subscription's lock: a consumer cannot
	// join between the check and the close (it finds it closing).
	drop := !sub.durable && t.mu.subs[sub.name] == sub && len(sub.mu.consumers) == 0 && !time.Now().Before(sub.mu.keepUntil)
	if drop {
		sub.mu.dropping = true
		delete(t.mu.subs, sub.name)
	}
	sub.mu.Unlock()
	t.mu.Unlock()
	if !drop {
		return
	}
	sub.close(context.Background())
	if sub.cur != nil {
		sub.cur.Delete(context.Background())
	}
}

// seekReattachGrace is how long a non-durable subscription waits at least
// for the consumer a seek closed to subscribe again; it is dropped at the
// first retention check after (--retention-check-interval). A variable
// for tests.
var seekReattachGrace = time.Minute

// keepNonDurable keeps a non-durable subscription whose consumer a seek
// closed, so that the consumer, subscribing again, finds its cursor where
// the seek put it: Pulsar's clients subscribe again with the start
// position they were created with, and Pulsar's broker, like this one,
// reuses the subscription that still exists.
func (t *topic) keepNonDurable(sub *subscription) {
	if sub.durable {
		return
	}
	sub.mu.Lock()
	sub.mu.keepUntil = time.Now().Add(seekReattachGrace)
	sub.mu.Unlock()
}

func (t *topic) removeSubscription(ctx context.Context, name string, force bool) error {
	t.mu.Lock()
	sub := t.mu.subs[name]
	if sub == nil {
		t.mu.Unlock()
		return errorf(ErrSubscriptionNotFound, "%s on %s", name, t.name)
	}
	if n := sub.consumerCount(); n > 0 && !force {
		t.mu.Unlock()
		return errorf(ErrNotAllowed, "subscription %s has %d connected consumers", name, n)
	}
	delete(t.mu.subs, name)
	t.mu.Unlock()
	sub.close(ctx)
	if sub.cur == nil {
		return nil // non-persistent
	}
	return sub.cur.Delete(ctx)
}

func (t *topic) subscriptions() []*subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*subscription, 0, len(t.mu.subs))
	for _, s := range t.mu.subs {
		out = append(out, s)
	}
	return out
}

func (t *topic) subscription(name string) (*subscription, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.mu.subs[name]; s != nil {
		return s, nil
	}
	return nil, errorf(ErrSubscriptionNotFound, "%s on %s", name, t.name)
}

// ---- background work ----

// testHookPersist, when set by a test, runs at the start of persist.
var testHookPersist atomic.Pointer[func(topic string, ctx context.Context)]

// persist persists cursors and deduplication state.
func (t *topic) persist(ctx context.Context) {
	if h := testHookPersist.Load(); h != nil {
		(*h)(t.name.String(), ctx)
	}
	if t.ml == nil {
		return // non-persistent: nothing to persist
	}
	for _, s := range t.subscriptions() {
		if err := s.cur.Persist(ctx); err != nil && !errors.Is(err, cursor.ErrClosed) {
			t.log.Warn("cursor persist failed", zap.String("subscription", s.name), zap.Error(err))
		}
	}
	if err := t.persistDedup(ctx, false); err != nil {
		t.log.Warn("deduplication snapshot failed", zap.Error(err))
	}
}

// retain expires messages past the TTL and trims consumed ledgers.
func (t *topic) retain(ctx context.Context) {
	if t.ml == nil {
		t.retainNonPersistent(ctx)
		return
	}
	t.mu.Lock()
	ttl, ret := t.mu.set.messageTTL, t.mu.set.retention
	dedupAfter, keepDedup := t.mu.dedup.keepAfter()
	keepDedup = keepDedup && t.mu.set.dedup
	t.mu.Unlock()
	subs := t.subscriptions()
	for _, s := range subs {
		s.mu.Lock()
		expired := !s.durable && !s.mu.keepUntil.IsZero() && !time.Now().Before(s.mu.keepUntil)
		s.mu.Unlock()
		if expired {
			t.dropNonDurable(s) // kept after a seek; its consumer did not come back
		}
	}
	if ttl > 0 {
		cutoff := time.Now().Add(-ttl).UnixMilli()
		for _, s := range subs {
			if s.durable {
				s.expire(ctx, cutoff)
			}
		}
	}
	t.enforceBacklogQuotas(ctx, subs)
	t.ml.RollIfDue()
	slowest := t.ml.Next(t.ml.LastConfirmed())
	for _, s := range subs {
		if !s.durable {
			continue
		}
		if p := t.ml.Next(s.cur.MarkDelete()); p.Before(slowest) {
			slowest = p
		}
	}
	// Entries the stored deduplication snapshot does not cover are
	// replayed on load: keep them until the next snapshot covers them.
	if p := t.ml.Next(dedupAfter); keepDedup && p.Before(slowest) {
		slowest = p
	}
	if _, err := t.ml.Trim(ctx, slowest, ret); err != nil {
		t.log.Warn("trim failed", zap.Error(err))
	}
}

// publishTime returns the publish time of the entry at p.
func (t *topic) publishTime(ctx context.Context, p mledger.Position) (int64, bool, error) {
	es, err := t.ml.Read(ctx, p, 1)
	if err != nil || len(es) == 0 {
		return 0, false, err
	}
	md, _, err := entry.Decode(es[0].Data)
	if err != nil {
		return 0, false, err
	}
	return int64(md.GetPublishTime()), true, nil
}

// findByTime returns the position of the first entry published at or
// after ts (publish times increase along the partition), or the position
// after the last entry.
func (t *topic) findByTime(ctx context.Context, ts int64) (mledger.Position, error) {
	end := t.ml.Next(t.ml.LastConfirmed())
	for _, ref := range t.ml.Ledgers() {
		if ref.Entries == 0 {
			continue
		}
		lastTime, ok, err := t.publishTime(ctx, mledger.Position{Ledger: ref.LedgerId, Entry: ref.Entries - 1})
		if err != nil {
			return mledger.Position{}, err
		}
		if !ok || lastTime < ts {
			continue
		}
		lo, hi := int64(0), ref.Entries-1 // the answer is in lo..hi
		for lo < hi {
			mid := (lo + hi) / 2
			tm, _, err := t.publishTime(ctx, mledger.Position{Ledger: ref.LedgerId, Entry: mid})
			if err != nil {
				return mledger.Position{}, err
			}
			if tm >= ts {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return mledger.Position{Ledger: ref.LedgerId, Entry: lo}, nil
	}
	return end, nil
}

// entryMessages returns the number of messages in a stored entry and its
// metadata, without checking the entry's checksum.
func entryMessages(data []byte) (int, *pulsarpb.MessageMetadata, error) {
	// Routing needs the metadata only; the consumer checks the checksum.
	md, _, err := entry.DecodeUnchecked(data)
	if err != nil {
		return 0, nil, err
	}
	n := int(md.GetNumMessagesInBatch())
	if md.NumMessagesInBatch == nil || n < 1 {
		n = 1
	}
	return n, md, nil
}
