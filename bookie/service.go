package bookie

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/wirecodec"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// Long polls for LAC wait at most this long, whatever the request says.
const maxLongPoll = 60 * time.Second

// service implements bookiepb.BookieServer. Handlers return sentinel errors
// from package wire; errorInterceptor turns them into statuses.
type service struct {
	bookiepb.UnimplementedBookieServer
	s *Server
}

func checkLedger(id int64) error {
	if id <= 0 {
		return fmt.Errorf("%w: ledger id %d must be positive", wire.ErrInvalidArgument, id)
	}
	return nil
}

func checkEntry(ledger, entry int64) error {
	if err := checkLedger(ledger); err != nil {
		return err
	}
	if entry < 0 {
		return fmt.Errorf("%w: entry id %d must not be negative", wire.ErrInvalidArgument, entry)
	}
	return nil
}

// toEntry checks an add request and converts it. A read-only bookie
// refuses normal adds (after the checks every bookie would make, so that a
// bad request is told so); recovery adds go on.
func (v *service) toEntry(req *bookiepb.AddEntryRequest) (storage.Entry, error) {
	if err := checkEntry(req.LedgerId, req.EntryId); err != nil {
		return storage.Entry{}, err
	}
	if n := len(req.Payload); n > v.s.cfg.MaxEntrySize {
		return storage.Entry{}, fmt.Errorf("%w: entry %d of ledger %d has %d bytes, the maximum is %d", wire.ErrEntryTooLarge, req.EntryId, req.LedgerId, n, v.s.cfg.MaxEntrySize)
	}
	if sum := wire.Checksum(req.LedgerId, req.EntryId, req.LastAddConfirmed, req.Length, req.Payload); sum != req.Crc32C {
		return storage.Entry{}, fmt.Errorf("%w: entry %d of ledger %d: checksum %08x, computed %08x", wire.ErrBadChecksum, req.EntryId, req.LedgerId, req.Crc32C, sum)
	}
	if !req.Recovery {
		if err := v.s.refuseNormalAdd(); err != nil {
			return storage.Entry{}, err
		}
	}
	return storage.Entry{
		LedgerID: req.LedgerId,
		EntryID:  req.EntryId,
		LAC:      req.LastAddConfirmed,
		Length:   req.Length,
		CRC:      req.Crc32C,
		Payload:  req.Payload,
	}, nil
}

func (v *service) AddEntry(ctx context.Context, req *bookiepb.AddEntryRequest) (*bookiepb.AddEntryResponse, error) {
	e, err := v.toEntry(req)
	if err != nil {
		return nil, err
	}
	n := int64(len(e.Payload))
	start := time.Now()
	if err := v.s.budget.Acquire(ctx, n); err != nil {
		return nil, err
	}
	defer v.s.budget.Release(n)
	err = v.s.db.AddEntry(ctx, e, req.MasterKey, req.Recovery)
	v.s.metrics.added(len(e.Payload), start, err)
	if err != nil {
		return nil, err
	}
	return &bookiepb.AddEntryResponse{}, nil
}

// maxStreamOutstanding bounds the adds one add stream may have
// outstanding (the bookie's byte budget bounds them all together); past it
// the bookie stops reading an AddEntries stream and HTTP/2 flow control
// holds the client back, and a local stream's Add waits.
const maxStreamOutstanding = 8192

// AddEntries serves a stream of add batches. Each add goes to the storage
// without waiting for the previous one, so the adds of one stream share
// group commits; results go back as they complete, batched. The stream
// ends when the client ends it or the bookie stops: the adds taken are
// answered first.
func (v *service) AddEntries(stream bookiepb.Bookie_AddEntriesServer) error {
	v.s.metrics.grpcStreams.Inc()
	results := newResultQueue()
	sendDone := make(chan error, 1)
	go func() { sendDone <- results.sendLoop(stream) }()

	st := newOutstanding()
	recvDone := make(chan error, 1)
	// The receiver outlives this handler when the bookie stops: it ends as
	// soon as the stream's context does, which returning cancels.
	go func() { recvDone <- v.receiveAdds(stream, st, results) }()
	// A stream outliving the caller's token is retired at its expiry: the
	// client is told (wire.StreamExpired) to send its next adds on a new
	// stream, with fresh credentials, and to close this one once its adds
	// are answered; one that does not is cut after retireGrace. Cutting at
	// once would fail the adds in flight on every bookie together.
	expired, stopExpiry := auth.ExpiryTimer(stream.Context())
	defer stopExpiry()
	var hard <-chan time.Time
	var recvErr error
wait:
	for {
		select {
		case recvErr = <-recvDone:
			break wait
		case <-v.s.stop:
			break wait
		case <-expired:
			expired = nil
			results.push(&bookiepb.AddResult{Code: uint32(codes.Unavailable), Reason: wire.StreamExpired,
				Message: auth.ExpiredError(auth.Expiry(stream.Context())).Error() + ": send the next adds on a new stream"})
			timer := time.NewTimer(retireGrace)
			defer timer.Stop()
			hard = timer.C
		case <-hard:
			recvErr = wire.ToStatus(fmt.Errorf("%w: %v", wire.ErrUnavailable, auth.ExpiredError(auth.Expiry(stream.Context()))))
			break wait
		}
	}
	st.close() // no new adds; wait for the ones taken
	<-st.zero
	results.close()
	if err := <-sendDone; err != nil {
		return err
	}
	return recvErr
}

// retireGrace is how long a retired add stream may go on before it is cut.
var retireGrace = 30 * time.Second

// receiveAdds reads add batches and hands each add to the storage.
func (v *service) receiveAdds(stream bookiepb.Bookie_AddEntriesServer, st *outstanding, results *resultQueue) error {
	ctx := stream.Context()
	s := &addStream{v: v, st: st, results: results}
	for {
		batch, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		// The batch's adds arrived together: one clock reading for all.
		// An add's latency (metrics) then includes the waits of the adds
		// before it in the batch (budget, slots, a full queue).
		start := time.Now()
		for _, req := range batch.Entries {
			if err := s.take(ctx, start, req, req.RequestId, req.Payload); err != nil {
				if errors.Is(err, errStopping) {
					return nil // the client sees the stream end
				}
				return err
			}
		}
	}
}

// errStopping: the stream's adds are closed (the bookie is stopping, or
// a local stream's client closed it).
var errStopping = errors.New("the add stream is closing")

// take hands one add of the stream to the storage, answered on the
// stream's results with id; a request the bookie's checks refuse is
// answered at once. payload is what AddDone releases to the codec's pool
// (nil: the caller's, not pooled). It waits for room in the bookie's
// budget and the stream's slots: ctx's error, or errStopping once the
// stream's adds are closed, ends the stream.
func (s *addStream) take(ctx context.Context, start time.Time, req *bookiepb.AddEntryRequest, id uint64, payload []byte) error {
	v := s.v
	a := &streamAdd{s: s, start: start, payload: payload, size: int64(len(req.Payload)), result: bookiepb.AddResult{RequestId: id}}
	e, err := v.toEntry(req)
	if err == nil {
		if err := v.s.budget.Acquire(ctx, a.size); err != nil {
			return err
		}
		a.budgeted = true
	}
	if !s.st.add(ctx) {
		if a.budgeted {
			v.s.budget.Release(a.size)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return errStopping
	}
	if err != nil {
		a.AddDone(err)
		return nil
	}
	// A stream whose client gave up does not wait for room in a full
	// queue (a hung disk): the add is answered with ctx's error.
	v.s.db.AddEntryInto(ctx, &a.req, e, req.MasterKey, req.Recovery, a)
	return nil
}

// addStream is what the adds of one add stream share: an AddEntries
// stream's, or a local one's (localAdds).
type addStream struct {
	v       *service
	st      *outstanding
	results *resultQueue
}

// streamAdd is one add of a stream, from its arrival to its result: the
// storage tells it the outcome (storage.AddDone), and its result is the
// message queued for the client: one allocation per add, the storage's
// record of it included.
type streamAdd struct {
	s        *addStream
	start    time.Time
	payload  []byte // the codec's pooled buffer; nil when the caller's (a local stream's)
	size     int64  // the payload's bytes
	budgeted bool   // size bytes are held in the bookie's budget
	result   bookiepb.AddResult
	req      storage.AddRequest // the storage's record of the add
}

// AddDone answers the add. Called once: by the storage (on its
// goroutines, or on the taker's when it refuses the add at once), or by
// the taker when the bookie's own checks refuse it. The taker is an
// AddEntries stream's receiver, or a local stream's client in Add.
func (a *streamAdd) AddDone(err error) {
	// The storage has answered: it holds no reference to the payload any
	// more (it copied it into its log or batch).
	n := a.size
	if a.payload != nil {
		wirecodec.Release(a.payload)
		a.payload = nil
	}
	v := a.s.v
	v.s.metrics.added(int(n), a.start, err)
	a.result.Code, a.result.Reason, a.result.Message = wire.ToResult(err)
	a.s.results.push(&a.result)
	if a.budgeted { // on every outcome: a refused add holds nothing either
		v.s.budget.Release(n)
	}
	a.s.st.done()
}

// outstanding counts a stream's adds in progress, and refuses new ones
// once closed; zero is closed when it is closed and none is left.
type outstanding struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{}
	slots  chan struct{} // maxStreamOutstanding
}

func newOutstanding() *outstanding {
	return &outstanding{zero: make(chan struct{}), slots: make(chan struct{}, maxStreamOutstanding)}
}

// add takes a slot, waiting while maxStreamOutstanding are in progress;
// false once closed or once ctx ends (the stream's client gave up).
func (o *outstanding) add(ctx context.Context) bool {
	select {
	case o.slots <- struct{}{}:
	case <-o.zero:
		return false
	case <-ctx.Done(): // the stream's client gave up
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		<-o.slots
		return false
	}
	o.n++
	return true
}

func (o *outstanding) done() {
	<-o.slots
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n--
	if o.n == 0 && o.closed {
		close(o.zero)
	}
}

func (o *outstanding) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	o.closed = true
	if o.n == 0 {
		close(o.zero)
	}
}

// resultQueue collects the results of one stream for its send loop. push
// never blocks (the stream's outstanding adds bound its length).
type resultQueue struct {
	mu     sync.Mutex
	items  []*bookiepb.AddResult
	closed bool
	signal chan struct{}
}

func newResultQueue() *resultQueue { return &resultQueue{signal: make(chan struct{}, 1)} }

func (q *resultQueue) push(r *bookiepb.AddResult) {
	q.mu.Lock()
	q.items = append(q.items, r)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

func (q *resultQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// sendLoop sends what is queued, in batches, until the queue is closed and
// empty. After a failed send it keeps draining (so pushes never pile up)
// and returns the error at the end.
func (q *resultQueue) sendLoop(stream bookiepb.Bookie_AddEntriesServer) error {
	var sendErr error
	for {
		<-q.signal
		q.mu.Lock()
		items, closed := q.items, q.closed
		q.items = nil
		q.mu.Unlock()
		if len(items) > 0 && sendErr == nil {
			sendErr = stream.Send(&bookiepb.AddEntriesResponse{Results: items})
		}
		if closed {
			return sendErr
		}
	}
}

func (v *service) ReadEntry(ctx context.Context, req *bookiepb.ReadEntryRequest) (_ *bookiepb.ReadEntryResponse, err error) {
	if err := checkEntry(req.LedgerId, req.EntryId); err != nil {
		return nil, err
	}
	start, bytes := time.Now(), 0
	defer func() { v.s.metrics.readDone(bytes, start, err) }()
	if req.Fence {
		// A recovery read: the fence is durable before anything is read,
		// so the old writer cannot get an add past us afterwards.
		if _, err := v.s.db.Fence(ctx, req.LedgerId, req.MasterKey); err != nil {
			return nil, err
		}
	}
	e, err := v.s.db.ReadEntry(req.LedgerId, req.EntryId)
	if err != nil {
		return nil, err
	}
	info, err := v.s.db.Info(req.LedgerId)
	if err != nil {
		return nil, err
	}
	bytes = len(e.Payload)
	return &bookiepb.ReadEntryResponse{
		EntryId:                e.EntryID,
		LastAddConfirmed:       e.LAC,
		Length:                 e.Length,
		Crc32C:                 e.CRC,
		Payload:                e.Payload,
		BookieLastAddConfirmed: info.LAC,
	}, nil
}

func (v *service) ReadLAC(ctx context.Context, req *bookiepb.ReadLACRequest) (*bookiepb.ReadLACResponse, error) {
	if err := checkLedger(req.LedgerId); err != nil {
		return nil, err
	}
	var (
		info storage.LedgerInfo
		err  error
	)
	if req.LongPoll {
		wait := min(time.Duration(req.TimeoutMs)*time.Millisecond, maxLongPoll)
		if wait <= 0 {
			wait = 10 * time.Second
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		info, err = v.s.db.WaitLAC(wctx, req.LedgerId, req.PreviousLac)
		cancel()
	} else {
		info, err = v.s.db.Info(req.LedgerId)
	}
	if err != nil {
		return nil, err
	}
	return &bookiepb.ReadLACResponse{LastAddConfirmed: info.LAC, LastEntryId: info.LastEntry, Fenced: info.Fenced}, nil
}

func (v *service) WriteLAC(ctx context.Context, req *bookiepb.WriteLACRequest) (*bookiepb.WriteLACResponse, error) {
	if err := checkLedger(req.LedgerId); err != nil {
		return nil, err
	}
	if err := v.s.db.WriteLAC(ctx, req.LedgerId, req.MasterKey, req.LastAddConfirmed); err != nil {
		return nil, err
	}
	return &bookiepb.WriteLACResponse{}, nil
}

func (v *service) Fence(ctx context.Context, req *bookiepb.FenceRequest) (*bookiepb.FenceResponse, error) {
	if err := checkLedger(req.LedgerId); err != nil {
		return nil, err
	}
	info, err := v.s.db.Fence(ctx, req.LedgerId, req.MasterKey)
	if err != nil {
		return nil, err
	}
	return &bookiepb.FenceResponse{LastAddConfirmed: info.LAC, LastEntryId: info.LastEntry}, nil
}

func (v *service) ListEntries(ctx context.Context, req *bookiepb.ListEntriesRequest) (*bookiepb.ListEntriesResponse, error) {
	if err := checkLedger(req.LedgerId); err != nil {
		return nil, err
	}
	if req.StartEntry < 0 {
		return nil, fmt.Errorf("%w: start entry %d is negative", wire.ErrInvalidArgument, req.StartEntry)
	}
	ids, more, err := v.s.db.ListEntries(req.LedgerId, req.StartEntry, int(req.Limit))
	if err != nil {
		return nil, err
	}
	return &bookiepb.ListEntriesResponse{EntryIds: ids, More: more}, nil
}
