package ledger

import (
	"context"

	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// LocalBookie is a bookie running in the client's own process (a
// standalone's): a stream's adds are handed to it by a function call
// instead of gRPC over loopback (Config.LocalBookies), as BookKeeper's
// local transport does for bookies in the client's JVM. No encoding, no
// socket, and four fewer goroutine hand-offs an add: the stream's sender
// hands its adds to the bookie's storage queue, and the bookie's storage
// answers straight to the stream's receiver. Everything else (reads,
// fencing, recovery) still goes over gRPC.
//
// *bookie.Server implements it.
type LocalBookie interface {
	// OpenAdds opens an add stream, which ctx ends: Recv, and an Add
	// waiting for room, then return ctx's error at once, and the bookie
	// answers what it took in the background.
	OpenAdds(ctx context.Context) (LocalAdds, error)
}

// LocalAdds is one add stream to a LocalBookie: one goroutine calls Add
// and CloseSend, another Recv.
type LocalAdds interface {
	// Add hands adds to the bookie, each answered (on Recv) by a result
	// with its ID as RequestId. The requests are shared with the entry's
	// other bookies and the caller's: the bookie must not change them,
	// and reads their payloads until it answers them. Add may wait while
	// the bookie's queues are full (as a gRPC stream waits on flow
	// control), until the stream's ctx ends; an error ends the stream.
	Add(adds []QueuedAdd) error
	// Recv waits for the next results, in any order. Once CloseSend was
	// called and every add answered it returns io.EOF; when the bookie
	// stops (having answered what it took), an error wrapping
	// wire.ErrUnavailable.
	Recv() ([]*bookiepb.AddResult, error)
	// CloseSend tells the bookie no more adds will come.
	CloseSend()
}

// addWire is how a stream's adds reach its bookie and its results come
// back: a gRPC stream (grpcAdds) or a LocalBookie's LocalAdds.
type addWire interface {
	Add(adds []QueuedAdd) error
	Recv() ([]*bookiepb.AddResult, error)
	CloseSend()
}

// grpcAdds is an AddEntries stream as an addWire: a batch is one message,
// encoded by the add codec (addBatch).
type grpcAdds struct {
	stream bookiepb.Bookie_AddEntriesClient
}

func (g grpcAdds) Add(adds []QueuedAdd) error { return g.stream.SendMsg(&addBatch{adds: adds}) }

func (g grpcAdds) Recv() ([]*bookiepb.AddResult, error) {
	resp, err := g.stream.Recv()
	if err != nil {
		return nil, err
	}
	return resp.Results, nil
}

func (g grpcAdds) CloseSend() { g.stream.CloseSend() }
