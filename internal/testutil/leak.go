package testutil

import "go.uber.org/goleak"

// GoleakIgnores lists goroutines that libraries leave running on purpose
// (process-wide caches and loggers), which goleak should not report.
func GoleakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
	}
}
