package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

const quotaPath = "/admin/v2/namespaces/public/default/backlogQuota"

// setQuota sets a backlog quota on public/default through the admin API.
func setQuota(t *testing.T, e *env, typ string, body map[string]any) {
	t.Helper()
	code, out, err := adminDo(e, "POST", quotaPath+"?backlogQuotaType="+typ, body)
	if err != nil || code != 204 {
		t.Fatalf("set the %s quota %v: %d %s %v", typ, body, code, out, err)
	}
}

// fillUntil sends 1 KiB messages until a send fails, and returns that
// error (the test fails if none does within 2,000 messages).
func fillUntil(t *testing.T, p client.Producer) error {
	t.Helper()
	payload := bytes.Repeat([]byte("x"), 1024)
	for i := 0; i < 2000; i++ {
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: payload}); err != nil {
			return err
		}
		time.Sleep(time.Millisecond) // let the quota check (every 20 ms) catch up
	}
	t.Fatal("2,000 KiB sent over a 4 KiB backlog quota: never refused")
	return nil
}

// The producer_exception policy refuses sends and new producers while a
// subscription's backlog is over the size quota, and no longer once the
// backlog is cleared; what was stored stays readable.
func TestBacklogQuotaProducerException(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.RetentionCheckInterval = 20 * time.Millisecond })
	setQuota(t, e, "destination_storage", map[string]any{"limitSize": 4096, "policy": "producer_exception"})
	cl := e.client()
	slow, err := cl.Subscribe(client.ConsumerOptions{Topic: "quota-x", SubscriptionName: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "quota-x", DisableBatching: true, SendTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := fillUntil(t, p); !errors.Is(err, client.ErrBacklogQuotaExceeded) {
		t.Fatalf("send over the quota: %v, want ErrBacklogQuotaExceeded", err)
	}
	if _, err := cl.CreateProducer(client.ProducerOptions{Topic: "quota-x"}); !errors.Is(err, client.ErrBacklogQuotaExceeded) {
		t.Fatalf("new producer over the quota: %v, want ErrBacklogQuotaExceeded", err)
	}
	// Every message acknowledged as stored is there.
	st := subscriptionStats(t, e, "quota-x", "slow")
	if st.MsgBacklog < 4 {
		t.Fatalf("backlog %d messages: the quota blocked too early", st.MsgBacklog)
	}
	if code, out, err := adminDo(e, "POST", "/admin/v2/persistent/public/default/quota-x/subscription/slow/skip_all", nil); err != nil || code != 204 {
		t.Fatalf("clear backlog: %d %s %v", code, out, err)
	}
	testutil.Eventually(t, 30*time.Second, "a producer accepted once the backlog is cleared", func() bool {
		p2, err := cl.CreateProducer(client.ProducerOptions{Topic: "quota-x", DisableBatching: true})
		if err != nil {
			return false
		}
		defer p2.Close()
		_, err = p2.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("after")})
		return err == nil
	})
	if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("after, first producer")}); err != nil {
		t.Fatalf("the first producer after the backlog was cleared: %v", err)
	}
}

// The producer_request_hold policy holds sends: the SDK resends until its
// send timeout, and a send held when the backlog is consumed goes through.
func TestBacklogQuotaProducerHold(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.RetentionCheckInterval = 20 * time.Millisecond })
	setQuota(t, e, "destination_storage", map[string]any{"limitSize": 4096, "policy": "producer_request_hold"})
	cl := e.client()
	slow, err := cl.Subscribe(client.ConsumerOptions{Topic: "quota-h", SubscriptionName: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "quota-h", DisableBatching: true, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = fillUntil(t, p)
	if !errors.Is(err, client.ErrSendTimeout) || !errors.Is(err, client.ErrBacklogQuotaHeld) {
		t.Fatalf("send over the quota: %v, want a send timeout held by the quota", err)
	}
	// A send held now goes through once the backlog is consumed.
	done := make(chan error, 1)
	p.SendAsync(context.Background(), &client.ProducerMessage{Payload: []byte("held")}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { done <- err })
	n := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		m, err := slow.Receive(ctx)
		cancel()
		if err != nil {
			break // drained what is stored
		}
		slow.Ack(m)
		n++
	}
	if n < 4 {
		t.Fatalf("consumed %d messages", n)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("held send, the backlog consumed: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the held send never completed")
	}
	m, err := slow.Receive(ctxT(t))
	if err != nil || string(m.Payload()) != "held" {
		t.Fatalf("the held message: %v %v", m, err)
	}
}

// consumer_backlog_eviction drops the oldest messages of a slow
// subscription: by size down to the quota, keeping the newest; by age
// those older than the limit.
//
// The checks run when the test says (RetainNow): a periodic one between
// the sends would evict some whatever it keeps, and hide an eviction that
// keeps too little.
func TestBacklogQuotaEviction(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) { c.RetentionCheckInterval = time.Hour })
	setQuota(t, e, "destination_storage", map[string]any{"limitSize": 10 << 10, "policy": "consumer_backlog_eviction"})
	cl := e.client()
	slow, err := cl.Subscribe(client.ConsumerOptions{Topic: "quota-e", SubscriptionName: "slow", ReceiverQueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "quota-e", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pad := bytes.Repeat([]byte("x"), 1000)
	for i := 0; i < 100; i++ {
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: append([]byte(fmt.Sprintf("m-%05d ", i)), pad...)}); err != nil {
			t.Fatalf("send %d: %v (eviction never blocks producers)", i, err)
		}
	}
	if st := subscriptionStats(t, e, "quota-e", "slow"); st.MsgBacklog != 100 {
		t.Fatalf("backlog %d before the check, want 100", st.MsgBacklog)
	}
	// What the check keeps is the newest 10 KiB, not less.
	if !e.b.RetainNow("quota-e") {
		t.Fatal("the topic is not loaded")
	}
	st := subscriptionStats(t, e, "quota-e", "slow")
	if st.MsgBacklog > 12 {
		t.Fatalf("backlog %d after eviction to 10 KiB of 1 KiB messages: evicted too little", st.MsgBacklog)
	}
	if st.MsgBacklog < 5 {
		t.Fatalf("backlog %d after eviction to 10 KiB of 1 KiB messages: evicted too much", st.MsgBacklog)
	}
	// The newest are kept: the last message is the last one sent.
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		m, err := slow.Receive(ctx)
		cancel()
		if err != nil {
			break
		}
		slow.Ack(m)
		last = string(m.Payload()[:7])
	}
	if last != "m-00099" {
		t.Fatalf("last message after eviction %q, want m-00099", last)
	}

	// By age: everything older than a second goes.
	code, out, err := adminDo(e, "DELETE", quotaPath, nil)
	if err != nil || code != 204 {
		t.Fatalf("remove the size quota: %d %s %v", code, out, err)
	}
	setQuota(t, e, "message_age", map[string]any{"limitTime": 1, "policy": "consumer_backlog_eviction"})
	for i := 0; i < 5; i++ {
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("old")}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, "messages older than the age quota evicted", func() bool {
		e.b.RetainNow("quota-e")
		return subscriptionStats(t, e, "quota-e", "slow").MsgBacklog == 0
	})
}

// A quota's limit may come as a string holding an integer, as Pulsar's
// broker takes it (pulsar-client-go's own tests post {"limit": "10240"});
// a string that is not an integer is refused.
func TestBacklogQuotaLimitAsString(t *testing.T) {
	e := newEnv(t, nil)
	setQuota(t, e, "destination_storage", map[string]any{"limit": "10240", "policy": "producer_request_hold"})
	setQuota(t, e, "message_age", map[string]any{"limitTime": "60", "policy": "producer_request_hold"})
	code, out, err := adminDo(e, "GET", "/admin/v2/namespaces/public/default/backlogQuotaMap", nil)
	want := `{"destination_storage":{"limitSize":10240,"limitTime":-1,"policy":"producer_request_hold"},"message_age":{"limitSize":-1,"limitTime":60,"policy":"producer_request_hold"}}`
	if err != nil || code != 200 || string(bytes.TrimSpace(out)) != want {
		t.Fatalf("quota map: %d %s %v, want %s", code, out, err, want)
	}
	// null stays as before: no limit of that kind.
	code, out, err = adminDo(e, "PUT", "/admin/v2/namespaces/public/quota-null", map[string]any{
		"backlog_quota_map": map[string]any{"destination_storage": map[string]any{"limitSize": "4096", "limitTime": nil, "policy": "producer_exception"}}})
	if err != nil || code != 204 {
		t.Fatalf("a namespace whose quota has limitTime null: %d %s %v", code, out, err)
	}
	for _, limit := range []any{"ten", "10.5", true} {
		code, out, err := adminDo(e, "POST", quotaPath, map[string]any{"limit": limit, "policy": "producer_request_hold"})
		if err != nil || code != 400 || !bytes.Contains(out, []byte("want an integer")) {
			t.Errorf("limit %v: %d %s %v, want 400 with the reason", limit, code, out, err)
		}
	}
}
