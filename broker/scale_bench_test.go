package broker_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testcluster"
	"github.com/magnetar-io/magnetar/proto/brokerpb"
)

// Scale curves (issue 14, docs/benchmarks.md). Each runs a whole system in
// this process (embedded etcd, 3 bookies with 3/3/2, one broker, the SDK),
// so heap figures are of all of it together. Run them once:
//
//	go test -run '^$' -bench 'BenchmarkScale' -benchtime 1x -timeout 30m ./broker/

// benchBroker starts a cluster of 3 bookies and one broker writing 3/3/2.
func benchBroker(b *testing.B) (*broker.Server, client.Client) {
	b.Helper()
	c := testcluster.Start(b, 3, testcluster.Options{})
	cfg := broker.DefaultConfig()
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", ""
	cfg.Metastore = c.Etcd.Endpoints()
	cfg.Ensemble, cfg.WriteQuorum, cfg.AckQuorum = 3, 3, 2
	s, err := broker.Start(context.Background(), cfg, broker.WithStore(c.Store), broker.WithLogger(zap.NewNop()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return s, cl
}

// forEach runs fn(0..n-1), conc at a time, and returns the first error.
func forEach(n, conc int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		first atomic.Pointer[error]
	)
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil {
					return
				}
				if err := fn(i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Many topics on one broker: how fast they are created (a producer's
// lookup, the topic's first ledger, one message), what an idle topic costs
// in memory once its producer is gone, and lookups per second of loaded
// topics.
func BenchmarkScaleTopics(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("topics=%d", n), func(b *testing.B) {
			for iter := 0; iter < b.N; iter++ {
				s, cl := benchBroker(b)
				ctx := context.Background()
				topic := func(i int) string { return fmt.Sprintf("persistent://public/default/scale-%d-%d-%d", n, iter, i) }
				before := heapInUse()
				start := time.Now()
				err := forEach(n, 32, func(i int) error {
					p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic(i)})
					if err != nil {
						return err
					}
					defer p.Close()
					_, err = p.Send(ctx, &client.ProducerMessage{Payload: []byte("x")})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				created := time.Since(start)
				after := heapInUse()
				perTopic := float64(after-min(before, after)) / float64(n)

				cc, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				bc := brokerpb.NewBrokerClient(cc)
				lookups := 4 * n
				start = time.Now()
				err = forEach(lookups, 32, func(i int) error {
					_, err := bc.Lookup(ctx, &brokerpb.LookupRequest{Topic: topic(i % n)})
					return err
				})
				cc.Close()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/created.Seconds(), "topics/s")
				b.ReportMetric(perTopic, "heap-B/idle-topic")
				b.ReportMetric(float64(lookups)/time.Since(start).Seconds(), "lookups/s")
			}
		})
	}
}

// Many producers and consumers on one topic: producers each send their
// share (batching on), consumers on one shared subscription receive and
// acknowledge everything. Reports how fast they attach, the end-to-end
// rate and the heap per producer and consumer pair.
func BenchmarkScaleFanInFanOut(b *testing.B) {
	const (
		clients = 1000
		each    = 20
		total   = clients * each
	)
	b.Run(fmt.Sprintf("producers=%d/consumers=%d", clients, clients), func(b *testing.B) {
		for iter := 0; iter < b.N; iter++ {
			_, cl := benchBroker(b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			topic := fmt.Sprintf("persistent://public/default/fan-%d", iter)
			before := heapInUse()
			start := time.Now()
			consumers := make([]client.Consumer, clients)
			if err := forEach(clients, 32, func(i int) error {
				c, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s", Type: client.Shared,
					SubscriptionInitialPosition: client.SubscriptionPositionEarliest, ReceiverQueueSize: 10})
				consumers[i] = c
				return err
			}); err != nil {
				b.Fatal(err)
			}
			producers := make([]client.Producer, clients)
			if err := forEach(clients, 32, func(i int) error {
				p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic})
				producers[i] = p
				return err
			}); err != nil {
				b.Fatal(err)
			}
			attached := time.Since(start)
			after := heapInUse()
			pairs := float64(after-min(before, after)) / clients

			var received atomic.Int64
			all := make(chan struct{})
			var wg sync.WaitGroup
			for _, c := range consumers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						m, err := c.Receive(ctx)
						if err != nil {
							return
						}
						c.Ack(m)
						if received.Add(1) == total {
							close(all)
						}
					}
				}()
			}
			payload := make([]byte, 1024)
			start = time.Now()
			var failed atomic.Int64
			var sends sync.WaitGroup
			for _, p := range producers {
				for j := 0; j < each; j++ {
					sends.Add(1)
					p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
						if err != nil {
							failed.Add(1)
						}
						sends.Done()
					})
				}
			}
			sends.Wait()
			sent := time.Since(start)
			select {
			case <-all:
			case <-ctx.Done():
				b.Fatalf("%d of %d messages received", received.Load(), total)
			}
			endToEnd := time.Since(start)
			cancel()
			wg.Wait()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d sends failed", n)
			}
			for i := range producers {
				producers[i].Close()
				consumers[i].Close()
			}
			b.ReportMetric(2*clients/attached.Seconds(), "attach/s")
			b.ReportMetric(pairs, "heap-B/pair")
			b.ReportMetric(total/sent.Seconds(), "sent-msg/s")
			b.ReportMetric(total/endToEnd.Seconds(), "received-msg/s")
		}
	})
}
