package ledger

// PendingAdds is how many adds to bookie wait for an answer on its current
// stream: taken by the stream, sent or not.
func PendingAdds(c *Client, bookie string) int {
	c.mu.Lock()
	s := c.mu.streams[bookie]
	c.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	sc := s.cur
	s.mu.Unlock()
	if sc == nil {
		return 0
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.mu.npending
}
