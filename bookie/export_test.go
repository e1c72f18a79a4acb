package bookie

import "time"

// SetRetireGrace sets how long a retired add stream may go on, and returns
// a function restoring it.
func SetRetireGrace(d time.Duration) func() {
	old := retireGrace
	retireGrace = d
	return func() { retireGrace = old }
}
