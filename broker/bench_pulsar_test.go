package broker_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"

	"github.com/magnetar-io/magnetar/client"
)

// BenchmarkProtocols compares, on one broker (one bookie, one copy), the
// gRPC path (Magnetar's SDK) with Pulsar's binary protocol (the official
// pulsar-client-go) for 1 KiB messages: producing batched and unbatched,
// and consuming. Producing is measured with lean producers of each
// protocol as well (grpc-lean, pulsar-lean: bench_lean_test.go), which
// send the same entries with the least client work. Compare the msg/s of
// the two in one run:
//
//	go test -run '^$' -bench BenchmarkProtocols -benchtime 100000x ./broker/
//
// With MAGNETAR_BENCH_BROKER=host:port it drives that broker (a
// standalone in its own process) instead of one in the test process, and
// with MAGNETAR_BENCH_METRICS=http://host:port/metrics (that standalone's)
// it reports the CPU time the standalone spent per message as well:
// scripts/bench-protocols.sh runs it so. Each case reports the test
// process's CPU time per message too (self-cpu-us/msg: the clients, and
// the broker when it runs in the test process).
func BenchmarkProtocols(b *testing.B) {
	ctx := context.Background()
	addr := os.Getenv("MAGNETAR_BENCH_BROKER")
	if addr == "" && os.Getenv("MAGNETAR_BENCH_METRICS") != "" {
		b.Fatal("MAGNETAR_BENCH_METRICS names the metrics of the broker MAGNETAR_BENCH_BROKER names: set both")
	}
	if addr == "" {
		_, s := startBenchBroker(ctx, b, nil)
		addr = s.Addr()
	}
	sdk, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + addr, OperationTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer sdk.Close()
	official, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + addr, OperationTimeout: time.Minute, Logger: plog.DefaultNopLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer official.Close()
	payload := make([]byte, 1024)
	rand.Read(payload)
	topic := func(name string) string {
		return fmt.Sprintf("persistent://public/default/%s-%d", name, time.Now().UnixNano())
	}

	for _, batched := range []bool{true, false} {
		inflight := 500
		mode := "unbatched-500"
		if batched {
			inflight, mode = 5000, "batched-5000"
		}
		b.Run("produce-"+mode+"/grpc", func(b *testing.B) {
			p, err := sdk.CreateProducer(client.ProducerOptions{Topic: topic("g"), DisableBatching: !batched, MaxPendingMessages: inflight})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			benchSends(b, inflight, func(done func(error)) {
				p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) { done(err) })
			})
		})
		// The same entries through lean producers of each protocol.
		batch := 1
		if batched {
			batch = leanBatch
		}
		b.Run("produce-"+mode+"/grpc-lean", func(b *testing.B) {
			benchLean(b, inflight, batch, dialLeanGRPC(ctx, b, addr, topic("gl"), payload, batch))
		})
		b.Run("produce-"+mode+"/pulsar-lean", func(b *testing.B) {
			benchLean(b, inflight, batch, dialLeanPulsar(b, addr, topic("pl"), payload, batch))
		})
		b.Run("produce-"+mode+"/pulsar", func(b *testing.B) {
			p, err := official.CreateProducer(pulsar.ProducerOptions{Topic: topic("p"), DisableBatching: !batched, MaxPendingMessages: inflight,
				BatchingMaxMessages: 1000, BatchingMaxSize: 128 << 10, BatchingMaxPublishDelay: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			benchSends(b, inflight, func(done func(error)) {
				p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { done(err) })
			})
		})
	}

	// Consuming b.N stored messages (stored batched by the SDK first).
	fill := func(b *testing.B, name string) string {
		b.Helper()
		t := topic(name)
		p, err := sdk.CreateProducer(client.ProducerOptions{Topic: t, MaxPendingMessages: 5000})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		var wg sync.WaitGroup
		for i := 0; i < b.N; i++ {
			wg.Add(1)
			p.SendAsync(ctx, &client.ProducerMessage{Payload: payload}, func(_ client.MessageID, _ *client.ProducerMessage, err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
		}
		wg.Wait()
		return t
	}
	b.Run("consume/grpc", func(b *testing.B) {
		t := fill(b, "cg")
		c, err := sdk.Subscribe(client.ConsumerOptions{Topic: t, SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.SetBytes(int64(len(payload)))
		b.ResetTimer()
		start, cpu := time.Now(), startCPU(b)
		for i := 0; i < b.N; i++ {
			m, err := c.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			c.Ack(m)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
		cpu.report(b)
	})
	b.Run("consume/pulsar", func(b *testing.B) {
		t := fill(b, "cp")
		c, err := official.Subscribe(pulsar.ConsumerOptions{Topic: t, SubscriptionName: "s", SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.SetBytes(int64(len(payload)))
		b.ResetTimer()
		start, cpu := time.Now(), startCPU(b)
		for i := 0; i < b.N; i++ {
			m, err := c.Receive(ctx)
			if err != nil {
				b.Fatal(err)
			}
			c.Ack(m)
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
		cpu.report(b)
	})
}

// benchSends runs b.N sends with at most inflight pending and reports
// msg/s.
func benchSends(b *testing.B, inflight int, send func(done func(error))) {
	var failed atomic.Int64
	var wg sync.WaitGroup
	slots := make(chan struct{}, inflight)
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu := time.Now(), startCPU(b)
	for i := 0; i < b.N; i++ {
		slots <- struct{}{}
		wg.Add(1)
		send(func(err error) {
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
	cpu.report(b)
}

// cpuMeter is the CPU time used so far by the test process and, with
// MAGNETAR_BENCH_METRICS, by the standalone whose metrics that names.
type cpuMeter struct {
	self   time.Duration
	server float64 // seconds
}

func startCPU(b *testing.B) cpuMeter {
	return cpuMeter{self: selfCPU(b), server: serverCPU(b)}
}

// report reports the CPU time used since m per message of b.N.
func (m cpuMeter) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64((selfCPU(b)-m.self).Microseconds())/n, "self-cpu-us/msg")
	if os.Getenv("MAGNETAR_BENCH_METRICS") != "" {
		b.ReportMetric((serverCPU(b)-m.server)*1e6/n, "server-cpu-us/msg")
	}
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the standalone's process_cpu_seconds_total (0 without
// MAGNETAR_BENCH_METRICS).
func serverCPU(b *testing.B) float64 {
	url := os.Getenv("MAGNETAR_BENCH_METRICS")
	if url == "" {
		return 0
	}
	// No connection kept: the test binary checks that no goroutine is left.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("no process_cpu_seconds_total in %s (%v)", url, sc.Err())
	return 0
}
