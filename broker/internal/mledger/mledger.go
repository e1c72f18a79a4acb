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
	"bytes"
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
	// ErrNotEnoughBookies: the append was refused because no ledger can be
	// created: fewer bookies are writable than the ensemble size. What is
	// stored stays readable; retry the append once bookies are back (the
	// managed ledger keeps trying to create a ledger). It wraps
	// ledger.ErrNotEnoughBookies.
	ErrNotEnoughBookies = fmt.Errorf("mledger: no ledger can be created: %w", ledger.ErrNotEnoughBookies)
	// ErrTerminated: the append was refused because the managed ledger
	// was terminated (Terminate): it takes no more entries, ever.
	ErrTerminated = errors.New("mledger: terminated")
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
	// OnFenced, if set, is called once when the managed ledger learns that
	// another owner fenced it, from the managed ledger's own goroutine: it
	// must not block, nor call the managed ledger (start a goroutine of
	// its owner's to unload it).
	OnFenced func()
	Log      *zap.Logger
}

// ManagedLedger is one partition's storage. Safe for concurrent use.
//
// The ledger list's protocol (rollover, trimming, closing) is the pure
// listState, fed under mu; its I/O actions are carried out one at a time
// by a run goroutine, started when there is something to do and gone when
// there is not.
type ManagedLedger struct {
	name string // tenant/namespace/topic
	d    Deps
	log  *zap.Logger

	mu struct {
		sync.Mutex
		cfg Config
		st  *listState
		// writers are the open writers this managed ledger created: the
		// current ledger's, and one created and not yet installed.
		writers map[int64]*ledger.Writer
		// writer is the current ledger's, set at install; appends go to it
		// while st.takesAppends.
		writer *ledger.Writer
		// assigned and assignedBytes count the appends handed to writer,
		// completed or not: a ledger is full when they reach the limits,
		// so that appends in flight never overshoot them.
		assigned, assignedBytes int64
		queue                   []*appendOp              // appends waiting for the next ledger
		err                     error                    // terminal: fenced or closed
		last                    Position                 // last confirmed entry; Ledger -1 if none
		moved                   chan struct{}            // made by movedChanLocked when taken; nil: nobody waits
		readers                 map[int64]*ledger.Reader // of closed ledgers
		// actions for run to carry out, in order; running: a run
		// goroutine is on them.
		actions  []action
		running  bool
		trimWait chan trimResult // the Trim waiting for its outcome
		// termWait are the Terminates waiting for their outcome.
		termWait []chan error
		// createFailing: ledger creation failed and has not succeeded
		// since (its failures are logged once, not at every retry).
		createFailing bool
	}
	// terminating is set once Terminate is called (or the list was
	// opened terminated), never cleared: read without mu, by callers that
	// hold locks an append's callback takes (see Terminating).
	terminating atomic.Bool
	wg          sync.WaitGroup     // run goroutines
	wake        chan struct{}      // cuts run's backoff short (Close: no need to wait)
	runCtx      context.Context    // cancelled when Close gives up: run abandons
	runCancel   context.CancelFunc //
	done        chan struct{}      // closed when the list's protocol is done
}

type appendOp struct {
	ctx  context.Context
	data []byte
	cb   func(Position, error)
}

type trimResult struct {
	ids []int64
	err error
}

// Timeouts of one attempt of each I/O step of the list's protocol; a
// failed step is tried again, backing off up to maxStepBackoff.
const (
	closeWriterTimeout = time.Minute // waits for the appends in flight
	recoverTimeout     = time.Minute
	createTimeout      = 30 * time.Second
	storeTimeout       = 15 * time.Second
	maxStepBackoff     = 5 * time.Second
)

// Open loads a partition's ledger list, recovers every ledger in it left
// open (the last one, whose writer was the previous owner's, and any other:
// an older broker version could leave one), which fences the previous
// owner's writer, and starts a new ledger.
//
// When no ledger can be created because fewer bookies are writable than
// the ensemble size, Open still succeeds: it stores the list with every
// ledger closed, serves reads of what is stored, refuses appends with
// ErrNotEnoughBookies, and keeps trying to create a ledger in the
// background (with backoff, until Close); once one is created, appends
// are taken again.
func Open(ctx context.Context, name string, cfg Config, d Deps) (*ManagedLedger, error) {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	ml := &ManagedLedger{name: name, d: d, log: d.Log.With(zap.String("topic", name)), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	ml.runCtx, ml.runCancel = context.WithCancel(context.Background())
	ml.mu.cfg = cfg
	ml.mu.readers = make(map[int64]*ledger.Reader)
	ml.mu.writers = make(map[int64]*ledger.Writer)
	ml.mu.last = Position{-1, -1}
	fail := func(err error) (*ManagedLedger, error) {
		ml.runCancel()
		return nil, err
	}

	info := &metapb.ManagedLedgerInfo{}
	rev := metastore.MustNotExist
	kv, err := d.Store.Get(ctx, metastore.ManagedLedgerKey(name))
	switch {
	case err == nil:
		if err := proto.Unmarshal(kv.Value, info); err != nil {
			return fail(fmt.Errorf("mledger %s: corrupt ledger list: %w", name, err))
		}
		rev = kv.ModRevision
	case errors.Is(err, metastore.ErrNotFound):
	default:
		return fail(err)
	}
	var ledgers []*metapb.LedgerRef
	for _, ref := range info.Ledgers { // every one closed if terminated (L5)
		if ref.Closed {
			ledgers = append(ledgers, ref)
			continue
		}
		r, err := d.Ledgers.OpenRecover(ctx, ref.LedgerId)
		switch {
		case errors.Is(err, ledger.ErrNoSuchLedger):
			// Created, never written, then lost (its metadata is written
			// before its first entry): nothing to keep.
			ml.log.Info("dropping a ledger with no metadata from the list", zap.Int64("ledger", ref.LedgerId))
		case err != nil:
			return fail(fmt.Errorf("mledger %s: recover ledger %d: %w", name, ref.LedgerId, err))
		default:
			m := r.Metadata()
			ref = proto.Clone(ref).(*metapb.LedgerRef)
			ref.Entries, ref.Size, ref.Closed, ref.ClosedAtUnixMs = m.LastEntry+1, m.Length, true, time.Now().UnixMilli()
			ml.mu.readers[ref.LedgerId] = r
			ledgers = append(ledgers, ref)
		}
	}
	for i := len(ledgers) - 1; i >= 0; i-- {
		if ref := ledgers[i]; ref.Entries > 0 {
			ml.mu.last = Position{ref.LedgerId, ref.Entries - 1}
			break
		}
	}
	if info.Terminated {
		return ml.openTerminated(ctx, ledgers, rev, Position{info.TerminatedLedger, info.TerminatedEntry})
	}
	cctx, cancel := context.WithTimeout(ctx, createTimeout)
	w, err := ml.createLedger(cctx)
	cancel()
	switch {
	case errors.Is(err, ledger.ErrNotEnoughBookies):
		return ml.openWithoutLedger(ctx, ledgers, rev, err)
	case err != nil:
		return fail(err)
	}
	ledgers = append(ledgers, &metapb.LedgerRef{LedgerId: w.ID(), CreatedAtUnixMs: time.Now().UnixMilli()})
	newRev, err := ml.storeList(ctx, ledgers, false, rev)
	if err != nil {
		// The list with w may have been stored (the outcome of a failed
		// write can be unknown): delete w only when it was certainly not.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		w.Close(cctx)
		if errors.Is(err, ErrFenced) || errors.Is(err, errStoreConflict) {
			ml.d.Ledgers.Delete(cctx, w.ID())
		}
		cancel()
		return fail(err)
	}
	ml.mu.st = newListState(ledgers, newRev)
	ml.mu.writers[w.ID()] = w
	ml.mu.writer = w
	ml.log.Debug("ledger added", zap.Int64("ledger", w.ID()))
	return ml, nil
}

// openWithoutLedger ends Open when no ledger could be created for want of
// bookies (cerr): the list, every ledger of it closed, is stored as it is
// (recovery may have closed ledgers; the write also checks ownership), and
// the list's protocol starts in creating, refusing appends, trying again.
func (ml *ManagedLedger) openWithoutLedger(ctx context.Context, ledgers []*metapb.LedgerRef, rev int64, cerr error) (*ManagedLedger, error) {
	newRev, err := ml.storeList(ctx, ledgers, false, rev)
	if err != nil {
		ml.runCancel()
		return nil, err
	}
	ml.log.Warn("no ledger can be created: serving reads, refusing appends until enough bookies are writable", zap.Error(cerr))
	ml.mu.Lock()
	defer ml.mu.Unlock()
	st, acts := newListStateWithoutLedger(ledgers, newRev)
	ml.mu.st = st
	ml.mu.createFailing = true
	ml.feedLocked(acts)
	return ml, nil
}

// openTerminated ends Open on a terminated list: no ledger is created. The
// list is stored as it is (the write checks ownership), and the managed
// ledger serves reads only.
func (ml *ManagedLedger) openTerminated(ctx context.Context, ledgers []*metapb.LedgerRef, rev int64, last Position) (*ManagedLedger, error) {
	ml.mu.Lock()
	ml.mu.last = last // the stored position: its ledger may be trimmed
	ml.mu.Unlock()
	newRev, err := ml.storeList(ctx, ledgers, true, rev)
	if err != nil {
		ml.runCancel()
		return nil, err
	}
	ml.mu.Lock()
	ml.mu.st = newListStateTerminated(ledgers, newRev)
	ml.mu.Unlock()
	ml.terminating.Store(true)
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
	defer ml.mu.Unlock()
	ml.maybeRollLocked(ml.mu.writer)
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

// storeList writes the ledger list at revision rev, guarded by the
// ownership token, and returns the new revision. ErrFenced: this broker is
// no longer the owner. The outcome of another failure may be unknown (a
// timeout, a lost connection: the write may have been applied); the list
// protocol then stores the same list again, and if that finds the revision
// moved, the list is read back: holding exactly what was written, the
// earlier attempt was applied (the owner is the list's only writer);
// holding anything else, someone else changed it (errStoreConflict).
//
// A list stored terminated records the last confirmed entry with it:
// final by then (no append is taken once termination is asked, and
// recovery, which may find more, comes before the store), so that the
// same list is written again on a retry.
func (ml *ManagedLedger) storeList(ctx context.Context, ledgers []*metapb.LedgerRef, terminated bool, rev int64) (int64, error) {
	info := &metapb.ManagedLedgerInfo{Ledgers: ledgers, Terminated: terminated}
	if terminated {
		ml.mu.Lock()
		info.TerminatedLedger, info.TerminatedEntry = ml.mu.last.Ledger, ml.mu.last.Entry
		ml.mu.Unlock()
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(info)
	if err != nil {
		return 0, err
	}
	key := metastore.ManagedLedgerKey(ml.name)
	newRev, err := ml.d.Store.Commit(ctx, ml.d.Guard, metastore.PutOp(key, raw, rev))
	switch {
	case err == nil:
		return newRev, nil
	case errors.Is(err, metastore.ErrNotOwner):
		return 0, fmt.Errorf("%w: %s: %v", ErrFenced, ml.name, err)
	case errors.Is(err, metastore.ErrBadVersion):
		kv, gerr := ml.d.Store.Get(ctx, key)
		switch {
		case gerr == nil && bytes.Equal(kv.Value, raw):
			return kv.ModRevision, nil
		case gerr == nil || errors.Is(gerr, metastore.ErrNotFound):
			return 0, fmt.Errorf("%w: %s", errStoreConflict, ml.name)
		}
		return 0, fmt.Errorf("mledger %s: read the ledger list back: %w", ml.name, gerr)
	}
	return 0, fmt.Errorf("mledger %s: store ledger list: %w", ml.name, err)
}

// feedLocked takes the list protocol's actions: an install or failing the
// queue is done at once (under the lock that fed the event, so that no
// append sees the state between); the rest is queued for run, started if
// none runs.
func (ml *ManagedLedger) feedLocked(acts []action) {
	for _, a := range acts {
		switch a.kind {
		case actInstall:
			ml.installLocked(a.ledger)
		case actFailQueue:
			ml.failQueueLocked(ml.refusalLocked())
		default:
			ml.mu.actions = append(ml.mu.actions, a)
		}
	}
	if len(ml.mu.actions) > 0 && !ml.mu.running {
		ml.mu.running = true
		ml.wg.Add(1)
		go ml.run()
	}
}

// run carries out the queued actions in order, until none is left. I/O
// actions still queued when the protocol is done are dropped; failed steps
// are retried with backoff; when Close gave up (runCtx), the protocol is
// abandoned.
func (ml *ManagedLedger) run() {
	defer ml.wg.Done()
	var backoff time.Duration
	for {
		ml.mu.Lock()
		if len(ml.mu.actions) == 0 {
			ml.mu.running = false
			ml.mu.Unlock()
			return
		}
		a := ml.mu.actions[0]
		ml.mu.actions = ml.mu.actions[1:]
		done := ml.mu.st.phase == phaseDone
		ml.mu.Unlock()
		io := a.kind <= actStore
		if io && done {
			continue
		}
		if a.retry {
			backoff = min(max(2*backoff, 100*time.Millisecond), maxStepBackoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ml.wake:
			case <-ml.runCtx.Done():
			}
			t.Stop()
		} else if io {
			backoff = 0
		}
		if io && ml.runCtx.Err() != nil {
			ml.mu.Lock()
			ml.feedLocked(ml.mu.st.abandon())
			ml.mu.Unlock()
			continue
		}
		ml.do(a)
	}
}

// do carries out one action and feeds its result back.
func (ml *ManagedLedger) do(a action) {
	now := func() int64 { return time.Now().UnixMilli() }
	switch a.kind {
	case actCloseWriter:
		ml.mu.Lock()
		w := ml.mu.writers[a.ledger]
		if ml.mu.writer == w {
			ml.mu.writer = nil
		}
		ml.mu.Unlock()
		ctx, cancel := context.WithTimeout(ml.runCtx, closeWriterTimeout)
		err := w.Close(ctx)
		cancel()
		if errors.Is(err, ledger.ErrFenced) {
			err = fmt.Errorf("%w: %s: %v", ErrFenced, ml.name, err)
		} else if err != nil {
			ml.log.Warn("closing the ledger failed; recovering it", zap.Int64("ledger", a.ledger), zap.Error(err))
		}
		ml.mu.Lock()
		delete(ml.mu.writers, a.ledger)
		ml.feedLocked(ml.mu.st.writerClosed(w.LastAddConfirmed()+1, w.Length(), now(), err))
		ml.mu.Unlock()
	case actRecover:
		ctx, cancel := context.WithTimeout(ml.runCtx, recoverTimeout)
		r, err := ml.d.Ledgers.OpenRecover(ctx, a.ledger)
		cancel()
		var entries, size int64
		ml.mu.Lock()
		if err != nil {
			ml.log.Warn("recovering the ledger failed; retrying", zap.Int64("ledger", a.ledger), zap.Error(err))
		} else {
			m := r.Metadata()
			entries, size = m.LastEntry+1, m.Length
			ml.mu.readers[a.ledger] = r
			// Recovery may find entries whose appends were reported failed
			// ("maybe written"): they are the partition's from now on.
			if p := (Position{a.ledger, m.LastEntry}); m.LastEntry >= 0 && ml.mu.last.Before(p) {
				ml.movedLocked(p)
			}
		}
		ml.feedLocked(ml.mu.st.recovered(entries, size, now(), err))
		ml.mu.Unlock()
	case actCreate:
		ml.mu.Lock()
		closing := ml.mu.st.ending()
		ml.mu.Unlock()
		var w *ledger.Writer
		err := errCloseWanted // no new ledger is needed any more
		if !closing {
			ctx, cancel := context.WithTimeout(ml.runCtx, createTimeout)
			w, err = ml.createLedger(ctx)
			cancel()
		}
		var id int64
		ml.mu.Lock()
		switch {
		case err == nil:
			id = w.ID()
			ml.mu.writers[id] = w
			if ml.mu.createFailing {
				ml.log.Info("a ledger could be created again", zap.Int64("ledger", id))
			}
			ml.mu.createFailing = false
		case closing:
		case !ml.mu.createFailing:
			ml.log.Warn("creating a ledger failed; retrying", zap.Error(err))
			ml.mu.createFailing = true
		default:
			ml.log.Debug("creating a ledger failed again; retrying", zap.Error(err))
		}
		ml.feedLocked(ml.mu.st.created(id, now(), err))
		ml.mu.Unlock()
	case actStore:
		ctx, cancel := context.WithTimeout(ml.runCtx, storeTimeout)
		rev, err := ml.storeList(ctx, a.list, a.term, a.rev)
		cancel()
		if err != nil && !errors.Is(err, ErrFenced) && !errors.Is(err, errStoreConflict) {
			ml.log.Warn("storing the ledger list failed; retrying", zap.Error(err))
		}
		ml.mu.Lock()
		ml.feedLocked(ml.mu.st.storeDone(rev, err))
		ml.mu.Unlock()
	case actDiscard:
		ml.mu.Lock()
		w := ml.mu.writers[a.ledger]
		delete(ml.mu.writers, a.ledger)
		ml.mu.Unlock()
		ctx, cancel := context.WithTimeout(ml.runCtx, 5*time.Second)
		if w != nil {
			w.Close(ctx)
		}
		if a.del {
			if err := ml.d.Ledgers.Delete(ctx, a.ledger); err != nil {
				ml.log.Warn("unused ledger not deleted; the sweeper will", zap.Int64("ledger", a.ledger), zap.Error(err))
			}
		}
		cancel()
	case actDelete:
		ml.mu.Lock()
		for _, id := range a.ids {
			delete(ml.mu.readers, id)
		}
		ml.mu.Unlock()
		ctx, cancel := context.WithTimeout(ml.runCtx, storeTimeout)
		for _, id := range a.ids {
			if err := ml.d.Ledgers.Delete(ctx, id); err != nil {
				ml.log.Warn("trimmed ledger not deleted; the sweeper will", zap.Int64("ledger", id), zap.Error(err))
			}
		}
		cancel()
		ml.log.Info("trimmed consumed ledgers", zap.Int64s("ledgers", a.ids))
	case actTrimmed:
		ml.mu.Lock()
		if ml.mu.trimWait != nil {
			ml.mu.trimWait <- trimResult{a.ids, a.err}
			ml.mu.trimWait = nil
		}
		ml.mu.Unlock()
	case actTerminated:
		ml.mu.Lock()
		// The appends queued since Terminate was asked fail now, after
		// those in flight then were answered (the writer's close waited
		// for them): every success before any later failure. A
		// termination that failed (fenced, closed) did not terminate: they
		// fail for what happened instead.
		why := fmt.Errorf("%w: %s", ErrTerminated, ml.name)
		if a.err != nil {
			why = fmt.Errorf("%w: %s", a.err, ml.name)
		}
		ml.failQueueLocked(why)
		for _, ch := range ml.mu.termWait {
			ch <- a.err
		}
		ml.mu.termWait = nil
		ml.wakeLocked() // dispatchers waiting for more look again, and find the end
		ml.mu.Unlock()
	case actDone:
		ml.finish(a.err)
	}
}

// finish ends the managed ledger once its list protocol is done: appends
// fail from now on, the writers left open are closed, and a fenced owner
// is told.
func (ml *ManagedLedger) finish(reason error) {
	ml.mu.Lock()
	fenced := errors.Is(reason, ErrFenced)
	if ml.mu.err == nil || fenced && errors.Is(ml.mu.err, ErrClosed) {
		if fenced {
			ml.mu.err = fmt.Errorf("%w: %s", ErrFenced, ml.name)
		} else {
			ml.mu.err = fmt.Errorf("%w: %s", ErrClosed, ml.name)
		}
	}
	ml.failQueueLocked(ml.mu.err)
	ml.wakeLocked()
	ws := ml.mu.writers
	ml.mu.writers = map[int64]*ledger.Writer{}
	ml.mu.writer = nil
	ml.mu.Unlock()
	if fenced {
		ml.log.Warn("managed ledger fenced: the partition is owned elsewhere")
	}
	for _, w := range ws {
		// A fenced writer closes without touching the metadata; another
		// one (abandoned, or whose list write found another owner) closes
		// its ledger at its last entry, which a recovery would keep too.
		// Once Close gave up (runCtx), they stop at once.
		ctx, cancel := context.WithTimeout(ml.runCtx, 5*time.Second)
		w.Close(ctx)
		cancel()
	}
	if fenced && ml.d.OnFenced != nil {
		ml.d.OnFenced()
	}
	close(ml.done)
}

// fenceLocked: a ledger of this managed ledger was fenced by another owner.
func (ml *ManagedLedger) fenceLocked() {
	if ml.mu.err == nil {
		ml.mu.err = fmt.Errorf("%w: %s", ErrFenced, ml.name)
	}
	ml.failQueueLocked(ml.mu.err)
	ml.feedLocked(ml.mu.st.fence())
}

func (ml *ManagedLedger) failQueueLocked(err error) {
	q := ml.mu.queue
	ml.mu.queue = nil
	for _, op := range q {
		op.cb(Position{}, err)
	}
}

// wakeLocked wakes whoever waits on moved. A channel is made only when
// one is taken: an append with nobody waiting allocates none.
func (ml *ManagedLedger) wakeLocked() {
	if ml.mu.moved != nil {
		close(ml.mu.moved)
		ml.mu.moved = nil
	}
}

// movedChanLocked returns the channel wakeLocked closes next.
func (ml *ManagedLedger) movedChanLocked() chan struct{} {
	if ml.mu.moved == nil {
		ml.mu.moved = make(chan struct{})
	}
	return ml.mu.moved
}

// movedLocked records p as the last confirmed entry.
func (ml *ManagedLedger) movedLocked(p Position) {
	ml.mu.last = p
	ml.wakeLocked()
}

// installLocked makes ledger's writer the current one and hands it the
// queued appends.
func (ml *ManagedLedger) installLocked(id int64) {
	ml.mu.writer = ml.mu.writers[id]
	ml.mu.assigned, ml.mu.assignedBytes = 0, 0
	ml.log.Debug("ledger added", zap.Int64("ledger", id))
	q := ml.mu.queue
	ml.mu.queue = nil
	for i, op := range q {
		if ml.mu.err != nil {
			op.cb(Position{}, ml.mu.err)
			continue
		}
		if !ml.mu.st.takesAppends() {
			// The queue filled the new ledger too: the rest waits for the
			// next one (the lock kept anything from queueing meanwhile).
			ml.mu.queue = append([]*appendOp(nil), q[i:]...)
			break
		}
		ml.appendLocked(op)
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
// ledger's lock held): it must not block nor call the managed ledger. A
// success's cb runs once the entry is readable and before the channels
// of Moved are closed for it.
func (ml *ManagedLedger) AppendAsync(ctx context.Context, data []byte, cb func(Position, error)) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	st := ml.mu.st
	switch {
	case ml.mu.err != nil:
		cb(Position{}, ml.mu.err)
	case st.phase == phaseDone:
		cb(Position{}, fmt.Errorf("%w: %s", ErrClosed, ml.name))
	case st.terminated:
		cb(Position{}, fmt.Errorf("%w: %s", ErrTerminated, ml.name))
	case st.terminateWanted:
		// Refused once the appends in flight are answered (actTerminated):
		// a refusal must not overtake an earlier success.
		ml.mu.queue = append(ml.mu.queue, &appendOp{ctx: ctx, data: data, cb: cb}) // failed at actTerminated
	case st.refusing != nil:
		cb(Position{}, ml.refusalLocked())
	case !st.takesAppends() || ml.mu.writer == nil:
		ml.mu.queue = append(ml.mu.queue, &appendOp{ctx: ctx, data: data, cb: cb})
	default:
		ml.appendLocked(&appendOp{ctx: ctx, data: data, cb: cb})
	}
}

// refusalLocked is the error of an append refused while the list's
// protocol refuses appends.
func (ml *ManagedLedger) refusalLocked() error {
	if ml.mu.st.terminateWanted || ml.mu.st.terminated {
		return fmt.Errorf("%w: %s", ErrTerminated, ml.name)
	}
	if errors.Is(ml.mu.st.refusing, ErrNotEnoughBookies) {
		return fmt.Errorf("%w: %s: appends are refused until %d bookies are writable", ErrNotEnoughBookies, ml.name, ml.mu.cfg.Ensemble)
	}
	return fmt.Errorf("%w: %s: a ledger failed and is being replaced", ErrUnavailable, ml.name)
}

// appendLocked hands op to the current writer. Holding the lock keeps the
// writer's order the same as the callers'.
//
// An append whose context ended fails, also when it would not wait: the
// appends of one caller share its context (a producer's stream), so once
// one failed for it, every later one does too, and none of them is stored
// after a failed one (AppendAsync's order rule).
func (ml *ManagedLedger) appendLocked(op *appendOp) {
	if err := op.ctx.Err(); err != nil {
		op.cb(Position{}, err)
		return
	}
	w := ml.mu.writer
	lid := w.ID()
	err := w.AppendAsync(op.ctx, op.data, func(id int64, err error) { ml.appended(w, Position{lid, id}, op, err) })
	if err != nil {
		op.cb(Position{}, err)
		if op.ctx.Err() == nil && !errors.Is(err, ledger.ErrInvalidArgument) {
			// The writer stopped: replace it, refusing appends meanwhile.
			ml.feedLocked(ml.mu.st.appendFailed(w.ID()))
		}
		return
	}
	ml.mu.assigned++
	ml.mu.assignedBytes += int64(len(op.data))
	if ml.fullLocked() {
		// This entry is the ledger's last: later appends queue for the next
		// one, and the rollover closes w once the ones in flight complete.
		ml.feedLocked(ml.mu.st.roll(false))
	}
}

// fullLocked reports whether the current ledger has its share of entries
// or bytes and is old enough to be rolled over.
func (ml *ManagedLedger) fullLocked() bool {
	cfg := ml.mu.cfg
	if ml.mu.assigned < cfg.MaxEntriesPerLedger && ml.mu.assignedBytes < cfg.MaxSizePerLedger {
		return false
	}
	return time.Since(time.UnixMilli(ml.mu.st.current().CreatedAtUnixMs)) >= cfg.MinLedgerAge
}

// appended runs when the writer completed (or failed) an entry.
func (ml *ManagedLedger) appended(w *ledger.Writer, pos Position, op *appendOp, err error) {
	if err != nil {
		op.cb(Position{}, err)
		ml.mu.Lock()
		if errors.Is(err, ledger.ErrFenced) {
			ml.fenceLocked()
		} else {
			ml.feedLocked(ml.mu.st.appendFailed(w.ID()))
		}
		ml.mu.Unlock()
		return
	}
	// Cached before it becomes visible: a tailing reader woken by moved
	// finds it there and never goes to the bookies for it.
	if ml.d.Cache != nil {
		ml.d.Cache.Put(ml.name, pos, op.data)
	}
	// Visible (LastConfirmed, reads) before the callback, and waiters woken
	// only after it, as Pulsar's managed ledger completes the add before
	// it notifies the cursors: the producer's receipt is queued before an
	// idle dispatcher is woken to deliver the entry, so a client producing and
	// consuming on one connection most likely sees the receipt first
	// (pulsar-client-go's TestProducerWithInterceptors counts on it; the
	// receipt still passes the producer's answer queue, so it is not
	// guaranteed on the wire).
	ml.mu.Lock()
	moved := ml.mu.last.Before(pos)
	if moved {
		ml.mu.last = pos
	}
	ml.mu.Unlock()
	op.cb(pos, nil)
	ml.mu.Lock()
	if moved {
		ml.wakeLocked()
	}
	ml.maybeRollLocked(w)
	ml.mu.Unlock()
}

// maybeRollLocked starts a rollover of w if it is the current ledger taking
// appends and it is full, or MaxLedgerAge old and not empty.
func (ml *ManagedLedger) maybeRollLocked(w *ledger.Writer) {
	if w == nil || ml.mu.writer != w || !ml.mu.st.takesAppends() {
		return
	}
	cfg := ml.mu.cfg
	age := time.Since(time.UnixMilli(ml.mu.st.current().CreatedAtUnixMs))
	old := ml.mu.assigned > 0 && age >= cfg.MaxLedgerAge
	if ml.fullLocked() || old {
		ml.feedLocked(ml.mu.st.roll(false))
	}
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
		moved := ml.movedChanLocked()
		ml.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Moved returns a channel closed when the next entry is stored and its
// append's callback has run (or the managed ledger closes). Take it
// before checking for entries, then wait.
func (ml *ManagedLedger) Moved() <-chan struct{} {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.movedChanLocked()
}

// EntriesBetween counts the entries after from up to and including to.
func (ml *ManagedLedger) EntriesBetween(from, to Position) int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for i, ref := range ml.mu.st.stored {
		entries := ref.Entries
		if i == len(ml.mu.st.stored)-1 && !ref.Closed && ref.LedgerId == ml.mu.last.Ledger {
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
	for _, ref := range ml.mu.st.stored {
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
	for i, ref := range ml.mu.st.stored {
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
		for _, nxt := range ml.mu.st.stored[i+1:] {
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
	for _, r := range ml.mu.st.stored {
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
	if w := ml.mu.writers[p.Ledger]; w != nil {
		// The current ledger, or one being closed: its writer knows what
		// was confirmed (the bookies may not yet, the LAC rides on the
		// next add).
		src = w.Reader()
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
	for _, ref := range ml.mu.st.stored {
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
	out := make([]*metapb.LedgerRef, len(ml.mu.st.stored))
	for i, r := range ml.mu.st.stored {
		out[i] = proto.Clone(r).(*metapb.LedgerRef)
	}
	if w := ml.mu.writer; w != nil && len(out) > 0 && out[len(out)-1].LedgerId == w.ID() {
		cur := out[len(out)-1]
		cur.Entries, cur.Size = w.LastAddConfirmed()+1, w.Length()
	}
	return out
}

// Owns reports whether ledger id is one of the managed ledger's: in its
// list, or created for it and possibly named by a list whose write is in
// flight. The orphan sweeper must spare it.
func (ml *ManagedLedger) Owns(id int64) bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	st := ml.mu.st
	if st.next == id || ml.mu.writers[id] != nil {
		return true
	}
	for _, l := range [][]*metapb.LedgerRef{st.stored, st.storing} {
		for _, ref := range l {
			if ref.LedgerId == id {
				return true
			}
		}
	}
	return false
}

// Terminate ends the managed ledger's writing for good: appends are
// refused with ErrTerminated from now on (the queued ones too), those in
// flight complete, the current ledger is closed, and the list is stored
// with every ledger closed and marked terminated, so that no owner ever
// writes it again. It returns the last entry's position (Ledger -1 if
// none was ever stored), the last one the partition will have. Reads,
// cursors and trimming go on. Terminating a terminated managed ledger
// returns the same position; a failure (ErrFenced, ErrClosed, ctx) may
// leave the termination done or not: call it again (on the new owner).
func (ml *ManagedLedger) Terminate(ctx context.Context) (Position, error) {
	ch := make(chan error, 1)
	ml.mu.Lock()
	ml.mu.termWait = append(ml.mu.termWait, ch)
	acts := ml.mu.st.terminate()
	if ml.mu.st.terminateWanted {
		ml.terminating.Store(true)
	}
	ml.feedLocked(acts)
	ml.mu.Unlock()
	select { // a step waiting to be retried (a ledger creation) goes now
	case ml.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-ch:
		if err != nil {
			return Position{}, fmt.Errorf("mledger %s: terminate: %w", ml.name, err)
		}
		return ml.LastConfirmed(), nil
	case <-ctx.Done():
		ml.mu.Lock()
		if i := slices.Index(ml.mu.termWait, ch); i >= 0 {
			ml.mu.termWait = slices.Delete(ml.mu.termWait, i, i+1)
		}
		ml.mu.Unlock()
		return Position{}, ctx.Err()
	}
}

// Terminating reports whether Terminate was called (successfully or not
// yet) or the list was opened terminated. It takes no lock: callers may
// hold locks that an append's callback takes.
func (ml *ManagedLedger) Terminating() bool { return ml.terminating.Load() }

// Terminated reports whether the managed ledger is terminated: a list
// marked so is stored, and LastConfirmed is its last entry for good.
func (ml *ManagedLedger) Terminated() bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.mu.st.terminated
}

// Close stops accepting appends, waits for those in flight, closes the
// current ledger and stores the list with it closed, so that the next
// owner needs no recovery. A rollover under way is finished first, without
// installing its new ledger. If ctx ends first, Close gives up: what is
// not stored by then is left to the next owner's recovery.
func (ml *ManagedLedger) Close(ctx context.Context) error {
	ml.mu.Lock()
	if ml.mu.err == nil {
		ml.mu.err = fmt.Errorf("%w: %s", ErrClosed, ml.name)
	}
	ml.failQueueLocked(ml.mu.err)
	ml.wakeLocked()
	ml.feedLocked(ml.mu.st.close())
	ml.mu.Unlock()
	select { // a step waiting to be retried (a ledger creation) goes now
	case ml.wake <- struct{}{}:
	default:
	}
	var err error
	select {
	case <-ml.done:
	case <-ctx.Done():
		ml.runCancel() // run abandons at its next step
		<-ml.done
	}
	ml.wg.Wait()
	ml.runCancel()
	ml.mu.Lock()
	reason := ml.mu.st.err
	ml.mu.Unlock()
	if errors.Is(reason, errAbandoned) {
		err = fmt.Errorf("mledger %s: close: %w", ml.name, cmpErr(ctx.Err(), reason))
	}
	return err
}
