package standalone

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/bytesize"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.PoisonReleased()
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

// A restart on the same data directory keeps every ledger, even when the
// bookies come back on other ports.
// Both storage designs: Pebble only and the entry log (--entry-log).
func TestRestartKeepsData(t *testing.T) {
	for _, entryLog := range []bool{false, true} {
		t.Run(fmt.Sprintf("entry-log=%v", entryLog), func(t *testing.T) { testRestartKeepsData(t, entryLog) })
	}
}

func testRestartKeepsData(t *testing.T, entryLog bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := testConfig(t, 3)
	cfg.EntryLog = entryLog
	s, err := Start(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := ledger.New(s.Store, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := w.Append(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if logs, _ := filepath.Glob(filepath.Join(cfg.DataDir, "bookie-*", "entries", "*.log")); (len(logs) > 0) != entryLog {
		t.Fatalf("entry log on %v, but its files: %v", entryLog, logs)
	}

	s, err = Start(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer s.Close()
	cl, err = ledger.New(s.Store, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := r.Read(ctx, 0, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if len(e.Payload) != 1 || e.Payload[0] != byte(i) {
			t.Fatalf("entry %d: %v", i, e.Payload)
		}
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string // a part of the error
	}{
		"no data dir":      {func(c *Config) { c.DataDir = "" }, "data directory"},
		"zero bookies":     {func(c *Config) { c.Bookies = 0 }, "bookies 0"},
		"too many bookies": {func(c *Config) { c.Bookies = MaxBookies + 1 }, "bookies 17"},
		"bad metastore":    {func(c *Config) { c.MetastoreListen = "nowhere" }, `--metastore-listen "nowhere": missing port`},
		"bad bookie":       {func(c *Config) { c.BookieListen = "127.0.0.1:65536" }, `--bookie-listen "127.0.0.1:65536": port 65536 is out of range 0..65535`},
		"bad bookie port": {func(c *Config) { c.BookieListen = "127.0.0.1:65535"; c.Bookies = 2 },
			`--bookie-listen "127.0.0.1:65535": bookie 1 would listen on port 65536`},
		"bad broker":     {func(c *Config) { c.BrokerListen = "127.0.0.1:x" }, `--broker-listen "127.0.0.1:x": port "x" is not a number`},
		"bad http":       {func(c *Config) { c.HTTPListen = "" }, `--http "": empty address`},
		"bad advertised": {func(c *Config) { c.AdvertisedAddress = "0.0.0.0" }, `--advertised-address "0.0.0.0": missing port`},
		"small budget":   {func(c *Config) { c.MemoryBudget = 100 << 20 }, "--memory-budget 100MiB: must be in 128MiB..1TiB"},
		"huge budget":    {func(c *Config) { c.MemoryBudget = 2 << 40 }, "--memory-budget 2TiB: must be in 128MiB..1TiB"},
		"budget below the in-flight adds": {func(c *Config) { c.MemoryBudget, c.Bookies, c.MaxEntrySize = 128<<20, 16, 16<<20 },
			"--memory-budget 128MiB is too small for 16 bookies with --max-entry-size 16777216"},
		"no room left": {func(c *Config) { c.MemoryBudget, c.Bookies = 128<<20, 8 },
			"--memory-budget 128MiB is too small for 8 bookies with --max-entry-size 5242880: 120MiB would be configured, over three quarters of it"},
		"a bookie's own checks": {func(c *Config) { c.MaxEntrySize = -1 }, "max entry size -1 must be in 1..67108864"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.BookieListen, c.Bookies = "127.0.0.1:65535", 1
	if err := c.Validate(); err != nil {
		t.Fatalf("one bookie on the last port: %v", err)
	}
}

// The memory budget is shared out in whole MiB among the broker's cache
// and the bookies, leaves room for what has no configured size, and is
// what the started broker and bookies use.
func TestMemoryBudget(t *testing.T) {
	for _, tc := range []struct {
		budget  int64
		bookies int
		want    Budget
	}{
		{512 << 20, 3, Budget{Total: 512 << 20, BrokerCache: 64 << 20, Bookies: 3, Bookie: bookie.Memory{Memtables: 2 * 16 << 20, BlockCache: 8 << 20, InflightPayload: 16 << 20}}},
		{512 << 20, 1, Budget{Total: 512 << 20, BrokerCache: 64 << 20, Bookies: 1, Bookie: bookie.Memory{Memtables: 2 * 48 << 20, BlockCache: 24 << 20, InflightPayload: 48 << 20}}},
		// A memtable is at most 1GiB, as a bookie takes it.
		{11 << 30, 1, Budget{Total: 11 << 30, BrokerCache: 1408 << 20, Bookies: 1, Bookie: bookie.Memory{Memtables: 2 << 30, BlockCache: 528 << 20, InflightPayload: 1056 << 20}}},
		// Two of the largest entries (5 MiB) in flight at least.
		{256 << 20, 4, Budget{Total: 256 << 20, BrokerCache: 32 << 20, Bookies: 4, Bookie: bookie.Memory{Memtables: 2 * 6 << 20, BlockCache: 3 << 20, InflightPayload: 10 << 20}}},
	} {
		c := DefaultConfig()
		c.MemoryBudget, c.Bookies = bytesize.Size(tc.budget), tc.bookies
		got := c.Budget()
		if got != tc.want {
			t.Errorf("%v with %d bookies: %v, want %v", c.MemoryBudget, tc.bookies, got, tc.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%v with %d bookies: %v", c.MemoryBudget, tc.bookies, err)
		}
		if got.Configured() > got.Total/2 && got.Bookie.InflightPayload > 2*int64(c.MaxEntrySize) {
			t.Errorf("%v with %d bookies: %v configured, over half", c.MemoryBudget, tc.bookies, got.Configured())
		}
	}

	c := testConfig(t, 2)
	c.MemoryBudget = 256 << 20
	s, err := Start(context.Background(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := c.Budget()
	if s.Budget != want || s.Broker.Config().CacheSize != want.BrokerCache {
		t.Errorf("broker cache %d, budget %v; want %v", s.Broker.Config().CacheSize, s.Budget, want)
	}
	for _, b := range s.Bookies {
		if got := b.Config().Memory(); got != want.Bookie {
			t.Errorf("bookie %s: %v, want %v", b.ID(), got, want.Bookie)
		}
	}
}

// The standalone's entry log settings reach every bookie.
func TestEntryLogSettingsReachTheBookies(t *testing.T) {
	c := DefaultConfig()
	c.Bookies = 3
	c.EntryLog, c.EntryLogDirectIO = true, false
	c.EntryLogCheckpointBytes, c.EntryLogSyncInterval = 1<<30, 4*time.Millisecond
	c.EntryLogRecycleFiles = 8
	for i := range c.Bookies {
		bc := c.bookieConfig(c.Budget(), i)
		if !bc.EntryLog || bc.EntryLogDirectIO || bc.EntryLogCheckpointBytes != 1<<30 || bc.EntryLogSyncInterval != 4*time.Millisecond || bc.EntryLogRecycleFiles != 8 {
			t.Errorf("bookie %d: entry log %v, direct I/O %v, checkpoint bytes %v, sync interval %v, recycled files %d", i, bc.EntryLog, bc.EntryLogDirectIO, bc.EntryLogCheckpointBytes, bc.EntryLogSyncInterval, bc.EntryLogRecycleFiles)
		}
	}
}

// The standalone sets the broker's replication from its bookie count; it
// does not use the broker's default (2/2/2), which one bookie cannot serve.
func TestReplication(t *testing.T) {
	for n, want := range map[int][3]int{1: {1, 1, 1}, 2: {2, 2, 2}, 3: {3, 3, 2}, 16: {3, 3, 2}} {
		if e, qw, qa := replication(n); [3]int{e, qw, qa} != want {
			t.Errorf("%d bookies: %d/%d/%d, want %v", n, e, qw, qa, want)
		}
	}
}

// With several bookies, standalone runs autorecovery in each: a bookie
// that stops for good has its copies moved to the others. With one there
// is nothing to move to, and none runs.
func TestAutorecoveryWithSeveralBookies(t *testing.T) {
	cfg := testConfig(t, 4)
	cfg.LostBookieRecoveryDelay = 0
	ctx, s := start(t, cfg)
	cl := ledgerClient(t, s)
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 3, WriteQuorum: 3, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := w.Append(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	gone := w.Metadata().Segments[0].Bookies[0]
	for _, b := range s.Bookies {
		if b.Autorecovery() == nil {
			t.Fatalf("bookie %s runs no autorecovery", b.ID())
		}
		if b.ID() == gone {
			b.Close()
		}
	}
	testutil.Eventually(t, time.Minute, "the stopped bookie's copies move", func() bool {
		m, err := cl.Metadata(ctx, w.ID())
		return err == nil && !slices.Contains(m.Segments[0].Bookies, gone)
	})

	one := testConfig(t, 1)
	s1, err := Start(ctx, one, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	if s1.Bookies[0].Autorecovery() != nil {
		t.Fatal("a single bookie runs autorecovery")
	}
}

// The broker is advertised at an address clients can dial: a wildcard
// listen address (a container's 0.0.0.0) becomes 127.0.0.1 with its port.
func TestAdvertised(t *testing.T) {
	for _, c := range []struct{ listen, advertised, want string }{
		{"127.0.0.1:6650", "", ""}, // the broker's own default: its bound address
		{"0.0.0.0:6650", "", "127.0.0.1:6650"},
		{":6650", "", "127.0.0.1:6650"},
		{"[::]:6650", "", "127.0.0.1:6650"},
		{"0.0.0.0:6650", "magnetar.local:16650", "magnetar.local:16650"},
		{"127.0.0.1:0", "", ""},
	} {
		cfg := DefaultConfig()
		cfg.BrokerListen, cfg.AdvertisedAddress = c.listen, c.advertised
		if got := advertised(cfg); got != c.want {
			t.Errorf("advertised(listen %q, advertised %q) = %q, want %q", c.listen, c.advertised, got, c.want)
		}
	}
}

// The standalone process's /readyz (on the broker's HTTP port) covers its
// bookies: one stopped makes the whole process unready, and says which.
func TestReadyzCoversBookies(t *testing.T) {
	cfg := testConfig(t, 2)
	_, s := start(t, cfg)
	addr := s.Broker.HTTPAddr()
	code, r := testutil.Probe(t, addr, "/readyz")
	if code != http.StatusOK || r.Checks["registered"] != "ok" || r.Checks["standalone-bookie-1/registered"] != "ok" || r.Checks["standalone-bookie-0/storage"] != "ok" {
		t.Fatalf("/readyz: %d %+v", code, r)
	}
	if err := s.Bookies[1].Close(); err != nil {
		t.Fatal(err)
	}
	code, r = testutil.Probe(t, addr, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(r.Reason, "standalone-bookie-1/") {
		t.Fatalf("/readyz with a bookie stopped: %d %+v", code, r)
	}
}

// The admin port's /metrics covers the bookies too, each labelled with
// its id, under BookKeeper's names; the runtime's metrics appear once.
func TestMetricsCoverBookies(t *testing.T) {
	cfg := testConfig(t, 2)
	ctx, s := start(t, cfg)
	cl := ledgerClient(t, s)
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 2, WriteQuorum: 2, AckQuorum: 2})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for i := 0; i < n; i++ {
		if _, err := w.Append(ctx, []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Open(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, n-1); err != nil {
		t.Fatal(err)
	}
	addr := s.Broker.HTTPAddr()
	m := testutil.Scrape(t, addr)
	reads := 0.0
	for _, b := range s.Bookies {
		l := []string{"bookie", b.ID()}
		m.Want(t, n, "bookkeeper_server_ADD_ENTRY_REQUEST", append(l, "success", "true")...)
		m.Want(t, n, "bookkeeper_server_ADD_ENTRY", append(l, "success", "true")...)
		m.Want(t, 10*n, "bookie_WRITE_BYTES", l...)
		m.Want(t, 1, "bookie_SERVER_STATUS", l...)
		m.Want(t, 1, "magnetar_bookie_state", append(l, "state", "writable")...)
		m.Want(t, 0, "magnetar_bookie_state", append(l, "state", "draining")...)
		// The group commit's parts: every add went through the syncer
		// (other writes, of a last-add-confirmed, may too), which wrote
		// and synced the entry log at least once.
		for name, least := range map[string]float64{"bookie_journal_JOURNAL_ADD_ENTRY": n, "bookie_journal_JOURNAL_FORCE_WRITE_ENQUEUE": 1,
			"bookie_journal_JOURNAL_FLUSH_LATENCY": 1, "bookie_journal_JOURNAL_SYNC": 1} {
			if v, _ := m.Value(t, name, append(l, "success", "true")...); v < least {
				t.Errorf("bookie %s: %s counted %v, want at least %v", b.ID(), name, v, least)
			}
		}
		v, _ := m.Value(t, "bookkeeper_server_READ_ENTRY_REQUEST", append(l, "success", "true")...)
		reads += v
	}
	if reads < n {
		t.Errorf("%v reads counted, want at least %d", reads, n)
	}
	if _, ok := m.Value(t, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics")
	}
	// One of the two autorecovery instances audits.
	testutil.Eventually(t, time.Minute, "an auditor", func() bool {
		m := testutil.Scrape(t, addr)
		auditors := 0.0
		for _, b := range s.Bookies {
			v, _ := m.Value(t, "magnetar_autorecovery_auditor", "bookie", b.ID())
			auditors += v
		}
		_, marks := m.Value(t, "magnetar_autorecovery_under_replicated_marks")
		return auditors == 1 && marks
	})
}

// The broker hands its adds to the bookies of its process by function
// calls (--local-bookies, the default), or sends them over gRPC as a
// cluster's broker does; messages are stored and read back either way.
func TestLocalBookies(t *testing.T) {
	for _, local := range []bool{true, false} {
		t.Run(fmt.Sprintf("local-bookies=%v", local), func(t *testing.T) {
			cfg := testConfig(t, 2)
			cfg.LocalBookies = local
			ctx, s := start(t, cfg)
			cl := sdkClient(t, s, client.ClientOptions{})
			p, err := cl.CreateProducer(client.ProducerOptions{Topic: "t"})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			const n = 20
			for i := 0; i < n; i++ {
				if _, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte(fmt.Sprint(i))}); err != nil {
					t.Fatal(err)
				}
			}
			// Read back from the bookies: a reader on a new subscription
			// after the topic's unload (no cache).
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+s.Broker.HTTPAddr()+"/admin/v2/persistent/public/default/t/unload", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("unload: %s", resp.Status)
			}
			r, err := cl.CreateReader(client.ReaderOptions{Topic: "t", StartMessageID: client.EarliestMessageID()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i := 0; i < n; i++ {
				m, err := r.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(m.Payload()) != fmt.Sprint(i) {
					t.Fatalf("message %d read back as %q", i, m.Payload())
				}
			}
			m := testutil.Scrape(t, s.Broker.HTTPAddr())
			want, other := "local", "grpc"
			if !local {
				want, other = other, want
			}
			for _, b := range s.Bookies {
				if v, _ := m.Value(t, "magnetar_bookie_add_streams_total", "bookie", b.ID(), "transport", want); v == 0 {
					t.Errorf("bookie %s: no %s add stream", b.ID(), want)
				}
				m.Want(t, 0, "magnetar_bookie_add_streams_total", "bookie", b.ID(), "transport", other)
			}
		})
	}
}

// start starts a standalone, closed when the test ends, and returns it
// with a context that bounds the test.
func start(t *testing.T, cfg Config) (context.Context, *Standalone) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := Start(ctx, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ctx, s
}

// ledgerClient is a ledger client on s's metadata, closed when the test
// ends.
func ledgerClient(t *testing.T, s *Standalone) *ledger.Client {
	t.Helper()
	cl, err := ledger.New(s.Store, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// sdkClient is an SDK client of s's broker with opts (URL filled in),
// closed when the test ends.
func sdkClient(t *testing.T, s *Standalone, opts client.ClientOptions) client.Client {
	t.Helper()
	opts.URL = "magnetar://" + s.Broker.Addr()
	cl, err := client.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// testConfig is a standalone of n bookies on free ports, with its data in
// the test's directory.
func testConfig(t *testing.T, n int) Config {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Bookies = n
	cfg.MetastoreListen, cfg.BookieListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.BrokerListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	return cfg
}
