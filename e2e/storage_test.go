package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/internal/testutil"
)

// history records what a writer was told about each append.
type history struct {
	mu     sync.Mutex
	acked  map[int64][]byte // entry id -> payload
	order  []int64
	failed int
}

func (h *history) record(payload []byte) func(int64, error) {
	return func(id int64, err error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			h.failed++
			return
		}
		h.acked[id] = payload
		h.order = append(h.order, id)
	}
}

func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acked)
}

// check: acknowledgements in order without gaps, and every acknowledged
// entry readable with its payload.
func (h *history) check(t *testing.T, r *ledger.Reader) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, id := range h.order {
		if id != int64(i) {
			t.Fatalf("acknowledgement %d was for entry %d", i, id)
		}
	}
	if len(h.order) == 0 {
		t.Fatal("nothing was acknowledged")
	}
	last := h.order[len(h.order)-1]
	if r.LastAddConfirmed() < last {
		t.Fatalf("ledger ends at %d, before acknowledged entry %d", r.LastAddConfirmed(), last)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for first := int64(0); first <= last; first += ledger.MaxReadBatch {
		entries, err := r.Read(ctx, first, min(first+ledger.MaxReadBatch-1, last))
		if err != nil {
			t.Fatalf("read from %d: %v", first, err)
		}
		for _, e := range entries {
			if !bytes.Equal(e.Payload, h.acked[e.ID]) {
				t.Fatalf("entry %d read back as %q, acknowledged as %q", e.ID, e.Payload, h.acked[e.ID])
			}
		}
	}
	t.Logf("%d entries acknowledged and read back (%d appends failed)", len(h.order), h.failed)
}

// appendUntil appends without pause until stop is closed, keeping up to
// the writer's in-flight limit.
func appendUntil(t *testing.T, w *ledger.Writer, h *history, stop <-chan struct{}) (done chan struct{}) {
	done = make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		for n := int64(0); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			p := payloadOf(n)
			if err := w.AppendAsync(ctx, p, h.record(p)); err != nil {
				return
			}
		}
	}()
	return done
}

// kill -9 of the only bookie of a ledger while appends are in flight:
// after it restarts on its data directory, recovery finds every entry it
// had acknowledged. Acknowledged means durable, not just in memory.
func TestKill9SingleBookieLosesNothingAcknowledged(t *testing.T) {
	c := newCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := ledger.New(c.store, ledger.Config{Logger: zaptest.NewLogger(t), AddTimeout: 2 * time.Second, EnsembleChangeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: 1, WriteQuorum: 1, AckQuorum: 1})
	if err != nil {
		t.Fatal(err)
	}
	h := &history{acked: map[int64][]byte{}}
	stop := make(chan struct{})
	done := appendUntil(t, w, h, stop)
	testutil.Eventually(t, time.Minute, "acknowledged appends", func() bool { return h.count() >= 2000 })
	c.bookie("bookie-0").kill()
	close(stop)
	<-done
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	w.Close(cctx) // the bookie is gone: this fails, the ledger stays open
	ccancel()

	c.restart(c.bookie("bookie-0"))
	r, err := cl.OpenRecover(ctx, w.ID())
	if err != nil {
		t.Fatal(err)
	}
	h.check(t, r)
}

// kill -9 of one bookie of an E3/Qw3/Qa2 ledger among 4 while appends are
// in flight: the writer replaces it, nothing acknowledged is lost, no gap;
// the killed bookie restarts on its data and serves again.
func TestKill9BookieDuringAppends(t *testing.T) {
	for _, q := range []struct{ e, qw, qa int }{{3, 3, 2}, {3, 2, 2}} {
		t.Run(fmt.Sprintf("E%dQw%dQa%d", q.e, q.qw, q.qa), func(t *testing.T) {
			c := newCluster(t, 4)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cl, err := ledger.New(c.store, ledger.Config{Logger: zaptest.NewLogger(t), AddTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			w, err := cl.Create(ctx, ledger.CreateOptions{Ensemble: q.e, WriteQuorum: q.qw, AckQuorum: q.qa})
			if err != nil {
				t.Fatal(err)
			}
			victim := w.Metadata().Segments[0].Bookies[0]
			h := &history{acked: map[int64][]byte{}}
			stop := make(chan struct{})
			done := appendUntil(t, w, h, stop)
			testutil.Eventually(t, time.Minute, "acknowledged appends", func() bool { return h.count() >= 2000 })
			c.bookie(victim).kill()
			n := h.count()
			testutil.Eventually(t, time.Minute, "appends to go on after the kill", func() bool { return h.count() >= n+3000 })
			close(stop)
			<-done
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if h.failed > 0 {
				t.Fatalf("%d appends failed although a spare bookie was there", h.failed)
			}
			if segs := w.Metadata().Segments; len(segs) < 2 {
				t.Fatalf("no ensemble change after the kill: %+v", segs)
			}
			r, err := cl.Open(ctx, w.ID())
			if err != nil {
				t.Fatal(err)
			}
			h.check(t, r)

			// The killed bookie comes back with its data.
			c.restart(c.bookie(victim))
		})
	}
}
