// Package ops serves the operational endpoints every Magnetar process
// offers on its HTTP port: health for probes (/healthz, /readyz, see
// internal/health), Prometheus metrics (/metrics) and, only when switched
// on (--pprof), Go's profiles under /debug/pprof/ for `go tool pprof`.
//
// Profiles are off by default: they reveal the process's internals and a
// CPU or trace profile costs while it runs.
package ops

import (
	"net/http"
	"net/http/pprof"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/magnetar-io/magnetar/internal/health"
)

// Options say what to serve.
type Options struct {
	Health health.Checks
	// Metrics is gathered on GET /metrics (nil: no /metrics).
	Metrics prometheus.Gatherer
	// Pprof serves /debug/pprof/.
	Pprof bool
	// MetricsGuard and PprofGuard, if set, wrap those endpoints (a
	// server's authorization: profiles show the command line, metrics
	// every tenant's topics).
	MetricsGuard, PprofGuard func(http.Handler) http.Handler
}

// Register adds the endpoints to mux.
func Register(mux *http.ServeMux, o Options) {
	health.Register(mux, o.Health)
	guard := func(g func(http.Handler) http.Handler, h http.Handler) http.Handler {
		if g == nil {
			return h
		}
		return g(h)
	}
	if o.Metrics != nil {
		mux.Handle("GET /metrics", guard(o.MetricsGuard, promhttp.HandlerFor(o.Metrics, promhttp.HandlerOpts{
			ErrorHandling: promhttp.ContinueOnError, // a failing collector does not hide the others
		})))
	}
	if o.Pprof {
		mux.Handle("GET /debug/pprof/", guard(o.PprofGuard, http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", guard(o.PprofGuard, http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", guard(o.PprofGuard, http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", guard(o.PprofGuard, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("POST /debug/pprof/symbol", guard(o.PprofGuard, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", guard(o.PprofGuard, http.HandlerFunc(pprof.Trace)))
	}
}

// Handler is a mux with only these endpoints, for a process whose HTTP
// port serves nothing else.
func Handler(o Options) *http.ServeMux {
	mux := http.NewServeMux()
	Register(mux, o)
	return mux
}

var (
	runtimeOnce sync.Once
	runtimeReg  *prometheus.Registry
)

// RuntimeMetrics gathers the Go runtime's and the process's metrics
// (go_*, process_*): one registry per process, which every server of it
// (a standalone's broker and bookies) serves beside its own.
func RuntimeMetrics() prometheus.Gatherer {
	runtimeOnce.Do(func() {
		runtimeReg = prometheus.NewRegistry()
		runtimeReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	})
	return runtimeReg
}
