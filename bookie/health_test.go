package bookie_test

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"google.golang.org/grpc/codes"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// The bookie's HTTP port answers the probes: ready while registered under
// its session, whatever its state (writable, read-only and draining
// bookies all serve reads; the body says which); not ready while its
// registration is gone; not live once its storage failed (a restart after
// fixing the disk is the remedy).
func TestBookieHealthEndpoints(t *testing.T) {
	e := newEnv(t)
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && strings.HasSuffix(op.Path, ".log") && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) {
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.EIO}
		}
		return nil
	}))
	cfg := e.config(t.TempDir())
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.RegistrationInterval = time.Hour // the test decides when it registers again
	s := e.startWith(t, cfg, bookie.WithFS(fs))
	addr := s.HTTPAddr()
	if addr == "" {
		t.Fatal("no HTTP address with --http set")
	}

	if code, r := testutil.Probe(t, addr, "/readyz"); code != http.StatusOK || r.Status != "ready" || r.Checks["registered"] != "ok" || r.Info["state"] != "writable" {
		t.Fatalf("/readyz of a fresh bookie: %d %+v", code, r)
	}
	if code, r := testutil.Probe(t, addr, "/healthz"); code != http.StatusOK || r.Checks["storage"] != "ok" {
		t.Fatalf("/healthz: %d %+v", code, r)
	}

	s.SetReadOnly("test", true)
	if code, r := testutil.Probe(t, addr, "/readyz"); code != http.StatusOK || r.Info["state"] != "read-only" {
		t.Fatalf("/readyz of a read-only bookie: %d %+v", code, r)
	}
	s.SetReadOnly("test", false)
	// Published: no refresh is pending (the interval is an hour).
	e.waitRegistration(t, s.ID(), "writable again", func(i *metapb.BookieInfo) bool { return !i.ReadOnly })

	// The registration gone (an operator's mistake, a compaction of
	// another cluster's keys): not ready.
	// A refresh woken by the read-only changes may still be pending: delete
	// again until the key stays gone.
	var code int
	var r health.Response
	testutil.Eventually(t, 30*time.Second, "the registration gone", func() bool {
		if err := e.store.Delete(ctxT(t), metastore.BookieAvailableKey(s.ID())); err != nil {
			t.Fatal(err)
		}
		code, r = testutil.Probe(t, addr, "/readyz")
		return code != http.StatusOK
	})
	if code != http.StatusServiceUnavailable || r.Code != "NOT_READY" || !strings.HasPrefix(r.Reason, "registered: ") {
		t.Fatalf("/readyz without a registration: %d %+v", code, r)
	}
	// Still live: a restart would not help.
	if code, _ := testutil.Probe(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz without a registration: %d", code)
	}
	s.SetReadOnly("test", true) // wakes the registration loop: it publishes again
	testutil.WaitProbe(t, addr, "/readyz", http.StatusOK, 30*time.Second)
	s.SetReadOnly("test", false)

	// The storage fails: not live, not ready, and the reason says why.
	failing.Store(true)
	c := dial(t, s.Addr())
	_, err := c.AddEntry(ctxT(t), addReq(1, 0, []byte("x")))
	wantStatus(t, err, codes.Unavailable, "STORAGE_FAILED")
	r = testutil.WaitProbe(t, addr, "/healthz", http.StatusServiceUnavailable, 30*time.Second)
	if r.Code != "NOT_LIVE" || !strings.HasPrefix(r.Reason, "storage: storage failed") {
		t.Fatalf("/healthz after a storage failure: %+v", r)
	}
	if code, r := testutil.Probe(t, addr, "/readyz"); code != http.StatusServiceUnavailable || r.Checks["storage"] == "ok" {
		t.Fatalf("/readyz after a storage failure: %d %+v", code, r)
	}
}

// A draining bookie is ready (it serves reads while its copies move) and
// says it drains; a stopped bookie's port is closed.
func TestBookieReadyWhileDrainingAndGoneWhenClosed(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t.TempDir())
	cfg.HTTPListen = "127.0.0.1:0"
	s := e.start(t, cfg)
	if _, err := e.store.Put(ctxT(t), metastore.BookieDrainKey(s.ID()), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the bookie draining", func() bool {
		return slices.Contains(s.ReadOnly(), bookie.ReadOnlyDraining)
	})
	if code, r := testutil.Probe(t, s.HTTPAddr(), "/readyz"); code != http.StatusOK || r.Info["state"] != "draining" {
		t.Fatalf("/readyz of a draining bookie: %d %+v", code, r)
	}
	addr := s.HTTPAddr()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("/healthz of a closed bookie answered %d", resp.StatusCode)
	}
}

// The bookie's HTTP port serves its metrics (BookKeeper's names) with the
// runtime's, and Go's profiles only with --pprof.
func TestBookieMetricsPort(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(t.TempDir())
	cfg.HTTPListen = "127.0.0.1:0"
	s := e.startWith(t, cfg)
	m := testutil.Scrape(t, s.HTTPAddr())
	m.Want(t, 1, "bookie_SERVER_STATUS")
	m.Want(t, 1, "magnetar_bookie_state", "state", "writable")
	if _, ok := m.Value(t, "go_goroutines"); !ok {
		t.Error("no Go runtime metrics")
	}
	s.SetReadOnly("test", true)
	m = testutil.Scrape(t, s.HTTPAddr())
	m.Want(t, 0, "bookie_SERVER_STATUS")
	m.Want(t, 1, "magnetar_bookie_state", "state", "read_only")
	s.SetReadOnly("test", false)

	pprof := func(s *bookie.Server) int {
		resp, err := http.Get("http://" + s.HTTPAddr() + "/debug/pprof/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := pprof(s); code != http.StatusNotFound {
		t.Errorf("pprof off: %d, want 404", code)
	}
	cfg2 := e.config(t.TempDir())
	cfg2.HTTPListen = "127.0.0.1:0"
	cfg2.Pprof = true
	if code := pprof(e.startWith(t, cfg2)); code != http.StatusOK {
		t.Errorf("pprof on: %d, want 200", code)
	}
}
