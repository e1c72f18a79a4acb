package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/bufpool"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// As in the magnetar binary: gRPC's buffers are not cleared.
func init() { bufpool.Install() }

func TestMain(m *testing.M) {
	testutil.PoisonReleased()
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type env struct {
	t   *testing.T
	c   *testcluster.Cluster
	cfg broker.Config
	b   *broker.Server
}

func newEnv(t *testing.T, configure func(*broker.Config)) *env {
	return newEnvWith(t, testcluster.Options{}, configure)
}

// newEnvWith is newEnv with bookies tuned by opts.
func newEnvWith(t *testing.T, opts testcluster.Options, configure func(*broker.Config)) *env {
	e := &env{t: t, c: testcluster.Start(t, 1, opts)}
	e.cfg = broker.DefaultConfig()
	e.cfg.Listen = "127.0.0.1:0"
	e.cfg.HTTPListen = "127.0.0.1:0"
	e.cfg.Metastore = e.c.Etcd.Endpoints()
	// One bookie: one copy (the default, 2/2/2, needs two).
	e.cfg.Ensemble, e.cfg.WriteQuorum, e.cfg.AckQuorum = 1, 1, 1
	e.cfg.CursorPersistInterval = 100 * time.Millisecond
	if configure != nil {
		configure(&e.cfg)
	}
	e.start()
	return e
}

func (e *env) start() {
	e.t.Helper()
	b, err := broker.Start(ctxT(e.t), e.cfg, broker.WithStore(e.c.Store), broker.WithLogger(zaptest.NewLogger(e.t).Named("broker")))
	if err != nil {
		e.t.Fatal(err)
	}
	e.b = b
	// The same address after a restart, so that clients find it again.
	e.cfg.Listen = b.Addr()
	e.cfg.HTTPListen = b.HTTPAddr()
	e.t.Cleanup(func() { b.Close() })
}

func (e *env) restart() {
	e.t.Helper()
	if err := e.b.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.start()
}

func (e *env) client() client.Client {
	e.t.Helper()
	c, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), OperationTimeout: 20 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func produce(t *testing.T, p client.Producer, from, n int) []client.MessageID {
	t.Helper()
	ids := make([]client.MessageID, n)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		p.SendAsync(ctxT(t), &client.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", from+i)), Key: fmt.Sprint("k", (from+i)%7)},
			func(id client.MessageID, _ *client.ProducerMessage, err error) {
				ids[i] = id
				errs <- err
			})
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	return ids
}

func receiveN(t *testing.T, c client.Consumer, n int) []client.Message {
	t.Helper()
	var out []client.Message
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(out) < n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

func TestProduceConsumeRestart(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	// One message per entry: the backlog (in entries) counts messages.
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "orders", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "orders", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 100)
	msgs := receiveN(t, cons, 100)
	for i, m := range msgs {
		if want := fmt.Sprintf("m-%05d", i); string(m.Payload()) != want {
			t.Fatalf("message %d = %q, want %q", i, m.Payload(), want)
		}
		if m.Key() != fmt.Sprint("k", i%7) || m.Topic() == "" || m.PublishTime().IsZero() {
			t.Fatalf("message %d metadata: key %q topic %q publish %v", i, m.Key(), m.Topic(), m.PublishTime())
		}
		if i < 60 {
			if err := cons.Ack(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Let the acks persist, then restart the broker: the subscription
	// resumes at the first unacknowledged message.
	testutil.Eventually(t, 30*time.Second, "acks to reach the broker", func() bool { return statsBacklog(t, e, "orders", "s") == 40 })
	p.Close()
	cons.Close()
	e.restart()
	cons, err = cl.Subscribe(client.ConsumerOptions{Topic: "orders", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	msgs = receiveN(t, cons, 40)
	if string(msgs[0].Payload()) != "m-00060" || string(msgs[39].Payload()) != "m-00099" {
		t.Fatalf("after restart: %q..%q", msgs[0].Payload(), msgs[39].Payload())
	}
}

func statsBacklog(t *testing.T, e *env, topic, sub string) int64 {
	t.Helper()
	st, err := adminGetJSON[struct {
		Subscriptions map[string]struct {
			MsgBacklog int64 `json:"msgBacklog"`
		} `json:"subscriptions"`
	}](e, "/admin/v2/persistent/public/default/"+topic+"/stats")
	if err != nil {
		t.Fatal(err)
	}
	return st.Subscriptions[sub].MsgBacklog
}

func TestBadInputGetsClearErrors(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.MaxMessageSize = 10 << 10 })
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "persistent://bad tenant/ns/t"}); !errors.Is(err, client.ErrInvalidTopicName) {
		t.Fatalf("invalid topic: %v", err)
	}
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "nosuch/ns/t"}); !errors.Is(err, client.ErrTopicNotFound) {
		t.Fatalf("topic in a missing namespace: %v", err)
	}
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "big", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: make([]byte, 20<<10)}); !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("oversized message: %v", err)
	}
	// The producer goes on after the refusal, and nothing is lost.
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("fits")}); err != nil {
		t.Fatalf("send after a refused one: %v", err)
	}
	for _, bad := range []client.ProducerOptions{{}, {Topic: "t", MaxPendingMessages: -1}, {Topic: "t", CompressionType: 42}} {
		if _, err := cl.CreateProducer(bad); !errors.Is(err, client.ErrInvalidOptions) {
			t.Errorf("producer options %+v: %v", bad, err)
		}
	}
	for _, bad := range []client.ConsumerOptions{{Topic: "t"}, {SubscriptionName: "s"}, {Topic: "t", SubscriptionName: "s", ReceiverQueueSize: -1}} {
		if _, err := cl.Subscribe(bad); !errors.Is(err, client.ErrInvalidOptions) {
			t.Errorf("consumer options %+v: %v", bad, err)
		}
	}
	if _, err := client.NewClient(client.ClientOptions{URL: "http://x:1"}); !errors.Is(err, client.ErrInvalidOptions) {
		t.Fatalf("bad URL: %v", err)
	}
}
