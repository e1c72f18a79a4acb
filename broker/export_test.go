package broker

// SetTestHookPublishTimed installs f as testHookPublishTimed; tests reset
// it with nil when they end.
func SetTestHookPublishTimed(f func()) { testHookPublishTimed = f }
