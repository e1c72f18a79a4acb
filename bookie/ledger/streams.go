package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/latency"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// addStream carries a client's adds to one bookie over a single add
// stream (AddEntries over gRPC, or a LocalBookie's): adds queue up while
// a batch is being sent and go out together, results come back batched.
// A broken stream fails its pending adds (ErrUnavailable) and the next add
// opens a new one.
//
// Goroutines: per stream, one that connects and then sends, and a
// receiver; owned by the streamConn and stopped when it breaks or the
// client closes (a stream the bookie retired runs on until its adds are
// answered; close stops it too).
type addStream struct {
	c      *Client
	bookie string
	lat    *latency.Child // the bookie's add latencies (Client.Metrics)

	mu     sync.Mutex
	cur    *streamConn // nil until the next add connects
	closed bool
	// retired: streams the bookie retired (wire.StreamExpired) that still
	// run, answering the adds sent on them; close fails and waits for
	// them too.
	retired map[*streamConn]bool
}

// streamConn is one add stream, connecting or open.
type streamConn struct {
	s      *addStream
	ctx    context.Context // the stream's lifetime; cancelled by fail
	cancel context.CancelFunc
	signal chan struct{} // wakes the sender
	done   chan struct{} // closed once its goroutines have exited

	mu struct {
		sync.Mutex
		nextID uint64
		queue  []QueuedAdd
		err    error // set once: the stream is broken
		// retired: the bookie asked for a new stream (wire.StreamExpired);
		// this one takes no new adds and closes once its adds are answered.
		retired bool
		// pending holds the adds sent or queued, in the order they were
		// taken (by id, increasing); an answered one has its cb cleared
		// and is dropped once it reaches the front. Every add has the
		// same timeout, so the front one is the first to time out: one
		// timer per stream (timer, armed while adds are pending) watches
		// it, instead of one per add. npending counts those with a cb.
		pending  []pendingAdd
		npending int
		timer    *time.Timer
		armed    bool
	}
}

// addDone is told the outcome of one add to one bookie: called exactly
// once, never under a lock of the stream's, and must not block.
type addDone interface{ addDone(err error) }

// addFunc is a function as an addDone.
type addFunc func(error)

func (f addFunc) addDone(err error) { f(err) }

// QueuedAdd is an add as a stream sends it: the request, shared among
// the entry's bookies (its RequestId unset), and the stream's id for it,
// written in its place when the batch is encoded (addBatch) or handed to
// a LocalBookie as it is: no copy of the request per bookie.
type QueuedAdd struct {
	Req *bookiepb.AddEntryRequest
	ID  uint64
}

type pendingAdd struct {
	id            uint64
	cb            addDone // nil once answered
	ledger, entry int64
	deadline      time.Time
	timeout       time.Duration
}

// addAsync sends one add to a bookie; cb gets nil once it is durable
// there, or an error (wire sentinels; ErrUnavailable when the bookie could
// not be reached or did not answer within timeout). Every add of a client
// must have the same timeout: the stream's one timer watches its oldest
// add only. addAsync never blocks on the
// network; cb may run before it returns, and never under a lock of the
// caller's: call it unlocked.
func (c *Client) addAsync(bookie string, req *bookiepb.AddEntryRequest, timeout time.Duration, cb addDone) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		cb.addDone(ErrClosed)
		return
	}
	s := c.mu.streams[bookie]
	if s == nil {
		s = &addStream{c: c, bookie: bookie, lat: c.adds.With(bookie)}
		c.mu.streams[bookie] = s
	}
	c.mu.Unlock()
	conn := s.conn()
	if conn == nil {
		cb.addDone(ErrClosed)
		return
	}
	conn.add(req, timeout, cb)
}

// conn returns the current stream, starting a new one (which connects in
// the background; adds queue meanwhile) if there is none. nil once closed.
func (s *addStream) conn() *streamConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.cur == nil {
		ctx, cancel := context.WithCancel(context.Background())
		sc := &streamConn{s: s, ctx: ctx, cancel: cancel, signal: make(chan struct{}, 1), done: make(chan struct{})}
		s.cur = sc
		go sc.run()
	}
	return s.cur
}

// run connects, then sends until the stream breaks.
func (sc *streamConn) run() {
	defer close(sc.done)
	defer func() { // a retired stream is done
		sc.s.mu.Lock()
		delete(sc.s.retired, sc)
		sc.s.mu.Unlock()
	}()
	stream, err := sc.open()
	if err != nil {
		sc.fail(err)
		return
	}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		sc.recvLoop(stream)
	}()
	sc.sendLoop(stream)
	<-recvDone
}

// open opens the stream: to the bookie in this process if it is one
// (Config.LocalBookies), else over gRPC, an opening bounded by
// AddTimeout (a local one does not wait). The stream lives as long as
// sc.ctx.
func (sc *streamConn) open() (addWire, error) {
	c := sc.s.c
	if c.cfg.LocalBookies != nil {
		if lb := c.cfg.LocalBookies(sc.s.bookie); lb != nil {
			return lb.OpenAdds(sc.ctx) // an error: fail wraps it as unavailable if it is not
		}
	}
	cli, err := func() (bookiepb.BookieClient, error) {
		ctx, cancel := context.WithTimeout(sc.ctx, c.cfg.AddTimeout)
		defer cancel()
		return c.bookie(ctx, sc.s.bookie)
	}()
	if err != nil {
		return nil, err
	}
	timer := time.AfterFunc(c.cfg.AddTimeout, sc.cancel)
	stream, err := cli.AddEntries(sc.ctx)
	if !timer.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	if err != nil {
		return nil, fmt.Errorf("%w: open add stream to bookie %s: %v", wire.ErrUnavailable, sc.s.bookie, wire.FromStatus(err))
	}
	return grpcAdds{stream}, nil
}

// close breaks the current stream and the retired ones still running,
// and refuses new adds; it waits for the streams' goroutines.
func (s *addStream) close() {
	s.mu.Lock()
	s.closed = true
	var all []*streamConn
	if s.cur != nil {
		all = append(all, s.cur)
	}
	for sc := range s.retired {
		all = append(all, sc)
	}
	s.mu.Unlock()
	for _, sc := range all {
		sc.fail(ErrClosed)
		<-sc.done
	}
}

func (sc *streamConn) add(req *bookiepb.AddEntryRequest, timeout time.Duration, cb addDone) {
	sc.mu.Lock()
	if err := sc.mu.err; err != nil {
		// The stream broke after conn returned it: the add fails with its
		// error, a failure of the bookie as those pending on it were,
		// unless the client's closing ended it.
		sc.mu.Unlock()
		if !errors.Is(err, ErrClosed) {
			sc.s.lat.Observe(time.Now(), 0, err)
		}
		cb.addDone(err)
		return
	}
	if sc.mu.retired { // taken just before the retirement: a new stream
		sc.mu.Unlock()
		next := sc.s.conn()
		if next == nil {
			cb.addDone(ErrClosed)
			return
		}
		next.add(req, timeout, cb)
		return
	}
	sc.mu.nextID++
	id := sc.mu.nextID
	// req is shared among the entry's bookies: its RequestId is not set,
	// id goes in its place in the encoding.
	sc.mu.queue = append(sc.mu.queue, QueuedAdd{Req: req, ID: id})
	sc.mu.pending = append(sc.mu.pending, pendingAdd{id: id, cb: cb, ledger: req.LedgerId, entry: req.EntryId, deadline: time.Now().Add(timeout), timeout: timeout})
	sc.mu.npending++
	if !sc.mu.armed {
		sc.armLocked(timeout)
	}
	sc.mu.Unlock()
	select {
	case sc.signal <- struct{}{}:
	default:
	}
}

// take answers a pending add: it returns its callback, nil if it was
// already answered (or is unknown), and when it was taken.
func (sc *streamConn) take(id uint64) (addDone, time.Time) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	p := sc.mu.pending
	i, ok := slices.BinarySearchFunc(p, id, func(a pendingAdd, id uint64) int { return cmp.Compare(a.id, id) })
	if !ok || p[i].cb == nil {
		return nil, time.Time{}
	}
	cb := p[i].cb
	p[i].cb = nil
	sc.mu.npending--
	sc.trimLocked()
	return cb, p[i].taken()
}

// taken is when the add was taken by its stream.
func (p *pendingAdd) taken() time.Time { return p.deadline.Add(-p.timeout) }

// trimLocked drops answered adds from the front of pending.
func (sc *streamConn) trimLocked() {
	p := sc.mu.pending
	i := 0
	for i < len(p) && p[i].cb == nil {
		i++
	}
	if i == len(p) {
		if cap(p) > 4096 {
			sc.mu.pending = nil // grown during a stall: let it go
		} else {
			sc.mu.pending = p[:0]
		}
		return
	}
	sc.mu.pending = p[i:]
}

// armLocked starts the stream's timer to fire after d.
func (sc *streamConn) armLocked(d time.Duration) {
	sc.mu.armed = true
	if sc.mu.timer == nil {
		sc.mu.timer = time.AfterFunc(d, sc.checkTimeouts)
		return
	}
	sc.mu.timer.Reset(d)
}

// checkTimeouts runs on the stream's timer: if the oldest pending add is
// past its deadline, it fails and the stream breaks; else the timer is
// set for the oldest's deadline.
func (sc *streamConn) checkTimeouts() {
	sc.mu.Lock()
	sc.mu.armed = false
	if sc.mu.err != nil {
		sc.mu.Unlock()
		return
	}
	sc.trimLocked()
	if len(sc.mu.pending) == 0 {
		sc.mu.Unlock()
		return
	}
	first := sc.mu.pending[0]
	if wait := time.Until(first.deadline); wait > 0 {
		sc.armLocked(wait)
		sc.mu.Unlock()
		return
	}
	sc.mu.pending[0].cb = nil
	sc.mu.npending--
	sc.mu.Unlock()
	err := fmt.Errorf("%w: bookie %s did not acknowledge entry %d of ledger %d within %v", wire.ErrUnavailable, sc.s.bookie, first.entry, first.ledger, first.timeout)
	now := time.Now()
	sc.s.lat.Observe(now, now.Sub(first.taken()), err)
	first.cb.addDone(err)
	// The stream is stalled: break it, so that what is queued on it is
	// dropped (not kept for as long as the stall lasts) and the next add
	// opens a new one.
	sc.fail(err)
}

// retire stops new adds from taking this stream: the bookie's next add
// opens a new one (with fresh credentials); this one is closed by the send
// loop once every add sent on it is answered.
func (sc *streamConn) retire() {
	sc.s.mu.Lock()
	if sc.s.cur == sc {
		sc.s.cur = nil
		if sc.s.retired == nil {
			sc.s.retired = map[*streamConn]bool{}
		}
		sc.s.retired[sc] = true
	}
	sc.s.mu.Unlock()
	sc.mu.Lock()
	sc.mu.retired = true
	sc.mu.Unlock()
	select {
	case sc.signal <- struct{}{}:
	default:
	}
}

// fail breaks the stream: pending adds fail with err, and the bookie's
// next add opens a new stream.
func (sc *streamConn) fail(err error) {
	sc.mu.Lock()
	if sc.mu.err != nil {
		sc.mu.Unlock()
		return
	}
	if !errors.Is(err, ErrClosed) && !errors.Is(err, wire.ErrUnavailable) {
		err = fmt.Errorf("%w: add stream to bookie %s: %v", wire.ErrUnavailable, sc.s.bookie, err)
	}
	sc.mu.err = err
	pending := sc.mu.pending
	sc.mu.pending, sc.mu.npending = nil, 0
	sc.mu.queue = nil
	if sc.mu.timer != nil {
		sc.mu.timer.Stop()
	}
	sc.mu.Unlock()
	sc.cancel()
	sc.s.mu.Lock()
	if sc.s.cur == sc {
		sc.s.cur = nil
	}
	sc.s.mu.Unlock()
	sc.s.c.forget(sc.s.bookie)
	select {
	case sc.signal <- struct{}{}:
	default:
	}
	now := time.Now()
	closing := errors.Is(err, ErrClosed) // the client's doing, not the bookie's
	for _, p := range pending {
		if p.cb != nil {
			if !closing {
				sc.s.lat.Observe(now, now.Sub(p.taken()), err)
			}
			p.cb.addDone(err)
		}
	}
}

// Caps on one stream message: it holds at most maxSendBatch adds and, past
// its first add, at most maxSendBatchBytes of payload. The bookie accepts
// messages of its maximum entry size plus 1 MiB (see bookie.Start).
const (
	maxSendBatch      = 1024
	maxSendBatchBytes = 1 << 20
)

// batchLen is how many adds of q the next message takes.
func batchLen(q []QueuedAdd) int {
	n, bytes := 0, 0
	for n < len(q) && n < maxSendBatch {
		if n > 0 && bytes+len(q[n].Req.Payload) > maxSendBatchBytes {
			break
		}
		bytes += len(q[n].Req.Payload)
		n++
	}
	return n
}

func (sc *streamConn) sendLoop(stream addWire) {
	for {
		<-sc.signal
		// Let the goroutines that are ready to run go first: adds come in
		// waves (one message of results wakes many writers at once), and
		// those woken with the one that signalled join its message instead
		// of costing one each (a write system call on each side, the
		// encoding, a wake-up). With nothing else to run this returns at
		// once. BenchmarkBookieAddStream: 1.5 adds per message without it,
		// about 20 with it, and 1.4x the adds per second.
		runtime.Gosched()
		sc.mu.Lock()
		if sc.mu.err != nil || (sc.mu.retired && sc.mu.npending == 0 && len(sc.mu.queue) == 0) {
			sc.mu.Unlock()
			stream.CloseSend()
			return
		}
		n := batchLen(sc.mu.queue)
		batch := sc.mu.queue[:n:n]
		if n < len(sc.mu.queue) {
			sc.mu.queue = sc.mu.queue[n:]
			select {
			case sc.signal <- struct{}{}:
			default:
			}
		} else {
			sc.mu.queue = nil
		}
		sc.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if err := stream.Add(batch); err != nil {
			sc.fail(err)
			return
		}
	}
}

func (sc *streamConn) recvLoop(stream addWire) {
	for {
		results, err := stream.Recv()
		if err != nil {
			sc.fail(wire.FromStatus(err))
			return
		}
		now := time.Now()
		for _, r := range results {
			if r.RequestId == 0 && r.Reason == wire.StreamExpired {
				sc.retire()
				continue
			}
			if cb, taken := sc.take(r.RequestId); cb != nil {
				err := wire.FromResult(r.Code, r.Reason, r.Message)
				sc.s.lat.Observe(now, now.Sub(taken), err)
				cb.addDone(err)
			}
		}
		sc.mu.Lock()
		done := sc.mu.retired && sc.mu.npending == 0
		sc.mu.Unlock()
		if done {
			select {
			case sc.signal <- struct{}{}: // the send loop closes the stream
			default:
			}
		}
	}
}
