package bookie_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// recvN reads results from l until it has n, by request id.
func recvN(t *testing.T, l ledger.LocalAdds, n int) map[uint64]*bookiepb.AddResult {
	t.Helper()
	got := map[uint64]*bookiepb.AddResult{}
	for len(got) < n {
		rs, err := l.Recv()
		if err != nil {
			t.Fatalf("recv after %d of %d results: %v", len(got), n, err)
		}
		for _, r := range rs {
			if got[r.RequestId] != nil {
				t.Fatalf("request %d answered twice", r.RequestId)
			}
			got[r.RequestId] = r
		}
	}
	return got
}

// A local add stream (the standalone's broker to its bookies) takes adds
// as an AddEntries stream does: the same checks, answers by request id,
// entries stored and readable over gRPC, the same metrics; the caller's
// payloads are left alone (not released to the codec's pool, which the
// tests poison); once the client closes it, Recv ends with io.EOF.
func TestLocalAdds(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, e.config(t.TempDir()))
	ctx := ctxT(t)
	l, err := s.OpenAdds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	payloads := make([][]byte, 3)
	var adds []ledger.QueuedAdd
	for i := range payloads {
		payloads[i] = bytes.Repeat([]byte{byte('a' + i)}, 1000+i)
		adds = append(adds, ledger.QueuedAdd{Req: addReq(7, int64(i), payloads[i]), ID: uint64(10 + i)})
	}
	bad := addReq(7, 3, []byte("tampered"))
	bad.Crc32C++
	adds = append(adds, ledger.QueuedAdd{Req: bad, ID: 13}, ledger.QueuedAdd{Req: addReq(-1, 0, []byte("x")), ID: 14})
	if err := l.Add(adds); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, l, len(adds))
	for i := range payloads {
		if r := got[uint64(10+i)]; r == nil || r.Code != 0 {
			t.Fatalf("add of entry %d: %+v", i, r)
		}
		if want := bytes.Repeat([]byte{byte('a' + i)}, 1000+i); !bytes.Equal(payloads[i], want) {
			t.Fatalf("the caller's payload of entry %d changed: released to the pool?", i)
		}
	}
	for id, want := range map[uint64]error{13: wire.ErrBadChecksum, 14: wire.ErrInvalidArgument} {
		r := got[id]
		if r == nil {
			t.Fatalf("request %d not answered", id)
		}
		if err := wire.FromResult(r.Code, r.Reason, r.Message); !errors.Is(err, want) {
			t.Fatalf("request %d answered %v, want %v", id, err, want)
		}
	}
	c := dial(t, s.Addr())
	for i := range payloads {
		r, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 7, EntryId: int64(i)})
		if err != nil || !bytes.Equal(r.Payload, payloads[i]) {
			t.Fatalf("read entry %d: %v", i, err)
		}
	}
	m := testutil.Gather(t, s.Metrics(false))
	m.Want(t, 1, "magnetar_bookie_add_streams_total", "transport", "local")
	m.Want(t, 0, "magnetar_bookie_add_streams_total", "transport", "grpc")
	m.Want(t, 3, "bookkeeper_server_ADD_ENTRY_REQUEST", "success", "true")
	m.Want(t, 2, "bookkeeper_server_ADD_ENTRY_REQUEST", "success", "false")

	l.CloseSend()
	if rs, err := l.Recv(); err != io.EOF {
		t.Fatalf("recv after CloseSend: %v %v, want io.EOF", rs, err)
	}
}

// How a local add stream ends: its client's context ends it at once,
// though the bookie still owes the adds (a stuck disk must not stall the
// client: it times the adds out and cancels); the bookie's stop ends it as
// unavailable, after the adds taken are answered; a stopped bookie opens
// none.
func TestLocalAddsEnd(t *testing.T) {
	e := newEnv(t)
	t.Run("cancelled while the disk stalls", func(t *testing.T) {
		fs := testutil.NewStallFS()
		cfg := e.config(t.TempDir())
		s := e.startWith(t, cfg, bookie.WithFS(fs))
		t.Cleanup(fs.Release) // before the bookie's close, which waits for the held add
		ctx, cancel := context.WithCancel(ctxT(t))
		l, err := s.OpenAdds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fs.Stall(cfg.DataDir)
		if err := l.Add([]ledger.QueuedAdd{{Req: addReq(1, 0, []byte("stuck")), ID: 1}}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the add's write held", func() bool { return fs.Held() > 0 })
		recvErr := make(chan error, 1)
		go func() {
			_, err := l.Recv()
			recvErr <- err
		}()
		cancel()
		select {
		case err := <-recvErr:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("recv after cancel: %v", err)
			}
		case <-time.After(30 * time.Second): // a bound, not a wait: it returns at once
			t.Fatal("recv still waits for the stalled add after its context ended")
		}
		fs.Release() // the bookie answers it, and its Close can end
		s.Close()
	})
	// One add, its write held, holds the syncer on a group of one batch:
	// the storage then takes at most 4 batches more for the syncer, the
	// one its committer holds (4096 adds each at most) and its queue
	// (1024): 21,505 adds. Adds of 8 streams (8192 each, as many as a
	// stream may have outstanding) then wait for room in the queue. The
	// cancel comes once both queues are full (the committer waits, or is
	// about to, for the syncer) and an add has waited for room: an add
	// that has not reached the queue by then stops at its stream's other
	// checks of the context. (The wait for a slot is
	// TestOutstandingEndsWithContext's.)
	t.Run("cancelled while adds wait for room", func(t *testing.T) {
		const streams, perStream = 8, 8192
		fs := testutil.NewStallFS()
		cfg := e.config(t.TempDir())
		s := e.startWith(t, cfg, bookie.WithFS(fs))
		t.Cleanup(fs.Release)
		ctx, cancel := context.WithCancel(ctxT(t))
		defer cancel()
		fs.Stall(cfg.DataDir)
		first, err := s.OpenAdds(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Add([]ledger.QueuedAdd{{Req: addReq(100, 0, []byte("first")), ID: 1}}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the first add's write held", func() bool { return fs.Held() > 0 })
		added := make(chan error, streams)
		for i := 0; i < streams; i++ {
			l, err := s.OpenAdds(ctx)
			if err != nil {
				t.Fatal(err)
			}
			adds := make([]ledger.QueuedAdd, perStream)
			for j := range adds {
				adds[j] = ledger.QueuedAdd{Req: addReq(int64(i+1), int64(j), []byte("x")), ID: uint64(j + 1)}
			}
			go func() { added <- l.Add(adds) }()
		}
		testutil.Eventually(t, 30*time.Second, "the queues full and an add waiting for room", func() bool {
			m := testutil.Gather(t, s.Metrics(false))
			q, _ := m.Value(t, "bookie_journal_JOURNAL_QUEUE_SIZE")
			sq, _ := m.Value(t, "bookie_journal_JOURNAL_FORCE_WRITE_QUEUE_SIZE")
			waits, _ := m.Value(t, "magnetar_bookie_queue_full_waits_total")
			return q == storage.QueueLength && sq == storage.SyncQueueLength && waits > 0
		})
		cancel()
		// An add stopped while it waited for room is answered with the
		// context's error; its stream's Add returns at the next add's
		// check of the context. An add still waiting (its wait deaf to
		// the context) would hold its stream's Add past the bound.
		stopped := 0
		for i := 0; i < streams; i++ {
			select {
			case err := <-added:
				if errors.Is(err, context.Canceled) {
					stopped++
				} else if err != nil {
					t.Fatalf("add after cancel: %v", err)
				}
			case <-time.After(30 * time.Second): // a bound, not a wait: they return at once
				t.Fatal("an add still waits for room after its context ended")
			}
		}
		if stopped == 0 {
			t.Fatal("no stream was stopped by the cancel: every add was taken")
		}
	})
	t.Run("bookie stops", func(t *testing.T) {
		fs := testutil.NewStallFS()
		cfg := e.config(t.TempDir())
		s := e.startWith(t, cfg, bookie.WithFS(fs))
		t.Cleanup(fs.Release)
		l, err := s.OpenAdds(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		fs.Stall(cfg.DataDir)
		if err := l.Add([]ledger.QueuedAdd{{Req: addReq(1, 0, []byte("before")), ID: 1}}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the add's write held", func() bool { return fs.Held() > 0 })
		closed := make(chan error, 1)
		go func() { closed <- s.Close() }()
		// Once the bookie is stopping (it opens no stream), let the held
		// add go: it is answered before the stream ends.
		pollCtx := ctxT(t)
		go func() {
			for {
				if _, err := s.OpenAdds(pollCtx); err != nil {
					break
				}
				time.Sleep(time.Millisecond) // polls; each stream opened is closed with the bookie
			}
			fs.Release()
		}()
		var answered bool
		for {
			rs, err := l.Recv()
			if err != nil {
				if !answered || !errors.Is(err, wire.ErrUnavailable) {
					t.Fatalf("stream ended with %v, add answered %v", err, answered)
				}
				break
			}
			for _, r := range rs {
				answered = answered || (r.RequestId == 1 && r.Code == 0)
			}
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if err := l.Add([]ledger.QueuedAdd{{Req: addReq(1, 1, []byte("after")), ID: 2}}); !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("add on the stream of a stopped bookie: %v", err)
		}
		if _, err := s.OpenAdds(ctxT(t)); !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("open on a stopped bookie: %v", err)
		}
	})
}
