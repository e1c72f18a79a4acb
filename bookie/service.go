package bookie

import (
	"context"
	"fmt"
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

func (v *service) AddEntry(ctx context.Context, req *bookiepb.AddEntryRequest) (*bookiepb.AddEntryResponse, error) {
	if err := checkEntry(req.LedgerId, req.EntryId); err != nil {
		return nil, err
	}
	if n := len(req.Payload); n > v.s.cfg.MaxEntrySize {
		return nil, fmt.Errorf("%w: entry %d of ledger %d has %d bytes, the maximum is %d", wire.ErrEntryTooLarge, req.EntryId, req.LedgerId, n, v.s.cfg.MaxEntrySize)
	}
	if sum := wire.Checksum(req.LedgerId, req.EntryId, req.LastAddConfirmed, req.Length, req.Payload); sum != req.Crc32C {
		return nil, fmt.Errorf("%w: entry %d of ledger %d: checksum %08x, computed %08x", wire.ErrBadChecksum, req.EntryId, req.LedgerId, req.Crc32C, sum)
	}
	err := v.s.db.AddEntry(ctx, storage.Entry{
		LedgerID: req.LedgerId,
		EntryID:  req.EntryId,
		LAC:      req.LastAddConfirmed,
		Length:   req.Length,
		CRC:      req.Crc32C,
		Payload:  req.Payload,
	}, req.MasterKey, req.Recovery)
	if err != nil {
		return nil, err
	}
	return &bookiepb.AddEntryResponse{}, nil
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
