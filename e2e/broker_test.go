package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/metastore"
)

// startBrokers runs n broker processes with the session TTL given, waits
// for their registrations, and returns their addresses, the processes by
// address, and a client that knows all of them.
func (c *cluster) startBrokers(n int, ttl string) ([]string, map[string]*proc, client.Client) {
	c.t.Helper()
	addrs := freePorts(c.t, n)
	procs := map[string]*proc{}
	for i, addr := range addrs {
		procs[addr] = c.startBroker(fmt.Sprint("broker-", i), addr, ttl)
	}
	for _, addr := range addrs {
		c.waitBroker(addr)
	}
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + strings.Join(addrs, ","), OperationTimeout: 30 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return addrs, procs, cl
}

// startBroker runs `magnetar broker` on addr against the cluster's etcd,
// storing one copy of each message (the tests here run one bookie).
func (c *cluster) startBroker(name, addr, ttl string) *proc {
	return startProc(c.t, name, "broker",
		"--listen", addr, "--http", "",
		"--metastore", c.etcd.Endpoints()[0],
		"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1",
		"--session-ttl", ttl,
		"--log-level", "warn")
}

// owner returns the broker owning a partition ("" if none).
func (c *cluster) owner(topic string) string {
	owner, _ := c.ownerKey(topic)
	return owner
}

// ownerRevision is the create revision of a partition's owner key (0 if
// nobody owns it).
func (c *cluster) ownerRevision(topic string) int64 {
	_, rev := c.ownerKey(topic)
	return rev
}

func (c *cluster) ownerKey(topic string) (owner string, createRevision int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := c.store.Get(ctx, metastore.OwnerKey(topic))
	if errors.Is(err, metastore.ErrNotFound) {
		return "", 0
	}
	if err != nil {
		c.t.Fatal(err)
	}
	owner, _, _ = strings.Cut(string(kv.Value), "\n")
	return owner, kv.CreateRevision
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
	addrs, brokers, cl := c.startBrokers(2, ttl.String())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "failover", DisableBatching: true, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
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

// A rolling restart of three broker processes (SIGTERM, start again, next)
// under load on four topics: nothing acknowledged is lost, each topic's
// messages arrive in order (a resend after a lost receipt may repeat one),
// and the longest stall of each producer is logged.
func TestRollingRestartOfBrokers(t *testing.T) {
	c := newCluster(t, 1)
	addrs, brokers, cl := c.startBrokers(3, "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const topics = 4
	type result struct {
		topic    int
		acked    int
		maxStall time.Duration
		err      error
	}
	results := make(chan result, topics)
	stop := make(chan struct{})
	var consumers []client.Consumer
	for i := 0; i < topics; i++ {
		topic := fmt.Sprint("rolling-", i)
		cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s",
			SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		consumers = append(consumers, cons)
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		go func() {
			r := result{topic: i}
			last := time.Now()
			for v := 0; ; v++ {
				select {
				case <-stop:
					results <- r
					return
				default:
				}
				if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(v))}); err != nil {
					r.err = fmt.Errorf("%s: send %d: %w", topic, v, err)
					results <- r
					return
				}
				r.acked = v + 1
				r.maxStall = max(r.maxStall, time.Since(last))
				last = time.Now()
			}
		}()
	}
	// Every partition is owned now; the restarts move each of them.
	revs := make([]int64, topics)
	for i := range revs {
		revs[i] = c.ownerRevision(fmt.Sprint("public/default/rolling-", i))
	}
	for i, addr := range addrs {
		b := brokers[addr]
		if err := b.stop(); err != nil {
			t.Fatalf("stopping broker-%d: %v", i, err)
		}
		b.start()
		c.waitBroker(addr)
	}
	close(stop)
	for i, rev := range revs {
		if now := c.ownerRevision(fmt.Sprint("public/default/rolling-", i)); now == rev {
			t.Errorf("rolling-%d kept its owner through the restarts (revision %d)", i, rev)
		}
	}
	acked := make([]int, topics)
	for i := 0; i < topics; i++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		acked[r.topic] = r.acked
		t.Logf("rolling-%d: %d messages acknowledged, longest wait for one %v", r.topic, r.acked, r.maxStall.Round(time.Millisecond))
	}
	// Every topic's acknowledged messages, in order; repeats only of
	// messages received before (a resend whose first receipt was lost).
	for i, cons := range consumers {
		next := 0
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		for next < acked[i] {
			m, err := cons.Receive(rctx)
			if err != nil {
				rcancel()
				t.Fatalf("rolling-%d: %d of %d acknowledged messages received: %v", i, next, acked[i], err)
			}
			v := 0
			fmt.Sscan(string(m.Payload()), &v)
			switch {
			case v == next:
				next++
			case v < next:
				// a duplicate of something received
			default:
				rcancel()
				t.Fatalf("rolling-%d: %d after %d: lost or reordered", i, v, next-1)
			}
			cons.Ack(m)
		}
		rcancel()
	}
}

// waitBroker waits until the broker at addr has registered.
func (c *cluster) waitBroker(addr string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.store.Get(ctx, metastore.BrokerAvailableKey(addr))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("broker %s did not register: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil {
		cmd.Process.Signal(sig)
	}
}

// The owner of a partition is paused (SIGSTOP) longer than its lease: the
// other broker takes the partition over and fences its ledger. When the
// zombie wakes up (SIGCONT) it has lost its session and its ledger is
// fenced: it gets nothing more acknowledged, unloads, and the messages
// acknowledged by either broker are all delivered, once, in order.
func TestPausedBrokerIsFencedOut(t *testing.T) {
	c := newCluster(t, 1)
	_, brokers, cl := c.startBrokers(2, "3s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A short send timeout: sends to the paused owner fail and are looked
	// up again rather than waiting for it.
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "zombie", DisableBatching: true, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "zombie", SubscriptionName: "s",
		SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var acked []int
	var paused time.Time
	var resumed time.Duration // from the pause to the first acknowledgement after it
	send := func(v int) {
		if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(v))}); err == nil {
			acked = append(acked, v)
			if !paused.IsZero() && resumed == 0 {
				resumed = time.Since(paused)
			}
		}
	}
	for v := 0; v < 50; v++ {
		send(v)
	}
	owner := c.owner("public/default/zombie")
	zombie := brokers[owner]
	zombie.signal(syscall.SIGSTOP)
	paused = time.Now()
	// Keep sending until the other broker has taken over.
	v := 50
	for ; c.owner("public/default/zombie") == owner || c.owner("public/default/zombie") == ""; v++ {
		if time.Since(paused) > time.Minute {
			t.Fatal("nobody took the paused broker's partition over")
		}
		send(v)
	}
	for end := v + 50; v < end; v++ {
		send(v)
	}
	zombie.signal(syscall.SIGCONT)
	// The woken broker must not take writes any more; the others go on.
	for end := v + 50; v < end; v++ {
		send(v)
	}
	t.Logf("owner paused: first send acknowledged %v later (lease 3s, send timeout 2s); %d of %d sends acknowledged",
		resumed.Round(10*time.Millisecond), len(acked), v)
	got := map[int]bool{}
	last := -1
	missing := func() int {
		n := 0
		for _, a := range acked {
			if !got[a] {
				n++
			}
		}
		return n
	}
	for missing() > 0 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%d acknowledged messages never received: %v", missing(), err)
		}
		var x int
		fmt.Sscan(string(m.Payload()), &x)
		if x < last && !got[x] {
			t.Fatalf("%d received after %d", x, last)
		}
		last = max(last, x)
		got[x] = true
		cons.Ack(m)
	}
	if now := c.owner("public/default/zombie"); now == owner {
		t.Fatalf("the woken broker owns the partition again")
	}
}
