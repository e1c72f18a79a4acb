package broker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// Two brokers: a client that knows only one of them is sent to the
// partition's owner; when the owner stops cleanly, the partition moves to
// the other broker, and the consumer receives every message once, in
// order.
func TestLookupRedirectsAndCleanHandover(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	servers := map[string]*broker.Server{e.b.Addr(): e.b, other.Addr(): other}

	both := "magnetar://" + e.b.Addr() + "," + other.Addr()
	cl, err := client.NewClient(client.ClientOptions{URL: both, OperationTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "moving", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	kv, err := e.c.Store.Get(ctxT(t), metastore.OwnerKey("public/default/moving"))
	if err != nil {
		t.Fatal(err)
	}
	ownerAddr, _, _ := strings.Cut(string(kv.Value), "\n")
	owner := servers[ownerAddr]
	if owner == nil {
		t.Fatalf("owner %q is neither broker", ownerAddr)
	}
	var nonOwner *broker.Server
	for _, s := range servers {
		if s != owner {
			nonOwner = s
		}
	}

	// A client that knows only the other broker is sent to the owner.
	only, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + nonOwner.Addr(), OperationTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	p, err := only.CreateProducer(client.ProducerOptions{Topic: "moving", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	// In order, nothing missing. Acknowledgements still grouped in the
	// client when the owner stopped reach the next owner after it has
	// delivered from the persisted position: those messages may come again.
	next := 0
	expect := func(upTo int) {
		for next < upTo {
			m := receiveOne(t, cons)
			var v int
			fmt.Sscan(string(m.Payload()), &v)
			switch {
			case v == next:
				next++
			case v > next:
				t.Fatalf("received %d, want %d", v, next)
			}
			cons.Ack(m)
		}
	}
	send(0, 50)
	expect(50)

	// The owner stops cleanly: the partition moves to the other broker.
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	send(50, 50)
	expect(100)
	kv, err = e.c.Store.Get(ctxT(t), metastore.OwnerKey("public/default/moving"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := strings.Cut(string(kv.Value), "\n"); got != nonOwner.Addr() {
		t.Fatalf("after the handover the owner is %q, want %q", got, nonOwner.Addr())
	}
}

// A broker whose etcd session is lost stops serving its partitions at
// once; with a new session it (or another broker) takes them over, and the
// clients carry on without losing a message.
func TestSessionLossUnloadsPartitions(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "lost", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "lost", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 20)
	for _, m := range receiveN(t, cons, 20) {
		cons.Ack(m)
	}
	// Acknowledgements are persisted in the background; one not yet
	// persisted when the session goes is redelivered, as it should be.
	// This test is about what comes after, so it waits for them.
	testutil.Eventually(t, 10*time.Second, "the acknowledgements persisted", func() bool {
		ok, err := e.b.PersistedAcks(ctxT(t), "persistent://public/default/lost", "s")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	key := metastore.OwnerKey("public/default/lost")
	before, err := e.c.Store.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	// The lease expires (as when the broker is cut off from etcd).
	lease := e.b.SessionLease()
	if _, err := e.c.Store.Client().Revoke(ctxT(t), clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "a new session", func() bool { return e.b.SessionLease() != lease })
	produce(t, p, 20, 20)
	msgs := receiveN(t, cons, 20)
	for i, m := range msgs {
		if want := fmt.Sprintf("m-%05d", 20+i); string(m.Payload()) != want {
			t.Fatalf("after the session loss: %q, want %q", m.Payload(), want)
		}
		cons.Ack(m)
	}
	after, err := e.c.Store.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if after.CreateRevision == before.CreateRevision || after.Lease == before.Lease {
		t.Fatalf("the partition was not claimed again: owner key revision %d -> %d, lease %d -> %d",
			before.CreateRevision, after.CreateRevision, before.Lease, after.Lease)
	}
}

// When another owner fences the partition's ledger (it recovered it), the
// broker stops serving the partition at once; clients look it up again
// and, here, the broker claims it anew and they carry on.
func TestFencedPartitionIsUnloaded(t *testing.T) {
	e := newEnv(t, nil)
	cl := e.client()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "fenced", SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: "fenced", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, p, 0, 10)
	key := metastore.OwnerKey("public/default/fenced")
	before, err := e.c.Store.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := adminGetJSON[internalStats](e, "/admin/v2/persistent/public/default/fenced/internalStats")
	if err != nil {
		t.Fatal(err)
	}
	current := st.Ledgers[len(st.Ledgers)-1].LedgerID
	lc := e.c.Client(ledger.Config{})
	if _, err := lc.OpenRecover(ctxT(t), current); err != nil {
		t.Fatal(err)
	}
	// The next send meets the fence; the partition is unloaded and claimed
	// again, and the producer resends.
	produce(t, p, 10, 10)
	for i, m := range receiveN(t, cons, 20) {
		if want := fmt.Sprintf("m-%05d", i); string(m.Payload()) != want {
			t.Fatalf("message %d: %q", i, m.Payload())
		}
		cons.Ack(m)
	}
	after, err := e.c.Store.Get(ctxT(t), key)
	if err != nil {
		t.Fatal(err)
	}
	if after.CreateRevision == before.CreateRevision {
		t.Fatal("the fenced partition was not unloaded and claimed again")
	}
}

// Admin calls about a topic another broker owns are redirected to it;
// unload makes the owner close the topic cleanly, and the owners listing
// shows who owns what.
func TestAdminRedirectsToTheOwner(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	// The other broker owns the topic: its client asks it alone, and it is
	// the least loaded (the first broker owns nothing either: retry until
	// a topic lands there).
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + other.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var topic string
	for i := 0; topic == ""; i++ {
		name := fmt.Sprint("owned-", i)
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: name})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		p.Close()
		kv, err := e.c.Store.Get(ctxT(t), metastore.OwnerKey("public/default/"+name))
		if err != nil {
			t.Fatal(err)
		}
		if owner, _, _ := strings.Cut(string(kv.Value), "\n"); owner == other.Addr() {
			topic = name
		}
	}
	// Asked of the first broker, answered by the owner (the Go client
	// follows the 307).
	st, err := adminGetJSON[struct {
		Entries int64 `json:"entries"`
	}](e, "/admin/v2/persistent/public/default/"+topic+"/stats")
	if err != nil || st.Entries != 1 {
		t.Fatalf("stats through the other broker: %+v, %v", st, err)
	}
	owners, err := adminGetJSON[map[string]string](e, "/admin/v2/owners")
	if err != nil || owners["persistent://public/default/"+topic] != other.Addr() {
		t.Fatalf("owners %v (%v), want %s on %s", owners, err, topic, other.Addr())
	}
	code, body, err := adminDo(e, "PUT", "/admin/v2/persistent/public/default/"+topic+"/unload", nil)
	if err != nil || code != 204 {
		t.Fatalf("unload: %d %s %v", code, body, err)
	}
	if _, err := e.c.Store.Get(ctxT(t), metastore.OwnerKey("public/default/"+topic)); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("after unload the topic is still owned: %v", err)
	}
}

// A broker that joins gets a share of the partitions: the busy broker
// unloads its excess and lookups assign it to the newcomer; the producers
// carry on.
func TestLoadBalancingMovesPartitionsToANewBroker(t *testing.T) {
	fast := func(c *broker.Config) { c.LoadBalanceInterval = 100 * time.Millisecond }
	e := newEnv(t, fast)
	cl := e.client()
	var producers []client.Producer
	for i := 0; i < 10; i++ {
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: fmt.Sprint("busy-", i), DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		producers = append(producers, p)
	}
	other := e.startAnother(fast)
	owned := func(addr string) int {
		owners, err := adminGetJSON[map[string]string](e, "/admin/v2/owners")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range owners {
			if o == addr {
				n++
			}
		}
		return n
	}
	// The producers keep sending: each send looks the partition up again
	// if it moved. The first broker unloads its excess (5) at once, and
	// its lookups place none of them back on itself although the
	// registered counts lag.
	testutil.Eventually(t, 60*time.Second, "the new broker owns its share of the partitions", func() bool {
		for i, p := range producers {
			if _, err := p.Send(ctxT(t), &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatalf("send to busy-%d: %v", i, err)
			}
		}
		return owned(other.Addr()) >= 5
	})
	if a, b := owned(e.b.Addr()), owned(other.Addr()); a != 5 || b != 5 {
		t.Fatalf("the brokers own %d and %d partitions, want 5 each", a, b)
	}
}

// Unloading a namespace unloads its partitions on every broker.
func TestNamespaceUnloadReachesEveryBroker(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	cl := clientOf(t, e.b, other)
	// Topics until both brokers own some.
	byOwner := map[string]int{}
	for i := 0; len(byOwner) < 2; i++ {
		if i == 50 {
			t.Fatalf("50 topics, all on one broker: %v", byOwner)
		}
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: fmt.Sprint("ns-", i)})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		owners, err := adminGetJSON[map[string]string](e, "/admin/v2/owners")
		if err != nil {
			t.Fatal(err)
		}
		clear(byOwner)
		for _, o := range owners {
			byOwner[o]++
		}
	}
	code, body, err := adminDo(e, "PUT", "/admin/v2/namespaces/public/default/unload", nil)
	if err != nil || code != 200 {
		t.Fatalf("namespace unload: %d %s %v", code, body, err)
	}
	owners, err := adminGetJSON[map[string]string](e, "/admin/v2/owners")
	if err != nil || len(owners) != 0 {
		t.Fatalf("after the namespace unload: %v %v", owners, err)
	}
}

// startAnother starts a second broker on the env's cluster (with an admin
// address), configured like the first plus configure; it stops with the test.
func (e *env) startAnother(configure func(*broker.Config)) *broker.Server {
	e.t.Helper()
	cfg := e.cfg
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	if configure != nil {
		configure(&cfg)
	}
	other, err := broker.Start(ctxT(e.t), cfg, broker.WithStore(e.c.Store), broker.WithLogger(zaptest.NewLogger(e.t).Named("broker-2")))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { other.Close() })
	return other
}

// The stats of a partitioned topic whose partitions two brokers own are
// gathered from both, whichever broker is asked.
// spreadPartitionedTopic creates partitioned topics named prefix0,
// prefix1, ... of parts partitions, sending msgs messages (keys 0, 1, ...)
// to each, until one has partitions owned by both brokers; it returns its
// name and its producer, still connected (the test closes it).
func spreadPartitionedTopic(t *testing.T, e *env, cl client.Client, prefix string, parts, msgs int) (string, client.Producer) {
	return spreadPartitionedTopicIn(t, e, cl, "persistent", prefix, parts, msgs)
}

// spreadPartitionedTopicIn is spreadPartitionedTopic in a domain
// ("persistent" or "non-persistent").
func spreadPartitionedTopicIn(t *testing.T, e *env, cl client.Client, domain, prefix string, parts, msgs int) (string, client.Producer) {
	t.Helper()
	for i := 0; i < 50; i++ {
		name := fmt.Sprint(prefix, i)
		if code, body, err := adminDo(e, "PUT", "/admin/v2/"+domain+"/public/default/"+name+"/partitions", parts); err != nil || code/100 != 2 {
			t.Fatalf("create: %d %s %v", code, body, err)
		}
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: domain + "://public/default/" + name, DisableBatching: true})
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < msgs; k++ {
			if _, err := p.Send(ctxT(t), &client.ProducerMessage{Key: fmt.Sprint(k), Payload: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		owners, err := adminGetJSON[map[string]string](e, "/admin/v2/owners")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for path, o := range owners {
			if strings.HasPrefix(path, domain+"://public/default/"+name+"-partition-") {
				seen[o] = true
			}
		}
		if len(seen) == 2 {
			return name, p
		}
		p.Close()
	}
	t.Fatal("50 partitioned topics, each all on one broker")
	return "", nil
}

func TestPartitionedStatsAcrossBrokers(t *testing.T) {
	e := newEnv(t, nil)
	other := e.startAnother(nil)
	cl := clientOf(t, e.b, other)
	const parts = 4
	topic, p := spreadPartitionedTopic(t, e, cl, "pstats-", parts, 2*parts)
	defer p.Close()
	for _, via := range []string{e.b.HTTPAddr(), other.HTTPAddr()} {
		resp, err := http.Get("http://" + via + "/admin/v2/persistent/public/default/" + topic + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Partitions map[string]struct {
				Entries    int64            `json:"entries"`
				Publishers []map[string]any `json:"publishers"`
			} `json:"partitions"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stats via %s: %s %v", via, resp.Status, err)
		}
		var entries int64
		for _, p := range st.Partitions {
			entries += p.Entries
			if len(p.Publishers) != 1 {
				t.Fatalf("stats via %s: a partition with %d publishers: %+v", via, len(p.Publishers), st)
			}
		}
		if len(st.Partitions) != parts || entries != 2*parts {
			t.Fatalf("stats via %s: %d partitions, %d entries: %+v", via, len(st.Partitions), entries, st)
		}
	}
	// The load report lists both brokers with what they own and carry.
	testutil.Eventually(t, 30*time.Second, "both brokers' loads", func() bool {
		loads, err := adminGetJSON[map[string]struct {
			Topics    int     `json:"topics"`
			MsgRateIn float64 `json:"msgRateIn"`
		}](e, "/admin/v2/brokers/load")
		if err != nil || len(loads) != 2 {
			return false
		}
		topics := 0
		for _, l := range loads {
			topics += l.Topics
		}
		return topics >= parts
	})
}

// clientOf returns a client that knows the brokers given; it closes with
// the test.
func clientOf(t *testing.T, brokers ...*broker.Server) client.Client {
	t.Helper()
	var addrs []string
	for _, b := range brokers {
		addrs = append(addrs, b.Addr())
	}
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + strings.Join(addrs, ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
