package autorecovery

import (
	"github.com/magnetar-io/magnetar/bookie/ledger"
	"github.com/magnetar-io/magnetar/metastore"
)

// SetHook installs a step hook (see Service.hook) before the service does
// anything that calls it. Tests only.
func (s *Service) SetHook(h func(step string, ledgerID int64) error) {
	s.hookMu.Lock()
	s.hookFn = h
	s.hookMu.Unlock()
}

// StartWithHook is Start with a step hook (see SetHook) in place before
// the service does anything.
func StartWithHook(store *metastore.Store, lc *ledger.Client, cfg Config, hook func(step string, ledgerID int64) error) (*Service, error) {
	return start(store, lc, cfg, hook)
}
