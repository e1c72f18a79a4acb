package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/metastore"
)

// startBroker runs `magnetar broker` on addr against the cluster's etcd.
func (c *cluster) startBroker(name, addr, ttl string) *proc {
	return startProc(c.t, name, "broker",
		"--listen", addr, "--http", "",
		"--metastore", c.etcd.Endpoints()[0],
		"--session-ttl", ttl,
		"--log-level", "warn")
}

// owner returns the broker owning a partition ("" if none).
func (c *cluster) owner(topic string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := c.store.Get(ctx, metastore.OwnerKey(topic))
	if errors.Is(err, metastore.ErrNotFound) {
		return ""
	}
	if err != nil {
		c.t.Fatal(err)
	}
	owner, _, _ := strings.Cut(string(kv.Value), "\n")
	return owner
}

// Two broker processes; the owner of a partition is killed with SIGKILL.
// After its session's lease expires the other broker takes the partition
// over (fencing and recovering its ledger); the producer's sends succeed
// again and every acknowledged message is delivered, once, in order. The
// time from the kill to the first acknowledged send after it is logged
// (docs/benchmarks.md).
func TestKill9BrokerFailsOver(t *testing.T) {
	for _, ttl := range []time.Duration{3 * time.Second, 10 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) { kill9Failover(t, ttl) })
	}
}

func kill9Failover(t *testing.T, ttl time.Duration) {
	c := newCluster(t, 1)
	addrs := freePorts(t, 2)
	brokers := map[string]*proc{}
	for i, addr := range addrs {
		brokers[addr] = c.startBroker(fmt.Sprint("broker-", i), addr, ttl.String())
	}
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + strings.Join(addrs, ","), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The brokers register as they start: retry until one answers.
	var p client.Producer
	for p == nil {
		if p, err = cl.CreateProducer(client.ProducerOptions{Topic: "failover", DisableBatching: true, SendTimeout: time.Minute}); err != nil {
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	defer p.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "failover", SubscriptionName: "s",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	send := func(i int) {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := 0; i < 100; i++ {
		send(i)
	}
	owner := c.owner("public/default/failover")
	if brokers[owner] == nil {
		t.Fatalf("owner %q is not one of %v", owner, addrs)
	}
	killed := time.Now()
	brokers[owner].kill()
	send(100)
	recovered := time.Since(killed)
	t.Logf("lease %v: first send acknowledged %v after the owner's kill -9", ttl, recovered.Round(10*time.Millisecond))
	if now := c.owner("public/default/failover"); now == owner || now == "" {
		t.Fatalf("owner after the kill: %q (was %q)", now, owner)
	}
	for i := 101; i < 200; i++ {
		send(i)
	}
	for i := 0; i < 200; i++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of 200: %v", i, err)
		}
		if got := string(m.Payload()); got != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, got)
		}
		cons.Ack(m)
	}
}
