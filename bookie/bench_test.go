package bookie_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// startBenchBookie runs a bookie on disk, stopped when the benchmark ends.
func startBenchBookie(b *testing.B) (bookiepb.BookieClient, *bookie.Server) {
	return startBenchBookieIn(b, b.TempDir(), func(*bookie.Config) {})
}

// startBenchBookieIn runs a bookie on dataDir, its defaults changed by
// set.
func startBenchBookieIn(b *testing.B, dataDir string, set func(*bookie.Config)) (bookiepb.BookieClient, *bookie.Server) {
	e := testutil.StartEtcd(b)
	store := testutil.OpenStore(b, e.Endpoints(), "/magnetar")
	cfg := bookie.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dataDir
	cfg.Metastore = e.Endpoints()
	set(&cfg)
	s, err := bookie.Start(context.Background(), cfg, bookie.WithStore(store), bookie.WithLogger(zap.NewNop()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return dial(b, s.Addr()), s
}

// groupCommits returns a function that, called once the timed part has
// ended, reports the bookie's group commits since groupCommits was called
// (its metrics): the adds per sync of the entry log ("adds/sync") and the
// mean time of a sync's write and fdatasync ("io-us/sync"), which bound the
// adds a second (docs/benchmarks.md, "The group commit waits on its
// syncer's I/O").
func groupCommits(b *testing.B, s *bookie.Server) func() {
	read := func() (syncs uint64, ms float64) {
		m := testutil.Gather(b, s.Metrics(false))
		fsync := m.Summary(b, "bookie_journal_JOURNAL_SYNC", "success", "true")
		write := m.Summary(b, "bookie_journal_JOURNAL_FLUSH_LATENCY", "success", "true")
		return fsync.GetSampleCount(), fsync.GetSampleSum() + write.GetSampleSum()
	}
	syncs0, ms0 := read()
	return func() {
		syncs, ms := read()
		if n := syncs - syncs0; n > 0 {
			b.ReportMetric(float64(b.N)/float64(n), "adds/sync")
			b.ReportMetric((ms-ms0)*1000/float64(n), "io-us/sync")
		}
	}
}

// A bookie over gRPC on loopback: durable adds to one ledger, closed loop
// with a fixed number in flight. Compare with BenchmarkRawFsync in
// bookie/internal/storage, run in the same invocation.
func BenchmarkBookieAdd(b *testing.B) {
	c, srv := startBenchBookie(b)
	ledgerID := int64(0)
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("size=%dKiB/inflight=%d", size>>10, inflight), func(b *testing.B) {
				ledgerID++
				payload := make([]byte, size)
				rand.Read(payload) // incompressible, as most payloads (producers compress)
				ctx := context.Background()
				var lat testutil.Latencies
				b.SetBytes(int64(size))
				b.ReportAllocs() // allocations per operation (issue 14)
				report := groupCommits(b, srv)
				b.ResetTimer()
				testutil.RunClosedLoop(b, inflight, &lat, func(i int) error {
					entry := int64(i)
					length := (entry + 1) * int64(size)
					_, err := c.AddEntry(ctx, &bookiepb.AddEntryRequest{
						LedgerId: ledgerID, EntryId: entry, MasterKey: key, LastAddConfirmed: -1,
						Length: length, Payload: payload, Crc32C: wire.Checksum(ledgerID, entry, -1, length, payload),
					})
					return err
				})
				b.StopTimer()
				report() // one add per call: no adds per message
				lat.Report(b)
			})
		}
	}
}

// streamClient is a minimal AddEntries client for the benchmark: adds
// queue while a batch is being sent, results are matched by request id.
type streamClient struct {
	stream  bookiepb.Bookie_AddEntriesClient
	mu      sync.Mutex
	nextID  uint64
	queue   []*bookiepb.AddEntryRequest
	waiters map[uint64]chan error
	signal  chan struct{}
}

func newStreamClient(b *testing.B, c bookiepb.BookieClient) *streamClient {
	stream, err := c.AddEntries(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	sc := &streamClient{stream: stream, waiters: map[uint64]chan error{}, signal: make(chan struct{}, 1)}
	go func() {
		for range sc.signal {
			runtime.Gosched() // as bookie/ledger's streams do: adds come in waves
			for {
				sc.mu.Lock()
				n, bytes := 0, 0
				for n < len(sc.queue) && (n == 0 || bytes+len(sc.queue[n].Payload) <= 1<<20) {
					bytes += len(sc.queue[n].Payload)
					n++
				}
				batch := sc.queue[:n:n]
				sc.queue = sc.queue[n:]
				sc.mu.Unlock()
				if n == 0 {
					break
				}
				benchSends.Add(1)
				if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: batch}); err != nil {
					panic(err)
				}
			}
		}
	}()
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			sc.mu.Lock()
			for _, r := range resp.Results {
				sc.waiters[r.RequestId] <- wire.FromResult(r.Code, r.Reason, r.Message)
				delete(sc.waiters, r.RequestId)
			}
			sc.mu.Unlock()
		}
	}()
	return sc
}

func (sc *streamClient) add(req *bookiepb.AddEntryRequest) error {
	ch := make(chan error, 1)
	sc.mu.Lock()
	sc.nextID++
	req.RequestId = sc.nextID
	sc.waiters[req.RequestId] = ch
	sc.queue = append(sc.queue, req)
	sc.mu.Unlock()
	select {
	case sc.signal <- struct{}{}:
	default:
	}
	return <-ch
}

func (sc *streamClient) close() {
	close(sc.signal)
	sc.stream.CloseSend()
}

// The same over one AddEntries stream, as ledger writers send adds.
// benchSends counts stream messages: adds per message is reported.
var benchSends atomic.Int64

func BenchmarkBookieAddStream(b *testing.B) {
	c, srv := startBenchBookie(b)
	ledgerID := int64(0)
	for _, size := range []int{1 << 10, 64 << 10} {
		for _, inflight := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("size=%dKiB/inflight=%d", size>>10, inflight), func(b *testing.B) {
				ledgerID++
				sc := newStreamClient(b, c)
				defer sc.close()
				payload := make([]byte, size)
				rand.Read(payload) // incompressible, as most payloads (producers compress)
				var lat testutil.Latencies
				b.SetBytes(int64(size))
				b.ReportAllocs() // allocations per operation (issue 14)
				report := groupCommits(b, srv)
				b.ResetTimer()
				testutil.RunClosedLoop(b, inflight, &lat, func(i int) error {
					entry := int64(i)
					length := (entry + 1) * int64(size)
					return sc.add(&bookiepb.AddEntryRequest{
						LedgerId: ledgerID, EntryId: entry, MasterKey: key, LastAddConfirmed: -1,
						Length: length, Payload: payload, Crc32C: wire.Checksum(ledgerID, entry, -1, length, payload),
					})
				})
				b.StopTimer()
				report()
				b.ReportMetric(float64(b.N)/float64(benchSends.Swap(0)), "adds/msg")
				lat.Report(b)
			})
		}
	}
}

// BenchmarkBookieAddStream's 1 KiB case at 256 in flight on new entry log
// files (appended to) and on files kept for reuse (overwritten, as on a
// bookie whose retention deletes ledgers; storage's
// BenchmarkStorageAddRecycled is the same without the network). Before
// the timer, the recycled case writes a ledger as large as the run will
// write into the data directory and deletes it; the bookie then starts
// with its files kept for reuse.
func BenchmarkBookieAddStreamRecycled(b *testing.B) {
	const size, inflight, fileSize = 1 << 10, 256, 32 << 20
	for _, recycled := range []bool{false, true} {
		b.Run(fmt.Sprintf("recycled=%v", recycled), func(b *testing.B) {
			dir := b.TempDir()
			need := int64(b.N)*(size+64) + fileSize
			if recycled {
				fillRecycled(b, dir, fileSize, need)
			}
			c, srv := startBenchBookieIn(b, dir, func(cfg *bookie.Config) {
				cfg.EntryLogFileSize = fileSize
				if recycled {
					cfg.EntryLogRecycleFiles = 64
				}
			})
			sc := newStreamClient(b, c)
			defer sc.close()
			payload := make([]byte, size)
			rand.Read(payload)
			var lat testutil.Latencies
			b.SetBytes(size)
			b.ReportAllocs()
			report := groupCommits(b, srv)
			b.ResetTimer()
			testutil.RunClosedLoop(b, inflight, &lat, func(i int) error {
				entry := int64(i)
				length := (entry + 1) * size
				return sc.add(&bookiepb.AddEntryRequest{
					LedgerId: 1, EntryId: entry, MasterKey: key, LastAddConfirmed: -1,
					Length: length, Payload: payload, Crc32C: wire.Checksum(1, entry, -1, length, payload),
				})
			})
			b.StopTimer()
			report()
			b.ReportMetric(float64(b.N)/float64(benchSends.Swap(0)), "adds/msg")
			lat.Report(b)
		})
	}
}

// fillRecycled writes a ledger of need bytes into a bookie's data
// directory and deletes it: its files (but the last) are kept for reuse.
func fillRecycled(b *testing.B, dir string, fileSize, need int64) {
	d, err := storage.Open(storage.Options{Dir: dir, FS: vfs.Default, Logger: zap.NewNop(), EntryLog: true, EntryLogDirectIO: true, EntryLogFileSize: fileSize, EntryLogRecycle: 64})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	big := make([]byte, 1<<20)
	for e := int64(0); e*int64(len(big)) < need; e++ {
		if err := d.AddEntry(ctx, storage.Entry{LedgerID: 2, EntryID: e, LAC: -1, Length: int64(len(big)), Payload: big}, key, false); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.DeleteLedgers(ctx, []int64{2}); err != nil {
		b.Fatal(err)
	}
	if err := d.Close(); err != nil { // its last checkpoint keeps the files for reuse
		b.Fatal(err)
	}
}

// BenchmarkBookieAddStreamPipelined is BenchmarkBookieAddStream's 1 KiB
// case at 256 in flight with a client shaped like a ledger writer's
// stream: no goroutine per add. The goroutine that reads the results
// queues one new add for each result and wakes the sender once per
// message of results. It leaves out the writer's own bookkeeping (its
// pending list, timers, callbacks, the appenders it wakes), so it is an
// upper bound for such a client. BenchmarkBookieAddStream's client parks
// one goroutine per add in flight: each message of results makes about a
// hundred of them runnable at once, and their scheduling (`go tool trace
// -pprof=sched`) is part of what that benchmark measures. Latencies run
// from an add's queueing to its result's arrival, with no goroutine
// woken, so they are lower than that benchmark's. Both are recorded in
// docs/benchmarks.md.
func BenchmarkBookieAddStreamPipelined(b *testing.B) {
	const size, inflight = 1 << 10, 256
	c, srv := startBenchBookie(b)
	stream, err := c.AddEntries(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size)
	rand.Read(payload)
	var (
		mu      sync.Mutex
		queue   []*bookiepb.AddEntryRequest
		issued  int
		started = make([]time.Time, b.N)
		signal  = make(chan struct{}, 1)
		sends   int
	)
	// next queues entry i; the caller holds mu.
	next := func(i int) {
		entry := int64(i)
		length := (entry + 1) * size
		started[i] = time.Now()
		queue = append(queue, &bookiepb.AddEntryRequest{
			LedgerId: 1, EntryId: entry, RequestId: uint64(i) + 1, MasterKey: key, LastAddConfirmed: -1, // 0: the stream's control results
			Length: length, Payload: payload, Crc32C: wire.Checksum(1, entry, -1, length, payload),
		})
	}
	sent := make(chan error, 1)
	go func() {
		for range signal {
			runtime.Gosched() // kept as in bookie/ledger's streams
			for {
				mu.Lock()
				batch := queue
				queue = nil
				mu.Unlock()
				if len(batch) == 0 {
					break
				}
				sends++
				if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: batch}); err != nil {
					sent <- err
					return
				}
			}
		}
		sent <- nil
	}()
	var stopSender sync.Once
	defer stopSender.Do(func() { close(signal) }) // also on b.Fatal
	var lat testutil.Latencies
	b.SetBytes(size)
	b.ReportAllocs()
	report := groupCommits(b, srv)
	b.ResetTimer()
	mu.Lock()
	for ; issued < min(inflight, b.N); issued++ {
		next(issued)
	}
	mu.Unlock()
	signal <- struct{}{}
	for done := 0; done < b.N; {
		resp, err := stream.Recv()
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		mu.Lock()
		for _, r := range resp.Results {
			if err := wire.FromResult(r.Code, r.Reason, r.Message); err != nil {
				mu.Unlock()
				b.Fatalf("add %d: %v", r.RequestId, err)
			}
			lat.Add(now.Sub(started[r.RequestId-1]))
			done++
			if issued < b.N {
				next(issued)
				issued++
			}
		}
		mu.Unlock()
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	b.StopTimer()
	report()
	stopSender.Do(func() { close(signal) })
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
	stream.CloseSend()
	b.ReportMetric(float64(b.N)/float64(sends), "adds/msg")
	lat.Report(b)
}
