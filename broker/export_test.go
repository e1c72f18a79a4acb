package broker

// SetTestHookPublishTimed installs f as testHookPublishTimed; tests reset
// it with nil when they end.
func SetTestHookPublishTimed(f func()) { testHookPublishTimed = f }

// SessionLease is the broker's current etcd lease.
func (s *Server) SessionLease() int64 { return int64(s.session.Load().Lease()) }
