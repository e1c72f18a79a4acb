package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"

	"github.com/magnetar-io/magnetar/client"
)

// Pulsar's official Go client (pulsar-client-go, pinned in go.mod, used
// only by tests) against Magnetar's processes, on the brokers' client
// ports. These tests live here, not in broker/: the library has data
// races of its own (its producer's reconnection), which -race reports.

// officialClient is a pulsar-client-go client for url.
func officialClient(t *testing.T, url string) pulsar.Client {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(w.stop) // after the client's Close: cleanups run last first
	l := logrus.New()
	l.SetOutput(w)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: 30 * time.Second, ConnectionTimeout: 10 * time.Second,
		Logger: plog.NewLoggerWithLogrus(l)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// testWriter sends a library's log to the test's until the test ends
// (the library's goroutines may outlive it).
type testWriter struct {
	t       *testing.T
	mu      sync.Mutex
	stopped bool
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimSuffix(string(b), "\n"))
	}
	return len(b), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

// receiveAll takes n messages from a Magnetar consumer, acknowledging
// them.
func receiveAll(t *testing.T, c client.Consumer, n int) []client.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []client.Message
	for len(out) < n {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(out), n, err)
		}
		c.Ack(m)
		out = append(out, m)
	}
	return out
}

// Messages sent by the official client reach Magnetar's SDK with their
// payload, key, properties, event time and producer name, unbatched and
// in batches compressed with LZ4 and ZSTD; receipts carry the positions.
func TestPulsarClientToSDK(t *testing.T) {
	ports := freePorts(t, 4)
	s := startStandalone(t, t.TempDir(), ports)
	t.Cleanup(func() { s.stop() })
	pc := officialClient(t, "pulsar://"+s.brokerAddr)
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + s.brokerAddr, OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eventTime := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name string
		opts pulsar.ProducerOptions
	}{
		{"unbatched", pulsar.ProducerOptions{DisableBatching: true}},
		{"batched-lz4", pulsar.ProducerOptions{BatchingMaxMessages: 10, BatchingMaxPublishDelay: 50 * time.Millisecond, CompressionType: pulsar.LZ4}},
		{"batched-zstd", pulsar.ProducerOptions{BatchingMaxMessages: 10, BatchingMaxPublishDelay: 50 * time.Millisecond, CompressionType: pulsar.ZSTD}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "persistent://public/default/official-" + tc.name
			cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
			if err != nil {
				t.Fatal(err)
			}
			defer cons.Close()
			opts := tc.opts
			opts.Topic, opts.Name = topic, "official-"+tc.name
			p, err := pc.CreateProducer(opts)
			if err != nil {
				t.Fatalf("official producer: %v", err)
			}
			defer p.Close()
			const n = 30
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%02d", i)), Key: fmt.Sprint("k", i%3),
					Properties: map[string]string{"i": fmt.Sprint(i)}, EventTime: eventTime},
					func(id pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
						if err == nil && id.LedgerID() <= 0 {
							err = fmt.Errorf("receipt with message id %v", id)
						}
						errs <- err
					})
			}
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n; i++ {
				if err := <-errs; err != nil {
					t.Fatalf("send: %v", err)
				}
			}
			for i, m := range receiveAll(t, cons, n) {
				want := fmt.Sprintf("m-%02d", i)
				if string(m.Payload()) != want || m.Key() != fmt.Sprint("k", i%3) || m.Properties()["i"] != fmt.Sprint(i) ||
					!m.EventTime().Equal(eventTime) || m.ProducerName() != "official-"+tc.name {
					t.Fatalf("message %d: %q key %q props %v event %v producer %q; want %q", i, m.Payload(), m.Key(), m.Properties(), m.EventTime(), m.ProducerName(), want)
				}
			}
		})
	}
}

// Two broker processes: the official client, given both addresses, sends
// to a partitioned topic whose partitions each broker owns (each lookup
// sends it to the owner). One broker is killed (SIGKILL) mid-stream; its
// partitions move to the other, the client follows, and with
// deduplication on every message is stored once.
func TestPulsarClientTwoBrokersOneKilled(t *testing.T) {
	c := newCluster(t, 1)
	addrs := freePorts(t, 2)
	https := freePorts(t, 2)
	procs := make([]*proc, 2)
	for i := range addrs {
		procs[i] = startProc(t, fmt.Sprint("broker-", i), "broker",
			"--listen", addrs[i], "--http", https[i],
			"--metastore", c.etcd.Endpoints()[0],
			"--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1",
			"--session-ttl", "3s", "--log-level", "warn")
	}
	for _, a := range addrs {
		c.waitBroker(a)
	}
	admin := func(method, path string, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+https[0]+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %s", method, path, resp.Status)
		}
	}
	const parts = 4
	admin("PUT", "/admin/v2/persistent/public/default/orders/partitions", `{"partitions":4,"properties":null}`)
	admin("POST", "/admin/v2/namespaces/public/default/deduplication", "true")
	cl, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + strings.Join(addrs, ","), OperationTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: "orders", SubscriptionName: "s", SubscriptionInitialPosition: client.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	owners := map[string]bool{}
	for i := 0; i < parts; i++ {
		owners[c.owner(fmt.Sprintf("public/default/orders-partition-%d", i))] = true
	}
	if !owners[addrs[0]] || !owners[addrs[1]] {
		t.Logf("partitions owned by %v only: the kill below moves none or all", owners)
	}

	pc := officialClient(t, "pulsar://"+strings.Join(addrs, ","))
	p, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/default/orders", Name: "orders-writer",
		DisableBatching: true, SendTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("official producer: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 200
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		if i == n/2 {
			procs[1].kill()
		}
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%03d", i)), Key: fmt.Sprint("key-", i)},
			func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) { errs <- err })
		if i%10 == 0 {
			time.Sleep(10 * time.Millisecond) // spread the sends around the kill
		}
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	var got []string
	for _, m := range receiveAll(t, cons, n) {
		got = append(got, string(m.Payload()))
	}
	sort.Strings(got)
	for i, g := range got {
		if want := fmt.Sprintf("m-%03d", i); g != want {
			t.Fatalf("message %d of the sorted %d: %q, want %q (lost or duplicated)", i, n, g, want)
		}
	}
	// Nothing more: no duplicate behind the n received.
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	if m, err := cons.Receive(rctx); err == nil {
		t.Fatalf("a duplicate after the %d messages: %q", n, m.Payload())
	}
}
