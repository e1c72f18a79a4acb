// Package mledger is the managed ledger: a topic partition stored as a chain
// of ledgers on bookies. Appends go to the last (open) ledger; it is rolled
// over to a new one by entry count, size or age; ledgers that every
// subscription has consumed are trimmed by retention. The list of ledgers
// lives in the metastore and only the partition's owner changes it, in
// transactions guarded by its ownership token.
//
// Positions are (ledger id, entry id). Ledger ids increase with creation,
// so positions compare as pairs.
package mledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Position names an entry.
type Position struct {
	Ledger int64
	Entry  int64
}

// Before reports whether p comes before q.
func (p Position) Before(q Position) bool {
	return p.Ledger < q.Ledger || p.Ledger == q.Ledger && p.Entry < q.Entry
}

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }

// Entry is a stored entry.
type Entry struct {
	Pos  Position
	Data []byte
}

var (
	// ErrFenced: another broker took the partition over; this managed
	// ledger can no longer be written.
	ErrFenced = errors.New("mledger: fenced: the partition is owned elsewhere")
	// ErrClosed: the managed ledger was closed.
	ErrClosed = errors.New("mledger: closed")
	// ErrUnavailable: the append was refused for now; retry it.
	ErrUnavailable = errors.New("mledger: temporarily unavailable")
)

// Config holds the rollover and replication settings.
type Config struct {
	// Ensemble, WriteQuorum and AckQuorum of new ledgers.
	Ensemble, WriteQuorum, AckQuorum int
	// A ledger is rolled over once it has MaxEntriesPerLedger entries or
	// MaxSizePerLedger bytes and is at least MinLedgerAge old, or once it
	// is MaxLedgerAge old and not empty. Pulsar's defaults: 50,000
	// entries, 2 GiB, 10 minutes, 4 hours.
	MaxEntriesPerLedger int64
	MaxSizePerLedger    int64
	MinLedgerAge        time.Duration
	MaxLedgerAge        time.Duration
}

// DefaultConfig has Pulsar's rollover defaults and 1/1/1 replication.
func DefaultConfig() Config {
	return Config{
		Ensemble: 1, WriteQuorum: 1, AckQuorum: 1,
		MaxEntriesPerLedger: 50000,
		MaxSizePerLedger:    2 << 30,
		MinLedgerAge:        10 * time.Minute,
		MaxLedgerAge:        4 * time.Hour,
	}
}

// Deps are what a managed ledger works with.
type Deps struct {
	Store   *metastore.Store
	Ledgers *ledger.Client
	// Guard is the partition's ownership token; every metadata write is
	// guarded by it.
	Guard *metastore.Guard
	Cache *Cache
	// StorageReads, if set, counts the entries read from the bookies
	// (reads the cache did not serve).
	StorageReads *atomic.Int64
	// OnFenced, if set, is called once, in a goroutine of its own, when the
	// managed ledger learns that another owner fenced it.
	OnFenced func()
	Log      *zap.Logger
}

// ManagedLedger is one partition's storage. Safe for concurrent use.
type ManagedLedger struct {
	name string // tenant/namespace/topic
	d    Deps
	log  *zap.Logger

	mu struct {
		sync.Mutex
		cfg     Config
		ledgers []*metapb.LedgerRef // closed ones, then the current one
		modRev  int64               // revision of the stored ledger list
		writer  *ledger.Writer      // nil while rolling over
		// assigned and assignedBytes count the appends handed to writer,
		// completed or not: a ledger is full when they reach the limits,
		// so that appends in flight never overshoot them.
		assigned, assignedBytes int64
		rolling                 bool
		rollingFrom             *ledger.Writer // the writer being closed
		// recovering: the rollover replaces a failed ledger; appends are
		// refused meanwhile (see AppendAsync).
		recovering bool
		queue      []*appendOp // appends waiting for the next ledger
		err        error       // terminal: fenced or closed
		last       Position    // last confirmed entry; Ledger -1 if none
		moved      chan struct{}
		readers    map[int64]*ledger.Reader // of closed ledgers
	}
	wg sync.WaitGroup // rollovers

	// metaMu serializes the read-modify-write cycles of the stored ledger
	// list (new ledger, trim, close), so that they never race each other.
	// Taken before mu.
	metaMu sync.Mutex
}

type appendOp struct {
	ctx  context.Context
	data []byte
	cb   func(Position, error)
}

// Open loads a partition's ledger list, recovers its last ledger if it was
// left open (fencing the previous owner's writer), and starts a new ledger.
func Open(ctx context.Context, name string, cfg Config, d Deps) (*ManagedLedger, error) {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	ml := &ManagedLedger{name: name, d: d, log: d.Log.With(zap.String("topic", name))}
	ml.mu.cfg = cfg
	ml.mu.moved = make(chan struct{})
	ml.mu.readers = make(map[int64]*ledger.Reader)
	ml.mu.last = Position{-1, -1}

	info := &metapb.ManagedLedgerInfo{}
	kv, err := d.Store.Get(ctx, metastore.ManagedLedgerKey(name))
	switch {
	case err == nil:
		if err := proto.Unmarshal(kv.Value, info); err != nil {
			return nil, fmt.Errorf("mledger %s: corrupt ledger list: %w", name, err)
		}
		ml.mu.modRev = kv.ModRevision
	case errors.Is(err, metastore.ErrNotFound):
		ml.mu.modRev = metastore.MustNotExist
	default:
		return nil, err
	}
	ml.mu.ledgers = info.Ledgers
	if n := len(ml.mu.ledgers); n > 0 && !ml.mu.ledgers[n-1].Closed {
		ref := ml.mu.ledgers[n-1]
		r, err := d.Ledgers.OpenRecover(ctx, ref.LedgerId)
		switch {
		case errors.Is(err, ledger.ErrNoSuchLedger):
			ml.mu.ledgers = ml.mu.ledgers[:n-1] // created, never written, then lost
		case err != nil:
			return nil, fmt.Errorf("mledger %s: recover ledger %d: %w", name, ref.LedgerId, err)
		default:
			m := r.Metadata()
			ref.Entries, ref.Size, ref.Closed, ref.ClosedAtUnixMs = m.LastEntry+1, m.Length, true, time.Now().UnixMilli()
			ml.mu.readers[ref.LedgerId] = r
		}
	}
	for i := len(ml.mu.ledgers) - 1; i >= 0; i-- {
		if ref := ml.mu.ledgers[i]; ref.Entries > 0 {
			ml.mu.last = Position{ref.LedgerId, ref.Entries - 1}
			break
		}
	}
	w, err := ml.createLedger(ctx)
	if err != nil {
		return nil, err
	}
	if err := ml.addLedger(ctx, w); err != nil {
		return nil, err
	}
	return ml, nil
}

// Name is "tenant/namespace/topic".
func (ml *ManagedLedger) Name() string { return ml.name }

// SetConfig changes rollover and replication settings for the next ledgers.
func (ml *ManagedLedger) SetConfig(cfg Config) {
	ml.mu.Lock()
	ml.mu.cfg = cfg
	ml.mu.Unlock()
}

// RollIfDue rolls the current ledger over if it is full or MaxLedgerAge
// old and not empty, as an append would. Call it now and then: a ledger
// nobody appends to is otherwise never closed, and so never trimmed.
func (ml *ManagedLedger) RollIfDue() {
	ml.mu.Lock()
	w := ml.mu.writer
	ml.mu.Unlock()
	if w != nil {
		ml.maybeRollover(w, false)
	}
}

func (ml *ManagedLedger) createLedger(ctx context.Context) (*ledger.Writer, error) {
	ml.mu.Lock()
	cfg := ml.mu.cfg
	ml.mu.Unlock()
	w, err := ml.d.Ledgers.Create(ctx, ledger.CreateOptions{
		Ensemble: cfg.Ensemble, WriteQuorum: cfg.WriteQuorum, AckQuorum: cfg.AckQuorum,
		Custom: map[string][]byte{"topic": []byte(ml.name)},
	})
	if err != nil {
		return nil, fmt.Errorf("mledger %s: create ledger: %w", ml.name, err)
	}
	return w, nil
}

// addLedger makes w the current ledger: the list with it is stored first.
// On failure the new ledger is deleted again.
func (ml *ManagedLedger) addLedger(ctx context.Context, w *ledger.Writer) error {
	ml.metaMu.Lock()
	defer ml.metaMu.Unlock()
	ml.mu.Lock()
	ledgers := append(slices.Clone(ml.mu.ledgers), &metapb.LedgerRef{LedgerId: w.ID(), CreatedAtUnixMs: time.Now().UnixMilli()})
	rev := ml.mu.modRev
	ml.mu.Unlock()
	newRev, err := ml.store(ctx, ledgers, rev)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w.Close(cctx)
		ml.d.Ledgers.Delete(cctx, w.ID())
		cancel()
		return err
	}
	ml.mu.Lock()
	ml.mu.ledgers, ml.mu.modRev, ml.mu.writer = ledgers, newRev, w
	ml.mu.assigned, ml.mu.assignedBytes = 0, 0
	ml.mu.Unlock()
	ml.log.Debug("ledger added", zap.Int64("ledger", w.ID()))
	return nil
}

// store writes the ledger list, guarded by the ownership token.
func (ml *ManagedLedger) store(ctx context.Context, ledgers []*metapb.LedgerRef, rev int64) (int64, error) {
	raw, err := proto.Marshal(&metapb.ManagedLedgerInfo{Ledgers: ledgers})
	if err != nil {
		return 0, err
	}
	newRev, err := ml.d.Store.Commit(ctx, ml.d.Guard, metastore.PutOp(metastore.ManagedLedgerKey(ml.name), raw, rev))
	if errors.Is(err, metastore.ErrNotOwner) {
		ml.fence()
		return 0, fmt.Errorf("%w: %s: %v", ErrFenced, ml.name, err)
	}
	if err != nil {
		return 0, fmt.Errorf("mledger %s: store ledger list: %w", ml.name, err)
	}
	return newRev, nil
}

// fence makes the managed ledger refuse everything from now on.
func (ml *ManagedLedger) fence() {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.mu.err == nil {
		ml.mu.err = fmt.Errorf("%w: %s", ErrFenced, ml.name)
		ml.log.Warn("managed ledger fenced: the partition is owned elsewhere")
		if ml.d.OnFenced != nil {
			go ml.d.OnFenced()
		}
	}
	ml.failQueueLocked(ml.mu.err)
}

func (ml *ManagedLedger) failQueueLocked(err error) {
	q := ml.mu.queue
	ml.mu.queue = nil
	for _, op := range q {
		op.cb(Position{}, err)
	}
}

// Append stores data as the next entry and returns its position.
func (ml *ManagedLedger) Append(ctx context.Context, data []byte) (Position, error) {
	type res struct {
		pos Position
		err error
	}
	ch := make(chan res, 1)
	ml.AppendAsync(ctx, data, func(p Position, err error) { ch <- res{p, err} })
	select {
	case r := <-ch:
		return r.pos, r.err
	case <-ctx.Done():
		return Position{}, ctx.Err()
	}
}

// AppendAsync stores data as the next entry; cb gets its position or an
// error. Entries are stored in the order of the AppendAsync calls, and
// every success is reported before any later failure: once an append
// failed, every append made before the failure was reported fails too
// (appends arriving while the failed ledger is being replaced are
// refused), so that a client that resends from its first failure keeps
// its order. cb may run before AppendAsync returns (with the managed
// ledger's lock held): it must not block nor call the managed ledger.
func (ml *ManagedLedger) AppendAsync(ctx context.Context, data []byte, cb func(Position, error)) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.mu.err != nil {
		cb(Position{}, ml.mu.err)
		return
	}
	if ml.mu.rolling && ml.mu.recovering {
		cb(Position{}, fmt.Errorf("%w: %s: a ledger failed and is being replaced", ErrUnavailable, ml.name))
		return
	}
	if ml.mu.rolling || ml.mu.writer == nil {
		ml.mu.queue = append(ml.mu.queue, &appendOp{ctx: ctx, data: data, cb: cb})
		return
	}
	ml.appendLocked(&appendOp{ctx: ctx, data: data, cb: cb})
}

// appendLocked hands op to the current writer. Holding the lock keeps the
// writer's order the same as the callers'.
func (ml *ManagedLedger) appendLocked(op *appendOp) {
	w := ml.mu.writer
	lid := w.ID()
	err := w.AppendAsync(op.ctx, op.data, func(id int64, err error) { ml.appended(w, Position{lid, id}, op, err) })
	if err != nil {
		op.cb(Position{}, err)
		return
	}
	ml.mu.assigned++
	ml.mu.assignedBytes += int64(len(op.data))
	if ml.fullLocked() {
		// This entry is the ledger's last: later appends queue for the next
		// one, and the rollover closes w once the ones in flight complete.
		ml.startRolloverLocked(w, false)
	}
}

// fullLocked reports whether the current ledger has its share of entries
// or bytes and is old enough to be rolled over.
func (ml *ManagedLedger) fullLocked() bool {
	cfg := ml.mu.cfg
	if ml.mu.assigned < cfg.MaxEntriesPerLedger && ml.mu.assignedBytes < cfg.MaxSizePerLedger {
		return false
	}
	return time.Since(time.UnixMilli(ml.mu.ledgers[len(ml.mu.ledgers)-1].CreatedAtUnixMs)) >= cfg.MinLedgerAge
}

// appended runs when the writer completed (or failed) an entry.
func (ml *ManagedLedger) appended(w *ledger.Writer, pos Position, op *appendOp, err error) {
	if err != nil {
		op.cb(Position{}, err)
		if errors.Is(err, ledger.ErrFenced) {
			ml.fence()
			return
		}
		ml.maybeRollover(w, true)
		return
	}
	// Cached before it becomes visible: a tailing reader woken by moved
	// finds it there and never goes to the bookies for it.
	if ml.d.Cache != nil {
		ml.d.Cache.Put(ml.name, pos, op.data)
	}
	ml.mu.Lock()
	if ml.mu.last.Before(pos) {
		ml.mu.last = pos
		close(ml.mu.moved)
		ml.mu.moved = make(chan struct{})
	}
	ml.mu.Unlock()
	op.cb(pos, nil)
	ml.maybeRollover(w, false)
}

// maybeRollover starts a rollover of w if it is still the current ledger
// and it is full or old enough, or at once if an append to it failed.
func (ml *ManagedLedger) maybeRollover(w *ledger.Writer, failed bool) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if ml.mu.err != nil {
		return
	}
	if failed && ml.mu.rolling && ml.mu.rollingFrom == w && !ml.mu.recovering {
		// An entry of the ledger being closed failed. The appends queued
		// meanwhile come after it: they must not be stored before its
		// producer resends it, so they fail too, as later ones will until
		// the new ledger is in place.
		ml.mu.recovering = true
		ml.failQueueLocked(fmt.Errorf("%w: %s: a ledger failed and is being replaced", ErrUnavailable, ml.name))
		return
	}
	if ml.mu.rolling || ml.mu.writer != w {
		return
	}
	if !failed {
		cfg := ml.mu.cfg
		age := time.Since(time.UnixMilli(ml.mu.ledgers[len(ml.mu.ledgers)-1].CreatedAtUnixMs))
		old := ml.mu.assigned > 0 && age >= cfg.MaxLedgerAge
		if !ml.fullLocked() && !old {
			return
		}
	}
	ml.startRolloverLocked(w, failed)
}

// startRolloverLocked stops handing appends to w and starts rolling over.
func (ml *ManagedLedger) startRolloverLocked(w *ledger.Writer, failed bool) {
	ml.mu.rolling, ml.mu.rollingFrom = true, w
	ml.mu.recovering = failed
	ml.mu.writer = nil
	ml.wg.Add(1)
	go ml.rollover(w)
}

// rollover closes w, adds a new ledger and sends it the queued appends.
func (ml *ManagedLedger) rollover(w *ledger.Writer) {
	defer ml.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := w.Close(ctx)
	if errors.Is(err, ledger.ErrFenced) {
		ml.fence()
		return
	}
	if err != nil {
		// The ledger stays open in the metadata; the next owner (or our own
		// next Open) recovers it. Carry on with a new one.
		ml.log.Warn("closing the current ledger failed", zap.Int64("ledger", w.ID()), zap.Error(err))
	}
	ml.mu.Lock()
	if ref := ml.mu.ledgers[len(ml.mu.ledgers)-1]; ref.LedgerId == w.ID() && err == nil {
		ref.Entries, ref.Size, ref.Closed, ref.ClosedAtUnixMs = w.LastAddConfirmed()+1, w.Length(), true, time.Now().UnixMilli()
	}
	ml.mu.Unlock()
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		nw, err := ml.createLedger(ctx)
		if err == nil {
			err = ml.addLedger(ctx, nw)
		}
		if err == nil {
			break
		}
		if errors.Is(err, ErrFenced) || ctx.Err() != nil {
			ml.mu.Lock()
			if ml.mu.err == nil {
				ml.mu.err = err
			}
			ml.failQueueLocked(err)
			ml.mu.rolling, ml.mu.recovering, ml.mu.rollingFrom = false, false, nil
			ml.mu.Unlock()
			return
		}
		ml.log.Warn("rollover: new ledger failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
	}
	ml.mu.Lock()
	ml.mu.rolling, ml.mu.recovering, ml.mu.rollingFrom = false, false, nil
	q := ml.mu.queue
	ml.mu.queue = nil
	for i, op := range q {
		if ml.mu.err != nil {
			op.cb(Position{}, ml.mu.err)
			continue
		}
		if ml.mu.writer == nil {
			// The queue filled the new ledger too: the rest waits for the
			// next one (the lock kept anything from queueing meanwhile).
			ml.mu.queue = append([]*appendOp(nil), q[i:]...)
			break
		}
		ml.appendLocked(op)
	}
	ml.mu.Unlock()
	ml.log.Debug("rolled over", zap.Int64("closed", w.ID()))
}

// LastConfirmed is the position of the last stored entry (Ledger -1 if the
// partition is empty).
func (ml *ManagedLedger) LastConfirmed() Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.mu.last
}

// WaitAfter blocks until an entry after p is stored, or ctx ends.
func (ml *ManagedLedger) WaitAfter(ctx context.Context, p Position) error {
	for {
		ml.mu.Lock()
		if p.Before(ml.mu.last) {
			ml.mu.Unlock()
			return nil
		}
		if err := ml.mu.err; err != nil {
			ml.mu.Unlock()
			return err
		}
		moved := ml.mu.moved
		ml.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Moved returns a channel closed when the next entry is stored (or the
// managed ledger closes). Take it before checking for entries, then wait.
func (ml *ManagedLedger) Moved() <-chan struct{} {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.mu.moved
}

// EntriesBetween counts the entries after from up to and including to.
func (ml *ManagedLedger) EntriesBetween(from, to Position) int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for i, ref := range ml.mu.ledgers {
		entries := ref.Entries
		if i == len(ml.mu.ledgers)-1 && !ref.Closed && ref.LedgerId == ml.mu.last.Ledger {
			entries = ml.mu.last.Entry + 1
		}
		lo, hi := int64(0), entries-1 // this ledger's entries in (from, to]
		if ref.LedgerId < from.Ledger || ref.LedgerId > to.Ledger {
			continue
		}
		if ref.LedgerId == from.Ledger {
			lo = from.Entry + 1
		}
		if ref.LedgerId == to.Ledger {
			hi = min(hi, to.Entry)
		}
		if hi >= lo {
			n += hi - lo + 1
		}
	}
	return n
}

// First is the position of the first stored entry, or Next(LastConfirmed)
// if there is none.
func (ml *ManagedLedger) First() Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for _, ref := range ml.mu.ledgers {
		if ref.Entries > 0 || !ref.Closed {
			return Position{ref.LedgerId, 0}
		}
	}
	return ml.nextLocked(ml.mu.last)
}

// Next returns the position after p, whether or not an entry is there yet.
func (ml *ManagedLedger) Next(p Position) Position {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.nextLocked(p)
}

func (ml *ManagedLedger) nextLocked(p Position) Position {
	for i, ref := range ml.mu.ledgers {
		if ref.LedgerId < p.Ledger {
			continue
		}
		if ref.LedgerId > p.Ledger {
			// p's ledger is gone (trimmed) or p is before everything.
			if ref.Entries > 0 || !ref.Closed {
				return Position{ref.LedgerId, 0}
			}
			continue
		}
		if !ref.Closed || p.Entry+1 < ref.Entries {
			return Position{p.Ledger, p.Entry + 1}
		}
		for _, nxt := range ml.mu.ledgers[i+1:] {
			if nxt.Entries > 0 || !nxt.Closed {
				return Position{nxt.LedgerId, 0}
			}
		}
		return Position{p.Ledger, p.Entry + 1}
	}
	return Position{p.Ledger, p.Entry + 1}
}

// Read returns up to max entries from p on (p included), all from p's
// ledger, no further than the last confirmed entry; none if there is
// nothing at p yet. Recently written entries come from the cache.
func (ml *ManagedLedger) Read(ctx context.Context, p Position, max int) ([]Entry, error) {
	ml.mu.Lock()
	if ml.mu.err != nil && errors.Is(ml.mu.err, ErrClosed) {
		ml.mu.Unlock()
		return nil, ml.mu.err
	}
	p = ml.normalizeLocked(p)
	if ml.mu.last.Before(p) || ml.mu.last.Ledger < 0 {
		ml.mu.Unlock()
		return nil, nil
	}
	last := p.Entry + int64(max) - 1
	var ref *metapb.LedgerRef
	for _, r := range ml.mu.ledgers {
		if r.LedgerId == p.Ledger {
			ref = r
		}
	}
	if ref == nil {
		ml.mu.Unlock()
		return nil, nil
	}
	if ref.Closed {
		last = min(last, ref.Entries-1)
	}
	if p.Ledger == ml.mu.last.Ledger {
		last = min(last, ml.mu.last.Entry)
	}
	var src interface {
		Read(context.Context, int64, int64) ([]ledger.Entry, error)
	}
	if ml.mu.writer != nil && ml.mu.writer.ID() == p.Ledger {
		src = ml.mu.writer.Reader()
	} else if r := ml.mu.readers[p.Ledger]; r != nil {
		src = r
	}
	ml.mu.Unlock()
	if last < p.Entry {
		return nil, nil
	}
	out := make([]Entry, 0, last-p.Entry+1)
	// The cache holds the tail. What it has from p on is returned alone
	// (the caller reads on from there); if it does not have p, the bookies
	// are asked for the entries before the first one it has, so that a
	// reader catching up meets the cached tail and reads no more of it
	// from storage.
	if ml.d.Cache != nil {
		for e := p.Entry; e <= last; e++ {
			data, ok := ml.d.Cache.Get(ml.name, Position{p.Ledger, e})
			if !ok {
				break
			}
			out = append(out, Entry{Pos: Position{p.Ledger, e}, Data: data})
		}
		if len(out) > 0 {
			return out, nil
		}
		for e := p.Entry + 1; e <= last; e++ {
			if ml.d.Cache.Has(ml.name, Position{p.Ledger, e}) {
				last = e - 1
				break
			}
		}
	}
	if src == nil {
		r, err := ml.d.Ledgers.Open(ctx, p.Ledger)
		if err != nil {
			return nil, fmt.Errorf("mledger %s: open ledger %d: %w", ml.name, p.Ledger, err)
		}
		ml.mu.Lock()
		if ref.Closed {
			ml.mu.readers[p.Ledger] = r
		}
		ml.mu.Unlock()
		src = r
	}
	es, err := src.Read(ctx, p.Entry, last)
	if err != nil {
		return nil, fmt.Errorf("mledger %s: read %s..%d: %w", ml.name, p, last, err)
	}
	for _, e := range es {
		out = append(out, Entry{Pos: Position{p.Ledger, e.ID}, Data: e.Payload})
	}
	if ml.d.StorageReads != nil {
		ml.d.StorageReads.Add(int64(len(es)))
	}
	return out, nil
}

// normalizeLocked moves p to the first entry at or after it that can
// exist: past the end of a closed ledger to the next one, past trimmed
// ledgers to the first one kept.
func (ml *ManagedLedger) normalizeLocked(p Position) Position {
	for _, ref := range ml.mu.ledgers {
		if ref.LedgerId < p.Ledger {
			continue
		}
		if ref.LedgerId > p.Ledger {
			p = Position{ref.LedgerId, 0}
		}
		if ref.Closed && p.Entry >= ref.Entries {
			continue
		}
		return p
	}
	return p
}

// Ledgers returns a copy of the ledger list (for stats).
func (ml *ManagedLedger) Ledgers() []*metapb.LedgerRef {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	out := make([]*metapb.LedgerRef, len(ml.mu.ledgers))
	for i, r := range ml.mu.ledgers {
		out[i] = proto.Clone(r).(*metapb.LedgerRef)
	}
	if w := ml.mu.writer; w != nil && len(out) > 0 {
		cur := out[len(out)-1]
		cur.Entries, cur.Size = w.LastAddConfirmed()+1, w.Length()
	}
	return out
}

// Close stops accepting appends, waits for those in flight and closes the
// current ledger, so that the next owner needs no recovery.
func (ml *ManagedLedger) Close(ctx context.Context) error {
	ml.mu.Lock()
	if ml.mu.err != nil && errors.Is(ml.mu.err, ErrClosed) {
		ml.mu.Unlock()
		return nil
	}
	fenced := ml.mu.err != nil
	ml.mu.err = fmt.Errorf("%w: %s", ErrClosed, ml.name)
	ml.failQueueLocked(ml.mu.err)
	w := ml.mu.writer
	ml.mu.writer = nil
	close(ml.mu.moved)
	ml.mu.moved = make(chan struct{})
	ml.mu.Unlock()
	ml.wg.Wait()
	if w == nil || fenced {
		if w != nil {
			w.Close(ctx)
		}
		return nil
	}
	if err := w.Close(ctx); err != nil {
		return fmt.Errorf("mledger %s: close ledger %d: %w", ml.name, w.ID(), err)
	}
	ml.metaMu.Lock()
	defer ml.metaMu.Unlock()
	ml.mu.Lock()
	ledgers := slices.Clone(ml.mu.ledgers)
	if ref := ledgers[len(ledgers)-1]; ref.LedgerId == w.ID() {
		ledgers[len(ledgers)-1] = &metapb.LedgerRef{LedgerId: ref.LedgerId, CreatedAtUnixMs: ref.CreatedAtUnixMs,
			Entries: w.LastAddConfirmed() + 1, Size: w.Length(), Closed: true, ClosedAtUnixMs: time.Now().UnixMilli()}
	}
	rev := ml.mu.modRev
	ml.mu.Unlock()
	newRev, err := ml.store(ctx, ledgers, rev)
	if err != nil {
		return err
	}
	ml.mu.Lock()
	ml.mu.ledgers, ml.mu.modRev = ledgers, newRev
	ml.mu.Unlock()
	return nil
}
