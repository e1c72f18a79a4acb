package ledger

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/magnetar-io/magnetar/bookie/wire"
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

// An add the bookie does not answer fails with ErrUnavailable once the add
// timeout passed (one timer per stream watches the oldest pending add),
// with the adds behind it; an add answered before is not failed again;
// and the next add opens a new stream.
func TestStreamAddTimeout(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	bookiepb.RegisterBookieServer(srv, &silentBookie{answer: 1})
	go srv.Serve(lis)
	defer srv.Stop()

	const timeout = 300 * time.Millisecond
	c, err := New(nil, Config{AddTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	known := func() { // no registry: the address is known (again, once forgotten)
		c.mu.Lock()
		c.mu.addrs["b1"] = lis.Addr().String()
		c.mu.Unlock()
	}
	known()

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
