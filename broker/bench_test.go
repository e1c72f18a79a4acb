package broker_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/metastore"
)

// BenchmarkDispatch measures how fast a subscription's consumers drain a
// backlog of b.N 1 KiB messages (receive and acknowledge each), by
// subscription type and number of consumers, each consumer with a client
// (connection) of its own. The backlog is the same for every case: keys
// in runs of 100 messages (1,000 keys), key-based batching, so that
// Key_Shared can dispatch the batches by key.
//
//	go test -run '^$' -bench BenchmarkDispatch -benchtime 200000x ./broker/
//
// Subscribing is part of the time measured (a few milliseconds).
func BenchmarkDispatch(b *testing.B) {
	cases := []struct {
		typ       client.SubscriptionType
		consumers int
	}{
		{client.Exclusive, 1},
		{client.Shared, 1}, {client.Shared, 4}, {client.Shared, 16},
		{client.KeyShared, 1}, {client.KeyShared, 4}, {client.KeyShared, 16},
	}
	for _, tc := range cases {
		b.Run(fmt.Sprintf("%s-%d", tc.typ, tc.consumers), func(b *testing.B) {
			benchDispatch(b, tc.typ, tc.consumers, false)
		})
	}
}

// BenchmarkDispatchUnbatched is BenchmarkDispatch with one message per
// entry (batching disabled): the cost of dispatching each entry.
//
//	go test -run '^$' -bench BenchmarkDispatchUnbatched -benchtime 200000x ./broker/
func BenchmarkDispatchUnbatched(b *testing.B) {
	for _, tc := range []struct {
		typ       client.SubscriptionType
		consumers int
	}{{client.Exclusive, 1}, {client.Shared, 4}, {client.KeyShared, 4}} {
		b.Run(fmt.Sprintf("%s-%d", tc.typ, tc.consumers), func(b *testing.B) {
			benchDispatch(b, tc.typ, tc.consumers, true)
		})
	}
}

// startBenchBroker runs a storage cluster of one bookie and a broker on
// it (one copy), with configure's changes; both stop when b ends.
func startBenchBroker(ctx context.Context, b *testing.B, configure func(*broker.Config)) (*testcluster.Cluster, *broker.Server) {
	c := testcluster.Start(b, 1, testcluster.Options{})
	cfg := broker.DefaultConfig()
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", ""
	cfg.Metastore = c.Etcd.Endpoints()
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 1, 1, 1 // one bookie
	if configure != nil {
		configure(&cfg)
	}
	s, err := broker.Start(ctx, cfg, broker.WithStore(c.Store), broker.WithLogger(zap.NewNop()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return c, s
}

func benchDispatch(b *testing.B, typ client.SubscriptionType, consumers int, unbatched bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, s := startBenchBroker(ctx, b, nil)
	newClient := func() client.Client {
		cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.Addr()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		return cl
	}
	subscribe := func(i int) client.Consumer {
		cn, err := newClient().Subscribe(client.ConsumerOptions{Topic: "bench", SubscriptionName: "s", Type: typ,
			Name: fmt.Sprint("c", i), SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			b.Fatal(err)
		}
		return cn
	}
	// The subscription exists before the backlog; its consumers come once
	// the backlog is complete, so that all of it is dispatched while timed.
	subscribe(0).Close()
	p, err := newClient().CreateProducer(client.ProducerOptions{Topic: "bench", BatcherBuilderType: client.KeyBasedBatchBuilder,
		MaxPendingMessages: 5000, DisableBatching: unbatched})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	var sendErr atomic.Value
	for i := 0; i < b.N; i++ {
		p.SendAsync(ctx, &client.ProducerMessage{Payload: payload, Key: "k" + strconv.Itoa(i/100%1000)},
			func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				if err != nil {
					sendErr.Store(err)
				}
			})
	}
	if err := p.Flush(); err != nil {
		b.Fatal(err)
	}
	if err, _ := sendErr.Load().(error); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	var cons []client.Consumer
	for i := 0; i < consumers; i++ {
		cn := subscribe(i)
		defer cn.Close()
		cons = append(cons, cn)
	}
	var received atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	for _, cn := range cons {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := cn.Receive(rctx)
				if err != nil {
					return
				}
				cn.Ack(m)
				if received.Add(1) == int64(b.N) {
					close(done)
				}
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("%d of %d messages received", received.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	wg.Wait()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
}

// BenchmarkCreateProducer measures what a new producer costs with two
// brokers, the client knowing only the first: "new-topic" creates a
// producer on a topic nobody has loaded (lookup, assignment to the least
// loaded broker, claim, ledger creation, then the producer), "loaded" on
// a topic already loaded on either broker (lookup and producer only).
// Each producer is closed after it is ready.
func BenchmarkCreateProducer(b *testing.B) {
	c := testcluster.Start(b, 1, testcluster.Options{})
	var addrs []string
	for i := 0; i < 2; i++ {
		cfg := broker.DefaultConfig()
		cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", ""
		cfg.Metastore = c.Etcd.Endpoints()
		cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 1, 1, 1 // one bookie
		s, err := broker.Start(context.Background(), cfg, broker.WithStore(c.Store), broker.WithLogger(zap.NewNop()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		addrs = append(addrs, s.Addr())
	}
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + addrs[0]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	create := func(topic string) {
		p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
		if err != nil {
			b.Fatal(err)
		}
		p.Close()
	}
	b.Run("new-topic", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			create(fmt.Sprintf("lookup-new-%d-%d", b.N, i))
		}
	})
	const loaded = 20
	for i := 0; i < loaded; i++ {
		create(fmt.Sprint("lookup-loaded-", i))
	}
	b.Run("loaded", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			create(fmt.Sprint("lookup-loaded-", i%loaded))
		}
	})
}

// BenchmarkDedupSnapshotWrites measures what deduplication costs etcd: the
// snapshot writes per second and the bytes per second they carry (the
// value written; keys and transaction overhead not counted), per
// partition, while every partition is produced to at a steady rate. One
// iteration is one second of production, so run it with -benchtime Nx
// for N seconds:
//
//	go test -run '^$' -bench BenchmarkDedupSnapshotWrites -benchtime 20x ./broker/
//
// "idle-2000" first lets 2,000 anonymous producers store one message each
// on every partition and disconnect, as short-lived producers do, then
// produces at 100 msg/s from one producer: the names stay in the state.
func BenchmarkDedupSnapshotWrites(b *testing.B) {
	for _, tc := range []struct {
		name  string
		rate  int // messages per second per partition
		idle  int // disconnected producers per partition before
		parts int
	}{
		{"rate-100", 100, 0, 2},
		{"rate-1000", 1000, 0, 2},
		{"idle-2000-rate-100", 100, 2000, 2},
	} {
		b.Run(tc.name, func(b *testing.B) { benchDedupSnapshotWrites(b, tc.rate, tc.idle, tc.parts) })
	}
}

func benchDedupSnapshotWrites(b *testing.B, rate, idle, parts int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, s := startBenchBroker(ctx, b, func(cfg *broker.Config) { cfg.Deduplication = true })
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	topic := func(i int) string { return fmt.Sprintf("dedup-rate-%d-%d-%d", rate, idle, i) }
	for i := 0; i < parts; i++ {
		for j := 0; j < idle; j++ {
			p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic(i), DisableBatching: true})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("x")}); err != nil {
				b.Fatal(err)
			}
			p.Close()
		}
	}
	producers := make([]client.Producer, parts)
	for i := range producers {
		if producers[i], err = cl.CreateProducer(client.ProducerOptions{Topic: topic(i), Name: "steady", DisableBatching: true}); err != nil {
			b.Fatal(err)
		}
		defer producers[i].Close()
	}
	// Count the snapshot puts from here on.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var writes, bytes atomic.Int64
	watching := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		ch := c.Store.Watch(wctx, metastore.TopicsPrefix, 0)
		close(watching)
		for batch := range ch {
			for _, ev := range batch.Events {
				if ev.Type == metastore.EventPut && strings.HasSuffix(ev.KV.Key, "/dedup") {
					writes.Add(1)
					bytes.Add(int64(len(ev.KV.Value)))
				}
			}
		}
	}()
	<-watching
	payload := make([]byte, 100)
	var sendErr atomic.Value
	const tick = 10 * time.Millisecond
	perTick := rate * int(tick) / int(time.Second)
	b.ResetTimer()
	start := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	for n := 0; n < b.N*int(time.Second/tick); n++ {
		<-t.C
		for _, p := range producers {
			for k := 0; k < perTick; k++ {
				p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
					if err != nil {
						sendErr.Store(err)
					}
				})
			}
		}
	}
	for _, p := range producers {
		if err := p.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := sendErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	stopWatch()
	<-watchDone
	perPart := float64(parts) * elapsed.Seconds()
	b.ReportMetric(float64(writes.Load())/perPart, "writes/s/partition")
	b.ReportMetric(float64(bytes.Load())/perPart, "B/s/partition")
	b.ReportMetric(float64(bytes.Load())/max(float64(writes.Load()), 1), "B/write")
}

// BenchmarkProduce measures the whole produce path in one process: the
// SDK, a broker and three bookies (3/3/2) on etcd, 1 KiB random payloads
// (producers compress; random bytes are what the storage sees then).
// One operation is one message acknowledged; allocs/op counts the
// allocations of every component per message (issue 14).
//
//	go test -run '^$' -bench BenchmarkProduce -benchtime 200000x ./broker/
func BenchmarkProduce(b *testing.B) {
	for _, tc := range []struct {
		name     string
		batching bool
		inflight int
	}{{"batched-5000", true, 5000}, {"unbatched-500", false, 500}} {
		b.Run(tc.name, func(b *testing.B) {
			_, cl := benchBroker(b)
			p, err := cl.CreateProducer(client.ProducerOptions{Topic: "produce-" + tc.name, DisableBatching: !tc.batching,
				MaxPendingMessages: tc.inflight})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			payload := make([]byte, 1024)
			rand.Read(payload)
			ctx := context.Background()
			var failed atomic.Int64
			var wg sync.WaitGroup
			slots := make(chan struct{}, tc.inflight)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				slots <- struct{}{}
				wg.Add(1)
				p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
					if err != nil {
						failed.Add(1)
					}
					<-slots
					wg.Done()
				})
			}
			wg.Wait()
			b.StopTimer()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d sends failed", n)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
		})
	}
}
