package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// MaxReadBatch caps the entries one Read call returns.
const MaxReadBatch = 10000

// readConcurrency bounds the entries one Read fetches at once.
const readConcurrency = 64

// Entry is an entry read back from a ledger.
type Entry struct {
	ID      int64
	Payload []byte
	// Length is the ledger's total payload bytes through this entry.
	Length int64
}

// Reader reads a ledger: a closed one up to its last entry, an open one up
// to the last add confirmed it has learned (and can wait for more).
type Reader struct {
	c  *Client
	id int64

	mu struct {
		sync.Mutex
		meta *Metadata
		lac  int64 // readable bound: LastEntry once closed
	}
}

func newReader(c *Client, m *Metadata, lac int64) *Reader {
	r := &Reader{c: c, id: m.ID}
	r.mu.meta = m
	r.mu.lac = lac
	if m.State == StateClosed {
		r.mu.lac = m.LastEntry
	}
	return r
}

// Open opens a ledger for reading without recovering it. For an open
// ledger the readable bound is the highest LAC its bookies report; the
// writer may go on adding.
func (c *Client) Open(ctx context.Context, id int64) (*Reader, error) {
	m, err := readMetadata(ctx, c.store, id)
	if err != nil {
		return nil, err
	}
	r := newReader(c, m, -1)
	if m.State != StateClosed {
		if _, err := r.ReadLAC(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ID is the ledger id.
func (r *Reader) ID() int64 { return r.id }

// Metadata returns a copy of the metadata the reader uses.
func (r *Reader) Metadata() *Metadata {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.meta.clone()
}

// Closed reports whether the ledger was closed when last checked.
func (r *Reader) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.meta.State == StateClosed
}

// LastAddConfirmed is the highest readable entry known (-1: none).
func (r *Reader) LastAddConfirmed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lac
}

func (r *Reader) raiseLAC(lac int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.meta.State != StateClosed && lac > r.mu.lac {
		r.mu.lac = lac
	}
	return r.mu.lac
}

// ReadLAC asks the bookies of the last segment for their last add
// confirmed and re-reads the metadata, returning the new readable bound.
func (r *Reader) ReadLAC(ctx context.Context) (int64, error) {
	if err := r.refreshMetadata(ctx, false); err != nil {
		return -1, err
	}
	return r.pollLAC(ctx, false, 0)
}

// WaitLAC waits (long-polling the bookies, up to ctx) until the last add
// confirmed passes previous, and returns it; at ctx's end it returns the
// current bound and ctx's error.
func (r *Reader) WaitLAC(ctx context.Context, previous int64) (int64, error) {
	backoff := 10 * time.Millisecond
	for {
		if lac := r.LastAddConfirmed(); lac > previous || r.Closed() {
			return lac, nil
		}
		start := time.Now()
		lac, err := r.pollLAC(ctx, true, previous)
		if ctx.Err() != nil {
			return r.LastAddConfirmed(), ctx.Err()
		}
		if err != nil {
			return lac, err
		}
		if lac > previous {
			return lac, nil
		}
		if err := r.refreshMetadata(ctx, false); err != nil {
			if ctx.Err() != nil {
				return r.LastAddConfirmed(), ctx.Err()
			}
			return r.LastAddConfirmed(), err
		}
		// Bookies normally hold a long poll; one that answered at once
		// without news must not make this loop spin.
		if time.Since(start) < backoff {
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(2*backoff, time.Second)
		} else {
			backoff = 10 * time.Millisecond
		}
	}
}

// refreshMetadata reads the metadata again: only while the ledger is not
// closed, unless always (a closed ledger's ensembles still change when
// autorecovery moves copies; its last entry never does).
func (r *Reader) refreshMetadata(ctx context.Context, always bool) error {
	r.mu.Lock()
	closed := r.mu.meta.State == StateClosed
	r.mu.Unlock()
	if closed && !always {
		return nil
	}
	m, err := readMetadata(ctx, r.c.store, r.id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.meta = m
	if m.State == StateClosed {
		r.mu.lac = m.LastEntry
	}
	return nil
}

// pollLAC asks every bookie of the last segment; with longPoll the first
// answer past previous wins.
func (r *Reader) pollLAC(ctx context.Context, longPoll bool, previous int64) (int64, error) {
	r.mu.Lock()
	if r.mu.meta.State == StateClosed {
		lac := r.mu.lac
		r.mu.Unlock()
		return lac, nil
	}
	seg := r.mu.meta.lastSegment()
	r.mu.Unlock()
	timeout := r.c.cfg.ReadTimeout
	var wait time.Duration
	if longPoll {
		wait = 10 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		timeout += wait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		lac int64
		err error
	}
	answers := make(chan answer, len(seg.Bookies))
	for _, addr := range seg.Bookies {
		go func() {
			resp, err := call(ctx, r.c, addr, timeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.ReadLACResponse, error) {
				return b.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: r.id, LongPoll: longPoll, PreviousLac: previous, TimeoutMs: uint32(wait / time.Millisecond)})
			})
			if err != nil {
				answers <- answer{-1, fmt.Errorf("%s: %w", addr, err)}
				return
			}
			answers <- answer{resp.LastAddConfirmed, nil}
		}()
	}
	best, ok := int64(-1), 0
	var errs []error
	for range seg.Bookies {
		a := <-answers
		if a.err != nil {
			// A bookie that never received an entry of this ledger knows
			// nothing of it: not a failure.
			if !errors.Is(a.err, wire.ErrNoSuchLedger) {
				errs = append(errs, a.err)
				continue
			}
		}
		ok++
		best = max(best, a.lac)
		if longPoll && best > previous {
			break
		}
	}
	if ok == 0 {
		return r.LastAddConfirmed(), fmt.Errorf("ledger %d: no bookie answered for its last add confirmed: %w", r.id, errors.Join(errs...))
	}
	return r.raiseLAC(best), nil
}

// Read returns entries first..last (inclusive), in order. Each comes from
// any bookie of its write set, the next replica being asked when one is
// slow or fails; checksums are verified.
func (r *Reader) Read(ctx context.Context, first, last int64) ([]Entry, error) {
	if first < 0 || last < first {
		return nil, fmt.Errorf("%w: read range %d..%d", ErrInvalidArgument, first, last)
	}
	if last-first+1 > MaxReadBatch {
		return nil, fmt.Errorf("%w: read of %d entries, at most %d at a time", ErrInvalidArgument, last-first+1, MaxReadBatch)
	}
	bound := r.LastAddConfirmed()
	if last > bound && !r.Closed() {
		var err error
		if bound, err = r.ReadLAC(ctx); err != nil {
			return nil, err
		}
	}
	if last > bound {
		return nil, fmt.Errorf("%w: ledger %d entry %d, last confirmed is %d", ErrReadPastEnd, r.id, last, bound)
	}
	meta := r.Metadata()
	out, err := r.read(ctx, meta, first, last)
	if errors.Is(err, ErrEntryUnreadable) {
		// The writer may have moved these entries to a new ensemble since
		// the reader last looked at the metadata, or (closed ledgers too)
		// autorecovery moved copies to other bookies.
		if rerr := r.refreshMetadata(ctx, true); rerr == nil {
			if fresh := r.Metadata(); fresh.modRev != meta.modRev {
				return r.read(ctx, fresh, first, last)
			}
		}
	}
	return out, err
}

// read fetches first..last with the given metadata.
func (r *Reader) read(ctx context.Context, meta *Metadata, first, last int64) ([]Entry, error) {
	out := make([]Entry, last-first+1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	sem := make(chan struct{}, readConcurrency)
	for id := first; id <= last; id++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := r.c.readEntry(ctx, meta, id)
			if err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
				return
			}
			out[id-first] = Entry{ID: id, Payload: resp.Payload, Length: resp.Length}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// verify checks that a bookie's answer is the entry asked for, intact.
func verify(ledger, entry int64, resp *bookiepb.ReadEntryResponse) error {
	if resp.EntryId != entry {
		return fmt.Errorf("%w: asked for entry %d, got %d", wire.ErrBadChecksum, entry, resp.EntryId)
	}
	if sum := wire.Checksum(ledger, entry, resp.LastAddConfirmed, resp.Length, resp.Payload); sum != resp.Crc32C {
		return fmt.Errorf("%w: ledger %d entry %d: stored %08x, computed %08x", wire.ErrBadChecksum, ledger, entry, resp.Crc32C, sum)
	}
	return nil
}

// readEntry reads one entry from its write set with speculative retries:
// one bookie is asked, and the next one too when the first fails or has
// not answered within SpeculativeReadTimeout.
func (c *Client) readEntry(ctx context.Context, m *Metadata, entry int64) (*bookiepb.ReadEntryResponse, error) {
	seg := m.segmentFor(entry)
	ws := writeSet(entry, m.Ensemble, m.WriteQuorum)
	// Start at a different replica for consecutive stripes, to spread reads.
	rot := int((entry / int64(m.Ensemble)) % int64(len(ws)))
	order := append(ws[rot:len(ws):len(ws)], ws[:rot]...)

	// The reads still out when one answers are lost to it.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(errSpeculationLost)
	results := make(chan readResult, len(order))
	next, outstanding := 0, 0
	launch := func() {
		go c.readChecked(ctx, m, seg.Bookies[order[next]], entry, nil, results)
		next++
		outstanding++
	}
	launch()
	timer := time.NewTimer(c.cfg.SpeculativeReadTimeout)
	defer timer.Stop()
	var errs []error
	for {
		select {
		case res := <-results:
			outstanding--
			if res.err == nil {
				return res.resp, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", res.addr, res.err))
			if next < len(order) {
				launch()
				timer.Reset(c.cfg.SpeculativeReadTimeout)
			} else if outstanding == 0 {
				return nil, fmt.Errorf("%w: ledger %d entry %d: %w", ErrEntryUnreadable, m.ID, entry, errors.Join(errs...))
			}
		case <-timer.C:
			if next < len(order) {
				launch()
				timer.Reset(c.cfg.SpeculativeReadTimeout)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readResult is one bookie's answer to a read.
type readResult struct {
	addr string
	resp *bookiepb.ReadEntryResponse
	err  error
}

// readChecked reads an entry from one bookie (fencing if masterKey is set),
// verified, and delivers the outcome on out (which must have room).
func (c *Client) readChecked(ctx context.Context, m *Metadata, bookie string, entry int64, masterKey []byte, out chan<- readResult) {
	resp, err := c.readOne(ctx, bookie, m.ID, entry, masterKey)
	out <- readResult{bookie, resp, err}
}

// errSpeculationLost ends the reads still out when another replica
// answered (readEntry): each bookie was slower than SpeculativeReadTimeout
// at least.
var errSpeculationLost = errors.New("another replica answered first")

// readOne reads an entry from one bookie and verifies it (entry id and
// checksum: a mismatch is the bookie's failure); with masterKey set it is
// a fencing (recovery) read. Its latency is recorded for the bookie
// (Client.Metrics): a read lost to another replica's answer as a failure
// (its time so far, a lower bound); not one its caller gave up otherwise,
// nor one the client's closing ended: those are no measure of the bookie.
func (c *Client) readOne(ctx context.Context, bookieID string, ledger, entry int64, masterKey []byte) (*bookiepb.ReadEntryResponse, error) {
	start := time.Now()
	resp, err := call(ctx, c, bookieID, c.cfg.ReadTimeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.ReadEntryResponse, error) {
		return b.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: ledger, EntryId: entry, Fence: masterKey != nil, MasterKey: masterKey})
	})
	if err == nil {
		err = verify(ledger, entry, resp)
	}
	now := time.Now()
	switch {
	case c.isClosed(): // the client's own doing
	case err == nil || ctx.Err() == nil:
		c.reads.With(bookieID).Observe(now, now.Sub(start), err)
	case errors.Is(context.Cause(ctx), errSpeculationLost):
		c.reads.With(bookieID).Observe(now, now.Sub(start), errSpeculationLost)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}
