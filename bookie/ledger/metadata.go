package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// State of a ledger.
type State int

const (
	StateOpen       State = State(metapb.LedgerState_LEDGER_STATE_OPEN)
	StateInRecovery State = State(metapb.LedgerState_LEDGER_STATE_IN_RECOVERY)
	StateClosed     State = State(metapb.LedgerState_LEDGER_STATE_CLOSED)
)

func (s State) String() string {
	switch s {
	case StateOpen:
		return "open"
	case StateInRecovery:
		return "in-recovery"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Segment is a range of entries stored on one ensemble, from First up to
// the next segment's First (or the end).
type Segment struct {
	First   int64
	Bookies []string
}

// Metadata describes a ledger. It is kept in the metastore at
// ledgers/<id>; every change is a compare-and-swap on its revision.
type Metadata struct {
	ID          int64
	Ensemble    int
	WriteQuorum int
	AckQuorum   int
	State       State
	// LastEntry (-1: empty) and Length are authoritative once Closed.
	LastEntry int64
	Length    int64
	Segments  []Segment
	MasterKey []byte
	CreatedAt time.Time
	Custom    map[string][]byte

	modRev int64 // metastore revision this copy was read or written at
}

// segmentFor returns the segment that holds entry.
func (m *Metadata) segmentFor(entry int64) Segment {
	for i := len(m.Segments) - 1; i > 0; i-- {
		if entry >= m.Segments[i].First {
			return m.Segments[i]
		}
	}
	return m.Segments[0]
}

func (m *Metadata) lastSegment() Segment { return m.Segments[len(m.Segments)-1] }

func (m *Metadata) clone() *Metadata {
	c := *m
	c.Segments = make([]Segment, len(m.Segments))
	for i, s := range m.Segments {
		c.Segments[i] = Segment{First: s.First, Bookies: slices.Clone(s.Bookies)}
	}
	return &c
}

func (m *Metadata) toProto() *metapb.LedgerMetadata {
	p := &metapb.LedgerMetadata{
		EnsembleSize:    int32(m.Ensemble),
		WriteQuorum:     int32(m.WriteQuorum),
		AckQuorum:       int32(m.AckQuorum),
		State:           metapb.LedgerState(m.State),
		LastEntryId:     m.LastEntry,
		Length:          m.Length,
		MasterKey:       m.MasterKey,
		CreatedAtUnixMs: m.CreatedAt.UnixMilli(),
		Custom:          m.Custom,
	}
	for _, s := range m.Segments {
		p.Segments = append(p.Segments, &metapb.Segment{FirstEntryId: s.First, Bookies: s.Bookies})
	}
	return p
}

func metadataFromProto(id int64, p *metapb.LedgerMetadata, modRev int64) (*Metadata, error) {
	m := &Metadata{
		ID:          id,
		Ensemble:    int(p.EnsembleSize),
		WriteQuorum: int(p.WriteQuorum),
		AckQuorum:   int(p.AckQuorum),
		State:       State(p.State),
		LastEntry:   p.LastEntryId,
		Length:      p.Length,
		MasterKey:   p.MasterKey,
		CreatedAt:   time.UnixMilli(p.CreatedAtUnixMs),
		Custom:      p.Custom,
		modRev:      modRev,
	}
	for _, s := range p.Segments {
		m.Segments = append(m.Segments, Segment{First: s.FirstEntryId, Bookies: s.Bookies})
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("ledger %d: corrupt metadata: %w", id, err)
	}
	return m, nil
}

// validate checks the invariants every stored metadata must keep.
func (m *Metadata) validate() error {
	if err := checkQuorums(m.Ensemble, m.WriteQuorum, m.AckQuorum); err != nil {
		return err
	}
	switch m.State {
	case StateOpen, StateInRecovery, StateClosed:
	default:
		return fmt.Errorf("unknown state %d", m.State)
	}
	if len(m.Segments) == 0 || m.Segments[0].First != 0 {
		return errors.New("segments must start at entry 0")
	}
	for i, s := range m.Segments {
		if len(s.Bookies) != m.Ensemble {
			return fmt.Errorf("segment %d has %d bookies, ensemble size is %d", i, len(s.Bookies), m.Ensemble)
		}
		if i > 0 && s.First <= m.Segments[i-1].First {
			return fmt.Errorf("segment %d starts at %d, not after %d", i, s.First, m.Segments[i-1].First)
		}
	}
	if len(m.MasterKey) == 0 {
		return errors.New("no master key")
	}
	return nil
}

// maxEnsemble bounds E: acks are tracked in a 64-bit set.
const maxEnsemble = 64

func checkQuorums(e, qw, qa int) error {
	if !(e >= qw && qw >= qa && qa >= 1) || e > maxEnsemble {
		return fmt.Errorf("%w: ensemble %d, write quorum %d, ack quorum %d: need %d >= E >= Qw >= Qa >= 1", ErrInvalidArgument, e, qw, qa, maxEnsemble)
	}
	return nil
}

// readMetadata loads a ledger's metadata.
func readMetadata(ctx context.Context, store *metastore.Store, id int64) (*Metadata, error) {
	kv, err := store.Get(ctx, metastore.LedgerKey(id))
	if errors.Is(err, metastore.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrNoSuchLedger, id)
	}
	if err != nil {
		return nil, err
	}
	var p metapb.LedgerMetadata
	if err := proto.Unmarshal(kv.Value, &p); err != nil {
		return nil, fmt.Errorf("ledger %d: corrupt metadata: %w", id, err)
	}
	return metadataFromProto(id, &p, kv.ModRevision)
}

// writeMetadata stores m if the stored copy is still at m's revision
// (metastore.ErrBadVersion otherwise) and updates m's revision.
func writeMetadata(ctx context.Context, store *metastore.Store, m *Metadata) error {
	raw, err := proto.Marshal(m.toProto())
	if err != nil {
		return err
	}
	rev, err := store.CompareAndSwap(ctx, metastore.LedgerKey(m.ID), raw, m.modRev)
	if err != nil {
		return err
	}
	m.modRev = rev
	return nil
}
