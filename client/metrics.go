package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/proto/topicname"
)

// MetricsCardinality says which labels the SDK's metrics carry, as in
// pulsar-client-go: none, the tenant, the namespace (tenant and
// namespace), or the topic too.
type MetricsCardinality int

const (
	MetricsCardinalityNone MetricsCardinality = iota + 1
	MetricsCardinalityTenant
	MetricsCardinalityNamespace // the default
	MetricsCardinalityTopic
)

// Latency buckets of the histograms, seconds (pulsar-client-go's).
var latencyBuckets = []float64{.0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// metrics are a client's Prometheus collectors, under pulsar-client-go's
// names (pulsar_client_*), so that its dashboards carry over. Clients
// registering on one Registerer share the collectors (as
// pulsar-client-go's do), when their labels agree.
type metrics struct {
	card MetricsCardinality

	published, bytesPublished   *prometheus.CounterVec
	pendingMsgs, pendingBytes   *prometheus.GaugeVec
	producerErrors              *prometheus.CounterVec
	producerLatency             *prometheus.HistogramVec
	producersOpened, prodClosed *prometheus.CounterVec
	producerPartitions          *prometheus.GaugeVec
	consumersOpened, consClosed *prometheus.CounterVec
	consumerPartitions          *prometheus.GaugeVec
	received, bytesReceived     *prometheus.CounterVec
	acks, nacks, dlq            *prometheus.CounterVec
	readersOpened, readClosed   *prometheus.CounterVec
	lookups                     prometheus.Counter
}

func newMetrics(o ClientOptions) (_ *metrics, err error) {
	if o.MetricsRegisterer == nil {
		return nil, nil
	}
	m := &metrics{card: o.MetricsCardinality}
	var labels []string
	switch m.card {
	case MetricsCardinalityNone:
	case MetricsCardinalityTenant:
		labels = []string{"pulsar_tenant"}
	case MetricsCardinalityTopic:
		labels = []string{"pulsar_tenant", "pulsar_namespace", "topic"}
	default:
		m.card = MetricsCardinalityNamespace
		labels = []string{"pulsar_tenant", "pulsar_namespace"}
	}
	constLabels := prometheus.Labels{"client": "go"}
	for k, v := range o.CustomMetricsLabels {
		constLabels[k] = v
	}
	r := &registerer{r: o.MetricsRegisterer}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: constLabels}, append(labels[:len(labels):len(labels)], extra...)))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constLabels}, labels))
	}
	m.published = counter("pulsar_client_messages_published", "Messages published (acknowledged by the broker).")
	m.bytesPublished = counter("pulsar_client_bytes_published", "Payload bytes published.")
	m.pendingMsgs = gauge("pulsar_client_producer_pending_messages", "Messages sent and not yet acknowledged.")
	m.pendingBytes = gauge("pulsar_client_producer_pending_bytes", "Payload bytes sent and not yet acknowledged.")
	m.producerErrors = counter("pulsar_client_producer_errors", "Sends that failed, by kind: timeout, msg_too_large or other.", "error")
	m.producerLatency = register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pulsar_client_producer_latency_seconds",
		Help: "Publish latency: from the send to the broker's receipt.", ConstLabels: constLabels, Buckets: latencyBuckets}, labels))
	m.producersOpened = counter("pulsar_client_producers_opened", "Producers created.")
	m.prodClosed = counter("pulsar_client_producers_closed", "Producers closed.")
	m.producerPartitions = gauge("pulsar_client_producers_partitions_active", "Partition producers open.")
	m.consumersOpened = counter("pulsar_client_consumers_opened", "Consumers created.")
	m.consClosed = counter("pulsar_client_consumers_closed", "Consumers closed.")
	m.consumerPartitions = gauge("pulsar_client_consumers_partitions_active", "Partition consumers open.")
	m.received = counter("pulsar_client_messages_received", "Messages handed to the application.")
	m.bytesReceived = counter("pulsar_client_bytes_received", "Payload bytes handed to the application.")
	m.acks = counter("pulsar_client_consumer_acks", "Messages acknowledged.")
	m.nacks = counter("pulsar_client_consumer_nacks", "Messages negatively acknowledged.")
	m.dlq = counter("pulsar_client_consumer_dlq_messages", "Messages sent to the dead-letter topic.")
	m.readersOpened = counter("pulsar_client_readers_opened", "Readers created.")
	m.readClosed = counter("pulsar_client_readers_closed", "Readers closed.")
	m.lookups = register(r, prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_client_lookup_count",
		Help: "Topic lookups.", ConstLabels: constLabels}))
	if r.err != nil {
		return nil, fmt.Errorf("%w: metrics: %v", ErrInvalidOptions, r.err)
	}
	return m, nil
}

// registerer registers collectors, keeping the first refusal.
type registerer struct {
	r   prometheus.Registerer
	err error
}

// register registers c on r, or returns the collector registered before
// under the same description (another client's). Any other refusal (a
// bad custom label, labels that disagree with another client's) is kept
// in r.err, for NewClient to report.
func register[C prometheus.Collector](r *registerer, c C) C {
	if err := r.r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if r.err == nil {
			r.err = err
		}
	}
	return c
}

// topicMetrics are the series of one topic (as subscribed or produced to,
// without partition suffix); nil when the client has no metrics.
type topicMetrics struct {
	published, bytesPublished prometheus.Counter
	pendingMsgs, pendingBytes prometheus.Gauge
	timeouts, tooLarge, other prometheus.Counter
	latency                   prometheus.Observer
	producerPartitions        prometheus.Gauge
	consumerPartitions        prometheus.Gauge
	received, bytesReceived   prometheus.Counter
	acks, nacks, dlq          prometheus.Counter

	m      *metrics
	labels []string
}

func (m *metrics) forTopic(topic string) *topicMetrics {
	if m == nil {
		return nil
	}
	var l []string
	if m.card != MetricsCardinalityNone {
		n, err := topicname.Parse(topic)
		if err != nil {
			n = topicname.Name{Tenant: "unknown", Namespace: "unknown", Local: topic}
		}
		switch m.card {
		case MetricsCardinalityTenant:
			l = []string{n.Tenant}
		case MetricsCardinalityNamespace:
			l = []string{n.Tenant, n.NamespaceName()}
		case MetricsCardinalityTopic:
			l = []string{n.Tenant, n.NamespaceName(), n.Base().String()}
		}
	}
	return &topicMetrics{
		m: m, labels: l,
		published: m.published.WithLabelValues(l...), bytesPublished: m.bytesPublished.WithLabelValues(l...),
		pendingMsgs: m.pendingMsgs.WithLabelValues(l...), pendingBytes: m.pendingBytes.WithLabelValues(l...),
		timeouts:           m.producerErrors.WithLabelValues(append(l[:len(l):len(l)], "timeout")...),
		tooLarge:           m.producerErrors.WithLabelValues(append(l[:len(l):len(l)], "msg_too_large")...),
		other:              m.producerErrors.WithLabelValues(append(l[:len(l):len(l)], "other")...),
		latency:            m.producerLatency.WithLabelValues(l...),
		producerPartitions: m.producerPartitions.WithLabelValues(l...),
		consumerPartitions: m.consumerPartitions.WithLabelValues(l...),
		received:           m.received.WithLabelValues(l...), bytesReceived: m.bytesReceived.WithLabelValues(l...),
		acks: m.acks.WithLabelValues(l...), nacks: m.nacks.WithLabelValues(l...), dlq: m.dlq.WithLabelValues(l...),
	}
}

// sending counts a send and wraps its callback to count its outcome.
func (tm *topicMetrics) sending(msg *ProducerMessage, cb func(MessageID, *ProducerMessage, error)) func(MessageID, *ProducerMessage, error) {
	if tm == nil || msg == nil {
		return cb
	}
	start, size := time.Now(), float64(len(msg.Payload))
	tm.pendingMsgs.Inc()
	tm.pendingBytes.Add(size)
	return func(id MessageID, m *ProducerMessage, err error) {
		tm.pendingMsgs.Dec()
		tm.pendingBytes.Sub(size)
		switch {
		case err == nil:
			tm.published.Inc()
			tm.bytesPublished.Add(size)
			tm.latency.Observe(time.Since(start).Seconds())
		case errors.Is(err, ErrSendTimeout):
			tm.timeouts.Inc()
		case errors.Is(err, ErrMessageTooLarge):
			tm.tooLarge.Inc()
		default:
			tm.other.Inc()
		}
		cb(id, m, err)
	}
}

func (tm *topicMetrics) opened(producer bool, partitions int, reader bool) {
	if tm == nil {
		return
	}
	switch {
	case producer:
		tm.m.producersOpened.WithLabelValues(tm.labels...).Inc()
		tm.producerPartitions.Add(float64(partitions))
	case reader:
		tm.m.readersOpened.WithLabelValues(tm.labels...).Inc()
		tm.consumerPartitions.Add(float64(partitions))
	default:
		tm.m.consumersOpened.WithLabelValues(tm.labels...).Inc()
		tm.consumerPartitions.Add(float64(partitions))
	}
}

func (tm *topicMetrics) closed(producer bool, partitions int, reader bool) {
	if tm == nil {
		return
	}
	switch {
	case producer:
		tm.m.prodClosed.WithLabelValues(tm.labels...).Inc()
		tm.producerPartitions.Sub(float64(partitions))
	case reader:
		tm.m.readClosed.WithLabelValues(tm.labels...).Inc()
		tm.consumerPartitions.Sub(float64(partitions))
	default:
		tm.m.consClosed.WithLabelValues(tm.labels...).Inc()
		tm.consumerPartitions.Sub(float64(partitions))
	}
}

func (tm *topicMetrics) delivered(m *message) {
	if tm == nil {
		return
	}
	tm.received.Inc()
	tm.bytesReceived.Add(float64(len(m.payload)))
}

func (tm *topicMetrics) acked() {
	if tm != nil {
		tm.acks.Inc()
	}
}

func (tm *topicMetrics) nacked() {
	if tm != nil {
		tm.nacks.Inc()
	}
}

func (tm *topicMetrics) deadLettered() {
	if tm != nil {
		tm.dlq.Inc()
	}
}
