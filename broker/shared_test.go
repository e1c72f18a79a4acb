package broker_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/murmur3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// produceKeyed sends n messages "v-<i>" with keys "k<i % keys>" and
// returns the first error.
func produceKeyed(ctx context.Context, p client.Producer, n, keys int) error {
	if err := produceKeyedFrom(ctx, p, 0, n, keys); err != nil {
		return err
	}
	return p.Flush()
}

func valueOf(t *testing.T, m client.Message) int {
	t.Helper()
	v, err := strconv.Atoi(strings.TrimPrefix(string(m.Payload()), "v-"))
	if err != nil {
		t.Fatalf("payload %q", m.Payload())
	}
	return v
}

// Shared: 4 consumers on 100,000 messages; one of them takes messages and
// dies without acknowledging any. Every message is acknowledged exactly
// once by the others, including those the dead one held.
func TestSharedConsumerKilledMidway(t *testing.T) {
	const total = 100000
	e := newEnv(t, nil)
	cl := e.client()
	sub := func(c client.Client, name string) client.Consumer {
		cons, err := c.Subscribe(client.ConsumerOptions{Topic: "work", SubscriptionName: "s", Type: client.Shared,
			Name: name, SubscriptionInitialPosition: client.SubscriptionPositionEarliest, ReceiverQueueSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		return cons
	}
	// The victim has a client of its own, closed to kill it.
	victimClient, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	victim := sub(victimClient, "victim")
	var workers []client.Consumer
	for i := 0; i < 3; i++ {
		workers = append(workers, sub(cl, fmt.Sprint("worker-", i)))
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "work"})
	if err != nil {
		t.Fatal(err)
	}
	produced := make(chan error, 1)
	go func() { produced <- produceKeyed(ctxT(t), p, total, 100) }()

	// The victim takes 2,000 messages, acknowledges none, and dies.
	victimGot := map[int]bool{}
	for len(victimGot) < 2000 {
		m, err := victim.Receive(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		victimGot[valueOf(t, m)] = true
	}
	victimClient.Close()

	var mu sync.Mutex
	acked := make([]int, total)
	redelivered := 0
	var done sync.WaitGroup
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	count := 0
	finished := make(chan struct{})
	for _, w := range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			for {
				m, err := w.Receive(ctx)
				if err != nil {
					return
				}
				if err := w.Ack(m); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				v := valueOf(t, m)
				acked[v]++
				if m.RedeliveryCount() > 0 {
					redelivered++
				}
				if acked[v] == 1 {
					if count++; count == total {
						close(finished)
					}
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-finished:
	case <-time.After(90 * time.Second):
		mu.Lock()
		t.Fatalf("only %d of %d messages acknowledged", count, total)
	}
	// Once the broker has every acknowledgement, nothing is left to
	// deliver again: the counts are final.
	waitSub(t, e, "work", "s", func(st subStats) bool { return st.MsgBacklog == 0 && st.UnackedMessages == 0 })
	cancel()
	done.Wait()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	for v, n := range acked {
		if n != 1 {
			t.Errorf("message %d acknowledged %d times", v, n)
		}
	}
	if redelivered < len(victimGot) {
		t.Errorf("%d redelivered messages acknowledged, the victim held %d", redelivered, len(victimGot))
	}
}

type subStats struct {
	Type             string  `json:"type"`
	MsgBacklog       int64   `json:"msgBacklog"`
	UnackedMessages  int     `json:"unackedMessages"`
	Blocked          bool    `json:"blockedSubscriptionOnUnackedMsgs"`
	MsgRedelivered   int64   `json:"msgRedeliverCounter"`
	MsgRateRedeliver float64 `json:"msgRateRedeliver"`
	Replay           int     `json:"entriesToReplay"`
	MsgDelayed       int     `json:"msgDelayed"`
	DelayedSpilled   bool    `json:"delayedSpilled"`
	Consumers        []struct {
		Name                    string   `json:"consumerName"`
		UnackedMessages         int      `json:"unackedMessages"`
		BlockedOnUnacked        bool     `json:"blockedConsumerOnUnackedMsgs"`
		KeyHashRanges           []string `json:"keyHashRanges"`
		HeldBackForDrainingKeys int      `json:"heldBackForDrainingKeys"`
	} `json:"consumers"`
}

func subscriptionStats(t *testing.T, e *env, topic, sub string) subStats {
	t.Helper()
	st, err := adminGetJSON[struct {
		Subscriptions map[string]subStats `json:"subscriptions"`
	}](e, "/admin/v2/persistent/public/default/"+topic+"/stats")
	if err != nil {
		t.Fatal(err)
	}
	return st.Subscriptions[sub]
}

// waitSub polls the subscription's stats until ok (or fails after a
// minute).
func waitSub(t *testing.T, e *env, topic, sub string, ok func(subStats) bool) subStats {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := subscriptionStats(t, e, topic, sub)
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscription %s of %s: %+v", sub, topic, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func receiveOne(t *testing.T, c client.Consumer) client.Message {
	t.Helper()
	m, err := c.Receive(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Nacked messages and messages not acknowledged within AckTimeout come
// again, with their redelivery count; the backoff policy sees the counts.
func TestSharedNackAndAckTimeoutRedeliverWithCounts(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	var mu sync.Mutex
	var backoffCounts []uint32
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "retry", SubscriptionName: "s", Type: client.Shared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest, AckTimeout: time.Second,
		NackBackoffPolicy: func(n uint32) time.Duration {
			mu.Lock()
			backoffCounts = append(backoffCounts, n)
			mu.Unlock()
			return 10 * time.Millisecond
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "retry", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"nacked", "timed-out"} {
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string][]uint32{} // payload: redelivery counts in order
	record := func(m client.Message) string {
		seen[string(m.Payload())] = append(seen[string(m.Payload())], m.RedeliveryCount())
		return string(m.Payload())
	}
	// First deliveries: nack one, leave the other unacknowledged.
	for i := 0; i < 2; i++ {
		if m := receiveOne(t, cons); record(m) == "nacked" {
			cons.Nack(m)
		}
	}
	// The nacked one comes back first (10 ms), is nacked again, then
	// acknowledged; the other one comes back after the ack timeout.
	for len(seen["nacked"]) < 3 || len(seen["timed-out"]) < 2 {
		m := receiveOne(t, cons)
		switch record(m) {
		case "nacked":
			if len(seen["nacked"]) < 3 {
				cons.Nack(m)
			} else {
				cons.Ack(m)
			}
		default:
			cons.Ack(m)
		}
	}
	if got := fmt.Sprint(seen["nacked"]); got != "[0 1 2]" {
		t.Errorf("nacked message delivered with counts %s, want [0 1 2]", got)
	}
	if got := fmt.Sprint(seen["timed-out"]); got != "[0 1]" {
		t.Errorf("timed-out message delivered with counts %s, want [0 1]", got)
	}
	mu.Lock()
	if got := fmt.Sprint(backoffCounts); got != "[0 1]" {
		t.Errorf("backoff policy asked for counts %s, want [0 1]", got)
	}
	mu.Unlock()
	st := waitSub(t, e, "retry", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
	if st.MsgRedelivered != 3 || st.MsgRateRedeliver != 3.0/60 {
		t.Errorf("redelivery counter %d and rate %v/s, want 3 and 3 in the last minute", st.MsgRedelivered, st.MsgRateRedeliver)
	}
}

// A message delivered MaxDeliveries times goes to the dead-letter topic
// with its properties and where it came from, and is acknowledged.
func TestDeadLetterAfterMaxDeliveries(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	dlq, err := cl.Subscribe(client.ConsumerOptions{Topic: "poison-s-DLQ", SubscriptionName: "ops",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "poison", SubscriptionName: "s", Type: client.Shared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest, NackRedeliveryDelay: 10 * time.Millisecond,
		DLQ: &client.DLQPolicy{MaxDeliveries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "poison"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("bad"), Key: "k", Properties: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint32(0); i < 3; i++ {
		m := receiveOne(t, cons)
		if m.RedeliveryCount() != i {
			t.Fatalf("delivery %d with redelivery count %d", i, m.RedeliveryCount())
		}
		cons.Nack(m)
	}
	d := receiveOne(t, dlq)
	props := d.Properties()
	if string(d.Payload()) != "bad" || d.Key() != "k" || props["app"] != "x" ||
		props[client.PropertyRealTopic] != "persistent://public/default/poison" || props[client.PropertyOriginMessageID] != id.String() {
		t.Fatalf("dead letter %q key %q properties %v (sent as %v)", d.Payload(), d.Key(), props, id)
	}
	waitSub(t, e, "poison", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
}

// A consumer at its unacknowledged limit gets nothing more until it
// acknowledged half of them.
func TestUnackedLimitBlocksConsumer(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.MaxUnackedMessagesPerConsumer = 10 })
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "limited", SubscriptionName: "s", Type: client.Shared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest, ReceiverQueueSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "limited", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := produceKeyed(ctxT(t), p, 50, 1); err != nil {
		t.Fatal(err)
	}
	st := waitSub(t, e, "limited", "s", func(st subStats) bool {
		return len(st.Consumers) == 1 && st.Consumers[0].BlockedOnUnacked
	})
	if n := st.Consumers[0].UnackedMessages; n != 10 {
		t.Fatalf("blocked with %d unacknowledged messages, want 10", n)
	}
	var got []client.Message
	for len(got) < 10 {
		got = append(got, receiveOne(t, cons))
	}
	// Acknowledging 4 is not enough: still blocked once the broker has
	// them. The fifth unblocks it: exactly 5 more come, up to the limit.
	for _, m := range got[:4] {
		cons.Ack(m)
	}
	waitSub(t, e, "limited", "s", func(st subStats) bool { return st.MsgBacklog == 46 })
	if st := subscriptionStats(t, e, "limited", "s"); !st.Consumers[0].BlockedOnUnacked || st.Consumers[0].UnackedMessages != 6 {
		t.Fatalf("after 4 acknowledgements: %+v", st.Consumers[0])
	}
	cons.Ack(got[4])
	for len(got) < 15 {
		got = append(got, receiveOne(t, cons))
	}
	waitSub(t, e, "limited", "s", func(st subStats) bool {
		return st.MsgBacklog == 45 && st.Consumers[0].BlockedOnUnacked && st.Consumers[0].UnackedMessages == 10
	})
	for _, m := range got[5:] {
		cons.Ack(m)
	}
	for n := 15; n < 50; n++ {
		cons.Ack(receiveOne(t, cons))
	}
	waitSub(t, e, "limited", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
}

// Bad input: cumulative acknowledgements on Shared and Key_Shared, sticky
// ranges that overlap or are out of bounds.
func TestQueueSubscriptionsBadInput(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	for _, typ := range []client.SubscriptionType{client.Shared, client.KeyShared} {
		cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "bad", SubscriptionName: "s-" + typ.String(), Type: typ,
			SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: "bad"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		p.Close()
		m := receiveOne(t, cons)
		if err := cons.AckCumulative(m); !errors.Is(err, client.ErrNotAllowed) {
			t.Errorf("%s: cumulative ack: %v", typ, err)
		}
		cons.Close()
	}
	// The broker refuses it too, whatever the client.
	stream := rawConsume(t, e, &brokerpb.Subscribe{Topic: "bad", Subscription: "s-shared", Type: brokerpb.SubscriptionType_SHARED, Durable: true})
	stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{
		MessageIds: []*brokerpb.MessageId{{LedgerId: 0, EntryId: 0, BatchIndex: -1}}, Cumulative: true}}})
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ce := r.GetError(); ce != nil {
			if ce.Reason != brokerpb.ErrorReason_NOT_ALLOWED || !strings.Contains(ce.Message, "cumulative") {
				t.Errorf("cumulative ack on shared: %v %q", ce.Reason, ce.Message)
			}
			break
		}
	}

	sticky := func(name string, ranges ...int) error {
		pol, err := client.NewKeySharedPolicySticky(ranges)
		if err != nil {
			return err
		}
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: "bad", SubscriptionName: "sticky", Type: client.KeyShared,
			Name: name, KeySharedPolicy: pol})
		if err == nil {
			t.Cleanup(c.Close)
		}
		return err
	}
	if err := sticky("a", 0, 100, 200, 300); err != nil {
		t.Fatal(err)
	}
	if err := sticky("b", 300, 400); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("overlapping sticky range: %v", err)
	}
	if err := sticky("c", 101, 199); err != nil {
		t.Errorf("adjacent sticky range: %v", err)
	}
	if err := sticky("d", 5, 70000); !errors.Is(err, client.ErrInvalidOptions) {
		t.Errorf("range past 65535: %v", err)
	}
	// Sticky ranges sent to the broker directly are checked there too.
	stream = rawConsume(t, e, &brokerpb.Subscribe{Topic: "bad", Subscription: "sticky", Type: brokerpb.SubscriptionType_KEY_SHARED, Durable: true,
		KeyShared: &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_STICKY, HashRanges: []*brokerpb.HashRange{{Start: 10, End: 5}}}})
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "not within") {
		t.Errorf("inverted range: %v", err)
	}
}

// rawConsume opens a Consume stream and subscribes (the answer is left to
// the caller).
func rawConsume(t *testing.T, e *env, sub *brokerpb.Subscribe) brokerpb.Broker_ConsumeClient {
	t.Helper()
	return rawConsumeCtx(ctxT(t), t, e, sub)
}

// rawConsumeCtx is rawConsume with a stream that ends with ctx (then
// Recv fails): a test waiting for a message that never comes fails then.
func rawConsumeCtx(ctx context.Context, t *testing.T, e *env, sub *brokerpb.Subscribe) brokerpb.Broker_ConsumeClient {
	t.Helper()
	cc, err := grpc.NewClient(e.b.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := brokerpb.NewBrokerClient(cc).Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Subscribe{Subscribe: sub}}); err != nil {
		t.Fatal(err)
	}
	return stream
}

// Key_Shared with 1,000 keys and consumers joining and leaving while
// 100,000 messages flow. A checker over every delivery (not a sample)
// asserts that each key's messages are first delivered in the key's order,
// that a consumer never receives a key's message while another consumer
// holds an earlier message of that key unacknowledged (the order in which
// the application processes them would be lost), and that nothing is lost.
func TestKeySharedKeepsKeyOrderWhileConsumersChange(t *testing.T) {
	const total, keys = 100000, 1000
	e := newEnv(t, nil)
	cl := e.client()

	var mu sync.Mutex             // guards the checker's state
	lastFirst := map[string]int{} // key: highest value delivered so far
	delivered := make([]bool, total)
	firstDeliveries, reorderings, redeliveries, overlaps := 0, 0, 0, 0
	// outstanding: per key, the messages received and not yet acknowledged,
	// with the consumer holding each.
	outstanding := map[string]map[int]string{}
	var examples []string
	allIn := make(chan struct{})
	record := func(m client.Message, by string) {
		v := valueOf(t, m)
		mu.Lock()
		defer mu.Unlock()
		for w, holder := range outstanding[m.Key()] {
			if w < v && holder != by {
				if overlaps++; len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("key %s: %d to %s while %s holds %d", m.Key(), v, by, holder, w))
				}
			}
		}
		if outstanding[m.Key()] == nil {
			outstanding[m.Key()] = map[int]string{}
		}
		outstanding[m.Key()][v] = by
		if m.Key() != "k"+strconv.Itoa(v%keys) {
			t.Errorf("value %d with key %q", v, m.Key())
		}
		if delivered[v] {
			redeliveries++
			return
		}
		delivered[v] = true
		if last, ok := lastFirst[m.Key()]; ok && v < last {
			reorderings++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("key %s: %d after %d", m.Key(), v, last))
			}
		}
		lastFirst[m.Key()] = max(lastFirst[m.Key()], v)
		if firstDeliveries++; firstDeliveries == total {
			close(allIn)
		}
	}

	type member struct {
		c    client.Consumer
		name string
		done chan struct{}
	}
	ackEvery := 20
	join := func(i int) *member {
		name := fmt.Sprint("c", i)
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: "orders", SubscriptionName: "ks", Type: client.KeyShared,
			Name: name, SubscriptionInitialPosition: client.SubscriptionPositionEarliest, ReceiverQueueSize: 200})
		if err != nil {
			t.Fatal(err)
		}
		m := &member{c: c, name: name, done: make(chan struct{})}
		go func() {
			defer close(m.done)
			// Acknowledged 20 at a time: a consumer leaves holding up to
			// 19 unacknowledged messages (and what its queue holds), which
			// then go to the others.
			var unacked []client.Message
			for {
				msg, err := c.Receive(context.Background())
				if err != nil {
					return // closed
				}
				record(msg, name)
				if unacked = append(unacked, msg); len(unacked) >= ackEvery {
					mu.Lock()
					for _, u := range unacked {
						delete(outstanding[u.Key()], valueOf(t, u))
					}
					mu.Unlock()
					for _, u := range unacked {
						c.Ack(u)
					}
					unacked = unacked[:0]
				}
			}
		}()
		return m
	}
	leave := func(m *member) {
		m.c.Close()
		<-m.done
		// What it held unacknowledged goes to the others.
		mu.Lock()
		for _, held := range outstanding {
			for v, holder := range held {
				if holder == m.name {
					delete(held, v)
				}
			}
		}
		mu.Unlock()
	}
	members := []*member{join(0), join(1)}

	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "orders", BatcherBuilderType: client.KeyBasedBatchBuilder})
	if err != nil {
		t.Fatal(err)
	}
	// 40 steps of 2,500 messages; while each step's messages flow, a
	// consumer joins or leaves (1 to 5 of them).
	next, changes := 2, 0
	for step := 0; step < 40; step++ {
		produced := make(chan error, 1)
		go func() { produced <- produceKeyedFrom(ctxT(t), p, step*total/40, total/40, keys) }()
		changes++
		if len(members) < 5 && (changes%3 != 0 || len(members) == 1) {
			members = append(members, join(next))
			next++
		} else {
			i := changes % len(members)
			leave(members[i])
			members = append(members[:i], members[i+1:]...)
		}
		if err := <-produced; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-allIn:
	case <-time.After(time.Minute):
		mu.Lock()
		t.Fatalf("%d of %d messages delivered", firstDeliveries, total)
	}
	// The last consumers leave holding unacknowledged messages; one that
	// acknowledges everything takes them all.
	for _, m := range members {
		leave(m)
	}
	ackEvery = 1
	last := join(next)
	waitSub(t, e, "orders", "ks", func(st subStats) bool { return st.MsgBacklog == 0 })
	leave(last)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d membership changes, %d messages delivered again after a consumer left", changes, redeliveries)
	if reorderings > 0 || overlaps > 0 {
		t.Errorf("%d per-key reorderings and %d deliveries while another consumer held an earlier message of the key, e.g. %v",
			reorderings, overlaps, examples)
	}
}

// produceKeyedFrom sends values from..from+n-1 with keys "k<v % keys>".
func produceKeyedFrom(ctx context.Context, p client.Producer, from, n, keys int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for v := from; v < from+n; v++ {
		wg.Add(1)
		p.SendAsync(ctx, &client.ProducerMessage{Payload: []byte("v-" + strconv.Itoa(v)), Key: "k" + strconv.Itoa(v%keys)},
			func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			})
	}
	wg.Wait()
	return first
}

// A key whose hash moves to a new Key_Shared consumer while the old one
// still holds its messages unacknowledged waits ("draining"): the new
// consumer gets the key's next messages only once the old one acknowledged.
func TestKeySharedHoldsBackKeysStillHeldElsewhere(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	sub := func(name string) client.Consumer {
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: "drain", SubscriptionName: "ks", Type: client.KeyShared,
			Name: name, SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a := sub("a")
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "drain", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 200
	if err := produceKeyedFrom(ctxT(t), p, 0, keys, keys); err != nil {
		t.Fatal(err)
	}
	var held []client.Message
	for len(held) < keys {
		held = append(held, receiveOne(t, a))
	}
	b := sub("b")
	if err := produceKeyedFrom(ctxT(t), p, keys, keys, keys); err != nil {
		t.Fatal(err)
	}
	// a gets the next message of the keys it keeps; those of the keys
	// that moved to b wait for a.
	byName := func(st subStats, name string) int {
		for i, c := range st.Consumers {
			if c.Name == name {
				return i
			}
		}
		t.Fatalf("no consumer %s in %+v", name, st)
		return -1
	}
	st := waitSub(t, e, "drain", "ks", func(st subStats) bool {
		return len(st.Consumers) == 2 &&
			st.Consumers[byName(st, "a")].UnackedMessages+st.Consumers[byName(st, "b")].HeldBackForDrainingKeys == 2*keys
	})
	moved := st.Consumers[byName(st, "b")].HeldBackForDrainingKeys
	if moved == 0 || moved == keys {
		t.Fatalf("%d of %d keys moved to the new consumer", moved, keys)
	}
	if n := st.Consumers[byName(st, "b")].UnackedMessages; n != 0 {
		t.Fatalf("b received %d messages of keys a still holds", n)
	}
	for _, m := range held {
		a.Ack(m)
	}
	for i := 0; i < keys-moved; i++ {
		a.Ack(receiveOne(t, a))
	}
	for i := 0; i < moved; i++ {
		m := receiveOne(t, b)
		if v := valueOf(t, m); v < keys {
			t.Fatalf("b received %d, a message a acknowledged", v)
		}
		b.Ack(m)
	}
	waitSub(t, e, "drain", "ks", func(st subStats) bool { return st.MsgBacklog == 0 })
}

// sendDelayed sends a message to be delivered at the time it carries,
// truncated to whole milliseconds as Pulsar's clients send it: the
// deliver_at_time is the millisecond the payload names.
func sendDelayed(t *testing.T, p client.Producer, at time.Time) {
	t.Helper()
	at = at.Truncate(time.Millisecond)
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("d-" + strconv.FormatInt(at.UnixMilli(), 10)), DeliverAt: at}); err != nil {
		t.Fatal(err)
	}
}

// checkNotEarly fails if m, sent by sendDelayed, arrived before the
// millisecond its deliver_at_time names was over: a Pulsar client may
// have meant any time in it (dueBy).
func checkNotEarly(t *testing.T, m client.Message) {
	t.Helper()
	now := time.Now()
	at, err := strconv.ParseInt(strings.TrimPrefix(string(m.Payload()), "d-"), 10, 64)
	if err != nil {
		t.Fatalf("payload %q", m.Payload())
	}
	if end := time.UnixMilli(at + 1); now.Before(end) {
		t.Fatalf("message due at %d ms delivered at %v, %v before the millisecond was over", at, now, end.Sub(now))
	}
}

// Delayed messages: Shared subscriptions deliver them no earlier than
// their time, after the messages sent at once, and still after a broker
// restart.
func TestDelayedDeliveryNoEarlierAndAfterRestart(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "later", SubscriptionName: "s", Type: client.Shared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "later"})
	if err != nil {
		t.Fatal(err)
	}
	sendDelayed(t, p, time.Now().Add(700*time.Millisecond))
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("now")}); err != nil {
		t.Fatal(err)
	}
	if m := receiveOne(t, cons); string(m.Payload()) != "now" {
		t.Fatalf("first message %q, want the one not delayed", m.Payload())
	} else {
		cons.Ack(m)
	}
	m := receiveOne(t, cons)
	checkNotEarly(t, m)
	cons.Ack(m)

	// Pending delayed messages survive a restart of the broker.
	// (No wait for the stats to show it delayed: under load the poll could
	// come after the message was due.)
	due := time.Now().Add(3 * time.Second)
	sendDelayed(t, p, due)
	e.restart()
	// Acknowledgements still grouped in the client when the broker went
	// down are lost with it: those messages may come again first.
	want := "d-" + strconv.FormatInt(due.UnixMilli(), 10)
	for {
		m = receiveOne(t, cons)
		cons.Ack(m)
		if string(m.Payload()) == want {
			checkNotEarly(t, m)
			break
		}
		if got := string(m.Payload()); got != "now" && !strings.HasPrefix(got, "d-") {
			t.Fatalf("unexpected message %q", got)
		}
	}
	waitSub(t, e, "later", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
}

// More delayed messages than the in-memory index holds: the rest are
// found again by scanning the partition, none is lost or early.
func TestDelayedDeliveryBeyondTheIndex(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.DelayedDeliveryMaxIndexed = 10 })
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "many-later", SubscriptionName: "s", Type: client.KeyShared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "many-later"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	start := time.Now()
	// Due between 3 and 5 s from now, in shuffled order; sent at once (not
	// one by one, which under load could take until they are due).
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		at := start.Add(3*time.Second + time.Duration(i*7919%n)*10*time.Millisecond)
		p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte("d-" + strconv.FormatInt(at.UnixMilli(), 10)), DeliverAt: at},
			func(_ client.MessageID, _ *client.ProducerMessage, err error) { errs <- err })
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if st := waitSub(t, e, "many-later", "s", func(st subStats) bool { return st.DelayedSpilled }); st.MsgDelayed > 10 {
		t.Fatalf("index of %d delayed messages, bounded to 10", st.MsgDelayed)
	}
	got := map[string]bool{}
	for len(got) < n {
		m := receiveOne(t, cons)
		checkNotEarly(t, m)
		got[string(m.Payload())] = true
		cons.Ack(m)
	}
	waitSub(t, e, "many-later", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
}

// ReconsumeLater sends a message through the retry topic, back to the
// consumer after the delay with its reconsume count; past MaxDeliveries it
// goes to the dead-letter topic instead.
func TestRetryTopicRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	dlq, err := cl.Subscribe(client.ConsumerOptions{Topic: "jobs-s-DLQ", SubscriptionName: "ops",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "jobs", SubscriptionName: "s", Type: client.Shared,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest, RetryEnable: true,
		DLQ: &client.DLQPolicy{MaxDeliveries: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("job"), Properties: map[string]string{"app": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	m := receiveOne(t, cons)
	for times := 1; times <= 2; times++ {
		sent := time.Now()
		if err := cons.ReconsumeLater(m, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		m = receiveOne(t, cons)
		if waited := time.Since(sent); waited < 300*time.Millisecond {
			t.Fatalf("reconsumed after %v, before the 300ms delay", waited)
		}
		props := m.Properties()
		if string(m.Payload()) != "job" || props["app"] != "x" || props[client.PropertyReconsumeTimes] != strconv.Itoa(times) ||
			props[client.PropertyRealTopic] != "persistent://public/default/jobs" || props[client.PropertyOriginMessageID] != id.String() ||
			!strings.HasSuffix(m.Topic(), "jobs-s-RETRY") {
			t.Fatalf("reconsumed %q from %s with properties %v", m.Payload(), m.Topic(), props)
		}
	}
	// A third time is past MaxDeliveries: dead letter.
	if err := cons.ReconsumeLater(m, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d := receiveOne(t, dlq)
	if string(d.Payload()) != "job" || d.Properties()[client.PropertyOriginMessageID] != id.String() {
		t.Fatalf("dead letter %q %v", d.Payload(), d.Properties())
	}
	waitSub(t, e, "jobs", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
	waitSub(t, e, "jobs-s-RETRY", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
	if err := cons.ReconsumeLater(d, time.Second); err == nil {
		t.Error("ReconsumeLater of another consumer's message accepted")
	}
}

// keysIn returns n keys whose Key_Shared hash is in lo..hi.
func keysIn(n, lo, hi int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprint("key-", i)
		if h := int((murmur3.Sum32([]byte(k)) & 0x7fffffff) % 65536); h >= lo && h <= hi {
			out = append(out, k)
		}
	}
	return out
}

// Entries held back for keys nobody can take now do not stall the keys a
// consumer can take, however many of them wait in replay (from a review:
// only the first 200 replay entries were ever looked at).
func TestKeySharedHeldBackEntriesDoNotStallOtherKeys(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	pol, err := client.NewKeySharedPolicySticky([]int{0, 32767})
	if err != nil {
		t.Fatal(err)
	}
	a, err := cl.Subscribe(client.ConsumerOptions{Topic: "hol", SubscriptionName: "ks", Type: client.KeyShared,
		Name: "a", KeySharedPolicy: pol, NackRedeliveryDelay: 10 * time.Millisecond,
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "hol", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	// 250 messages of keys nobody covers: held back in replay.
	for _, k := range keysIn(250, 32768, 65535) {
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("x"), Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	waitSub(t, e, "hol", "ks", func(st subStats) bool { return st.Replay == 250 })
	kA := keysIn(1, 0, 32767)[0]
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("first"), Key: kA}); err != nil {
		t.Fatal(err)
	}
	a.Nack(receiveOne(t, a)) // back to replay, behind the 250
	waitSub(t, e, "hol", "ks", func(st subStats) bool { return st.MsgRedelivered == 1 })
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("second"), Key: kA}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first", "second"} {
		if m := receiveOne(t, a); string(m.Payload()) != want {
			t.Fatalf("got %q, want %q", m.Payload(), want)
		} else {
			a.Ack(m)
		}
	}
}

// One bad id in an acknowledgement request is refused; the others are
// applied, and the entries they acknowledge are no longer counted as
// unacknowledged (from a review).
func TestSharedAckWithOneBadIDAppliesTheOthers(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "badack", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 3)
	stream := rawConsume(t, e, &brokerpb.Subscribe{Topic: "badack", Subscription: "s", Type: brokerpb.SubscriptionType_SHARED,
		Durable: true, InitialPosition: brokerpb.InitialPosition_EARLIEST, ReceiverQueueSize: 10})
	stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: 10}}})
	var ids []*brokerpb.MessageId
	for len(ids) < 3 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m := r.GetMessage(); m != nil {
			ids = append(ids, m.MessageId)
		}
	}
	bad := &brokerpb.MessageId{LedgerId: ids[0].LedgerId + 1000, EntryId: 0, BatchIndex: -1}
	stream.Send(&brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Ack{Ack: &brokerpb.Ack{MessageIds: []*brokerpb.MessageId{ids[0], bad, ids[2]}}}})
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetError() != nil {
			break
		}
	}
	st := waitSub(t, e, "badack", "s", func(st subStats) bool { return st.MsgBacklog == 1 })
	if st.UnackedMessages != 1 {
		t.Fatalf("backlog 1 but %d messages counted unacknowledged", st.UnackedMessages)
	}
}

// Messages that timed out while waiting in the consumer's queue, unseen by
// the application, are not handed to it after they went to another
// consumer (from a review).
func TestAckTimeoutDropsQueuedCopies(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	sub := func(name string) client.Consumer {
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: "at", SubscriptionName: "s", Type: client.Shared, Name: name,
			AckTimeout: time.Second, ReceiverQueueSize: 100, SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a := sub("a")
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "at", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 20)
	waitSub(t, e, "at", "s", func(st subStats) bool { return st.UnackedMessages == 20 })
	b := sub("b")
	// a's application does not receive; after the ack timeout the messages
	// go to b, which acknowledges them all.
	for n := 0; n < 20; {
		m := receiveOne(t, b)
		b.Ack(m)
		n++
	}
	waitSub(t, e, "at", "s", func(st subStats) bool { return st.MsgBacklog == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if m, err := a.Receive(ctx); err == nil {
		t.Fatalf("a's application got %q, processed by b already", m.Payload())
	}
}

// The subscription's unacknowledged limit holds back every consumer.
func TestUnackedLimitPerSubscription(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.MaxUnackedMessagesPerSubscription = 10 })
	cl := e.client()
	var cons []client.Consumer
	for _, name := range []string{"a", "b"} {
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: "sublimit", SubscriptionName: "s", Type: client.Shared, Name: name,
			SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cons = append(cons, c)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "sublimit", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 30)
	st := waitSub(t, e, "sublimit", "s", func(st subStats) bool { return st.Blocked })
	if st.UnackedMessages != 10 || st.Consumers[0].UnackedMessages+st.Consumers[1].UnackedMessages != 10 {
		t.Fatalf("blocked with %+v", st)
	}
	// Acknowledging what they hold lets the rest through.
	for n := 0; n < 30; n++ {
		select {
		case m := <-cons[0].Chan():
			cons[0].Ack(m.Message)
		case m := <-cons[1].Chan():
			cons[1].Ack(m.Message)
		case <-ctxT(t).Done():
			t.Fatalf("%d of 30 received", n)
		}
	}
	waitSub(t, e, "sublimit", "s", func(st subStats) bool { return st.MsgBacklog == 0 && !st.Blocked })
}

// rawMessages receives n messages on a raw consumer stream, skipping other
// responses.
func rawMessages(t *testing.T, stream brokerpb.Broker_ConsumeClient, n int) []*brokerpb.MessageId {
	t.Helper()
	var ids []*brokerpb.MessageId
	for len(ids) < n {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(ids), n, err)
		}
		if m := r.GetMessage(); m != nil {
			ids = append(ids, m.MessageId)
		}
	}
	return ids
}

func rawSend(t *testing.T, stream brokerpb.Broker_ConsumeClient, req *brokerpb.ConsumeRequest) {
	t.Helper()
	if err := stream.Send(req); err != nil {
		t.Fatalf("send %v: %v", req, err)
	}
}

func sameEntry(a, b *brokerpb.MessageId) bool {
	return a.LedgerId == b.LedgerId && a.EntryId == b.EntryId
}

// Key_Shared: a new entry of a key never overtakes an older entry of that
// key waiting in replay, also when the replay entry is beyond the part of
// replay one dispatch pass offers (200 entries) and its consumer could
// take both. The raw protocol lets the test hold the permits.
func TestKeySharedNewEntryWaitsBehindReplayOfItsKey(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "ks-replay", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(key string) client.MessageID {
		t.Helper()
		id, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(key), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	stream := rawConsume(t, e, &brokerpb.Subscribe{Topic: "ks-replay", Subscription: "s", Type: brokerpb.SubscriptionType_KEY_SHARED,
		Durable: true, InitialPosition: brokerpb.InitialPosition_EARLIEST, ReceiverQueueSize: 1000,
		KeyShared: &brokerpb.KeySharedMeta{Mode: brokerpb.KeySharedMode_AUTO_SPLIT}})
	const n = 250
	for i := range n {
		send(fmt.Sprint("key-", i))
	}
	rawSend(t, stream, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: n}}})
	first := rawMessages(t, stream, n)
	// No permits left: the new message of the last key waits.
	later := send(fmt.Sprint("key-", n-1))
	// Every message goes back to replay, then permits for all.
	rawSend(t, stream, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Redeliver{Redeliver: &brokerpb.Redeliver{MessageIds: first}}})
	rawSend(t, stream, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: 1000}}})
	again := rawMessages(t, stream, n+1)
	at := func(id *brokerpb.MessageId) int {
		for i, got := range again {
			if sameEntry(got, id) {
				return i
			}
		}
		t.Fatalf("%v not delivered again", id)
		return -1
	}
	older := at(first[n-1])
	newer := at(&brokerpb.MessageId{LedgerId: later.LedgerID(), EntryId: later.EntryID()})
	if newer < older {
		t.Fatalf("key-%d: the new message was delivered %dth, before the older one in replay (%dth)", n-1, newer+1, older+1)
	}
}

// Shared: a consumer's nack of its own messages sends them again at once
// (the raw protocol has no client-side delay), counted; a consumer that
// leaves has every message it held sent to another. Each consumer's
// stream lives 10 s: a redelivery that never comes fails the test then,
// not after a long timeout.
func TestSharedRedeliversNackedAndLeftMessages(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "redeliver", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce(t, p, 0, 6)
	sub := func(name string) (brokerpb.Broker_ConsumeClient, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream := rawConsumeCtx(ctx, t, e, &brokerpb.Subscribe{Topic: "redeliver", Subscription: "s", Type: brokerpb.SubscriptionType_SHARED,
			ConsumerName: name, Durable: true, InitialPosition: brokerpb.InitialPosition_EARLIEST, ReceiverQueueSize: 10})
		rawSend(t, stream, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Flow{Flow: &brokerpb.Flow{Permits: 10}}})
		return stream, cancel
	}
	a, cancelA := sub("a")
	defer cancelA()
	ids := rawMessages(t, a, 6)

	rawSend(t, a, &brokerpb.ConsumeRequest{Request: &brokerpb.ConsumeRequest_Redeliver{Redeliver: &brokerpb.Redeliver{MessageIds: ids[:2]}}})
	for i := range 2 {
		r, err := a.Recv()
		for err == nil && r.GetMessage() == nil {
			r, err = a.Recv()
		}
		if err != nil {
			t.Fatalf("nacked message %d not sent again: %v", i, err)
		}
		if m := r.GetMessage(); !sameEntry(m.MessageId, ids[i]) || m.RedeliveryCount != 1 {
			t.Fatalf("after the nack: %v (redelivery count %d); want %v, 1", m.MessageId, m.RedeliveryCount, ids[i])
		}
	}

	b, cancelB := sub("b")
	defer cancelB()
	waitSub(t, e, "redeliver", "s", func(st subStats) bool { return len(st.Consumers) == 2 })
	cancelA() // a leaves holding all six
	got := rawMessages(t, b, 6)
	for _, id := range ids {
		if !slices.ContainsFunc(got, func(g *brokerpb.MessageId) bool { return sameEntry(g, id) }) {
			t.Fatalf("%v, held by the consumer that left, not sent to the other; got %v", id, got)
		}
	}
}

// With --key-shared-selector auto-split, keys go where Pulsar's hash
// range auto-split sends them: the first consumer has every hash, the
// second takes 0..32768, so each key's consumer follows from its hash.
func TestKeySharedAutoSplitAssignsAsPulsar(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.KeySharedSelector = broker.KeySharedAutoSplit })
	cl := e.client()
	sub := func(name string) client.Consumer {
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: "split", SubscriptionName: "ks", Type: client.KeyShared,
			Name: name, SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	first, second := sub("first"), sub("second")
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "split", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 100
	if err := produceKeyedFrom(ctxT(t), p, 0, keys, keys); err != nil {
		t.Fatal(err)
	}
	type got struct{ consumer, key string }
	out := make(chan got, keys)
	for name, c := range map[string]client.Consumer{"first": first, "second": second} {
		go func() {
			for {
				m, err := c.Receive(ctxT(t))
				if err != nil {
					return
				}
				c.Ack(m)
				out <- got{name, m.Key()}
			}
		}()
	}
	perConsumer := map[string]int{}
	for range keys {
		var g got
		select {
		case g = <-out:
		case <-ctxT(t).Done():
			t.Fatalf("received %v of %d", perConsumer, keys)
		}
		hash := (murmur3.Sum32([]byte(g.key)) & 0x7fffffff) % 65536
		want := "first"
		if hash <= 32768 {
			want = "second"
		}
		if g.consumer != want {
			t.Errorf("key %s (hash %d) went to %s, want %s", g.key, hash, g.consumer, want)
		}
		perConsumer[g.consumer]++
	}
	if perConsumer["first"] == 0 || perConsumer["second"] == 0 {
		t.Fatalf("one consumer got every key: %v", perConsumer)
	}
}
