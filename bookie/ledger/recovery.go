package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// recoveryWindow is how many entries recovery reads, and re-replicates,
// at once.
const recoveryWindow = 64

// maxRecoveryAttempts bounds the restarts of a recovery that lost a
// metadata race with another recovery.
const maxRecoveryAttempts = 5

// OpenRecover opens a ledger for reading after making sure its writer can
// add nothing more: if the ledger is not closed, it is marked in recovery,
// fenced on its bookies, its last entry that may have been acknowledged is
// found and re-replicated, and it is closed there. Every entry the old
// writer ever had acknowledged is <= the closed ledger's last entry and
// readable. Safe to run concurrently with other recoveries of the ledger.
func (c *Client) OpenRecover(ctx context.Context, id int64) (*Reader, error) {
	var lastErr error
	for attempt := 0; attempt < maxRecoveryAttempts; attempt++ {
		m, err := readMetadata(ctx, c.store, id)
		if err != nil {
			return nil, err
		}
		if m.State == StateClosed {
			return newReader(c, m, m.LastEntry), nil
		}
		if m.State == StateOpen {
			m.State = StateInRecovery
			if err := writeMetadata(ctx, c.store, m); err != nil {
				if errors.Is(err, metastore.ErrBadVersion) {
					lastErr = err
					continue
				}
				return nil, err
			}
		}
		closed, err := c.recover(ctx, m)
		if errors.Is(err, metastore.ErrBadVersion) {
			lastErr = err // another recovery moved the metadata: start over
			continue
		}
		if err != nil {
			return nil, err
		}
		return newReader(c, closed, closed.LastEntry), nil
	}
	return nil, fmt.Errorf("%w: ledger %d: metadata kept changing: %w", ErrRecoveryIncomplete, id, lastErr)
}

// recover fences, finds the end, re-replicates and closes a ledger marked
// in recovery. It returns the closed metadata.
func (c *Client) recover(ctx context.Context, m *Metadata) (*Metadata, error) {
	log := c.log.With(zap.Int64("ledger", m.ID))
	seg := m.lastSegment()

	// 1. Fence the last ensemble. Fencing is complete when, in every write
	// set, fewer than Qa bookies might still take the old writer's adds.
	fenced := make([]bool, m.Ensemble)
	maxLAC := seg.First - 1 // entries before the last segment are complete
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for p, addr := range seg.Bookies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.fenceOne(ctx, addr, m.ID, m.MasterKey)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", addr, err))
				return
			}
			fenced[p] = true
			maxLAC = max(maxLAC, resp.LastAddConfirmed)
		}()
	}
	wg.Wait()
	if !fencingComplete(fenced, m.WriteQuorum, m.AckQuorum) {
		return nil, fmt.Errorf("%w: ledger %d: fenced %v of ensemble %v: %w", ErrRecoveryIncomplete, m.ID, fenced, seg.Bookies, errors.Join(errs...))
	}

	// 2. Read forward from the highest LAC seen until an entry is proven
	// absent, a window of entries at a time. Recovery reads fence too
	// (BookKeeper issue 2614). An entry after the first absent one was never
	// acknowledged (acknowledgements go in order), whatever its copies.
	var found []*bookiepb.ReadEntryResponse
	for start, done := maxLAC+1, false; !done; start += recoveryWindow {
		type outcome struct {
			o    readOutcome
			resp *bookiepb.ReadEntryResponse
			err  error
		}
		outs := make([]outcome, recoveryWindow)
		var wg sync.WaitGroup
		for i := range outs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, resp, err := c.recoveryRead(ctx, m, start+int64(i))
				outs[i] = outcome{o, resp, err}
			}()
		}
		wg.Wait()
		for _, o := range outs {
			if o.o == entryAbsent {
				done = true
				break
			}
			if o.err != nil {
				return nil, o.err
			}
			found = append(found, o.resp)
		}
	}
	last := maxLAC + int64(len(found))
	var length int64
	switch {
	case len(found) > 0:
		length = found[len(found)-1].Length
	case maxLAC >= 0:
		resp, err := c.readEntry(ctx, m, maxLAC)
		if err != nil {
			return nil, fmt.Errorf("ledger %d: read last confirmed entry %d: %w", m.ID, maxLAC, err)
		}
		length = resp.Length
	}

	// 3. Re-replicate what was found to full write sets. Bookies that did
	// not answer the fence are replaced for the recovered tail, but only in
	// memory until step 4: a replacement must never appear in the metadata
	// before it holds the entries, or a later recovery would count its "no
	// such entry" towards an absence quorum (and could cut acknowledged
	// entries off).
	closed := m.clone()
	if len(found) > 0 {
		var dead []int
		for p, ok := range fenced {
			if !ok {
				dead = append(dead, p)
			}
		}
		if len(dead) > 0 {
			next := slices.Clone(seg.Bookies)
			for _, p := range dead {
				next[p] = ""
			}
			next, err := c.pick(ctx, next, m.WriteQuorum, seg.Bookies)
			if err != nil {
				return nil, fmt.Errorf("%w: ledger %d: replacing unreachable bookies: %w", ErrRecoveryIncomplete, m.ID, err)
			}
			if l := &closed.Segments[len(closed.Segments)-1]; l.First == maxLAC+1 {
				l.Bookies = next
			} else {
				closed.Segments = append(closed.Segments, Segment{First: maxLAC + 1, Bookies: next})
			}
			log.Info("recovery replaces unreachable bookies", zap.Int64("from-entry", maxLAC+1), zap.Strings("ensemble", next))
		}
		if err := c.recoveryAddAll(ctx, closed, found); err != nil {
			return nil, err
		}
	}

	// 4. Close at the last entry, installing any new segment in the same
	// compare-and-swap. Bookies that did not answer the fence may lack
	// entries the old writer completed without them: autorecovery checks.
	var lacking []string
	for p, ok := range fenced {
		if !ok {
			lacking = append(lacking, seg.Bookies[p])
		}
	}
	closed.State, closed.LastEntry, closed.Length = StateClosed, last, length
	if err := writeMetadata(ctx, c.store, closed, markOps(m.ID, lacking, metapb.UnderReplicated_REASON_MISSING, "recovery")...); err != nil {
		return nil, err
	}
	log.Info("ledger recovered and closed", zap.Int64("last-entry", last), zap.Int("recovered", len(found)))
	return closed, nil
}

func (c *Client) fenceOne(ctx context.Context, bookieID string, ledger int64, key []byte) (*bookiepb.FenceResponse, error) {
	return call(ctx, c, bookieID, c.cfg.ReadTimeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.FenceResponse, error) {
		return b.Fence(ctx, &bookiepb.FenceRequest{LedgerId: ledger, MasterKey: key})
	})
}

// recoveryRead asks every bookie of the entry's write set, with fencing
// reads, and decides whether the entry exists (see recoveryDecision).
func (c *Client) recoveryRead(ctx context.Context, m *Metadata, entry int64) (readOutcome, *bookiepb.ReadEntryResponse, error) {
	seg := m.segmentFor(entry)
	ws := writeSet(entry, m.Ensemble, m.WriteQuorum)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan readResult, len(ws))
	for _, p := range ws {
		go c.readChecked(ctx, m, seg.Bookies[p], entry, m.MasterKey, results)
	}
	noSuch := 0
	var errs []error
	for range ws {
		r := <-results
		switch {
		case r.err == nil:
			return entryPresent, r.resp, nil
		case errors.Is(r.err, wire.ErrNoSuchEntry), errors.Is(r.err, wire.ErrNoSuchLedger):
			noSuch++
		default:
			errs = append(errs, fmt.Errorf("%s: %w", r.addr, r.err))
		}
		if recoveryDecision(0, noSuch, m.WriteQuorum, m.AckQuorum) == entryAbsent {
			return entryAbsent, nil, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return entryUnknown, nil, err
	}
	return entryUnknown, nil, fmt.Errorf("%w: ledger %d entry %d: %d of %d bookies said absent, need %d: %w",
		ErrRecoveryIncomplete, m.ID, entry, noSuch, m.WriteQuorum, m.WriteQuorum-m.AckQuorum+1, errors.Join(errs...))
}

// recoveryAddAll re-replicates the found entries, recoveryWindow at a time.
func (c *Client) recoveryAddAll(ctx context.Context, m *Metadata, found []*bookiepb.ReadEntryResponse) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, recoveryWindow)
	errc := make(chan error, len(found))
	for _, e := range found {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			err := c.recoveryAdd(ctx, m, e)
			if err != nil {
				cancel()
			}
			errc <- err
		}()
	}
	var errs []error
	for range found {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// recoveryAdd writes a found entry, as it was, to its whole write set in
// the current metadata, bypassing the fence; it needs Qa acks.
func (c *Client) recoveryAdd(ctx context.Context, m *Metadata, e *bookiepb.ReadEntryResponse) error {
	seg := m.segmentFor(e.EntryId)
	ws := writeSet(e.EntryId, m.Ensemble, m.WriteQuorum)
	req := &bookiepb.AddEntryRequest{
		LedgerId: m.ID, EntryId: e.EntryId, MasterKey: m.MasterKey,
		LastAddConfirmed: e.LastAddConfirmed, Length: e.Length, Crc32C: e.Crc32C,
		Payload: e.Payload, Recovery: true,
	}
	errc := make(chan error, len(ws))
	for _, p := range ws {
		addr := seg.Bookies[p]
		go func() {
			_, err := call(ctx, c, addr, c.cfg.AddTimeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.AddEntryResponse, error) {
				return b.AddEntry(ctx, req)
			})
			if err != nil {
				err = fmt.Errorf("%s: %w", addr, err)
			}
			errc <- err
		}()
	}
	acks := 0
	var errs []error
	for range ws {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		} else {
			acks++
		}
	}
	if acks < m.AckQuorum {
		return fmt.Errorf("%w: ledger %d entry %d re-replicated to %d bookies, need %d: %w",
			ErrRecoveryIncomplete, m.ID, e.EntryId, acks, m.AckQuorum, errors.Join(errs...))
	}
	return nil
}
