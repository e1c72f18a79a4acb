package broker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
)

// Etcd and every bookie go away at once, with producers and consumers at
// work: the broker's clean stop still ends within its shutdown timeout
// (correctness sweep, item 6).
func TestShutdownIsBoundedWhenEverythingElseIsGone(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.ShutdownTimeout = 2 * time.Second })
	cl := e.client()
	for _, topic := range []string{"a", "b", "c"} {
		// Sends that never get a receipt fail after 2 s: the client's own
		// close does not wait longer for them.
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, SendTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		produce(t, p, 0, 20)
		c, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range receiveN(t, c, 10) {
			c.Ack(m)
		}
		// More sends in flight when the bookies go.
		for i := 0; i < 50; i++ {
			p.SendAsync(context.Background(), &client.ProducerMessage{Payload: []byte("late")}, func(client.MessageID, *client.ProducerMessage, error) {})
		}
	}
	for _, b := range e.c.Bookies() {
		b.Kill()
	}
	e.c.Etcd.Close()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- e.b.Close() }()
	select {
	case err := <-done:
		t.Logf("close returned after %v: %v", time.Since(start).Round(10*time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatal("the broker is still stopping 20 s after etcd and the bookies went away (shutdown timeout 2 s)")
	}
}

// A topic whose background persist is stuck (its bookies are sick) holds
// one worker, and the other topics' persists go on meanwhile: their
// acknowledgements do not wait for it (correctness sweep, item 12).
func TestStuckTopicDoesNotDelayOthersPersistence(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	stuck := make(chan struct{})
	release := make(chan struct{})
	wellPersisted := make(chan struct{}, 100)
	var once sync.Once
	broker.SetTestHookPersist(func(topic string, ctx context.Context) {
		switch topic {
		case "persistent://public/default/sick":
			once.Do(func() { close(stuck) })
			select {
			case <-release:
			case <-ctx.Done():
			}
		case "persistent://public/default/well":
			select {
			case <-stuck:
				select {
				case wellPersisted <- struct{}{}:
				default:
				}
			default:
			}
		}
	})
	t.Cleanup(func() { broker.SetTestHookPersist(nil) })
	defer close(release)
	for _, topic := range []string{"sick", "well"} {
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		produce(t, p, 0, 10)
	}
	<-stuck
	// The persist interval is 100 ms; the sick topic's task is stuck for
	// its 30 s deadline.
	for i := 0; i < 3; i++ {
		select {
		case <-wellPersisted:
		case <-time.After(15 * time.Second):
			t.Fatalf("the healthy topic was persisted %d times while the sick one's persist was stuck", i)
		}
	}
}

// A topic load does not run on the context of the caller that started it:
// when that caller gives up, the others waiting for the same load still
// get the topic (correctness sweep, item 14).
func TestLoadOutlivesTheCallerThatStartedIt(t *testing.T) {
	e := newEnv(t, nil)
	const topic = "persistent://public/default/loaded"
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 3)
	p.Close()
	if err := e.b.Unload(ctxT(t), topic); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	broker.SetTestHookLoad(func(string) {
		close(started)
		<-release
	})
	t.Cleanup(func() { broker.SetTestHookLoad(nil) })
	first, cancel := context.WithCancel(ctxT(t))
	firstErr := make(chan error, 1)
	go func() { firstErr <- e.b.GetTopic(first, topic, false) }()
	<-started
	secondErr := make(chan error, 1)
	go func() { secondErr <- e.b.GetTopic(ctxT(t), topic, false) }()
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v", err)
	}
	close(release)
	if err := <-secondErr; err != nil {
		t.Fatalf("a caller waiting for the same load: %v", err)
	}
}
