package broker

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/magnetar-io/magnetar/proto/brokerpb"
	"github.com/magnetar-io/magnetar/proto/topicname"
)

// SetTestHookPublishTimed installs f as testHookPublishTimed; tests reset
// it with nil when they end.
func SetTestHookPublishTimed(f func()) { setHook(&testHookPublishTimed, f) }

// SessionLease is the broker's current etcd lease.
func (s *Server) SessionLease() int64 { return int64(s.session.Load().Lease()) }

// SetTestHookTerminated installs f as testHookTerminated.
func SetTestHookTerminated(f func()) { setHook(&testHookTerminated, f) }

// SetTestHookSlotsFull installs f as testHookSlotsFull.
func SetTestHookSlotsFull(f func()) { setHook(&testHookSlotsFull, f) }

// SetTestHookAnswering installs f as testHookAnswering.
func SetTestHookAnswering(f func()) { setHook(&testHookAnswering, f) }

// SetTestHookAppendDone installs f as testHookAppendDone.
func SetTestHookAppendDone(f func()) { setHook(&testHookAppendDone, f) }

// DedupWaiting is how many re-sends of producer wait on an append in
// flight on the loaded topic (a partition's full name).
func (s *Server) DedupWaiting(topic, producer string) int {
	n, err := topicname.Parse(topic)
	if err != nil {
		return 0
	}
	t := s.lookupTopic(n)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.mu.dedup.producers[producer]
	if d == nil {
		return 0
	}
	waiting := 0
	for _, w := range d.inflight {
		waiting += len(w.cbs)
	}
	return waiting
}

// SetDedupClock makes now the clock of the loaded topic's deduplication
// state (producers' idle times, snapshot cadence). It reports whether the
// topic is loaded.
func (s *Server) SetDedupClock(topic string, now func() time.Time) bool {
	t := s.loadedTopic(topic)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.clock = now
	return true
}

// DedupProducers lists the producer names the loaded topic keeps
// deduplication state for.
func (s *Server) DedupProducers(topic string) []string {
	t := s.loadedTopic(topic)
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for name := range t.mu.dedup.producers {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// ProducerConnected reports whether a producer of this name is connected
// to the loaded topic.
func (s *Server) ProducerConnected(topic, name string) bool {
	t := s.loadedTopic(topic)
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.connectedLocked(name)
}

// RetainNow applies retention to the loaded topic once (as the retention
// loop does).
func (s *Server) RetainNow(topic string) bool {
	t := s.loadedTopic(topic)
	if t == nil {
		return false
	}
	t.retain(context.Background())
	return true
}

// FirstEntry is the loaded topic's first stored position, as
// "ledger:entry".
func (s *Server) FirstEntry(topic string) string {
	t := s.loadedTopic(topic)
	if t == nil {
		return ""
	}
	p := t.ml.First()
	return fmt.Sprintf("%d:%d", p.Ledger, p.Entry)
}

func (s *Server) loadedTopic(topic string) *topic {
	n, err := topicname.Parse(topic)
	if err != nil {
		return nil
	}
	return s.lookupTopic(n)
}

// SetTestHookPersist installs f to run at the start of every topic's
// background persist (with its full name and the task's context); tests
// reset it with nil.
func SetTestHookPersist(f func(topic string, ctx context.Context)) { setHook(&testHookPersist, f) }

// setHook stores f in p, or clears p when f is nil. Hooks are atomic so
// that a test may set or reset one while the broker's goroutines run.
func setHook[F any](p *atomic.Pointer[F], f F) {
	if reflect.ValueOf(f).IsNil() {
		p.Store(nil)
		return
	}
	p.Store(&f)
}

// SetTestHookAfterSeek installs f to run in a consumer stream's handler
// after it handled a seek; f is given a channel that receives when a
// message is queued for a consumer (any) after f was installed.
func SetTestHookAfterSeek(f func(messageQueued <-chan struct{})) {
	if f == nil {
		testHookSeekHandled.Store(nil)
		testHookPushed.Store(nil)
		return
	}
	queued := make(chan struct{}, 1)
	pushed := func(r *brokerpb.ConsumeResponse) {
		if r.GetMessage() != nil {
			select {
			case queued <- struct{}{}:
			default:
			}
		}
	}
	handled := func() { f(queued) }
	testHookPushed.Store(&pushed)
	testHookSeekHandled.Store(&handled)
}

// SetTestHookLoad installs f to run at the start of every topic load.
func SetTestHookLoad(f func(topic string)) {
	if f == nil {
		testHookLoad.Store(nil)
		return
	}
	h := func(n topicname.Name) { f(n.String()) }
	testHookLoad.Store(&h)
}

// GetTopic loads a topic partition as a client call would (create: as a
// producer may create it), and reports the error.
func (s *Server) GetTopic(ctx context.Context, topic string, create bool) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	_, err = s.getTopic(ctx, n, create)
	return err
}

// Unload unloads a loaded topic partition.
func (s *Server) Unload(ctx context.Context, topic string) error {
	n, err := topicname.Parse(topic)
	if err != nil {
		return err
	}
	return s.unloadTopic(ctx, n)
}

// SetTestHookSubscriptionCreating installs f as
// testHookSubscriptionCreating.
func SetTestHookSubscriptionCreating(f func()) { setHook(&testHookSubscriptionCreating, f) }

// Subscribe creates (or finds) a durable subscription on the loaded
// topic, as a consumer's subscribe does before the consumer joins.
func (s *Server) Subscribe(ctx context.Context, topic, sub string) error {
	t := s.loadedTopic(topic)
	if t == nil {
		return fmt.Errorf("%s is not loaded", topic)
	}
	_, err := t.getOrCreateSubscription(ctx, &brokerpb.Subscribe{Subscription: sub, Durable: true})
	return err
}

// RefreshStats closes the stats window of every loaded topic now, as
// statsLoop does every StatsInterval.
func (s *Server) RefreshStats() { s.refreshStats(time.Now()) }

// PersistedAcks reports whether the loaded topic's subscription has
// acknowledged every message up to the last one written, and if so
// persists its cursor so that a broker loading the topic next starts
// after them.
func (s *Server) PersistedAcks(ctx context.Context, topic, sub string) (bool, error) {
	t := s.loadedTopic(topic)
	if t == nil {
		return false, fmt.Errorf("topic %s is not loaded", topic)
	}
	for _, su := range t.subscriptions() {
		if su.name != sub {
			continue
		}
		if su.cur.MarkDelete() != t.ml.LastConfirmed() {
			return false, nil
		}
		return true, su.cur.Persist(ctx)
	}
	return false, fmt.Errorf("no subscription %s on %s", sub, topic)
}

// RecentPositions is how many stored positions a producer's deduplication
// state keeps to answer re-sends with.
const RecentPositions = recentPositions

// UnackedSet and AckedIndexes are Pulsar's batch ack sets (pulsar_consumer.go).
var (
	UnackedSet   = unackedSet
	AckedIndexes = ackedIndexes
)

// SetSeekReattachGrace sets how long a reader's subscription is kept for
// the consumer a seek closed; tests restore it with the returned func.
func SetSeekReattachGrace(d time.Duration) (restore func()) {
	old := seekReattachGrace
	seekReattachGrace = d
	return func() { seekReattachGrace = old }
}

// SetTestHookEndDecided installs f as testHookEndDecided.
func SetTestHookEndDecided(f func()) { setHook(&testHookEndDecided, f) }
