package broker_test

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/broker"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// /metrics on the admin port: Pulsar's names and labels per topic and
// subscription, the stats window's rates and latency buckets, the broker
// aggregates and lookups.
func TestMetricsPerTopic(t *testing.T) {
	e := newEnv(t, func(c *broker.Config) {
		c.StatsInterval = time.Hour // windows are closed by the test (RefreshStats)
		c.ClusterName = "c1"
	})
	cl := e.client()
	const topic = "persistent://public/default/metered"
	cons, err := cl.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	e.b.RefreshStats() // the window starts here
	const n = 20
	produce(t, p, 0, n)
	receiveN(t, cons, n)
	e.b.RefreshStats()

	m := testutil.Scrape(t, e.b.HTTPAddr())
	tl := []string{"cluster", "c1", "namespace", "public/default", "topic", topic}
	sl := append(slices.Clone(tl), "subscription", "s")
	m.Want(t, n, "pulsar_in_messages_total", tl...)
	m.Want(t, 1, "pulsar_producers_count", tl...)
	m.Want(t, 1, "pulsar_subscriptions_count", tl...)
	m.Want(t, 1, "pulsar_consumers_count", tl...)
	m.Want(t, n, "pulsar_storage_write_latency_count", tl...)
	m.Want(t, n, "pulsar_entry_size_count", tl...)
	m.Want(t, n, "pulsar_out_messages_total", sl...)
	m.Want(t, 1, "pulsar_topics_count", "cluster", "c1", "namespace", "public/default")
	m.Want(t, 1, "pulsar_broker_topics_count", "cluster", "c1")
	m.Want(t, n, "pulsar_broker_in_messages_total", "cluster", "c1")
	m.Want(t, 1, "magnetar_broker_session_up", "cluster", "c1")
	// Drops are a non-persistent topic's (TestNonPersistentDropsWithoutPermits).
	m.Want(t, 0, "magnetar_broker_msg_dropped_total", "cluster", "c1")
	if v, ok := m.Value(t, "pulsar_subscription_msg_drop_rate", sl...); ok {
		t.Errorf("a persistent topic's subscription has a drop rate (%v)", v)
	}
	// The buckets count the window's publishes, each bucket on its own.
	var inBuckets float64
	for _, b := range []string{"le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "overflow"} {
		v, ok := m.Value(t, "pulsar_storage_write_latency_"+b, tl...)
		if !ok {
			t.Errorf("no pulsar_storage_write_latency_%s", b)
		}
		inBuckets += v
	}
	if inBuckets != n {
		t.Errorf("write latency buckets hold %v publishes, want %d", inBuckets, n)
	}
	for _, name := range []string{"pulsar_rate_in", "pulsar_throughput_in", "pulsar_rate_out", "pulsar_throughput_out", "pulsar_storage_write_rate",
		"pulsar_storage_size", "pulsar_storage_logical_size"} {
		if v, ok := m.Value(t, name, tl...); !ok || v <= 0 {
			t.Errorf("%s = %v (found %v), want > 0", name, v, ok)
		}
	}
	for _, name := range []string{"pulsar_subscription_msg_rate_out", "pulsar_subscription_msg_throughput_out"} {
		if v, ok := m.Value(t, name, sl...); !ok || v <= 0 {
			t.Errorf("%s = %v (found %v), want > 0", name, v, ok)
		}
	}
	if v, _ := m.Value(t, "pulsar_broker_lookup_answers_total", "cluster", "c1"); v < 1 {
		t.Errorf("lookups answered: %v, want at least 1 (the producer's and the consumer's)", v)
	}
	if v, _ := m.Value(t, "pulsar_broker_lookup", "cluster", "c1"); v < 1 {
		t.Errorf("lookup latencies observed: %v, want at least 1", v)
	}
	m.Want(t, 1, "magnetar_broker_ownership_changes_total", "cluster", "c1", "change", "acquired")
	// The adds' latency per bookie, as the broker saw them: each message
	// an entry (batching off), on the one bookie.
	bl := []string{"cluster", "c1", "bookie", e.c.Bookies()[0].ID}
	if v, _ := m.Value(t, "bookkeeper_client_per_channel_bookie_client_ADD_ENTRY", append(bl, "success", "true")...); v < n {
		t.Errorf("adds to the bookie answered: %v, want at least %d", v, n)
	}
	m.Want(t, 0, "bookkeeper_client_per_channel_bookie_client_ADD_ENTRY", append(bl, "success", "false")...)
	if _, ok := m.Value(t, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics")
	}

	// The next window saw nothing.
	e.b.RefreshStats()
	m = testutil.Scrape(t, e.b.HTTPAddr())
	m.Want(t, 0, "pulsar_storage_write_latency_count", tl...)
	m.Want(t, 0, "pulsar_rate_in", tl...)
	m.Want(t, n, "pulsar_in_messages_total", tl...)
}

// Topic-level metrics off, or more topics than --metrics-max-topics:
// everything is per namespace, and no series names a topic.
func TestMetricsPerNamespace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		configure func(*broker.Config)
	}{
		{"topic level off", func(c *broker.Config) { c.MetricsTopicLevel = false }},
		{"over the topic cap", func(c *broker.Config) { c.MetricsMaxTopics = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.configure)
			cl := e.client()
			for _, topic := range []string{"ns-a", "ns-b"} {
				p, err := cl.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
				if err != nil {
					t.Fatal(err)
				}
				produce(t, p, 0, 3)
				p.Close()
			}
			m := testutil.Scrape(t, e.b.HTTPAddr())
			l := []string{"cluster", "magnetar", "namespace", "public/default"}
			m.Want(t, 6, "pulsar_in_messages_total", l...)
			m.Want(t, 2, "pulsar_topics_count", l...)
			for name := range m {
				if slices.Contains(m.Labels(name), "topic") {
					t.Errorf("%s has a topic label", name)
				}
			}
		})
	}
}

// Profiles are served only with --pprof.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, on := range []bool{false, true} {
		e := newEnv(t, func(c *broker.Config) { c.Pprof = on })
		resp, err := http.Get("http://" + e.b.HTTPAddr() + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := http.StatusNotFound
		if on {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("pprof %v: GET /debug/pprof/cmdline: %s, want %d", on, resp.Status, want)
		}
	}
}

// The SDK's optional collectors (pulsar-client-go's names), shared by the
// clients that register on one Registerer.
func TestClientMetrics(t *testing.T) {
	e := newEnv(t, nil)
	reg := prometheus.NewRegistry()
	newClient := func() client.Client {
		c, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), MetricsRegisterer: reg,
			MetricsCardinality: client.MetricsCardinalityTopic, CustomMetricsLabels: map[string]string{"app": "test"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	c1, c2 := newClient(), newClient()
	// A custom label that collides with a series label is refused, not
	// silently dropped with every metric.
	if _, err := client.NewClient(client.ClientOptions{URL: "magnetar://" + e.b.Addr(), MetricsRegisterer: prometheus.NewRegistry(),
		MetricsCardinality: client.MetricsCardinalityTopic, CustomMetricsLabels: map[string]string{"topic": "x"}}); !errors.Is(err, client.ErrInvalidOptions) {
		t.Fatalf("a custom label named topic: %v, want ErrInvalidOptions", err)
	}
	const topic = "persistent://public/default/client-metrics"
	cons, err := c2.Subscribe(client.ConsumerOptions{Topic: topic, SubscriptionName: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c1.CreateProducer(client.ProducerOptions{Topic: topic, DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	produce(t, p, 0, n) // payloads of 7 bytes
	for _, m := range receiveN(t, cons, n) {
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	l := []string{"client", "go", "app", "test", "pulsar_tenant", "public", "pulsar_namespace", "public/default", "topic", topic}
	m := testutil.Gather(t, reg)
	m.Want(t, n, "pulsar_client_messages_published", l...)
	m.Want(t, 7*n, "pulsar_client_bytes_published", l...)
	m.Want(t, n, "pulsar_client_producer_latency_seconds", l...)
	m.Want(t, 0, "pulsar_client_producer_pending_messages", l...)
	m.Want(t, 1, "pulsar_client_producers_opened", l...)
	m.Want(t, 1, "pulsar_client_producers_partitions_active", l...)
	m.Want(t, 1, "pulsar_client_consumers_opened", l...)
	m.Want(t, 1, "pulsar_client_consumers_partitions_active", l...)
	m.Want(t, n, "pulsar_client_messages_received", l...)
	m.Want(t, 7*n, "pulsar_client_bytes_received", l...)
	m.Want(t, n, "pulsar_client_consumer_acks", l...)
	if v, _ := m.Value(t, "pulsar_client_lookup_count", "client", "go"); v < 2 {
		t.Errorf("lookups: %v, want at least 2 (the producer's and the consumer's)", v)
	}
	p.Close()
	cons.Close()
	m = testutil.Gather(t, reg)
	m.Want(t, 1, "pulsar_client_producers_closed", l...)
	m.Want(t, 0, "pulsar_client_producers_partitions_active", l...)
	m.Want(t, 1, "pulsar_client_consumers_closed", l...)
	m.Want(t, 0, "pulsar_client_consumers_partitions_active", l...)
}

// A name that is not UTF-8 is refused at the REST edge (names are metric
// label values, which must be UTF-8): /metrics keeps working.
func TestNonUTF8NamesRefused(t *testing.T) {
	e := newEnv(t, nil)
	p, err := e.client().CreateProducer(client.ProducerOptions{Topic: "utf"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	req, _ := http.NewRequest(http.MethodPut, "http://"+e.b.HTTPAddr()+"/admin/v2/persistent/public/default/utf/subscription/%FF", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("PUT of a subscription named \\xff: %s, want 400", resp.Status)
	}
	testutil.Scrape(t, e.b.HTTPAddr())
}
