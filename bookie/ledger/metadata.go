package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	// WriterLease is the etcd lease of the writer's session (0: unknown).
	WriterLease int64

	modRev int64 // metastore revision this copy was read or written at
	// indexed are the bookies the stored copy names, each with a key
	// bookies/ledgers/<bookie>/<ledger> written in the same transaction.
	indexed []string
}

// Bookies returns every bookie the metadata names, sorted, without
// repeats.
func (m *Metadata) Bookies() []string {
	var out []string
	for _, s := range m.Segments {
		out = append(out, s.Bookies...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SegmentEnd returns the last entry of segment i: the entry before the
// next segment, or the ledger's last entry (for the last segment of a
// closed ledger; below First when it holds none). For the last segment of
// a ledger that is not closed the end is unknown: math.MaxInt64.
func (m *Metadata) SegmentEnd(i int) int64 {
	if i+1 < len(m.Segments) {
		return m.Segments[i+1].First - 1
	}
	if m.State == StateClosed {
		return m.LastEntry
	}
	return math.MaxInt64
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

// Revision is the metastore revision this copy was read or written at.
func (m *Metadata) Revision() int64 { return m.modRev }

// Clone returns a deep copy that keeps the revision it was read at, for a
// compare-and-swap with Client.UpdateMetadata.
func (m *Metadata) Clone() *Metadata { return m.clone() }

func (m *Metadata) clone() *Metadata {
	c := *m
	c.indexed = slices.Clone(m.indexed)
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
		WriterLease:     m.WriterLease,
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
		WriterLease: p.WriterLease,
		modRev:      modRev,
	}
	for _, s := range p.Segments {
		m.Segments = append(m.Segments, Segment{First: s.FirstEntryId, Bookies: s.Bookies})
	}
	m.indexed = m.Bookies()
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("ledger %d: %w: %w", id, errCorruptMetadata, err)
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

// errCorruptMetadata: stored metadata that does not decode or breaks an
// invariant.
var errCorruptMetadata = errors.New("corrupt metadata")

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
		return nil, fmt.Errorf("ledger %d: %w: %w", id, errCorruptMetadata, err)
	}
	return metadataFromProto(id, &p, kv.ModRevision)
}

// writeMetadata stores m if the stored copy is still at m's revision
// (metastore.ErrBadVersion otherwise) and updates m's revision. In the same
// transaction it keeps the bookie -> ledgers index in step (a key per
// bookie the metadata names) and applies extra.
func writeMetadata(ctx context.Context, store *metastore.Store, m *Metadata, extra ...metastore.Op) error {
	return writeMetadataGuarded(ctx, store, m, nil, extra...)
}

func writeMetadataGuarded(ctx context.Context, store *metastore.Store, m *Metadata, guard *metastore.Guard, extra ...metastore.Op) error {
	raw, err := proto.Marshal(m.toProto())
	if err != nil {
		return err
	}
	expect := m.modRev
	if expect == 0 {
		expect = metastore.MustNotExist
	}
	ops := append([]metastore.Op{metastore.PutOp(metastore.LedgerKey(m.ID), raw, expect)}, indexOps(m.ID, m.indexed, m.Bookies())...)
	rev, err := store.Commit(ctx, guard, append(ops, extra...)...)
	if err != nil {
		return err
	}
	m.modRev, m.indexed = rev, m.Bookies()
	return nil
}

// indexOps moves the index keys of a ledger from the bookies in old to
// those in cur (both sorted).
func indexOps(id int64, old, cur []string) []metastore.Op {
	var ops []metastore.Op
	for _, b := range cur {
		if _, found := slices.BinarySearch(old, b); !found {
			ops = append(ops, metastore.PutOp(metastore.BookieLedgerKey(b, id), nil, metastore.AnyVersion))
		}
	}
	for _, b := range old {
		if _, found := slices.BinarySearch(cur, b); !found {
			ops = append(ops, metastore.DeleteOp(metastore.BookieLedgerKey(b, id), metastore.AnyVersion))
		}
	}
	return ops
}

// markOps marks bookies' copies of a ledger as under-replicated.
func markOps(id int64, bookies []string, reason metapb.UnderReplicated_Reason, by string) []metastore.Op {
	var ops []metastore.Op
	for _, b := range bookies {
		raw, _ := proto.Marshal(&metapb.UnderReplicated{Reason: reason, MarkedAtUnixMs: time.Now().UnixMilli(), MarkedBy: by})
		ops = append(ops, metastore.PutOp(metastore.UnderReplicatedKey(id, b), raw, metastore.AnyVersion))
	}
	return ops
}
