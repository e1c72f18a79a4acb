// Package health serves the liveness and readiness endpoints that every
// Magnetar process offers on its HTTP port, for Kubernetes probes, load
// balancers and operators:
//
//   - GET /healthz (liveness): 200 while the process serves HTTP and none
//     of its liveness checks fails. A failing liveness check means only a
//     restart helps (a bookie whose storage failed).
//   - GET /readyz (readiness): 200 when every readiness check passes
//     (registered in the metastore, serving), 503 otherwise.
//
// Both answer JSON: {"status": "ok"|"ready"|..., "checks": {name: "ok" or
// the error}}; a failure also carries the API's error fields "errorCode"
// and "reason", as the admin REST API's errors do. Each check gets at most
// CheckTimeout.
package health

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// CheckTimeout bounds one check: a probe must answer even when etcd does
// not.
const CheckTimeout = 2 * time.Second

// Check is one named condition: Fn returns nil when it holds.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
}

// Checks are the liveness and readiness conditions of a process.
type Checks struct {
	Live  []Check
	Ready []Check
	// Info, when set, adds what the process reports of itself to
	// /readyz's body (a bookie's state), whatever the checks say.
	Info func() map[string]any
}

// Response is the body of both endpoints.
type Response struct {
	Status string            `json:"status"`
	Code   string            `json:"errorCode,omitempty"`
	Reason string            `json:"reason,omitempty"`
	Checks map[string]string `json:"checks,omitempty"`
	Info   map[string]any    `json:"info,omitempty"`
}

// Register adds GET /healthz and GET /readyz to mux.
func Register(mux *http.ServeMux, c Checks) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, c.Live, nil, "ok", "NOT_LIVE", "not live")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// Readiness includes liveness: a process that must be restarted
		// is not ready either.
		serve(w, r, append(append([]Check(nil), c.Live...), c.Ready...), c.Info, "ready", "NOT_READY", "not ready")
	})
}

// Handler is a mux with only the two endpoints, for a process whose HTTP
// port serves nothing else.
func Handler(c Checks) *http.ServeMux {
	mux := http.NewServeMux()
	Register(mux, c)
	return mux
}

// Run evaluates checks; failed is the first failure's "name: error", or
// "" when all pass.
func Run(ctx context.Context, checks []Check) (results map[string]string, failed string) {
	results = make(map[string]string, len(checks))
	for _, c := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		err := c.Fn(cctx)
		cancel()
		if err == nil {
			results[c.Name] = "ok"
			continue
		}
		results[c.Name] = err.Error()
		if failed == "" {
			failed = c.Name + ": " + err.Error()
		}
	}
	return results, failed
}

func serve(w http.ResponseWriter, r *http.Request, checks []Check, info func() map[string]any, okStatus, code, badStatus string) {
	results, failed := Run(r.Context(), checks)
	resp := Response{Status: okStatus, Checks: results}
	status := http.StatusOK
	if failed != "" {
		resp = Response{Status: badStatus, Code: code, Reason: failed, Checks: results}
		status = http.StatusServiceUnavailable
	}
	if info != nil {
		resp.Info = info()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(resp)
}
