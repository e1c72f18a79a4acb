package broker

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Prometheus metrics of a broker, under Pulsar's names where Pulsar has
// one, so that its dashboards and alerts carry over:
//
//   - Per topic partition (labels cluster, namespace, topic) or, with
//     topic-level metrics off or more topics loaded than MetricsMaxTopics,
//     per namespace (cluster, namespace): counts, rates, storage, backlog
//     and the publish latency and entry size buckets. Per subscription
//     (topic level only): backlog, rates, unacknowledged, blocked, ack holes.
//   - Per broker (label cluster): the same aggregated (pulsar_broker_*),
//     lookups, ownership changes, session state, cache.
//
// Rates and buckets are Pulsar's: computed over the last stats window
// (StatsInterval, default 60 s, Pulsar's statsUpdateFrequencyInSecs) by
// statsLoop; buckets count the window's observations, each bucket on its
// own (not cumulative), and are typed gauge, as Pulsar exports them.
// Counters (*_total) count since the topic was loaded on this broker.

// Publish latency buckets, microseconds (Pulsar's ENTRY_LATENCY_BUCKETS_USEC),
// and their metric name suffixes; the last bucket is the overflow.
var (
	latencyBoundsUs = []int64{500, 1000, 5000, 10000, 20000, 50000, 100000, 200000, 1000000}
	latencyNames    = []string{"le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50", "le_100", "le_200", "le_1000", "overflow"}
	entrySizeBounds = []int64{128, 512, 1024, 2048, 4096, 16384, 102400, 1232896}
	entrySizeNames  = []string{"le_128", "le_512", "le_1_kb", "le_2_kb", "le_4_kb", "le_16_kb", "le_100_kb", "le_1_mb", "le_overflow"}
)

// buckets counts observations per bucket (value <= bound, else the next),
// with their count and sum, until taken.
type buckets struct {
	bounds []int64
	counts []atomic.Int64 // len(bounds)+1: the last is the overflow
	sum    atomic.Int64
}

func newBuckets(bounds []int64) *buckets {
	return &buckets{bounds: bounds, counts: make([]atomic.Int64, len(bounds)+1)}
}

func (b *buckets) add(v int64) {
	i, _ := slices.BinarySearch(b.bounds, v) // first bound >= v
	b.counts[i].Add(1)
	b.sum.Add(v)
}

// take returns the counts and sum since the last take and resets them.
func (b *buckets) take() bucketWindow {
	w := bucketWindow{counts: make([]int64, len(b.counts))}
	for i := range b.counts {
		w.counts[i] = b.counts[i].Swap(0)
		w.count += w.counts[i]
	}
	w.sum = b.sum.Swap(0)
	return w
}

// bucketWindow is one stats window of a buckets.
type bucketWindow struct {
	counts     []int64
	count, sum int64
}

func (w *bucketWindow) addTo(dst *bucketWindow) {
	if len(w.counts) == 0 {
		return // a window not closed yet: nothing in it
	}
	if dst.counts == nil {
		dst.counts = make([]int64, len(w.counts))
	}
	for i, c := range w.counts {
		dst.counts[i] += c
	}
	dst.count += w.count
	dst.sum += w.sum
}

// window is what a topic or subscription did in the last stats window.
type window struct {
	mu      sync.Mutex
	prev    trafficReading
	rates   rates
	latency bucketWindow
	size    bucketWindow
}

// refresh closes the window at now.
func (w *window) refresh(c *traffic, now time.Time, latency, size *buckets) {
	r := c.read(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rates = r.since(w.prev)
	w.prev = r
	if latency != nil {
		w.latency = latency.take()
		w.size = size.take()
	}
}

func (w *window) get() (rates, bucketWindow, bucketWindow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rates, w.latency, w.size
}

// statsLoop refreshes the stats windows of every loaded topic, and the
// broker's cache rates, every StatsInterval.
func (s *Server) statsLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.StatsInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			s.refreshStats(now)
		}
	}
}

// refreshStats closes the stats windows at now.
func (s *Server) refreshStats(now time.Time) {
	for _, t := range s.loadedTopics() {
		t.win.refresh(&t.traffic, now, t.latency, t.entrySize)
		for _, sub := range t.subscriptions() {
			sub.win.refresh(&sub.traffic, now, nil, nil)
		}
	}
	s.metrics.refreshCache(s, now)
}

// brokerMetrics are a broker's own collectors, registered on its
// registry with the per-topic collector.
type brokerMetrics struct {
	lookupAnswers   prometheus.Counter
	lookupRedirects prometheus.Counter
	lookupFailures  prometheus.Counter
	lookupLatency   prometheus.Summary
	ownership       *prometheus.CounterVec
	sessionsLost    prometheus.Counter
	discarded       *prometheus.CounterVec

	cacheMu    sync.Mutex
	cachePrev  [2]int64 // hits, misses at the last refresh
	cacheAt    time.Time
	cacheRates [2]float64

	warnOnce sync.Once // topic level capped
}

func newBrokerMetrics(reg prometheus.Registerer, cluster string) *brokerMetrics {
	l := prometheus.Labels{"cluster": cluster}
	m := &brokerMetrics{
		lookupAnswers: prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_broker_lookup_answers_total", ConstLabels: l,
			Help: "Lookups answered with this broker or the owner (not redirected)."}),
		lookupRedirects: prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_broker_lookup_redirects_total", ConstLabels: l,
			Help: "Lookups answered with another broker, which is to load the topic."}),
		lookupFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "pulsar_broker_lookup_failures_total", ConstLabels: l,
			Help: "Lookups that failed."}),
		lookupLatency: prometheus.NewSummary(prometheus.SummaryOpts{Name: "pulsar_broker_lookup", ConstLabels: l,
			Help:       "Lookup latency in milliseconds (Pulsar's unit).",
			Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001, 0.999: 0.0001}, MaxAge: time.Minute}),
		ownership: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_ownership_changes_total", ConstLabels: l,
			Help: "Topic partitions this broker started owning (acquired), let go (released) or lost with its etcd session or to fencing (lost)."},
			[]string{"change"}),
		sessionsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "magnetar_broker_sessions_lost_total", ConstLabels: l,
			Help: "etcd sessions this broker lost (every partition it owned was unloaded)."}),
		discarded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_broker_entries_discarded_total", ConstLabels: l,
			Help: "Entries a consumer could not read and acknowledged unread (Pulsar's ack validation error), by reason."},
			[]string{"reason"}),
	}
	reg.MustRegister(m.lookupAnswers, m.lookupRedirects, m.lookupFailures, m.lookupLatency, m.ownership, m.sessionsLost, m.discarded)
	for _, c := range []string{"acquired", "released", "lost"} {
		m.ownership.WithLabelValues(c)
	}
	for _, r := range []string{"checksum_mismatch", "decompression_error", "batch_error", "decryption_error", "other"} {
		m.discarded.WithLabelValues(r)
	}
	return m
}

// lookedUp records a lookup's outcome.
func (m *brokerMetrics) lookedUp(self, addr string, err error, took time.Duration) {
	m.lookupLatency.Observe(float64(took.Microseconds()) / 1000)
	switch {
	case err != nil:
		m.lookupFailures.Inc()
	case addr == self:
		m.lookupAnswers.Inc()
	default:
		m.lookupRedirects.Inc()
	}
}

func (m *brokerMetrics) refreshCache(s *Server, now time.Time) {
	_, hits, misses := s.cache.Stats()
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if d := now.Sub(m.cacheAt).Seconds(); !m.cacheAt.IsZero() && d > 0 {
		m.cacheRates = [2]float64{float64(hits-m.cachePrev[0]) / d, float64(misses-m.cachePrev[1]) / d}
	}
	m.cachePrev, m.cacheAt = [2]int64{hits, misses}, now
}

// topicMetrics collects the per-topic, per-namespace and per-broker
// figures when scraped (an unchecked collector: its series change with
// the topics loaded).
type topicMetrics struct{ s *Server }

func (topicMetrics) Describe(chan<- *prometheus.Desc) {}

// topicFigures are one topic's (or namespace's, or the broker's) figures.
type topicFigures struct {
	topics, subscriptions, producers, consumers int64
	rates                                       rates
	msgInTotal, bytesInTotal                    int64
	msgOutTotal, bytesOutTotal                  int64
	msgDroppedTotal                             int64 // non-persistent topics only
	storageSize, logicalSize                    int64
	backlog                                     int64
	writeRate                                   float64 // entries/s
	latency, size                               bucketWindow
}

func (f *topicFigures) add(o *topicFigures) {
	f.topics += o.topics
	f.subscriptions += o.subscriptions
	f.producers += o.producers
	f.consumers += o.consumers
	f.rates.MsgIn += o.rates.MsgIn
	f.rates.BytesIn += o.rates.BytesIn
	f.rates.MsgOut += o.rates.MsgOut
	f.rates.BytesOut += o.rates.BytesOut
	f.rates.EntriesIn += o.rates.EntriesIn
	f.msgInTotal += o.msgInTotal
	f.bytesInTotal += o.bytesInTotal
	f.msgOutTotal += o.msgOutTotal
	f.bytesOutTotal += o.bytesOutTotal
	f.msgDroppedTotal += o.msgDroppedTotal
	f.storageSize += o.storageSize
	f.logicalSize += o.logicalSize
	f.backlog += o.backlog
	f.writeRate += o.writeRate
	o.latency.addTo(&f.latency)
	o.size.addTo(&f.size)
}

type subFigures struct {
	name                       string
	backlog                    int64
	rates                      rates
	msgOutTotal, bytesOutTotal int64
	unacked                    int64
	blocked                    bool
	redeliverRate              float64
	delayed                    int64
	consumers                  int64
	holes                      int64
}

func (t *topic) figures() (topicFigures, []subFigures) {
	f := topicFigures{topics: 1}
	if t.ml != nil {
		for _, ref := range t.ml.Ledgers() {
			f.logicalSize += ref.Size
		}
	}
	t.mu.Lock()
	f.producers = int64(len(t.mu.producers))
	wq := int64(max(t.mu.set.writeQuorum, 1))
	t.mu.Unlock()
	f.storageSize = f.logicalSize * wq
	f.rates, f.latency, f.size = t.win.get()
	f.writeRate = f.rates.EntriesIn
	f.msgInTotal, f.bytesInTotal = t.traffic.msgIn.Load(), t.traffic.bytesIn.Load()
	f.msgOutTotal, f.bytesOutTotal = t.traffic.msgOut.Load(), t.traffic.bytesOut.Load()
	f.msgDroppedTotal = t.traffic.msgDropped.Load()
	var subs []subFigures
	for _, s := range t.subscriptions() {
		sf := s.figures()
		f.subscriptions++
		f.consumers += sf.consumers
		f.backlog += sf.backlog
		subs = append(subs, sf)
	}
	return f, subs
}

func (s *subscription) figures() subFigures {
	f := subFigures{name: s.name, backlog: s.backlog()}
	if s.cur != nil {
		f.holes = int64(s.cur.Stats().Holes)
	}
	f.rates, _, _ = s.win.get()
	f.msgOutTotal, f.bytesOutTotal = s.traffic.msgOut.Load(), s.traffic.bytesOut.Load()
	s.mu.Lock()
	defer s.mu.Unlock()
	f.consumers = int64(len(s.mu.consumers))
	if m := s.mu.multi; m != nil {
		f.unacked = int64(m.unacked)
		f.blocked = m.blocked
		f.redeliverRate = m.redeliveries1m.perSecond(time.Now())
		f.delayed = int64(m.delayed.len())
	}
	return f
}

func (m topicMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.s
	cluster := s.cfg.ClusterName
	topics := s.loadedTopics()
	slices.SortFunc(topics, func(a, b *topic) int { return strings.Compare(a.path, b.path) })
	topicLevel := s.cfg.MetricsTopicLevel
	if topicLevel && len(topics) > s.cfg.MetricsMaxTopics {
		topicLevel = false
		s.metrics.warnOnce.Do(func() {
			s.log.Warn("more topics loaded than --metrics-max-topics: metrics are per namespace",
				zap.Int("topics", len(topics)), zap.Int("max", s.cfg.MetricsMaxTopics))
		})
	}
	emit := func(typ prometheus.ValueType, name, help string, v float64, labels ...string) {
		d := desc(name, help, labels)
		m, err := prometheus.NewConstMetric(d, typ, v, labelValues(cluster, labels)...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err) // a bad label value fails this series, never the process
		}
		ch <- m
	}
	gauge := func(name, help string, v float64, labels ...string) {
		emit(prometheus.GaugeValue, name, help, v, labels...)
	}
	var broker topicFigures
	namespaces := map[string]*topicFigures{}
	var nsOrder []string
	for _, t := range topics {
		f, subs := t.figures()
		broker.add(&f)
		ns := t.name.NamespaceName()
		if namespaces[ns] == nil {
			namespaces[ns] = &topicFigures{}
			nsOrder = append(nsOrder, ns)
		}
		namespaces[ns].add(&f)
		if !topicLevel {
			continue
		}
		l := []string{"namespace", ns, "topic", t.name.String()}
		emitFigures(gauge, "pulsar_", &f, l)
		for _, sf := range subs {
			sl := append(slices.Clone(l), "subscription", sf.name)
			if t.ml == nil { // non-persistent: what no consumer could take
				gauge("pulsar_subscription_msg_drop_rate", "Messages of a non-persistent topic dropped per second: no consumer of the subscription had the permits when they were published.",
					sf.rates.MsgDropped, sl...)
			}
			gauge("pulsar_subscription_back_log", "Entries not acknowledged by the subscription.", float64(sf.backlog), sl...)
			gauge("pulsar_subscription_msg_rate_out", "Messages dispatched per second to the subscription's consumers.", sf.rates.MsgOut, sl...)
			gauge("pulsar_subscription_msg_throughput_out", "Bytes dispatched per second to the subscription's consumers.", sf.rates.BytesOut, sl...)
			gauge("pulsar_subscription_msg_rate_redeliver", "Messages redelivered per second (Shared, Key_Shared).", sf.redeliverRate, sl...)
			gauge("pulsar_subscription_unacked_messages", "Messages dispatched and not acknowledged (Shared, Key_Shared).", float64(sf.unacked), sl...)
			gauge("pulsar_subscription_blocked_on_unacked_messages", "1 when dispatch is blocked on the unacknowledged limit.", b2f(sf.blocked), sl...)
			gauge("pulsar_subscription_delayed", "Delayed messages waiting for their time.", float64(sf.delayed), sl...)
			gauge("pulsar_subscription_consumers_count", "Consumers connected to the subscription.", float64(sf.consumers), sl...)
			gauge("pulsar_out_messages_total", outMessagesHelp, float64(sf.msgOutTotal), sl...)
			gauge("pulsar_out_bytes_total", outBytesHelp, float64(sf.bytesOutTotal), sl...)
			gauge("pulsar_subscription_ack_holes", "Ranges of acknowledged entries after the mark-delete position (acknowledgement holes).",
				float64(sf.holes), sl...)
		}
	}
	for _, ns := range nsOrder {
		f := namespaces[ns]
		gauge("pulsar_topics_count", "Topic partitions of the namespace loaded on this broker.", float64(f.topics), "namespace", ns)
		if !topicLevel {
			emitFigures(gauge, "pulsar_", f, []string{"namespace", ns})
			gauge("pulsar_out_messages_total", outMessagesHelp, float64(f.msgOutTotal), "namespace", ns)
			gauge("pulsar_out_bytes_total", outBytesHelp, float64(f.bytesOutTotal), "namespace", ns)
		}
	}
	gauge("pulsar_broker_topics_count", "Topic partitions loaded on this broker.", float64(broker.topics))
	emitFigures(gauge, "pulsar_broker_", &broker, nil)
	gauge("pulsar_broker_out_messages_total", "Messages dispatched since the topics were loaded here.", float64(broker.msgOutTotal))
	gauge("pulsar_broker_out_bytes_total", "Bytes dispatched since the topics were loaded here.", float64(broker.bytesOutTotal))
	gauge("magnetar_broker_msg_dropped_total", "Messages of non-persistent topics dropped since the topics were loaded here, once per subscription that no consumer of could take them.",
		float64(broker.msgDroppedTotal))
	gauge("pulsar_ml_count", "Managed ledgers (topic partitions) open on this broker.", float64(len(topics)))
	size, hits, misses := s.cache.Stats()
	gauge("pulsar_ml_cache_used_size", "Bytes of entries in the broker's read cache.", float64(size))
	s.metrics.cacheMu.Lock()
	hitRate, missRate := s.metrics.cacheRates[0], s.metrics.cacheRates[1]
	s.metrics.cacheMu.Unlock()
	gauge("pulsar_ml_cache_hits_rate", "Reads served from the cache per second, over the last stats window.", hitRate)
	gauge("pulsar_ml_cache_misses_rate", "Reads that missed the cache per second, over the last stats window.", missRate)
	counter := func(name, help string, v float64) { emit(prometheus.CounterValue, name, help, v) }
	counter("magnetar_ml_cache_hits_total", "Reads served from the cache.", float64(hits))
	counter("magnetar_ml_cache_misses_total", "Reads that missed the cache.", float64(misses))
	counter("magnetar_ml_storage_reads_total", "Entries read from the bookies.", float64(s.storageReads.Load()))
	up := 1.0
	select {
	case <-s.session.Load().Done():
		up = 0
	default:
	}
	gauge("magnetar_broker_session_up", "1 while the broker's etcd session (registration and ownership leases) is alive.", up)
}

const (
	outMessagesHelp = "Messages dispatched since the topic was loaded here (per subscription, or per namespace)."
	outBytesHelp    = "Bytes dispatched since the topic was loaded here (per subscription, or per namespace)."
)

// emitFigures writes the figures of a topic, namespace or broker under
// prefix (pulsar_ or pulsar_broker_).
func emitFigures(gauge func(name, help string, v float64, labels ...string), p string, f *topicFigures, l []string) {
	gauge(p+"subscriptions_count", "Subscriptions.", float64(f.subscriptions), l...)
	gauge(p+"producers_count", "Producers connected.", float64(f.producers), l...)
	gauge(p+"consumers_count", "Consumers connected, over every subscription.", float64(f.consumers), l...)
	gauge(p+"rate_in", "Messages published per second, over the last stats window.", f.rates.MsgIn, l...)
	gauge(p+"rate_out", "Messages dispatched per second, over the last stats window.", f.rates.MsgOut, l...)
	gauge(p+"throughput_in", "Bytes published per second, over the last stats window.", f.rates.BytesIn, l...)
	gauge(p+"throughput_out", "Bytes dispatched per second, over the last stats window.", f.rates.BytesOut, l...)
	gauge(p+"in_messages_total", "Messages published since the topics were loaded here.", float64(f.msgInTotal), l...)
	gauge(p+"in_bytes_total", "Bytes published since the topics were loaded here.", float64(f.bytesInTotal), l...)
	gauge(p+"storage_size", "Bytes stored, counting every copy (size times write quorum).", float64(f.storageSize), l...)
	gauge(p+"storage_logical_size", "Bytes stored, one copy.", float64(f.logicalSize), l...)
	gauge(p+"storage_write_rate", "Entries written per second, over the last stats window.", f.writeRate, l...)
	gauge(p+"msg_backlog", "Entries not acknowledged, summed over the subscriptions.", float64(f.backlog), l...)
	if p != "pulsar_" {
		return
	}
	w := f.latency
	if len(w.counts) == 0 {
		w.counts = make([]int64, len(latencyNames))
	}
	for i, n := range latencyNames {
		gauge("pulsar_storage_write_latency_"+n, "Publishes whose storage write took this long (milliseconds; this bucket alone) in the last stats window.", float64(w.counts[i]), l...)
	}
	gauge("pulsar_storage_write_latency_count", "Publishes stored in the last stats window.", float64(w.count), l...)
	gauge("pulsar_storage_write_latency_sum", "Sum of their storage write latencies, microseconds.", float64(w.sum), l...)
	z := f.size
	if len(z.counts) == 0 {
		z.counts = make([]int64, len(entrySizeNames))
	}
	for i, n := range entrySizeNames {
		gauge("pulsar_entry_size_"+n, "Entries of this size (bytes; this bucket alone) stored in the last stats window.", float64(z.counts[i]), l...)
	}
	gauge("pulsar_entry_size_count", "Entries stored in the last stats window.", float64(z.count), l...)
	gauge("pulsar_entry_size_sum", "Sum of their sizes, bytes.", float64(z.sum), l...)
}

var (
	descMu sync.Mutex
	descs  = map[string]*prometheus.Desc{}
)

// desc returns the (cached) description of a metric with the cluster
// label and the names among labels (name, value pairs).
func desc(name, help string, labels []string) *prometheus.Desc {
	names := []string{"cluster"}
	for i := 0; i < len(labels); i += 2 {
		names = append(names, labels[i])
	}
	key := name + "\x00" + strings.Join(names, ",")
	descMu.Lock()
	defer descMu.Unlock()
	d := descs[key]
	if d == nil {
		d = prometheus.NewDesc(name, help, names, nil)
		descs[key] = d
	}
	return d
}

func labelValues(cluster string, labels []string) []string {
	v := []string{cluster}
	for i := 1; i < len(labels); i += 2 {
		v = append(v, labels[i])
	}
	return v
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
