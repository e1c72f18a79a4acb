package testutil

import "go.uber.org/goleak"

// GoleakIgnores lists goroutines that libraries leave running on purpose
// (process-wide caches and loggers), which goleak should not report.
func GoleakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		// Pulsar's official Go client (tests drive it against brokers):
		// a closed producer's goroutine ends only when its send-timeout
		// timer next fires (pulsar-client-go v0.19.0,
		// partitionProducer.failTimeoutMessages), up to 30 s later.
		goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
	}
}
