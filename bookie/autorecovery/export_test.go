package autorecovery

// SetHook installs a step hook (see Service.hook) before the service does
// anything that calls it. Tests only.
func (s *Service) SetHook(h func(step string, ledgerID int64) error) {
	s.hookMu.Lock()
	s.hookFn = h
	s.hookMu.Unlock()
}
