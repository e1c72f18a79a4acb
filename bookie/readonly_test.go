package bookie_test

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// fakeDisk is a disk whose usage the test sets, in per mille of 1000 MiB.
type fakeDisk struct {
	used  atomic.Int64
	calls atomic.Int64 // measures taken
}

func (d *fakeDisk) usage(string) (bookie.DiskUsage, error) {
	d.calls.Add(1)
	u := uint64(d.used.Load())
	return bookie.DiskUsage{Total: 1000 << 20, Used: u << 20, Avail: (1000 - u) << 20}, nil
}

// waitMeasures waits until the bookie has measured the disk twice more:
// the second measure started after the first was acted upon.
func (d *fakeDisk) waitMeasures(t *testing.T) {
	t.Helper()
	n := d.calls.Load() + 2
	testutil.Eventually(t, 10*time.Second, "two more disk measures", func() bool { return d.calls.Load() >= n })
}

func (e *env) startWith(t *testing.T, cfg bookie.Config, opts ...bookie.Option) *bookie.Server {
	t.Helper()
	opts = append([]bookie.Option{bookie.WithStore(e.store), bookie.WithLogger(zaptest.NewLogger(t))}, opts...)
	s, err := bookie.Start(ctxT(t), cfg, opts...)
	if err != nil {
		t.Fatalf("start bookie: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitRegistration waits (on a watch) until the bookie's registration
// satisfies cond and returns it.
func (e *env) waitRegistration(t *testing.T, id, what string, cond func(*metapb.BookieInfo) bool) *metapb.BookieInfo {
	t.Helper()
	var info metapb.BookieInfo
	testutil.WaitKey(t, e.store, metastore.BookieAvailableKey(id), 30*time.Second, what, func(kv metastore.KV, found bool) bool {
		return found && proto.Unmarshal(kv.Value, &info) == nil && cond(&info)
	})
	return &info
}

func readOnlyAs(reasons ...string) func(*metapb.BookieInfo) bool {
	return func(i *metapb.BookieInfo) bool {
		return i.ReadOnly == (len(reasons) > 0) && slices.Equal(i.ReadOnlyReasons, reasons)
	}
}

// addOnStream makes one add on an AddEntries stream and returns its result
// as an error.
func addOnStream(t *testing.T, c bookiepb.BookieClient, req *bookiepb.AddEntryRequest) error {
	t.Helper()
	stream, err := c.AddEntries(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	req.RequestId = 1
	if err := stream.Send(&bookiepb.AddEntriesRequest{Entries: []*bookiepb.AddEntryRequest{req}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.Results) != 1 {
		t.Fatalf("stream result: %+v %v", resp, err)
	}
	r := resp.Results[0]
	return wire.FromResult(r.Code, r.Reason, r.Message)
}

// Above the disk usage threshold the bookie registers read-only and
// refuses normal adds with BOOKIE_READ_ONLY (unary and on streams), while
// recovery adds, fences, explicit LACs and reads go on; between the two
// thresholds nothing changes; below the low one it is writable again.
// Other reasons (as decommissioning sets) combine with the disk's.
func TestReadOnlyAboveDiskUsageThreshold(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t.TempDir())
	cfg.DiskCheckInterval = 5 * time.Millisecond
	cfg.Rack, cfg.HostLabel = "rack-1", "host-a"
	disk := &fakeDisk{}
	disk.used.Store(500)
	s := e.startWith(t, cfg, bookie.WithDiskUsage(disk.usage))
	c := dial(t, s.Addr())
	ctx := ctxT(t)

	info := e.waitRegistration(t, s.ID(), "a writable registration with labels", func(i *metapb.BookieInfo) bool {
		return !i.ReadOnly && i.FreeDiskBytes == 500<<20 && i.TotalDiskBytes == 1000<<20
	})
	if info.Rack != "rack-1" || info.HostLabel != "host-a" || len(info.ReadOnlyReasons) != 0 {
		t.Fatalf("registration %+v", info)
	}
	for i := int64(0); i < 3; i++ {
		if _, err := c.AddEntry(ctx, addReq(1, i, []byte("before"))); err != nil {
			t.Fatal(err)
		}
	}

	disk.used.Store(950)
	info = e.waitRegistration(t, s.ID(), "a read-only registration", readOnlyAs(bookie.ReadOnlyDisk))
	if info.FreeDiskBytes != 50<<20 {
		t.Fatalf("free disk %d in the registration", info.FreeDiskBytes)
	}
	if got := s.ReadOnly(); !slices.Equal(got, []string{bookie.ReadOnlyDisk}) {
		t.Fatalf("ReadOnly() = %v", got)
	}
	_, err := c.AddEntry(ctx, addReq(1, 3, []byte("refused")))
	wantStatus(t, err, codes.FailedPrecondition, "BOOKIE_READ_ONLY")
	if !errors.Is(wire.FromStatus(err), wire.ErrReadOnly) {
		t.Fatalf("FromStatus(%v) does not match ErrReadOnly", err)
	}
	if err := addOnStream(t, c, addReq(1, 3, []byte("refused"))); !errors.Is(err, wire.ErrReadOnly) || wire.Reason(err) != "BOOKIE_READ_ONLY" {
		t.Fatalf("normal add on a stream: %v", err)
	}
	// A bad request is still told what is wrong with it.
	_, err = c.AddEntry(ctx, addReq(0, 3, []byte("bad")))
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	rec := addReq(1, 3, []byte("recovered"))
	rec.Recovery = true
	if _, err := c.AddEntry(ctx, rec); err != nil {
		t.Fatalf("recovery add on a read-only bookie: %v", err)
	}
	rec = addReq(1, 4, []byte("recovered"))
	rec.Recovery = true
	if err := addOnStream(t, c, rec); err != nil {
		t.Fatalf("recovery add on a stream of a read-only bookie: %v", err)
	}
	if r, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 3}); err != nil || string(r.Payload) != "recovered" {
		t.Fatalf("read from a read-only bookie: %+v %v", r, err)
	}
	if _, err := c.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: 1, MasterKey: key, LastAddConfirmed: 4}); err != nil {
		t.Fatalf("explicit LAC on a read-only bookie: %v", err)
	}
	if _, err := c.Fence(ctx, &bookiepb.FenceRequest{LedgerId: 2, MasterKey: key}); err != nil {
		t.Fatalf("fence on a read-only bookie: %v", err)
	}

	// Between the thresholds: still read-only.
	disk.used.Store(880)
	disk.waitMeasures(t)
	if got := s.ReadOnly(); !slices.Equal(got, []string{bookie.ReadOnlyDisk}) {
		t.Fatalf("read-only reasons at 88%%: %v", got)
	}
	_, err = c.AddEntry(ctx, addReq(3, 0, []byte("refused")))
	wantStatus(t, err, codes.FailedPrecondition, "BOOKIE_READ_ONLY")

	// Another reason on top: both are listed; the disk's clearing leaves
	// the other.
	s.SetReadOnly("draining", true)
	e.waitRegistration(t, s.ID(), "two reasons", readOnlyAs(bookie.ReadOnlyDisk, "draining"))
	disk.used.Store(800)
	e.waitRegistration(t, s.ID(), "the disk reason cleared", readOnlyAs("draining"))
	_, err = c.AddEntry(ctx, addReq(3, 0, []byte("refused")))
	wantStatus(t, err, codes.FailedPrecondition, "BOOKIE_READ_ONLY")
	if msg := err.Error(); !strings.Contains(msg, "draining") {
		t.Fatalf("refusal %q does not say why", msg)
	}
	s.SetReadOnly("draining", false)
	e.waitRegistration(t, s.ID(), "a writable registration again", readOnlyAs())
	if got := s.ReadOnly(); len(got) != 0 {
		t.Fatalf("ReadOnly() = %v once writable", got)
	}
	if _, err := c.AddEntry(ctx, addReq(3, 0, []byte("accepted"))); err != nil {
		t.Fatalf("add once writable again: %v", err)
	}
}

// A bookie that starts on a disk above the threshold registers read-only
// from the start.
func TestStartsReadOnlyOnAFullDisk(t *testing.T) {
	e := newEnv(t)
	disk := &fakeDisk{}
	disk.used.Store(990)
	s := e.startWith(t, e.config(t.TempDir()), bookie.WithDiskUsage(disk.usage))
	kv, err := e.store.Get(ctxT(t), metastore.BookieAvailableKey(s.ID()))
	if err != nil {
		t.Fatal(err)
	}
	var info metapb.BookieInfo
	if err := proto.Unmarshal(kv.Value, &info); err != nil || !readOnlyAs(bookie.ReadOnlyDisk)(&info) {
		t.Fatalf("first registration: %+v %v", &info, err)
	}
}

// A write that fails with ENOSPC makes the bookie read-only ("no-space"):
// the add is refused with BOOKIE_READ_ONLY, not STORAGE_FAILED; the bookie
// stays registered, on the same lease, and serves reads; every later add
// is refused the same way, recovery adds included, since its storage takes
// no more writes until restarted.
func TestNoSpaceMakesReadOnlyNotUnregistered(t *testing.T) {
	e := newEnv(t)
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	}))
	s := e.startWith(t, e.config(t.TempDir()), bookie.WithFS(fs))
	c := dial(t, s.Addr())
	ctx := ctxT(t)
	if _, err := c.AddEntry(ctx, addReq(1, 0, []byte("kept"))); err != nil {
		t.Fatal(err)
	}
	before, err := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID()))
	if err != nil {
		t.Fatal(err)
	}

	full.Store(true)
	_, err = c.AddEntry(ctx, addReq(1, 1, []byte("no room")))
	wantStatus(t, err, codes.FailedPrecondition, "BOOKIE_READ_ONLY")
	e.waitRegistration(t, s.ID(), "a read-only registration", readOnlyAs(bookie.ReadOnlyNoSpace))
	after, err := e.store.Get(ctx, metastore.BookieAvailableKey(s.ID()))
	if err != nil || after.Lease != before.Lease {
		t.Fatalf("registration after ENOSPC: %+v %v (lease before %d)", after, err, before.Lease)
	}
	full.Store(false)
	if r, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0}); err != nil || string(r.Payload) != "kept" {
		t.Fatalf("read after ENOSPC: %+v %v", r, err)
	}
	if _, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: 1}); err != nil {
		t.Fatalf("read LAC after ENOSPC: %v", err)
	}
	_, err = c.AddEntry(ctx, addReq(1, 1, []byte("again")))
	wantStatus(t, err, codes.FailedPrecondition, "BOOKIE_READ_ONLY")
	rec := addReq(2, 0, []byte("recovery"))
	rec.Recovery = true
	_, err = c.AddEntry(ctx, rec)
	wantStatus(t, err, codes.FailedPrecondition, "BOOKIE_READ_ONLY")
	if got := s.ReadOnly(); !slices.Equal(got, []string{bookie.ReadOnlyNoSpace}) {
		t.Fatalf("ReadOnly() = %v", got)
	}
}
