package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/metastore"
	"github.com/magnetar-io/magnetar/proto/bookiepb"
	"github.com/magnetar-io/magnetar/proto/metapb"
)

// Writer appends entries to an open ledger. Entries are striped over the
// ensemble, many in flight at once; each completes when Qa bookies have it
// durably, and completions are reported strictly in entry order. A bookie
// that fails or times out is replaced (ensemble change) and the pending
// entries it held are sent to its replacement.
//
// Adds travel on the client's per-bookie streams. Goroutines: one for
// completions, one for the explicit LAC, one during an ensemble change.
// Close stops them all; a Writer must always be closed.
type Writer struct {
	c         *Client
	id        int64
	masterKey []byte
	ensembleN int
	log       *zap.Logger

	ctx    context.Context // cancelled when the writer stops
	cancel context.CancelFunc
	wg     sync.WaitGroup // ensemble change, LAC loop

	signal      chan struct{} // wakes the completion loop
	stopDeliver chan struct{} // closed after wg is done: the completion loop drains and exits
	delivered   chan struct{} // closed when the completion loop has exited

	mu struct {
		sync.Mutex
		meta     *Metadata
		st       *writeState
		ensemble []string // the last segment's bookies; index = position
		// err is terminal: set on fencing, on an ensemble change that
		// could not find bookies, or by Close. No append is taken after.
		err      error
		closing  bool
		changing bool // an ensemble change goroutine is running
		// troubleSince is when a bookie first failed since an entry last
		// completed (zero: no trouble). Ensemble changes give up
		// EnsembleChangeTimeout after it.
		troubleSince time.Time
		pendingBytes int64
		space        chan struct{} // closed when pendingBytes drops; made only when an append waits (nil: none does)
		idle         chan struct{} // closed when nothing is pending
		lacSent      int64         // highest LAC sent to bookies
		queue        []completion  // completions to deliver, in order
		// owed counts, by bookie address, the adds sent to it and not
		// answered yet (every add is answered, by AddTimeout at the
		// latest). Close waits for the current ensemble's answers: an
		// entry completes with Qa of Qw acks, and a bookie that fails it
		// afterwards lacks it.
		owed map[string]int
		// answered is closed and replaced on every answer while closing.
		answered chan struct{}
	}
	closeOnce sync.Once
	closeErr  error
}

type completion struct {
	cb  func(int64, error)
	id  int64
	err error
}

func newWriter(c *Client, m *Metadata) *Writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{
		c:           c,
		id:          m.ID,
		masterKey:   m.MasterKey,
		ensembleN:   m.Ensemble,
		log:         c.log.With(zap.Int64("ledger", m.ID)),
		ctx:         ctx,
		cancel:      cancel,
		signal:      make(chan struct{}, 1),
		stopDeliver: make(chan struct{}),
		delivered:   make(chan struct{}),
	}
	w.mu.meta = m
	w.mu.st = newWriteState(m.Ensemble, m.WriteQuorum, m.AckQuorum, 0)
	w.mu.ensemble = slices.Clone(m.lastSegment().Bookies)
	w.mu.idle = make(chan struct{})
	close(w.mu.idle)
	w.mu.lacSent = -1
	w.mu.owed = make(map[string]int)
	w.mu.answered = make(chan struct{})
	go w.deliverLoop()
	if c.cfg.ExplicitLACInterval > 0 {
		w.wg.Add(1)
		go w.lacLoop()
	}
	return w
}

// ID is the ledger id.
func (w *Writer) ID() int64 { return w.id }

// LastAddConfirmed is the last entry reported complete (-1: none).
func (w *Writer) LastAddConfirmed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.st.lac
}

// Length is the total payload bytes through LastAddConfirmed.
func (w *Writer) Length() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.st.lacLen
}

// Metadata returns a copy of the ledger's current metadata.
func (w *Writer) Metadata() *Metadata {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.meta.clone()
}

// Reader returns a reader of the entries this writer has confirmed so far
// (its LastAddConfirmed at the time of the call), using the writer's
// current metadata. Cheap: make one per read.
func (w *Writer) Reader() *Reader {
	w.mu.Lock()
	defer w.mu.Unlock()
	return newReader(w.c, w.mu.meta.clone(), w.mu.st.lac)
}

// Append adds an entry and waits until it is complete. It returns the
// entry id. On error the entry may or may not be in the ledger (as after a
// timeout), except for ErrInvalidArgument and ErrWriterClosed, which mean
// it was not taken. Must not be called from an AppendAsync callback.
func (w *Writer) Append(ctx context.Context, payload []byte) (int64, error) {
	type result struct {
		id  int64
		err error
	}
	ch := make(chan result, 1)
	if err := w.AppendAsync(ctx, payload, func(id int64, err error) { ch <- result{id, err} }); err != nil {
		return -1, err
	}
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// AppendAsync adds an entry; cb is called exactly once, with the entry id
// or an error, from the writer's completion goroutine, in entry order.
// Callbacks must not block on the writer. AppendAsync waits (up to ctx)
// while MaxPendingBytes or MaxPendingEntries are in flight. The writer
// keeps payload and sends it as it is, without a copy (over 512 bytes),
// to every bookie of the entry's write quorum, also after the entry
// completes (a slower bookie's copy may still be on its way): do not
// modify it, ever.
func (w *Writer) AppendAsync(ctx context.Context, payload []byte, cb func(entryID int64, err error)) error {
	if len(payload) > w.c.cfg.MaxEntrySize {
		return fmt.Errorf("%w: entry of %d bytes, the maximum is %d", ErrInvalidArgument, len(payload), w.c.cfg.MaxEntrySize)
	}
	w.mu.Lock()
	for {
		if w.mu.err != nil || w.mu.closing {
			err := w.mu.err
			w.mu.Unlock()
			if err == nil || errors.Is(err, ErrWriterClosed) {
				return fmt.Errorf("%w: ledger %d", ErrWriterClosed, w.id)
			}
			return fmt.Errorf("%w: ledger %d: %w", ErrWriterClosed, w.id, err)
		}
		n := len(w.mu.st.pending)
		if n == 0 || (n < w.c.cfg.MaxPendingEntries && w.mu.pendingBytes+int64(len(payload)) <= w.c.cfg.MaxPendingBytes) {
			break
		}
		if w.mu.space == nil {
			w.mu.space = make(chan struct{})
		}
		space := w.mu.space
		w.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	if len(w.mu.st.pending) == 0 {
		w.mu.idle = make(chan struct{})
	}
	w.mu.pendingBytes += int64(len(payload))
	_, ts := w.mu.st.append(payload, cb)
	sends := w.sendsLocked(ts)
	w.mu.Unlock()
	w.dispatch(sends)
	return nil
}

// send is one add to one bookie, prepared under the lock and made after.
// It is the add's callback too (addDone): the sends of an append share
// one allocation, with no closure per bookie.
type send struct {
	w      *Writer
	req    *bookiepb.AddEntryRequest
	pos    int
	bookie string
}

func (s *send) addDone(err error) { s.w.onResult(s.req.EntryId, s.pos, s.bookie, err) }

// sendsLocked prepares one add per target, carrying the current LAC.
// Every send it returns must be dispatched: each is counted as owed.
func (w *Writer) sendsLocked(ts []target) []send {
	lac := w.mu.st.lac
	w.mu.lacSent = max(w.mu.lacSent, lac)
	sends := make([]send, 0, len(ts))
	var last *pendingEntry
	var req *bookiepb.AddEntryRequest
	for _, t := range ts {
		if t.e != last { // targets of one entry share a request
			last = t.e
			req = &bookiepb.AddEntryRequest{
				LedgerId:         w.id,
				EntryId:          t.e.id,
				MasterKey:        w.masterKey,
				LastAddConfirmed: lac,
				Length:           t.e.length,
				Payload:          t.e.payload,
			}
		}
		sends = append(sends, send{w: w, req: req, pos: t.pos, bookie: w.mu.ensemble[t.pos]})
		w.mu.owed[w.mu.ensemble[t.pos]]++
	}
	return sends
}

// dispatch makes the adds, without the lock held.
func (w *Writer) dispatch(sends []send) {
	var last *bookiepb.AddEntryRequest
	for i := range sends {
		s := &sends[i]
		if s.req != last {
			last = s.req
			s.req.Crc32C = wire.Checksum(s.req.LedgerId, s.req.EntryId, s.req.LastAddConfirmed, s.req.Length, s.req.Payload)
		}
		w.c.addAsync(s.bookie, s.req, w.c.cfg.AddTimeout, s)
	}
}

// onResult feeds one bookie's answer to the protocol state.
func (w *Writer) onResult(id int64, pos int, addr string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.owed[addr]--; w.mu.owed[addr] == 0 {
		delete(w.mu.owed, addr)
	}
	if w.mu.closing {
		close(w.mu.answered)
		w.mu.answered = make(chan struct{})
	}
	if w.mu.err != nil || w.mu.ensemble[pos] != addr {
		return // stopped, or an answer from a bookie since replaced
	}
	if err == nil {
		w.completeLocked(w.mu.st.ack(id, pos), nil)
		return
	}
	if w.ctx.Err() != nil {
		return
	}
	if errors.Is(err, ErrClosed) {
		// The client is closed: no bookie can be reached any more.
		w.abortLocked(fmt.Errorf("%w: ledger %d: %w", ErrWriterClosed, w.id, err))
		return
	}
	if errors.Is(err, wire.ErrEntryTooLarge) || errors.Is(err, wire.ErrInvalidArgument) || errors.Is(err, wire.ErrBadMasterKey) {
		// Every bookie would refuse it the same way: replacing this one
		// cannot help.
		w.log.Error("bookie refused an add for good; failing the writer", zap.String("bookie", addr), zap.Int64("entry", id), zap.Error(err))
		w.abortLocked(fmt.Errorf("ledger %d entry %d refused by bookie %s: %w", w.id, id, addr, err))
		return
	}
	if errors.Is(err, wire.ErrFenced) {
		w.log.Info("writer fenced: the ledger is being recovered", zap.String("bookie", addr))
		w.abortLocked(fmt.Errorf("%w: ledger %d (bookie %s refused entry %d)", ErrFenced, w.id, addr, id))
		return
	}
	// Anything else is this bookie's trouble, which another bookie can
	// take over: unreachable, too slow, its storage failed, or it is
	// read-only (wire.ErrReadOnly: its disk is nearly full, or it is
	// being drained). Replace it.
	if w.mu.troubleSince.IsZero() {
		w.mu.troubleSince = time.Now()
	}
	if !w.mu.st.fail(pos) {
		return // already being replaced: the other adds it had fail too
	}
	if w.mu.closing && len(w.mu.st.pending) == 0 {
		// An entry completed without it as the writer closes: nothing is
		// left to send to a replacement, and Close marks the bookie as
		// lacking entries.
		w.log.Warn("bookie failed an add as the ledger closes", zap.String("bookie", addr), zap.Int64("entry", id), zap.String("reason", wire.Reason(err)), zap.Error(err))
		return
	}
	w.log.Warn("bookie failed an add; replacing it", zap.String("bookie", addr), zap.Int64("entry", id), zap.String("reason", wire.Reason(err)), zap.Error(err))
	if !w.mu.changing {
		w.mu.changing = true
		w.wg.Add(1)
		go w.changeEnsemble()
	}
}

// completeLocked queues callbacks for finished entries (err nil: complete).
func (w *Writer) completeLocked(es []*pendingEntry, err error) {
	if len(es) == 0 {
		return
	}
	if err == nil {
		w.mu.troubleSince = time.Time{} // entries complete: the bookies work
	}
	for _, e := range es {
		w.mu.pendingBytes -= int64(len(e.payload))
		w.mu.queue = append(w.mu.queue, completion{cb: e.cb, id: e.id, err: err})
	}
	select {
	case w.signal <- struct{}{}:
	default:
	}
	if w.mu.space != nil {
		close(w.mu.space)
		w.mu.space = nil
	}
	if len(w.mu.st.pending) == 0 {
		select {
		case <-w.mu.idle:
		default:
			close(w.mu.idle)
		}
	}
}

// abortLocked stops the writer with err: entries that already have Qa
// acks complete (they are in the ledger whatever happens next), the others
// fail with err, in-flight requests are cancelled.
func (w *Writer) abortLocked(err error) {
	if w.mu.err != nil {
		return
	}
	w.mu.err = err
	complete, failed := w.mu.st.stop()
	w.completeLocked(complete, nil)
	w.completeLocked(failed, err)
	w.cancel()
}

// deliverLoop calls completion callbacks in order.
func (w *Writer) deliverLoop() {
	defer close(w.delivered)
	for {
		stop := false
		select {
		case <-w.signal:
		case <-w.stopDeliver:
			stop = true
		}
		w.mu.Lock()
		q := w.mu.queue
		w.mu.queue = nil
		w.mu.Unlock()
		for _, c := range q {
			if c.cb != nil {
				c.cb(c.id, c.err)
			}
		}
		if stop {
			return
		}
	}
}

// changeEnsemble replaces failed bookies until none is left, holding
// completions meanwhile. When no spare bookie exists it sends the pending
// entries to the failed bookies again, where they are: after a network
// blip they answer, and a bookie that is really gone fails again. It gives
// up, failing the pending appends, EnsembleChangeTimeout after the trouble
// started without an entry completing.
func (w *Writer) changeEnsemble() {
	defer w.wg.Done()
	backoff := 50 * time.Millisecond
	markedNoSpare := false // the failed bookies were marked under-replicated
	for {
		w.mu.Lock()
		if w.mu.err != nil {
			w.mu.changing = false
			w.mu.Unlock()
			return
		}
		if w.mu.troubleSince.IsZero() {
			w.mu.troubleSince = time.Now()
		}
		deadline := w.mu.troubleSince.Add(w.c.cfg.EnsembleChangeTimeout)
		failed := w.mu.st.failedPositions()
		if len(failed) == 0 {
			w.mu.changing = false
			w.completeLocked(w.mu.st.release(), nil)
			if len(w.mu.st.pending) == 0 {
				// Nothing waits on the new ensemble (an idle writer
				// replaced a retired bookie): no trouble left to time.
				w.mu.troubleSince = time.Time{}
			}
			w.mu.Unlock()
			return
		}
		segStart := w.mu.st.hold()
		meta := w.mu.meta.clone()
		ensemble := slices.Clone(w.mu.ensemble)
		w.mu.Unlock()

		newMeta, err := w.replaceBookies(meta, ensemble, failed, segStart)
		if err != nil {
			w.mu.Lock()
			switch {
			case errors.Is(err, ErrFenced):
				w.abortLocked(err)
			case time.Now().After(deadline):
				w.log.Error("ensemble change failed; failing pending appends", zap.Error(err))
				w.abortLocked(err)
			}
			stopped := w.mu.err != nil
			var again []send
			switch {
			case stopped:
				w.mu.changing = false
			case errors.Is(err, ErrNotEnoughBookies):
				again = w.sendsLocked(w.mu.st.replace(failed))
				// The ensemble stays as it is: entries with Qa acks from
				// it may complete meanwhile.
				w.completeLocked(w.mu.st.release(), nil)
			}
			w.mu.Unlock()
			if stopped {
				return
			}
			if errors.Is(err, ErrNotEnoughBookies) && !markedNoSpare {
				// Entries may now complete with Qa < Qw copies: say so at
				// once, so that autorecovery brings them back to Qw even
				// if this writer dies before it can change its ensemble.
				// Off this loop: the resends below must not wait for etcd.
				markedNoSpare = true
				var lacking []string
				for _, p := range failed {
					lacking = append(lacking, ensemble[p])
				}
				w.wg.Add(1)
				go func() {
					defer w.wg.Done()
					mctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
					defer cancel()
					if _, merr := w.c.store.Commit(mctx, nil, markOps(w.id, lacking, metapb.UnderReplicated_REASON_MISSING, "writer")...); merr != nil {
						w.log.Debug("could not mark bookies the writer goes on without", zap.Error(merr))
					}
				}()
			}
			if again != nil {
				w.log.Warn("no spare bookie; sending to the failed bookies again", zap.Error(err), zap.Int("entries", len(again)))
				w.dispatch(again)
			} else {
				w.log.Warn("ensemble change failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			}
			select {
			case <-time.After(backoff):
			case <-w.ctx.Done():
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		w.mu.Lock()
		if w.mu.err != nil {
			w.mu.changing = false
			w.mu.Unlock()
			return
		}
		w.log.Info("ensemble changed", zap.Int64("from-entry", segStart), zap.Strings("ensemble", newMeta.lastSegment().Bookies))
		w.mu.meta = newMeta
		w.mu.ensemble = slices.Clone(newMeta.lastSegment().Bookies)
		sends := w.sendsLocked(w.mu.st.replace(failed))
		w.mu.Unlock()
		w.dispatch(sends)
	}
}

// replaceBookies writes metadata in which the failed positions have new
// bookies from entry segStart on. ErrFenced if the ledger is no longer
// open (someone is recovering it).
func (w *Writer) replaceBookies(meta *Metadata, ensemble []string, failed []int, segStart int64) (*Metadata, error) {
	ctx, cancel := context.WithTimeout(w.ctx, w.c.cfg.AddTimeout)
	defer cancel()
	// The replacements must keep the placement rules with the positions
	// that stay, which share write sets with them.
	next := slices.Clone(ensemble)
	for _, p := range failed {
		next[p] = ""
	}
	next, err := w.c.pick(ctx, next, meta.WriteQuorum, ensemble)
	if err != nil {
		return nil, err
	}
	for {
		m := meta.clone()
		var marks []metastore.Op
		if last := &m.Segments[len(m.Segments)-1]; last.First == segStart {
			last.Bookies = next // nothing completed on it yet: replace in place
		} else {
			// Entries before segStart completed without the failed
			// bookies' acks, perhaps with Qa < Qw copies: autorecovery
			// brings them back to Qw copies.
			var lacking []string
			for _, p := range failed {
				lacking = append(lacking, last.Bookies[p])
			}
			marks = markOps(m.ID, lacking, metapb.UnderReplicated_REASON_MISSING, "writer")
			m.Segments = append(m.Segments, Segment{First: segStart, Bookies: next})
		}
		err := writeMetadata(ctx, w.c.store, m, marks...)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, metastore.ErrBadVersion) {
			return nil, err
		}
		cur, rerr := readMetadata(ctx, w.c.store, w.id)
		if rerr != nil {
			return nil, rerr
		}
		if cur.State != StateOpen {
			return nil, fmt.Errorf("%w: ledger %d is %s", ErrFenced, w.id, cur.State)
		}
		meta = cur
	}
}

// replaceRetired starts an ensemble change for the positions of the
// current ensemble held by bookies being decommissioned or declared lost
// by autorecovery, as if an add to them had failed. A busy writer learns
// it from its next add (a draining bookie refuses it, a lost one does not
// answer); an idle one only here. Without it the last segment of an idle
// ledger (a subscription without acknowledgements, a topic without
// producers) would keep naming such a bookie, and autorecovery, which
// leaves that segment to its writer, could never finish the decommission
// or the repair. While no replacement can be picked nothing is started:
// an idle writer has nothing to fail, and tries again at the next tick.
func (w *Writer) replaceRetired() {
	ctx, cancel := context.WithTimeout(w.ctx, w.c.cfg.AddTimeout)
	defer cancel()
	retired, err := w.c.retiredBookies(ctx)
	if err != nil || len(retired) == 0 {
		return
	}
	w.mu.Lock()
	if w.mu.err != nil || w.mu.closing || w.mu.changing {
		w.mu.Unlock()
		return
	}
	ensemble := slices.Clone(w.mu.ensemble)
	writeQuorum := w.mu.meta.WriteQuorum
	w.mu.Unlock()
	next := slices.Clone(ensemble)
	var gone []int
	for p, b := range ensemble {
		if retired[b] {
			gone = append(gone, p)
			next[p] = ""
		}
	}
	if len(gone) == 0 {
		return
	}
	if _, err := w.c.pick(ctx, next, writeQuorum, ensemble); err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil || w.mu.closing || w.mu.changing || !slices.Equal(w.mu.ensemble, ensemble) {
		return
	}
	for _, p := range gone {
		w.mu.st.fail(p)
	}
	w.log.Info("replacing bookies being decommissioned or declared lost", zap.Ints("positions", gone), zap.Strings("ensemble", ensemble))
	w.mu.changing = true
	w.wg.Add(1)
	go w.changeEnsemble()
}

// lacLoop sends the last add confirmed to the ensemble when no add has
// carried it, so that readers can see the last entries of an idle ledger.
func (w *Writer) lacLoop() {
	defer w.wg.Done()
	t := time.NewTicker(w.c.cfg.ExplicitLACInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		w.replaceRetired()
		w.mu.Lock()
		lac := w.mu.st.lac
		if w.mu.err != nil || lac <= w.mu.lacSent {
			w.mu.Unlock()
			continue
		}
		w.mu.lacSent = lac
		ensemble := slices.Clone(w.mu.ensemble)
		w.mu.Unlock()
		var wg sync.WaitGroup
		for _, addr := range ensemble {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := call(w.ctx, w.c, addr, w.c.cfg.AddTimeout, func(ctx context.Context, b bookiepb.BookieClient) (*bookiepb.WriteLACResponse, error) {
					return b.WriteLAC(ctx, &bookiepb.WriteLACRequest{LedgerId: w.id, MasterKey: w.masterKey, LastAddConfirmed: lac})
				})
				if err != nil {
					w.log.Debug("explicit LAC failed", zap.String("bookie", addr), zap.Error(err))
				}
			}()
		}
		wg.Wait()
	}
}

// Close waits for pending appends (until ctx ends: then they fail), then
// closes the ledger in the metadata at the last complete entry, so that
// readers and the next owner need no recovery. It returns ErrFenced if the
// ledger was taken over by a recovery. Close is idempotent.
func (w *Writer) Close(ctx context.Context) error {
	w.closeOnce.Do(func() { w.closeErr = w.close(ctx) })
	return w.closeErr
}

func (w *Writer) close(ctx context.Context) error {
	w.mu.Lock()
	w.mu.closing = true
	for len(w.mu.st.pending) > 0 && w.mu.err == nil {
		idle := w.mu.idle
		w.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			w.mu.Lock()
			w.abortLocked(fmt.Errorf("%w: ledger %d closed before the entry completed: %w", ErrWriterClosed, w.id, ctx.Err()))
			w.mu.Unlock()
		}
		w.mu.Lock()
	}
	// Entries complete with Qa acks; the other bookies of their write sets
	// may still fail them. Wait a little (CloseAnswerWait) for their
	// answers, so that such a bookie is known; one that is slower than
	// that is counted as lacking entries, which costs autorecovery a look
	// if it had them after all, and a close no more than the wait.
	wait := time.NewTimer(w.c.cfg.CloseAnswerWait)
	defer wait.Stop()
	for w.mu.err == nil && w.owedLocked() {
		answered := w.mu.answered
		w.mu.Unlock()
		stop := false
		select {
		case <-answered:
		case <-wait.C:
			stop = true
		case <-ctx.Done():
			stop = true
		}
		w.mu.Lock()
		if stop {
			break
		}
	}
	prevErr := w.mu.err
	lac, length := w.mu.st.lac, w.mu.st.lacLen
	meta := w.mu.meta.clone()
	// Bookies still failed when the ledger closes may lack entries that
	// completed without them (no spare bookie was found, or they failed
	// after the entries completed), and so may those that have not
	// answered. (If ctx ended, so does the close below: a recovery then
	// closes the ledger, and the periodic check is what finds entries up
	// to the last add confirmed that a bookie lacks.)
	var lacking []string
	for p, b := range w.mu.ensemble {
		if w.mu.st.failed[p] || w.mu.owed[b] > 0 {
			lacking = append(lacking, b)
		}
	}
	if w.mu.err == nil {
		w.mu.err = ErrWriterClosed
	}
	w.mu.Unlock()

	var err error
	if errors.Is(prevErr, ErrFenced) {
		err = prevErr
	} else {
		err = w.closeMetadata(ctx, meta, lac, length, markOps(w.id, lacking, metapb.UnderReplicated_REASON_MISSING, "writer")...)
	}
	w.cancel()
	w.wg.Wait()
	close(w.stopDeliver)
	<-w.delivered
	return err
}

// owedLocked says whether a bookie of the current ensemble that has not
// failed still owes answers to adds.
func (w *Writer) owedLocked() bool {
	for p, b := range w.mu.ensemble {
		if !w.mu.st.failed[p] && w.mu.owed[b] > 0 {
			return true
		}
	}
	return false
}

// closeMetadata marks the ledger closed at lac.
func (w *Writer) closeMetadata(ctx context.Context, meta *Metadata, lac, length int64, marks ...metastore.Op) error {
	for {
		m := meta.clone()
		m.State, m.LastEntry, m.Length = StateClosed, lac, length
		err := writeMetadata(ctx, w.c.store, m, marks...)
		if err == nil {
			w.mu.Lock()
			w.mu.meta = m
			w.mu.Unlock()
			return nil
		}
		if !errors.Is(err, metastore.ErrBadVersion) {
			return fmt.Errorf("ledger: close %d: %w", w.id, err)
		}
		cur, rerr := readMetadata(ctx, w.c.store, w.id)
		if rerr != nil {
			return rerr
		}
		switch {
		case cur.State == StateClosed && cur.LastEntry == lac:
			return nil // closed by a recovery at the same point
		case cur.State != StateOpen:
			return fmt.Errorf("%w: ledger %d is %s (last entry %d, ours %d)", ErrFenced, w.id, cur.State, cur.LastEntry, lac)
		}
		meta = cur
	}
}
