package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/bufpool"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// As in the magnetar binary: gRPC's buffers are not cleared (the
// benchmarks measure what the binary does).
func init() { bufpool.Install() }

func TestMain(m *testing.M) {
	testutil.PoisonReleased()
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type env struct {
	etcd  *metastore.Embedded
	store *metastore.Store
}

func newEnv(t *testing.T) *env {
	e := testutil.StartEtcd(t)
	return &env{etcd: e, store: testutil.OpenStore(t, e.Endpoints(), "/magnetar")}
}

func (e *env) config(dir string) bookie.Config {
	cfg := bookie.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.Metastore = e.etcd.Endpoints()
	cfg.RegistrationInterval = 100 * time.Millisecond
	cfg.GCInterval = time.Hour
	return cfg
}

func (e *env) start(t *testing.T, cfg bookie.Config) *bookie.Server {
	t.Helper()
	s, err := bookie.Start(ctxT(t), cfg, bookie.WithStore(e.store), bookie.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatalf("start bookie: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t testing.TB, addr string) bookiepb.BookieClient {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithWriteBufferSize(512<<10), grpc.WithReadBufferSize(512<<10),
		grpc.WithInitialWindowSize(8<<20), grpc.WithInitialConnWindowSize(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return bookiepb.NewBookieClient(conn)
}

var key = []byte("secret")

func addReq(ledger, entry int64, payload []byte) *bookiepb.AddEntryRequest {
	lac, length := entry-1, (entry+1)*int64(len(payload))
	return &bookiepb.AddEntryRequest{
		LedgerId: ledger, EntryId: entry, MasterKey: key, LastAddConfirmed: lac, Length: length,
		Payload: payload, Crc32C: wire.Checksum(ledger, entry, lac, length, payload),
	}
}

func TestAddReadFenceOverGRPC(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, e.config(t.TempDir()))
	c := dial(t, s.Addr())
	ctx := ctxT(t)
	for i := int64(0); i < 5; i++ {
		if _, err := c.AddEntry(ctx, addReq(1, i, []byte("hello"))); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 3})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Payload) != "hello" || r.LastAddConfirmed != 2 || r.Length != 20 || r.BookieLastAddConfirmed != 3 ||
		r.Crc32C != wire.Checksum(1, 3, 2, 20, []byte("hello")) {
		t.Fatalf("read back %+v", r)
	}
	lac, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: 1})
	if err != nil || lac.LastAddConfirmed != 3 || lac.LastEntryId != 4 || lac.Fenced {
		t.Fatalf("read LAC: %+v %v", lac, err)
	}
	// Long poll: answered once an add carries a newer LAC.
	got := make(chan *bookiepb.ReadLACResponse, 1)
	go func() {
		r, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: 1, LongPoll: true, PreviousLac: 3, TimeoutMs: 30000})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	if _, err := c.AddEntry(ctx, addReq(1, 5, []byte("hello"))); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r == nil || r.LastAddConfirmed != 4 {
		t.Fatalf("long poll answered %+v", r)
	}
	// A recovery read fences: the next normal add is refused.
	if _, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 5, Fence: true, MasterKey: key}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AddEntry(ctx, addReq(1, 6, []byte("late")))
	wantStatus(t, err, codes.FailedPrecondition, "LEDGER_FENCED")
	req := addReq(1, 6, []byte("late"))
	req.Recovery = true
	if _, err := c.AddEntry(ctx, req); err != nil {
		t.Fatalf("recovery add: %v", err)
	}
	if _, err := c.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: 1, MasterKey: key, LastAddConfirmed: 6}); err != nil {
		t.Fatal(err)
	}
	f, err := c.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 1, MasterKey: key})
	if err != nil || f.LastAddConfirmed != 6 || f.LastEntryId != 6 {
		t.Fatalf("fence: %+v %v", f, err)
	}
	// The writers' path, the AddEntries stream, keeps the fence too: a
	// normal add is refused, a recovery add taken.
	stream, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	late, recovery := addReq(1, 7, []byte("late")), addReq(1, 7, []byte("late"))
	late.RequestId, recovery.RequestId, recovery.Recovery = 1, 2, true
	for _, r := range []*bookiepb.AddEntryRequest{late, recovery} {
		if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{r}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		res := resp.Results[0]
		switch {
		case res.RequestId != r.RequestId:
			t.Fatalf("answer to request %d; want %d", res.RequestId, r.RequestId)
		case !r.Recovery && res.Reason != "LEDGER_FENCED":
			t.Fatalf("a normal add to a fenced ledger over the stream: %+v; want LEDGER_FENCED", res)
		case r.Recovery && res.Code != 0:
			t.Fatalf("a recovery add over the stream: %+v", res)
		}
	}
	stream.CloseSend()
}

func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("got %v, want status %v", err, code)
	}
	if st.Code() != code {
		t.Fatalf("got %v (%s), want code %v", st.Code(), st.Message(), code)
	}
	if reason == "" {
		return
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Reason == reason && info.Domain == wire.Domain {
			if st.Message() == "" {
				t.Fatal("status without a message")
			}
			return
		}
	}
	t.Fatalf("status %v %q lacks reason %s", st.Code(), st.Message(), reason)
}

func TestBadInputGetsClearStatus(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t.TempDir())
	cfg.MaxEntrySize = 1000
	s := e.start(t, cfg)
	c := dial(t, s.Addr())
	ctx := ctxT(t)
	if _, err := c.AddEntry(ctx, addReq(1, 0, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	corrupt := addReq(1, 1, []byte("payload"))
	corrupt.Payload[0] ^= 1
	wrongKey := addReq(1, 1, []byte("x"))
	wrongKey.MasterKey = []byte("other")
	noKey := addReq(1, 1, []byte("x"))
	noKey.MasterKey = nil
	for _, tc := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"wrong master key", func() error { _, err := c.AddEntry(ctx, wrongKey); return err }, codes.PermissionDenied, "BAD_MASTER_KEY"},
		{"missing master key", func() error { _, err := c.AddEntry(ctx, noKey); return err }, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"entry too large", func() error { _, err := c.AddEntry(ctx, addReq(1, 1, make([]byte, 1001))); return err }, codes.InvalidArgument, "ENTRY_TOO_LARGE"},
		{"message over the gRPC limit", func() error { _, err := c.AddEntry(ctx, addReq(1, 1, make([]byte, 2<<20))); return err }, codes.ResourceExhausted, ""},
		{"bad checksum", func() error { _, err := c.AddEntry(ctx, corrupt); return err }, codes.DataLoss, "BAD_CHECKSUM"},
		{"zero ledger id", func() error { _, err := c.AddEntry(ctx, addReq(0, 1, []byte("x"))); return err }, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"negative entry id", func() error {
			_, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: -1})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"unknown ledger", func() error {
			_, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 99, EntryId: 0})
			return err
		}, codes.NotFound, "NO_SUCH_LEDGER"},
		{"entry past the LAC", func() error {
			_, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 7})
			return err
		}, codes.NotFound, "NO_SUCH_ENTRY"},
		{"LAC of unknown ledger", func() error { _, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: 99}); return err }, codes.NotFound, "NO_SUCH_LEDGER"},
		{"fence with wrong key", func() error {
			_, err := c.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 1, MasterKey: []byte("other")})
			return err
		}, codes.PermissionDenied, "BAD_MASTER_KEY"},
		{"fencing read without key", func() error {
			_, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0, Fence: true})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"negative LAC", func() error {
			_, err := c.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: 1, MasterKey: key, LastAddConfirmed: -7})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.call(), tc.code, tc.reason) })
	}
	// The message says what was wrong.
	_, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 7})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "entry 7") || !strings.Contains(msg, "last add confirmed -1") {
		t.Fatalf("message %q does not name the entry and the LAC", msg)
	}
	// And the client side maps it back to the sentinel.
	if !errors.Is(wire.FromStatus(err), wire.ErrNoSuchEntry) {
		t.Fatalf("FromStatus(%v) does not match ErrNoSuchEntry", err)
	}
}

func TestRegistration(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, e.config(t.TempDir()))
	ctx := ctxT(t)
	c := dial(t, s.Addr())
	for i := int64(0); i < 20; i++ {
		if _, err := c.AddEntry(ctx, addReq(int64(1+i%3), i/3, []byte("data"))); err != nil {
			t.Fatal(err)
		}
	}
	var info metapb.BookieInfo
	testutil.Eventually(t, 10*time.Second, "registration to report the ledgers", func() bool {
		kv, err := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID()))
		if err != nil || proto.Unmarshal(kv.Value, &info) != nil {
			return false
		}
		return info.LedgerCount == 3
	})
	if info.Address != s.ID() || info.FreeDiskBytes == 0 || info.TotalDiskBytes < info.FreeDiskBytes || info.InstanceId == "" {
		t.Fatalf("registration: %+v", &info)
	}
	kv, _ := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID()))
	if kv.Lease == 0 {
		t.Fatal("registration is not bound to a lease")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID())); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("registration after a clean stop: %v", err)
	}
	// The cookie stays.
	if _, err := e.store.Get(ctx, metastore.BookieCookieKey(s.ID())); err != nil {
		t.Fatalf("cookie: %v", err)
	}
}

// Re-registers after the session is lost (the lease revoked behind its
// back), without a restart.
func TestRegistersAgainAfterSessionLoss(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, e.config(t.TempDir()))
	ctx := ctxT(t)
	kv, err := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Client().Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "a new registration on a new lease", func() bool {
		kv2, err := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID()))
		return err == nil && kv2.Lease != kv.Lease
	})
}

func TestCookie(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	cfg := e.config(dir)
	cfg.AdvertisedAddress = "bookie-a.test:3181" // the id; the test dials Addr()
	s := e.start(t, cfg)
	c := dial(t, s.Addr())
	if _, err := c.AddEntry(ctxT(t), addReq(1, 0, []byte("acked"))); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Same directory, same address: fine, and the data is there.
	s = e.start(t, cfg)
	if _, err := dial(t, s.Addr()).ReadEntry(ctxT(t), &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Wiped directory: refused, it would deny having acknowledged entries.
	wiped := cfg
	wiped.DataDir = t.TempDir()
	_, err := bookie.Start(ctxT(t), wiped, bookie.WithStore(e.store))
	if err == nil || !strings.Contains(err.Error(), "data is lost") {
		t.Fatalf("start on a wiped directory: %v", err)
	}
	// The directory of one bookie under another address: refused.
	moved := cfg
	moved.AdvertisedAddress = "bookie-b.test:3181"
	_, err = bookie.Start(ctxT(t), moved, bookie.WithStore(e.store))
	if err == nil || !strings.Contains(err.Error(), "belongs to bookie") {
		t.Fatalf("start with another bookie's directory: %v", err)
	}
}

func TestGarbageCollection(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t.TempDir())
	cfg.GCInterval = 50 * time.Millisecond
	s := e.start(t, cfg)
	c := dial(t, s.Addr())
	ctx := ctxT(t)
	// Ledger 1 and 3 have metadata, ledger 2 never had (deleted).
	for _, l := range []int64{1, 3} {
		if _, err := e.store.Put(ctx, metastore.LedgerKey(l), []byte("meta")); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []int64{1, 2, 3} {
		if _, err := c.AddEntry(ctx, addReq(l, 0, bytes.Repeat([]byte{1}, 100))); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(l int64) bool {
		_, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: l})
		return status.Code(err) == codes.NotFound
	}
	testutil.Eventually(t, 30*time.Second, "ledger 2 to be collected", func() bool { return gone(2) })
	if gone(1) || gone(3) {
		t.Fatal("GC deleted a ledger that has metadata")
	}
	if err := e.store.Delete(ctx, metastore.LedgerKey(3)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "ledger 3 to be collected", func() bool { return gone(3) })
	if gone(1) {
		t.Fatal("GC deleted ledger 1")
	}
}

func TestConfigValidate(t *testing.T) {
	good := bookie.DefaultConfig()
	good.Metastore = []string{"127.0.0.1:2379", "http://etcd-1.example:2379"}
	good.AdvertisedAddress = "bookie-0.example:3181"
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mod  func(*bookie.Config)
		want string // a part of the error
	}{
		"bad listen":            {func(c *bookie.Config) { c.Listen = "nowhere" }, `--listen "nowhere": missing port`},
		"listen port too big":   {func(c *bookie.Config) { c.Listen = "127.0.0.1:65536" }, `--listen "127.0.0.1:65536": port 65536 is out of range 0..65535`},
		"bad advertised":        {func(c *bookie.Config) { c.AdvertisedAddress = "x" }, `--advertised-address "x": missing port`},
		"advertised port 0":     {func(c *bookie.Config) { c.AdvertisedAddress = "x:0" }, `--advertised-address "x:0": port 0 is out of range 1..65535`},
		"advertised no host":    {func(c *bookie.Config) { c.AdvertisedAddress = ":3181" }, `--advertised-address ":3181": missing host`},
		"metastore no port":     {func(c *bookie.Config) { c.Metastore = []string{"127.0.0.1:2379", "etcd-1"} }, `--metastore "etcd-1": missing port`},
		"metastore URL no port": {func(c *bookie.Config) { c.Metastore = []string{"http://etcd-1"} }, `--metastore "http://etcd-1": missing port`},
		"no data dir":           {func(c *bookie.Config) { c.DataDir = "" }, "data directory"},
		"no metastore":          {func(c *bookie.Config) { c.Metastore = nil }, "--metastore"},
		"zero max entry":        {func(c *bookie.Config) { c.MaxEntrySize = 0 }, "max entry size"},
		"huge max entry":        {func(c *bookie.Config) { c.MaxEntrySize = 1 << 30 }, "max entry size"},
		"short session":         {func(c *bookie.Config) { c.SessionTTL = time.Millisecond }, "session TTL"},
		"zero registration":     {func(c *bookie.Config) { c.RegistrationInterval = 0 }, "registration interval"},
		"negative gc period":    {func(c *bookie.Config) { c.GCInterval = -time.Second }, "gc interval"},
		"zero disk threshold":   {func(c *bookie.Config) { c.DiskUsageThreshold = 0 }, "--disk-usage-threshold 0 must be in (0, 1]"},
		"disk threshold over 1": {func(c *bookie.Config) { c.DiskUsageThreshold = 1.5 }, "--disk-usage-threshold 1.5 must be in (0, 1]"},
		"negative low":          {func(c *bookie.Config) { c.DiskUsageLowThreshold = -0.1 }, "--disk-usage-low-threshold -0.1 must be in (0, 1]"},
		"low not below high": {func(c *bookie.Config) { c.DiskUsageThreshold, c.DiskUsageLowThreshold = 0.8, 0.8 },
			"--disk-usage-low-threshold 0.8 must be below --disk-usage-threshold 0.8"},
		"zero disk check":   {func(c *bookie.Config) { c.DiskCheckInterval = 0 }, "--disk-check-interval 0s must be positive"},
		"rack with a space": {func(c *bookie.Config) { c.Rack = "rack 1" }, `--rack "rack 1": contains ' '`},
		"long host label":   {func(c *bookie.Config) { c.HostLabel = strings.Repeat("h", 256) }, "--host-label"},
	} {
		c := good
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
	}
}

// Close does not wait for clients to end their add streams: the streams are
// ended by the bookie once the adds they carried are answered.
func TestCloseEndsAddStreams(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, e.config(t.TempDir()))
	c := dial(t, s.Addr())
	ctx := ctxT(t)
	stream, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := addReq(1, 0, []byte("x"))
	req.RequestId = 7
	if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{req}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.Results) != 1 || resp.Results[0].RequestId != 7 || resp.Results[0].Code != 0 {
		t.Fatalf("result: %+v %v", resp, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(4 * time.Second): // the grace period for unary calls is 5s
		t.Fatal("Close waited for the client's open add stream")
	}
	if _, err := stream.Recv(); err == nil {
		t.Fatal("stream still open after Close")
	}
}

// Every add on a stream is answered with its own request id, and gives its
// bytes back to the bookie's budget whatever its outcome: stored, refused
// by the bookie's checks (bad checksum, too large) or by the storage (a
// fenced ledger). The budget here holds two adds, and the stream makes
// many times that: an outcome that kept its bytes would stall the stream.
func TestStreamAddsReturnTheirBudgetOnEveryOutcome(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t.TempDir())
	const size = 1 << 10
	cfg.MaxEntrySize = 2 * size
	cfg.MaxInflightBytes = 2 * size
	s := e.start(t, cfg)
	c := dial(t, s.Addr())
	// A stalled stream fails the test here, well before the package's
	// timeout (a healthy run takes about a second).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	payload := bytes.Repeat([]byte("p"), size)
	if _, err := c.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 2, MasterKey: key}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.AddEntries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	want := map[uint64]string{} // request id: the reason expected ("" for success)
	var next int64
	id := uint64(0)
	for range rounds {
		var batch []*bookiepb.AddEntryRequest
		ok := addReq(1, next, payload)
		next++
		bad := addReq(1, next, payload)
		bad.Crc32C++
		large := addReq(1, next, bytes.Repeat([]byte("l"), 2*size+1))
		fenced := addReq(2, 0, payload)
		for _, r := range []struct {
			req    *bookiepb.AddEntryRequest
			reason string
		}{{ok, ""}, {bad, "BAD_CHECKSUM"}, {large, "ENTRY_TOO_LARGE"}, {fenced, "LEDGER_FENCED"}} {
			id++
			r.req.RequestId = id
			want[id] = r.reason
			batch = append(batch, r.req)
		}
		if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: batch}); err != nil {
			t.Fatal(err)
		}
	}
	for len(want) > 0 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%d adds unanswered: %v", len(want), err)
		}
		for _, r := range resp.Results {
			reason, ok := want[r.RequestId]
			switch {
			case !ok:
				t.Fatalf("result for request %d, not asked or answered twice: %+v", r.RequestId, r)
			case reason == "" && r.Code != 0:
				t.Fatalf("request %d: %+v, want success", r.RequestId, r)
			case reason != "" && (r.Reason != reason || r.Message == ""):
				t.Fatalf("request %d: %+v, want reason %s with a message", r.RequestId, r, reason)
			}
			delete(want, r.RequestId)
		}
	}
	stream.CloseSend()
	got, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: rounds - 1})
	if err != nil || !bytes.Equal(got.Payload, payload) {
		t.Fatalf("last stored entry: %q, %v; want %d bytes of %q", got.GetPayload(), err, size, "p")
	}
}
