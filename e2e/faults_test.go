package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// A fault is one kind of nemesis: inject starts it on the i-th target and
// returns that target's name and how to end it (restart, resume, heal);
// heal waits until the target is back.
type fault struct {
	name   string
	hold   time.Duration // how long the fault lasts before heal
	memFS  int           // bookies that run on the power-loss filesystem
	inject func(c *realCluster, i int) (target string, heal func())
}

// The fault suite: one scenario per fault type. Each runs the workload
// (4 producers, a 10-partition topic, consumers on every subscription
// type) while the fault is injected once per profile interval, then heals
// the cluster, drains every subscription and asserts the checker's verdict:
// nothing lost, unexpected, reordered or conflicting, and no duplicates
// (deduplication is on); and that every partition took writes again after
// every fault. The history and the report of each run are kept
// (see historyDir) and can be checked again with
// `go run ./e2e/cmd/magnetar-check DIR`.
var faults = []fault{
	{
		name: "kill-broker", hold: 3 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.brokers[i%len(c.brokers)]
			b.p.kill()
			return b.name, func() { b.p.start(); c.waitBrokerUp(b) }
		},
	},
	{
		// Longer than the session TTL: the paused owner loses its
		// partitions while it sleeps and must not write after it wakes.
		name: "pause-broker", hold: 6 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.brokers[i%len(c.brokers)]
			b.p.signal(syscall.SIGSTOP)
			return b.name, func() { b.p.signal(syscall.SIGCONT); c.waitBrokerUp(b) }
		},
	},
	{
		name: "kill-bookie", hold: 3 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.bookies[i%len(c.bookies)]
			lease := c.bookieLease(b)
			b.p.kill()
			return b.id, func() { b.p.start(); c.waitBookie(b, lease) }
		},
	},
	{
		// Every bookie runs on the power-loss filesystem; one at a time
		// loses what it had not synced and restarts.
		name: "power-loss-bookie", hold: 2 * time.Second, memFS: 4,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.bookies[i%len(c.bookies)]
			lease := c.bookieLease(b)
			b.powerLoss()
			return b.id, func() { b.p.start(); c.waitBookie(b, lease) }
		},
	},
	{
		name: "kill-etcd-member", hold: 3 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			m := c.etcd[i%len(c.etcd)]
			m.p.kill()
			return m.name, func() { m.p.start(); c.waitEtcdMember(m) }
		},
	},
	{
		// The broker still reaches its bookies but not etcd: its session
		// expires, it must stop serving, and the others take over.
		name: "partition-broker-etcd", hold: 6 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.brokers[i%len(c.brokers)]
			mustToxic(c, cut, b.etcdLinks...)
			return b.name, func() { heal(b.etcdLinks...); c.waitBrokerUp(b) }
		},
	},
	{
		// The broker keeps its session but reaches no bookie: its writes
		// stall until the links heal.
		name: "partition-broker-bookies", hold: 6 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.brokers[i%len(c.brokers)]
			mustToxic(c, cut, b.bookieLinks...)
			return b.name, func() { heal(b.bookieLinks...) }
		},
	},
	{
		// 100 ms (+-50) on every link of one broker, then every
		// connection reset at once.
		name: "latency-and-resets", hold: 4 * time.Second,
		inject: func(c *realCluster, i int) (string, func()) {
			b := c.brokers[i%len(c.brokers)]
			links := append(append([]*toxiproxy.Proxy{}, b.etcdLinks...), b.bookieLinks...)
			mustToxic(c, func(p *toxiproxy.Proxy) error { return slow(p, 100*time.Millisecond, 50*time.Millisecond) }, links...)
			return b.name, func() {
				heal(links...)
				mustToxic(c, resetPeers, links...)
				time.Sleep(200 * time.Millisecond)
				heal(links...)
				c.waitBrokerUp(b)
			}
		},
	},
}

func mustToxic(c *realCluster, f func(*toxiproxy.Proxy) error, links ...*toxiproxy.Proxy) {
	c.t.Helper()
	for _, p := range links {
		if err := f(p); err != nil {
			c.t.Fatal(err)
		}
	}
}

func TestFaults(t *testing.T) {
	prof := currentProfile()
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) { runFault(t, f, prof) })
	}
}

func runFault(t *testing.T, f fault, prof profile) {
	runFaultWith(t, f, prof, clusterOptions{})
}

// runFaultWith is runFault on a cluster of opts (and the bookies on the
// power-loss filesystem that f needs).
func runFaultWith(t *testing.T, f fault, prof profile, opts clusterOptions) {
	opts.powerLossBookies = f.memFS
	c := newRealCluster(t, opts)
	w := newWorkload(t, c, f.name, prof)
	report := w.run(func(ctx context.Context) {
		for i := 0; ; i++ {
			next := time.Now().Add(prof.interval)
			// Let the workload run a while before the first fault.
			select {
			case <-ctx.Done():
				return
			case <-time.After(prof.interval / 2):
			}
			start := time.Now()
			target, healFn := f.inject(c, i)
			time.Sleep(f.hold)
			healFn()
			w.fault(f.name, target, start, time.Now())
			t.Logf("%s %s: %v from the fault to healed", f.name, target, time.Since(start).Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
		}
	})
	t.Logf("checker report (%s profile):\n%s", prof.name, report.Text())
	// Liveness too: after every fault, every partition took writes again.
	for _, a := range report.Availability {
		if a.MaxSec < 0 {
			t.Errorf("%s of %s at %.1fs: partition %d never took a write again", a.Name, a.Target, a.StartSec, a.MaxPartition)
		}
	}
	if !report.Pass() {
		for _, reason := range report.Failures() {
			t.Error(reason)
		}
	}
	if t.Failed() {
		t.Errorf("history and report kept in %s", w.dir)
	}
}

// The harness's network faults take effect: a broker cut off from the
// bookies cannot get a write stored until the links heal, and a broker cut
// off from etcd loses its session (its registration lease expires). A
// fault suite whose faults did nothing would pass vacuously.
func TestNetworkFaultsTakeEffect(t *testing.T) {
	c := newRealCluster(t, clusterOptions{})
	cl, err := client.NewClient(client.ClientOptions{URL: c.brokerURL(), OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "probe", DisableBatching: true, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	owner := c.ownerOf("public/default/probe")

	mustToxic(c, cut, owner.bookieLinks...)
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("cut")}); err == nil {
		t.Fatal("a write was stored while its broker was cut off from every bookie")
	}
	heal(owner.bookieLinks...)
	if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("healed")}); err != nil {
		t.Fatalf("after the bookie links healed: %v", err)
	}

	lease := c.brokerLease(owner)
	mustToxic(c, cut, owner.etcdLinks...)
	testutil.Eventually(t, 30*time.Second, owner.name+"'s session to expire", func() bool { return c.brokerLease(owner) != lease })
	heal(owner.etcdLinks...)
	c.waitBrokerUp(owner)
}

// ownerOf returns the broker owning a partition.
func (c *realCluster) ownerOf(topic string) *brokerNode {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := c.store.Get(ctx, metastore.OwnerKey(topic))
	if err != nil {
		c.t.Fatalf("owner of %s: %v", topic, err)
	}
	addr, _, _ := strings.Cut(string(kv.Value), "\n")
	for _, b := range c.brokers {
		if b.addr == addr {
			return b
		}
	}
	c.t.Fatalf("%s is owned by %q, not a broker of the cluster", topic, addr)
	return nil
}
