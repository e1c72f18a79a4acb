package autorecovery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
)

// Config tunes autorecovery. Zero values take the defaults noted, except
// LostBookieDelay (0 is allowed: re-replicate at once).
type Config struct {
	// ID names this instance in the auditor key and in ledger locks (a
	// bookie uses its id). Required.
	ID string
	// LostBookieDelay: how long a bookie's registration must stay away
	// before its ledgers are marked under-replicated. A restart within it
	// copies nothing.
	LostBookieDelay time.Duration
	// CheckInterval: how often the auditor compares every ledger's
	// metadata with what each bookie holds (and repairs the bookie ->
	// ledgers index). Default 24h; negative disables.
	CheckInterval time.Duration
	// AuditInterval: how often the auditor reads the bookie registry
	// (changes to it also wake it). Default 1s.
	AuditInterval time.Duration
	// PollInterval: how often a worker looks for marks it could not
	// repair yet (new marks wake it at once). Default 5s.
	PollInterval time.Duration
	// SessionTTL of the lease holding the auditor key and ledger locks.
	// Default 10s.
	SessionTTL time.Duration
	// MaxBytesPerSec throttles the copying of this instance's worker.
	// 0: unlimited.
	MaxBytesPerSec int64
	// Copies in flight per fragment. Default 16.
	CopyConcurrency int
	// AutoRebalance: the auditor rebalances by itself every
	// RebalanceInterval (default off: only on request, `magnetar admin
	// bookies rebalance`).
	AutoRebalance bool
	// RebalanceInterval: how often an automatic rebalance round may run.
	// Default 5m.
	RebalanceInterval time.Duration
	// RebalanceSpread: the target of automatic rebalancing and the
	// default of requests: (max - min) / mean usage. Default 0.2.
	RebalanceSpread float64
	// Logger; nil discards.
	Logger *zap.Logger
}

func (c *Config) fill() error {
	if c.ID == "" {
		return errors.New("autorecovery: no instance id")
	}
	if c.LostBookieDelay < 0 || c.MaxBytesPerSec < 0 || c.AuditInterval < 0 || c.PollInterval < 0 || c.SessionTTL < 0 || c.CopyConcurrency < 0 {
		return errors.New("autorecovery: negative delay, interval, rate or concurrency")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.CheckInterval, 24*time.Hour)
	def(&c.AuditInterval, time.Second)
	def(&c.PollInterval, 5*time.Second)
	def(&c.SessionTTL, 10*time.Second)
	def(&c.RebalanceInterval, 5*time.Minute)
	if c.RebalanceSpread <= 0 {
		c.RebalanceSpread = DefaultRebalanceSpread
	}
	if c.CopyConcurrency == 0 {
		c.CopyConcurrency = 16
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// Service runs one autorecovery instance: a candidate for the auditor
// role and a re-replication worker. Every bookie runs one by default; a
// separate process (magnetar autorecovery) may run more.
//
// Goroutines: run (owns the session), and under it campaign and work;
// Close cancels and waits for all of them.
type Service struct {
	cfg   Config
	store *metastore.Store
	lc    *ledger.Client
	log   *zap.Logger
	limit *rate.Limiter // nil: unlimited

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	auditor atomic.Bool
	session atomic.Pointer[metastore.Session] // run's current one; nil between sessions

	// Counters, for tests and reports.
	copiedEntries atomic.Int64
	copiedBytes   atomic.Int64
	repaired      atomic.Int64 // ledgers whose repair completed

	// hookFn, when set (tests), is called at each step of a repair and of
	// an audit; an error it returns aborts the step as a crash would.
	hookMu sync.Mutex
	hookFn func(step string, ledgerID int64) error
}

// Start begins autorecovery on store, copying with lc. It returns at once;
// the work runs in the background until Close.
func Start(store *metastore.Store, lc *ledger.Client, cfg Config) (*Service, error) {
	return start(store, lc, cfg, nil)
}

// start is Start with a step hook in place before anything runs (tests).
func start(store *metastore.Store, lc *ledger.Client, cfg Config, hook func(step string, ledgerID int64) error) (*Service, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, store: store, lc: lc, log: cfg.Logger.With(zap.String("autorecovery", cfg.ID))}
	if cfg.MaxBytesPerSec > 0 {
		// A quarter second's worth of burst (at least 1 MiB): a larger one
		// let the first 16 MiB through at full speed whatever the rate.
		s.limit = rate.NewLimiter(rate.Limit(cfg.MaxBytesPerSec), int(max(cfg.MaxBytesPerSec/4, 1<<20)))
	}
	s.hookFn = hook
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// Close stops the auditor (releasing the role at once) and the worker
// (abandoning a repair in progress: the next worker redoes it).
func (s *Service) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Ready reports whether the instance takes part: it holds a live
// metastore session (under which it campaigns and takes ledger locks).
func (s *Service) Ready(context.Context) error {
	if s.ctx.Err() != nil {
		return errors.New("autorecovery: stopping")
	}
	sess := s.session.Load()
	if sess == nil {
		return errors.New("autorecovery: no metastore session")
	}
	return sess.Err()
}

// IsAuditor says whether this instance holds the auditor role now.
func (s *Service) IsAuditor() bool { return s.auditor.Load() }

// Stats are the instance's counters.
type Stats struct {
	CopiedEntries, CopiedBytes, LedgersRepaired int64
}

// Stats returns what this instance's worker did since Start.
func (s *Service) Stats() Stats {
	return Stats{CopiedEntries: s.copiedEntries.Load(), CopiedBytes: s.copiedBytes.Load(), LedgersRepaired: s.repaired.Load()}
}

func (s *Service) step(name string, id int64) error {
	s.hookMu.Lock()
	h := s.hookFn
	s.hookMu.Unlock()
	if h == nil {
		return nil
	}
	return h(name, id)
}

// run keeps a session and runs the campaign and the worker under it,
// starting both again with a new session when it is lost.
func (s *Service) run() {
	defer s.wg.Done()
	backoff := 100 * time.Millisecond
	for s.ctx.Err() == nil {
		sess, err := s.store.NewSession(s.ctx, s.cfg.SessionTTL)
		if err != nil {
			s.log.Warn("autorecovery: no metastore session; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			if !sleep(s.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		s.session.Store(sess)
		ctx, cancel := context.WithCancel(s.ctx)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() {
			defer wg.Done()
			select {
			case <-sess.Done():
				s.log.Warn("autorecovery: metastore session lost; starting over")
			case <-ctx.Done():
			}
			cancel()
		}()
		go func() { defer wg.Done(); s.campaign(ctx, sess) }()
		go func() { defer wg.Done(); s.work(ctx, sess) }()
		wg.Wait()
		s.session.Store(nil)
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		sess.CloseContext(cctx) // revokes: the auditor key and locks go at once
		ccancel()
	}
}

// campaign takes the auditor role when it is free and audits while it
// holds it; otherwise it waits for the holder's key to go.
func (s *Service) campaign(ctx context.Context, sess *metastore.Session) {
	for ctx.Err() == nil {
		rev, err := s.store.Create(ctx, metastore.AuditorKey, []byte(s.cfg.ID), metastore.WithLease(sess.Lease()))
		if errors.Is(err, metastore.ErrBadVersion) {
			// Ours already (a create whose answer was lost)? Then we are
			// the auditor; waiting for our own key would leave none.
			if kv, gerr := s.store.Get(ctx, metastore.AuditorKey); gerr == nil && kv.Lease == int64(sess.Lease()) {
				rev, err = kv.ModRevision, nil
			}
		}
		switch {
		case err == nil:
			s.log.Info("autorecovery: this instance is the auditor")
			s.auditor.Store(true)
			err := s.audit(ctx)
			s.auditor.Store(false)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("autorecovery: auditor stopped; giving up the role", zap.Error(err))
			}
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.store.CompareAndDelete(dctx, metastore.AuditorKey, rev)
			cancel()
			sleep(ctx, s.cfg.AuditInterval)
		case errors.Is(err, metastore.ErrBadVersion):
			s.waitGone(ctx, metastore.AuditorKey)
		default:
			if ctx.Err() == nil {
				s.log.Warn("autorecovery: campaign failed; retrying", zap.Error(err))
			}
			sleep(ctx, time.Second)
		}
	}
}

// waitGone returns when key is deleted (or ctx ends, or after a watch
// failure).
func (s *Service) waitGone(ctx context.Context, key string) {
	kv, err := s.store.Get(ctx, key)
	if err != nil {
		if !errors.Is(err, metastore.ErrNotFound) {
			sleep(ctx, time.Second)
		}
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for b := range s.store.Watch(wctx, key, kv.ModRevision+1) {
		if b.Err != nil {
			sleep(ctx, time.Second)
			return
		}
		for _, ev := range b.Events {
			if ev.KV.Key == key && ev.Type == metastore.EventDelete {
				return
			}
		}
	}
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func errf(format string, args ...any) error { return fmt.Errorf("autorecovery: "+format, args...) }
