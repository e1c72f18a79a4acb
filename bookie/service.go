package bookie

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/internal/storage"
	"github.com/magnetar-io/magnetar/bookie/wire"
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

// toEntry checks an add request and converts it.
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
	if err := v.s.db.AddEntry(ctx, e, req.MasterKey, req.Recovery); err != nil {
		return nil, err
	}
	return &bookiepb.AddEntryResponse{}, nil
}

// maxStreamOutstanding bounds the adds one AddEntries stream may have
// outstanding; past it the bookie stops reading the stream and HTTP/2 flow
// control holds the client back.
const maxStreamOutstanding = 8192

// AddEntries serves a stream of add batches. Each add goes to the storage
// without waiting for the previous one, so the adds of one stream share
// group commits; results go back as they complete, batched.
func (v *service) AddEntries(stream bookiepb.Bookie_AddEntriesServer) error {
	results := newResultQueue()
	sendDone := make(chan error, 1)
	go func() { sendDone <- results.sendLoop(stream) }()

	sem := make(chan struct{}, maxStreamOutstanding)
	var outstanding sync.WaitGroup
	var recvErr error
recv:
	for {
		batch, err := stream.Recv()
		if err != nil {
			if err != io.EOF {
				recvErr = err
			}
			break
		}
		for _, req := range batch.Entries {
			select {
			case sem <- struct{}{}:
			case <-stream.Context().Done():
				recvErr = stream.Context().Err()
				break recv
			}
			outstanding.Add(1)
			id := req.RequestId
			done := func(err error) {
				code, reason, msg := wire.ToResult(err)
				results.push(&bookiepb.AddResult{RequestId: id, Code: code, Reason: reason, Message: msg})
				<-sem
				outstanding.Done()
			}
			e, err := v.toEntry(req)
			if err != nil {
				done(err)
				continue
			}
			v.s.db.AddEntryAsync(e, req.MasterKey, req.Recovery, done)
		}
	}
	outstanding.Wait()
	results.close()
	if err := <-sendDone; err != nil {
		return err
	}
	return recvErr
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

func (v *service) ReadEntry(ctx context.Context, req *bookiepb.ReadEntryRequest) (*bookiepb.ReadEntryResponse, error) {
	if err := checkEntry(req.LedgerId, req.EntryId); err != nil {
		return nil, err
	}
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
