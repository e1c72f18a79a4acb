package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
)

// The building blocks of re-replication (package bookie/autorecovery):
// copying single entries between bookies, listing what a bookie holds,
// and changing a ledger's ensembles under compare-and-swap.

// WriteSet returns the ensemble positions that store entry.
func WriteSet(entry int64, ensemble, writeQuorum int) []int {
	return writeSet(entry, ensemble, writeQuorum)
}

// PickReplacement chooses a live writable bookie to take position pos of
// segment seg of m, by the placement rules (with the segment's other
// positions) and outside the segment's current bookies.
func (c *Client) PickReplacement(ctx context.Context, m *Metadata, seg, pos int) (string, error) {
	ensemble := slices.Clone(m.Segments[seg].Bookies)
	ensemble[pos] = ""
	next, err := c.pick(ctx, ensemble, m.WriteQuorum, m.Segments[seg].Bookies)
	if err != nil {
		return "", err
	}
	return next[pos], nil
}

// ReadFrom reads an entry of ledger m from one bookie and verifies it
// (entry id and checksum).
func (c *Client) ReadFrom(ctx context.Context, m *Metadata, bookie string, entry int64) (*bookiepb.ReadEntryResponse, error) {
	return c.readOne(ctx, bookie, m.ID, entry, nil)
}

// CopyEntry reads an entry from the first of sources that has an intact
// copy and stores it on dest with a recovery add (accepted even where the
// ledger is fenced). It returns the payload bytes copied. The copy is
// durable on dest when CopyEntry returns nil.
func (c *Client) CopyEntry(ctx context.Context, m *Metadata, entry int64, sources []string, dest string) (int, error) {
	var errs []error
	for _, src := range sources {
		resp, err := c.ReadFrom(ctx, m, src, entry)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		req := &bookiepb.AddEntryRequest{
			LedgerId: m.ID, EntryId: entry, MasterKey: m.MasterKey,
			LastAddConfirmed: resp.LastAddConfirmed, Length: resp.Length, Crc32C: resp.Crc32C,
			Payload: resp.Payload, Recovery: true,
		}
		_, err = call(ctx, c, dest, c.cfg.AddTimeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.AddEntryResponse, error) {
			return b.AddEntry(ctx, req)
		})
		if err != nil {
			return 0, fmt.Errorf("ledger %d entry %d: store on %s: %w", m.ID, entry, dest, err)
		}
		return len(resp.Payload), nil
	}
	return 0, fmt.Errorf("%w: ledger %d entry %d: no intact copy on %v: %w", ErrNoCopy, m.ID, entry, sources, errors.Join(errs...))
}

// ListEntries calls fn with the ids of the ledger's entries that bookie
// holds, in increasing order, a page at a time. A bookie that holds
// nothing of the ledger calls fn never and returns nil.
func (c *Client) ListEntries(ctx context.Context, bookie string, ledgerID int64, fn func(ids []int64) error) error {
	start := int64(0)
	for {
		resp, err := call(ctx, c, bookie, c.cfg.ReadTimeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.ListEntriesResponse, error) {
			return b.ListEntries(ctx, &bookiepb.ListEntriesRequest{LedgerId: ledgerID, StartEntry: start})
		})
		if errors.Is(err, wire.ErrNoSuchLedger) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(resp.EntryIds) > 0 {
			if err := fn(resp.EntryIds); err != nil {
				return err
			}
			start = resp.EntryIds[len(resp.EntryIds)-1] + 1
		}
		if !resp.More || len(resp.EntryIds) == 0 {
			return nil
		}
	}
}

// UpdateMetadata stores m (a Clone of metadata read from this client,
// changed) if the stored copy is still at the revision m was read at:
// metastore.ErrBadVersion otherwise. The bookie -> ledgers index follows
// in the same transaction, with extra. A non-nil guard makes the write
// conditional on it too (metastore.ErrNotOwner).
func (c *Client) UpdateMetadata(ctx context.Context, m *Metadata, guard *metastore.Guard, extra ...metastore.Op) error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("%w: ledger %d: %v", ErrInvalidArgument, m.ID, err)
	}
	if m.modRev == 0 {
		return fmt.Errorf("%w: ledger %d: metadata not read from the store", ErrInvalidArgument, m.ID)
	}
	return writeMetadataGuarded(ctx, c.store, m, guard, extra...)
}

// Store is the metastore the client uses.
func (c *Client) Store() *metastore.Store { return c.store }
