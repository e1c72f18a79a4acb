package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testcluster"
)

// A topic written with ensembles of 2 on 2 bookies; one bookie is then
// stopped for good (its registration gone) and the topic reloaded, so
// that fewer bookies are writable than its ensemble. Everything stored is
// still served: to a consumer that subscribes after the failure, to a
// subscription made before it (admin peek), to a reader. Producers are
// told NOT_ENOUGH_BOOKIES: a send is retried within its send timeout,
// fails naming the cause once the timeout passes, and succeeds when a
// bookie is added back in time. A topic created meanwhile (no ledger at
// all) takes consumers and, once a bookie is back, messages. Before,
// loading the topic failed: nothing stored could be read.
func TestTopicWithNotEnoughBookiesServesReads(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.Ensemble, c.WriteQuorum, c.AckQuorum = 2, 2, 2 })
	e.c.AddBookie(testcluster.Options{})
	const topic = "persistent://public/default/few-bookies"
	cl := e.client()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 20)
	p.Close()
	before, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "before", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	before.Close()

	e.c.Bookies()[1].Kill()
	if err := e.b.Unload(ctxT(t), topic); err != nil {
		t.Fatalf("unload: %v", err)
	}

	// Loaded again on the next use, with one bookie for ensembles of 2.
	after, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "after", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatalf("subscribe after the failure: %v", err)
	}
	defer after.Close()
	for i, m := range receiveN(t, after, 20) {
		if want := fmt.Sprintf("m-%05d", i); string(m.Payload()) != want {
			t.Fatalf("message %d = %q, want %q", i, m.Payload(), want)
		}
	}
	// Peek answers the entry's payload, as Pulsar's admin API does.
	code, peeked, err := adminDo(e, "GET", "/admin/v2/persistent/public/default/few-bookies/subscription/before/position/1", nil)
	if err != nil || code != 200 || string(peeked) != "m-00000" {
		t.Fatalf("peek of the subscription made before the failure: %d %q %v", code, peeked, err)
	}
	if got := readPayloads(t, cl, topic); len(got) != 20 || got[19] != "m-00019" {
		t.Fatalf("reader: %d messages %v", len(got), got)
	}

	// A send refused until its timeout fails naming the cause.
	short, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("producer on the topic without enough bookies: %v", err)
	}
	_, err = short.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("late")})
	short.Close()
	if !errors.Is(err, client.ErrSendTimeout) || !errors.Is(err, client.ErrNotEnoughBookies) {
		t.Fatalf("send with one bookie for ensembles of 2: %v, want a send timeout caused by not enough bookies", err)
	}

	// A topic created now has no ledger at all, yet takes a consumer.
	const fresh = "persistent://public/default/few-bookies-new"
	freshCons, err := cl.Subscribe(client.ConsumerOptions{Topic: fresh, SubscriptionName: "s"})
	if err != nil {
		t.Fatalf("subscribe to a new topic without enough bookies: %v", err)
	}
	defer freshCons.Close()

	// A send refused at first is retried, and stored once a bookie is
	// back within its send timeout.
	refused := make(chan struct{}, 1)
	broker.SetTestHookAppendDone(func() {
		select {
		case refused <- struct{}{}:
		default:
		}
	})
	defer broker.SetTestHookAppendDone(nil)
	p, err = cl.CreateProducer(client.ProducerOptions{Topic: topic, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := make(chan error, 1)
	p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte("m-00020")}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { sent <- err })
	select {
	case <-refused: // answered without a ledger: refused
	case err := <-sent:
		t.Fatalf("send completed with no ledger to store it: %v", err)
	case <-ctxT(t).Done():
		t.Fatal("the send never reached the managed ledger")
	}
	freshProd, err := cl.CreateProducer(client.ProducerOptions{Topic: fresh, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer freshProd.Close()
	freshSent := make(chan error, 1)
	freshProd.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte("first")}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { freshSent <- err })
	e.c.AddBookie(testcluster.Options{})
	for _, ch := range []chan error{sent, freshSent} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("send once a bookie is back: %v", err)
			}
		case <-ctxT(t).Done():
			t.Fatal("send not completed once a bookie is back")
		}
	}
	if m := receiveN(t, after, 1)[0]; string(m.Payload()) != "m-00020" {
		t.Fatalf("after a bookie came back: %q", m.Payload())
	}
	if m := receiveN(t, freshCons, 1)[0]; string(m.Payload()) != "first" {
		t.Fatalf("new topic after a bookie came back: %q", m.Payload())
	}
}
