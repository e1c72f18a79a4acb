package broker

import "github.com/magnetar-io/magnetar/proto/topicname"

// SetTestHookPublishTimed installs f as testHookPublishTimed; tests reset
// it with nil when they end.
func SetTestHookPublishTimed(f func()) { testHookPublishTimed = f }

// SessionLease is the broker's current etcd lease.
func (s *Server) SessionLease() int64 { return int64(s.session.Load().Lease()) }

// SetTestHookAppendDone installs f as testHookAppendDone.
func SetTestHookAppendDone(f func()) { testHookAppendDone = f }

// DedupWaiting is how many re-sends of producer wait on an append in
// flight on the loaded topic (a partition's full name).
func (s *Server) DedupWaiting(topic, producer string) int {
	n, err := topicname.Parse(topic)
	if err != nil {
		return 0
	}
	t := s.lookupTopic(n)
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.mu.dedup[producer]
	if d == nil {
		return 0
	}
	waiting := 0
	for _, w := range d.inflight {
		waiting += len(w.cbs)
	}
	return waiting
}
