package bookie

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// OpenAdds opens an add stream from a ledger client of this process
// (ledger.LocalBookie): the standalone's broker hands its adds over by a
// function call instead of gRPC over loopback. The adds go through the
// same checks, budget, per-stream bound and storage as an AddEntries
// stream's, and count in the same metrics; credentials are not asked for
// (the caller is this process). When the client closes the stream, or
// the bookie stops, it ends once the adds it took are answered; when ctx
// ends, Recv and a waiting Add return ctx's error at once, and the bookie
// answers the adds it took in the background.
func (s *Server) OpenAdds(ctx context.Context) (ledger.LocalAdds, error) {
	s.local.Lock()
	defer s.local.Unlock()
	if s.local.closed {
		return nil, fmt.Errorf("%w: bookie %s is stopping", wire.ErrUnavailable, s.id)
	}
	l := &localAdds{ctx: ctx, sendClosed: make(chan struct{})}
	l.s = addStream{v: &service{s: s}, st: newOutstanding(), results: newResultQueue()}
	s.metrics.localStreams.Inc()
	s.local.wg.Add(1)
	go l.run(s)
	return l, nil
}

// closeLocal refuses new local streams and waits for those open to end
// (s.stop is closed: they end once their adds are answered).
func (s *Server) closeLocal() {
	s.local.Lock()
	s.local.closed = true
	s.local.Unlock()
	s.local.wg.Wait()
}

// localAdds is a local add stream (ledger.LocalAdds). Goroutines: run,
// owned by the Server (Close waits for it), which ends the stream's adds
// once the client closes it, its ctx ends or the bookie stops, and then
// closes its results when every add taken is answered.
type localAdds struct {
	ctx        context.Context
	s          addStream
	sendClosed chan struct{} // closed by CloseSend
	closeOnce  sync.Once
	// end is Recv's error once the results are closed and drained:
	// written by run before it closes them (results.mu orders it).
	end error
}

func (l *localAdds) run(s *Server) {
	defer s.local.wg.Done()
	end := error(io.EOF)
	select {
	case <-l.sendClosed:
	case <-l.ctx.Done():
		end = l.ctx.Err()
	case <-s.stop:
		end = fmt.Errorf("%w: bookie %s is stopping", wire.ErrUnavailable, s.id)
	}
	l.s.st.close() // no new adds; wait for the ones taken
	<-l.s.st.zero
	l.end = end
	l.s.results.close()
}

// Add takes the adds in order; see ledger.LocalAdds. The payloads are the
// caller's: the storage copies them before it answers, and they are not
// released to a pool.
func (l *localAdds) Add(adds []ledger.QueuedAdd) error {
	start := time.Now() // as a gRPC stream's batch: one clock reading
	for _, a := range adds {
		if err := l.s.take(l.ctx, start, a.Req, a.ID, nil); err != nil {
			if err == errStopping {
				return fmt.Errorf("%w: the add stream to bookie %s is closed", wire.ErrUnavailable, l.s.v.s.id)
			}
			return err
		}
	}
	return nil
}

// Recv returns the next results, waiting for them; see ledger.LocalAdds.
// It returns ctx's error as soon as ctx ends.
func (l *localAdds) Recv() ([]*bookiepb.AddResult, error) {
	q := l.s.results
	for {
		q.mu.Lock()
		items, closed := q.items, q.closed
		q.items = nil
		q.mu.Unlock()
		if len(items) > 0 {
			return items, nil
		}
		if closed {
			return nil, l.end
		}
		select {
		case <-q.signal:
		case <-l.ctx.Done(): // the client gave up: it waits for nothing the bookie owes
			return nil, l.ctx.Err()
		}
	}
}

// CloseSend ends the stream's adds; see ledger.LocalAdds.
func (l *localAdds) CloseSend() { l.closeOnce.Do(func() { close(l.sendClosed) }) }

var _ ledger.LocalBookie = (*Server)(nil)
