package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// silentBookie answers the first `answer` adds of each stream, then
// nothing: a bookie that stalls.
type silentBookie struct {
	bookiepb.UnimplementedBookieServer
	answer int
}

func (b *silentBookie) AddEntries(stream grpc.BidiStreamingServer[bookiepb.AddEntriesRequest, bookiepb.AddEntriesResponse]) error {
	answered := 0
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		for _, e := range req.Entries {
			if answered < b.answer {
				answered++
				if err := stream.Send(&bookiepb.AddEntriesResponse{Results: []*bookiepb.AddResult{{RequestId: e.RequestId}}}); err != nil {
					return err
				}
			}
		}
	}
}

// fakeBookie serves impl as bookie "b1" until the test ends, and returns
// a client with cfg that knows its address, and known, which tells the
// client the address again (there is no registry: a client forgets a
// bookie's address when its stream breaks).
func fakeBookie(t *testing.T, impl bookiepb.BookieServer, cfg Config) (c *Client, known func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bookiepb.RegisterBookieServer(srv, impl)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	if c, err = New(nil, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // before srv.Stop
	known = func() {
		c.mu.Lock()
		c.mu.addrs["b1"] = lis.Addr().String()
		c.mu.Unlock()
	}
	known()
	return c, known
}

// An add the bookie does not answer fails with ErrUnavailable once the add
// timeout passed (one timer per stream watches the oldest pending add),
// with the adds behind it; an add answered before is not failed again;
// and the next add opens a new stream.
func TestStreamAddTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	c, known := fakeBookie(t, &silentBookie{answer: 1}, Config{AddTimeout: timeout})
	defer c.Close()

	type result struct {
		n    int
		err  error
		took time.Duration
	}
	results := make(chan result, 10)
	add := func(n int) {
		start := time.Now()
		c.addAsync("b1", &bookiepb.AddEntryRequest{LedgerId: 1, EntryId: int64(n), Payload: []byte("x")}, timeout, addFunc(func(err error) {
			results <- result{n, err, time.Since(start)}
		}))
	}
	next := func() result {
		t.Helper()
		select {
		case r := <-results:
			return r
		case <-time.After(20 * timeout):
			t.Fatal("no result within 20 add timeouts")
			return result{}
		}
	}
	add(0)
	if r := next(); r.n != 0 || r.err != nil {
		t.Fatalf("answered add: %+v", r)
	}
	add(1)
	add(2)
	for range 2 {
		r := next()
		if !errors.Is(r.err, wire.ErrUnavailable) {
			t.Fatalf("add %d the bookie never answers: %v; want ErrUnavailable", r.n, r.err)
		}
		// Add 1 times out; add 2, taken just after, fails with the stream
		// it broke.
		if r.n == 1 && (r.took < timeout || !strings.Contains(r.err.Error(), "did not acknowledge entry 1 of ledger 1")) {
			t.Fatalf("add 1: %v after %v; want a timeout after %v", r.err, r.took, timeout)
		}
	}
	// A new stream: its first add is answered. (The broken stream made
	// the client forget the bookie's address.)
	known()
	add(3)
	if r := next(); r.n != 3 || r.err != nil {
		t.Fatalf("add on a new stream: %+v", r)
	}
	select {
	case r := <-results:
		t.Fatalf("a result too many: %+v", r)
	case <-time.After(2 * timeout):
	}
}

// retiringBookie retires each add stream at its first message, as a
// bookie does when the stream's token expires; it answers the adds of
// that message if answer is set, else none. It ends the stream when the
// client does.
type retiringBookie struct {
	bookiepb.UnimplementedBookieServer
	answer bool
}

func (b retiringBookie) AddEntries(stream grpc.BidiStreamingServer[bookiepb.AddEntriesRequest, bookiepb.AddEntriesResponse]) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	results := []*bookiepb.AddResult{{Reason: wire.StreamExpired}}
	if b.answer {
		for _, e := range req.Entries {
			results = append(results, &bookiepb.AddResult{RequestId: e.RequestId})
		}
	}
	if err := stream.Send(&bookiepb.AddEntriesResponse{Results: results}); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// retiredStream waits until bookie "b1"'s stream is retired, and returns it.
func retiredStream(t *testing.T, c *Client) (*addStream, *streamConn) {
	t.Helper()
	c.mu.Lock()
	s := c.mu.streams["b1"]
	c.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the bookie's retirement never reached the client")
		}
		s.mu.Lock()
		for sc := range s.retired {
			s.mu.Unlock()
			return s, sc
		}
		s.mu.Unlock()
	}
}

// A retired stream whose adds are all answered ends, and leaves the
// client's list of retired streams.
func TestRetiredStreamEndsWhenAnswered(t *testing.T) {
	c, _ := fakeBookie(t, retiringBookie{answer: true}, Config{})
	result := make(chan error, 1)
	c.addAsync("b1", &bookiepb.AddEntryRequest{LedgerId: 1, Payload: []byte("x")}, c.cfg.AddTimeout, addFunc(func(err error) { result <- err }))
	c.mu.Lock()
	s := c.mu.streams["b1"]
	c.mu.Unlock()
	s.mu.Lock()
	sc := s.cur // the add's (retired, it may end before a look at s.retired)
	s.mu.Unlock()
	if err := <-result; err != nil {
		t.Fatalf("the add answered on the retired stream: %v", err)
	}
	select {
	case <-sc.done:
	case <-time.After(time.Minute):
		t.Fatal("the retired stream, all its adds answered, never ended")
	}
	sc.mu.Lock()
	retired := sc.mu.retired
	sc.mu.Unlock()
	s.mu.Lock()
	n := len(s.retired)
	s.mu.Unlock()
	if !retired || n != 0 {
		t.Fatalf("the stream retired: %v; %d retired streams listed after it ended, want none", retired, n)
	}
}

// Close fails the adds still waiting on a stream the bookie retired with
// ErrClosed, as those of the current stream, and waits for its
// goroutines; the client's closing counts as no failure of the bookie.
func TestCloseEndsRetiredStreams(t *testing.T) {
	c, _ := fakeBookie(t, retiringBookie{}, Config{})
	result := make(chan error, 1)
	c.addAsync("b1", &bookiepb.AddEntryRequest{LedgerId: 1, Payload: []byte("x")}, c.cfg.AddTimeout, addFunc(func(err error) { result <- err }))
	_, retired := retiredStream(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-retired.done:
	default:
		t.Fatal("Close returned with the retired stream's goroutines running")
	}
	if err := <-result; !errors.Is(err, ErrClosed) {
		t.Fatalf("the add on the retired stream: %v, want ErrClosed", err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Metrics())
	g := testutil.Gather(t, reg)
	for _, success := range []string{"true", "false"} {
		if n := g.Summary(t, "bookkeeper_client_per_channel_bookie_client_ADD_ENTRY", "bookie", "b1", "success", success).GetSampleCount(); n != 0 {
			t.Fatalf("the bookie's adds with success=%s: %d, want none counted", success, n)
		}
	}
}

// lyingBookie answers every read with another entry than the one asked.
type lyingBookie struct {
	bookiepb.UnimplementedBookieServer
}

func (lyingBookie) ReadEntry(_ context.Context, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	return &bookiepb.ReadEntryResponse{EntryId: req.EntryId + 1}, nil
}

// An answer that fails verification is the bookie's failed read.
func TestReadFailingVerificationCounts(t *testing.T) {
	c, _ := fakeBookie(t, lyingBookie{}, Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Metrics())
	if _, err := c.readOne(context.Background(), "b1", 1, 0, nil); !errors.Is(err, wire.ErrBadChecksum) {
		t.Fatalf("a read answered with another entry: %v, want ErrBadChecksum", err)
	}
	g := testutil.Gather(t, reg)
	const name = "bookkeeper_client_per_channel_bookie_client_READ_ENTRY"
	if ok, bad := g.Summary(t, name, "bookie", "b1", "success", "true").GetSampleCount(), g.Summary(t, name, "bookie", "b1", "success", "false").GetSampleCount(); ok != 0 || bad != 1 {
		t.Fatalf("reads counted: %d answered, %d failed; want one failed", ok, bad)
	}
}

// stallingBookie tells got of each read and answers none.
type stallingBookie struct {
	bookiepb.UnimplementedBookieServer
	got chan struct{}
}

func (b stallingBookie) ReadEntry(ctx context.Context, _ *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	b.got <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A read the client's closing ends is no failure of the bookie.
func TestReadEndedByCloseNotCounted(t *testing.T) {
	got := make(chan struct{}, 1)
	c, _ := fakeBookie(t, stallingBookie{got: got}, Config{ReadTimeout: time.Minute})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Metrics())
	done := make(chan error, 1)
	go func() {
		_, err := c.readOne(context.Background(), "b1", 1, 0, nil)
		done <- err
	}()
	select {
	case <-got: // the read is at the bookie
	case <-time.After(time.Minute):
		t.Fatal("the read never reached the bookie")
	}
	c.Close()
	if err := <-done; err == nil {
		t.Fatal("a read across the client's closing worked")
	}
	if n := testutil.Gather(t, reg).Summary(t, "bookkeeper_client_per_channel_bookie_client_READ_ENTRY", "bookie", "b1", "success", "false").GetSampleCount(); n != 0 {
		t.Fatalf("%d failed reads counted, want none: the client closed", n)
	}
}

// An add that reaches a stream that broke after conn returned it (fail
// set its error; whether or not it has cleared the stream as the bookie's
// current one yet) fails with the stream's error, without being sent, and counts as a
// failure of the bookie; one that reaches a stream the client's closing
// ended does not count.
func TestAddOnABrokenStream(t *testing.T) {
	c, err := New(nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.Metrics())
	for _, tc := range []struct {
		err    error
		failed uint64 // failures counted so far
	}{
		{fmt.Errorf("%w: add stream to bookie b9: cut", wire.ErrUnavailable), 1},
		{ErrClosed, 1},
	} {
		// A stream as fail leaves it for an instant: its error set, no
		// goroutine of its own running.
		s := &addStream{c: c, bookie: "b9", lat: c.adds.With("b9")}
		sc := &streamConn{s: s, signal: make(chan struct{}, 1), done: make(chan struct{})}
		sc.mu.err = tc.err
		got := make(chan error, 1)
		sc.add(&bookiepb.AddEntryRequest{LedgerId: 1, Payload: []byte("x")}, time.Second, addFunc(func(err error) { got <- err }))
		select { // answered at once, on the caller's goroutine
		case err := <-got:
			if !errors.Is(err, tc.err) {
				t.Fatalf("the add on a stream broken by %v: %v", tc.err, err)
			}
		default:
			t.Fatalf("the add on a stream broken by %v was not answered at once", tc.err)
		}
		if len(sc.mu.queue) != 0 || sc.mu.npending != 0 {
			t.Fatalf("the add on a stream broken by %v was queued", tc.err)
		}
		g := testutil.Gather(t, reg)
		if n := g.Summary(t, "bookkeeper_client_per_channel_bookie_client_ADD_ENTRY", "bookie", "b9", "success", "false").GetSampleCount(); n != tc.failed {
			t.Fatalf("after an add on a stream broken by %v: %d failures counted, want %d", tc.err, n, tc.failed)
		}
	}
}
