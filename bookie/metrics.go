package bookie

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/internal/latency"
)

// Prometheus metrics of a bookie, under BookKeeper's names where it has
// one (as a BookKeeper bookie exports them with its Prometheus provider),
// so that BookKeeper dashboards and alerts carry over:
//
//   - bookkeeper_server_ADD_ENTRY_REQUEST and _READ_ENTRY_REQUEST:
//     summaries in milliseconds with a success label (true/false), from
//     the request's arrival to its answer; bookkeeper_server_ADD_ENTRY
//     and _READ_ENTRY export the same figures (dashboards take their
//     rates from the _count). Their quantiles come from bucketed counts
//     (internal/latency: within 3.1% above the true value).
//   - bookie_WRITE_BYTES, bookie_READ_BYTES: payload bytes (counters).
//   - bookie_journal_*: the group commit, under BookKeeper's journal
//     names, in milliseconds with a success label (internal/latency too; success
//     is the group commit's outcome). For each batch handed to the
//     syncer: _JOURNAL_FORCE_WRITE_ENQUEUE, its wait for the syncer
//     (behind the syncs before; BookKeeper's starts after the journal's
//     write, ours before the entry log's); _JOURNAL_ADD_ENTRY, once per
//     add, hand-over to durable (with a wait for --entry-log-sync-interval,
//     which no other part counts). For each write and sync of the entry
//     log: _JOURNAL_FLUSH_LATENCY, the write; _JOURNAL_SYNC, its
//     fdatasync alone. Without the entry log Pebble writes and syncs its
//     WAL itself: neither of those two is counted. A rollover's own write
//     and sync are not counted, nor an add's wait for a rollover before
//     its hand-over (bookkeeper_server_ADD_ENTRY_REQUEST has it).
//     _FORCE_WRITE_BATCH_ENTRIES and _BATCH_BYTES: the requests one batch
//     held and its adds' payload bytes (client_golang summaries).
//   - bookie_SERVER_STATUS: 1 writable, 0 read-only (a draining bookie is
//     read-only); magnetar_bookie_state says which of the three.
//   - magnetar_bookie_disk_{total,used,free}_bytes, bookie_ledger_writable_dirs,
//     magnetar_bookie_stored_bytes.
//   - magnetar_bookie_add_streams_total, by transport: the add streams
//     opened over gRPC (AddEntries) and by ledger clients of the bookie's
//     process (Server.OpenAdds, the standalone's --local-bookies).
//   - bookie_journal_JOURNAL_QUEUE_SIZE: the requests queued for the
//     storage's committer, and _JOURNAL_FORCE_WRITE_QUEUE_SIZE: the
//     batches it handed to the syncer, waiting (gauges, as BookKeeper's
//     journal queues'); magnetar_bookie_queue_full_waits_total: the
//     requests that found the first queue full (each waits for room
//     unless its caller has given up), the disk behind its writers.
//   - magnetar_bookie_write_stalls_total and _write_stall_seconds_total,
//     by reason: the storage engine held writes back (memtables or level 0
//     full), a cause of latency spikes.
//
// Quantiles cover the last 30 to 60 seconds (internal/latency's two windows,
// the batch summaries' ageBuckets); BookKeeper's cover the previous
// minute.
type metrics struct {
	// add and read are exported twice, as _REQUEST and without it: one
	// observation per request.
	add, read  *latency.Summary
	writeBytes prometheus.Counter
	readBytes  prometheus.Counter
	// the group commit's parts (storage.SyncStats)
	enqueue, journalAdd, flush, sync *latency.Summary
	batchEntries                     prometheus.Summary
	batchBytes                       prometheus.Summary
	stalls, stallSecs                *prometheus.CounterVec
	// add streams opened, by transport
	grpcStreams, localStreams prometheus.Counter
}

// ageBuckets: the batch summaries' quantiles cover the last 30 to 60
// seconds (a bucket is dropped every 30 s), close to BookKeeper's, which
// reports the previous minute, and as internal/latency's windows do. Every
// observation goes into every bucket's stream.
const ageBuckets = 2

func newMetrics(reg prometheus.Registerer, s *Server) *metrics {
	m := &metrics{
		add: latency.New(time.Now, "bookkeeper_server_ADD_ENTRY_REQUEST", "Add requests, arrival to answer, milliseconds.",
			"bookkeeper_server_ADD_ENTRY"),
		read: latency.New(time.Now, "bookkeeper_server_READ_ENTRY_REQUEST", "Read requests, arrival to answer, milliseconds.",
			"bookkeeper_server_READ_ENTRY"),
		writeBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "bookie_WRITE_BYTES", Help: "Payload bytes added."}),
		readBytes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "bookie_READ_BYTES", Help: "Payload bytes read."}),
		enqueue: latency.New(time.Now, "bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE",
			"Group commits: a batch's wait for the syncer, milliseconds."),
		journalAdd: latency.New(time.Now, "bookie_journal_JOURNAL_ADD_ENTRY",
			"Group commits: an add's hand-over to the syncer to durable, milliseconds."),
		flush: latency.New(time.Now, "bookie_journal_JOURNAL_FLUSH_LATENCY",
			"Group commits: the entry log's writes, milliseconds."),
		sync: latency.New(time.Now, "bookie_journal_JOURNAL_SYNC",
			"Group commits: the entry log's fdatasync, milliseconds."),
		batchEntries: prometheus.NewSummary(prometheus.SummaryOpts{Name: "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES",
			Help: "Requests per group commit.", Objectives: latency.Objectives(), MaxAge: time.Minute, AgeBuckets: ageBuckets}),
		batchBytes: prometheus.NewSummary(prometheus.SummaryOpts{Name: "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES",
			Help: "Payload bytes per group commit.", Objectives: latency.Objectives(), MaxAge: time.Minute, AgeBuckets: ageBuckets}),
	}
	m.stalls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_bookie_write_stalls_total",
		Help: "Times the storage engine held writes back, by reason (memtables or level 0 full)."}, []string{"reason"})
	m.stallSecs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_bookie_write_stall_seconds_total",
		Help: "Seconds writes were held back by the storage engine, by reason."}, []string{"reason"})
	streams := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "magnetar_bookie_add_streams_total",
		Help: "Add streams opened, by transport: grpc, or local (a ledger client in the bookie's process)."}, []string{"transport"})
	m.grpcStreams, m.localStreams = streams.WithLabelValues("grpc"), streams.WithLabelValues("local")
	// Both success values are exported from the start, as BookKeeper's are.
	reg.MustRegister(streams, m.add, m.read, m.writeBytes, m.readBytes, m.enqueue, m.journalAdd, m.flush, m.sync,
		m.batchEntries, m.batchBytes,
		m.stalls, m.stallSecs, stateCollector{s})
	return m
}

// registerQueueMetrics exports the storage's queue (once it is open).
func registerQueueMetrics(reg prometheus.Registerer, db *storage.DB) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bookie_journal_JOURNAL_QUEUE_SIZE",
			Help: "Requests queued for the storage's committer."}, func() float64 { return float64(db.QueueLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE",
			Help: "Group commit batches waiting for the syncer."}, func() float64 { return float64(db.SyncQueueLen()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "magnetar_bookie_queue_full_waits_total",
			Help: "Requests that found the storage's queue full: each waits for room, unless its caller has given up."}, func() float64 { return float64(db.QueueFullWaits()) }))
}

// added records the outcome of an add that started at start.
func (m *metrics) added(bytes int, start time.Time, err error) {
	now := time.Now()
	m.add.Observe(now, now.Sub(start), err)
	if err == nil {
		m.writeBytes.Add(float64(bytes))
	}
}

// readDone records the outcome of a read that started at start.
func (m *metrics) readDone(bytes int, start time.Time, err error) {
	now := time.Now()
	m.read.Observe(now, now.Sub(start), err)
	if err == nil {
		m.readBytes.Add(float64(bytes))
	}
}

// synced records a batch of a group commit (storage.Options.OnSync).
func (m *metrics) synced(st storage.SyncStats) {
	now := time.Now()
	m.enqueue.Observe(now, st.Queued, st.Err)
	m.journalAdd.ObserveN(now, st.Took, st.Err, st.Adds)
	if st.Wrote {
		m.flush.Observe(now, st.Write, st.WriteErr)
	}
	if st.Synced {
		m.sync.Observe(now, st.Sync, st.SyncErr)
	}
	m.batchEntries.Observe(float64(st.Requests))
	m.batchBytes.Observe(float64(st.Bytes))
}

// stalled records a write stall (storage.Options.OnWriteStall). Pebble's
// reasons are a handful of fixed strings: the label stays bounded.
func (m *metrics) stalled(reason string, took time.Duration) {
	m.stalls.WithLabelValues(reason).Inc()
	m.stallSecs.WithLabelValues(reason).Add(took.Seconds())
}

// stateCollector reports the bookie's state and disk when scraped.
type stateCollector struct{ s *Server }

var (
	statusDesc   = prometheus.NewDesc("bookie_SERVER_STATUS", "1 when the bookie is writable, 0 when read-only (draining included).", nil, nil)
	stateDesc    = prometheus.NewDesc("magnetar_bookie_state", "1 for the bookie's state: writable, read_only or draining.", []string{"state"}, nil)
	dirsDesc     = prometheus.NewDesc("bookie_ledger_writable_dirs", "Writable data directories (the bookie has one).", nil, nil)
	totalDesc    = prometheus.NewDesc("magnetar_bookie_disk_total_bytes", "Size of the data directory's filesystem, at the last disk check.", nil, nil)
	usedDesc     = prometheus.NewDesc("magnetar_bookie_disk_used_bytes", "Bytes in use on that filesystem (by anyone), at the last disk check.", nil, nil)
	freeDesc     = prometheus.NewDesc("magnetar_bookie_disk_free_bytes", "Bytes the bookie may still write there, at the last disk check.", nil, nil)
	storedDesc   = prometheus.NewDesc("magnetar_bookie_stored_bytes", "Bytes the bookie's storage takes on disk.", nil, nil)
	stateLabels  = []string{"writable", "read_only", "draining"}
	collectDescs = []*prometheus.Desc{statusDesc, stateDesc, dirsDesc, totalDesc, usedDesc, freeDesc, storedDesc}
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range collectDescs {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	st, _ := c.s.state()
	state := strings.ReplaceAll(st, "-", "_") // a label value, as the others
	writable := 0.0
	if state == "writable" {
		writable = 1
	}
	ch <- prometheus.MustNewConstMetric(statusDesc, prometheus.GaugeValue, writable)
	ch <- prometheus.MustNewConstMetric(dirsDesc, prometheus.GaugeValue, writable)
	for _, st := range stateLabels {
		v := 0.0
		if st == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, v, st)
	}
	if u := c.s.lastUsage.Load(); u != nil {
		ch <- prometheus.MustNewConstMetric(totalDesc, prometheus.GaugeValue, float64(u.Total))
		ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(u.Used))
		ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(u.Avail))
	}
	ch <- prometheus.MustNewConstMetric(storedDesc, prometheus.GaugeValue, float64(c.s.db.DiskSpaceUsage()))
}
