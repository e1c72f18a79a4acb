package ops

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "ops_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Body)
		return rec.Code, string(body)
	}
	for _, tc := range []struct {
		name    string
		o       Options
		path    string
		code    int
		contain string
	}{
		{"metrics", Options{Metrics: prometheus.Gatherers{reg, RuntimeMetrics()}}, "/metrics", 200, "ops_test_total 3"},
		{"runtime metrics", Options{Metrics: prometheus.Gatherers{reg, RuntimeMetrics()}}, "/metrics", 200, "go_goroutines"},
		{"no metrics", Options{}, "/metrics", 404, ""},
		{"health", Options{Health: health.Checks{}}, "/healthz", 200, `"status"`},
		{"pprof off", Options{}, "/debug/pprof/", 404, ""},
		{"pprof on", Options{Pprof: true}, "/debug/pprof/", 200, "goroutine"},
		{"pprof profile by name", Options{Pprof: true}, "/debug/pprof/heap?debug=1", 200, "heap profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(Handler(tc.o), tc.path)
			if code != tc.code || !strings.Contains(body, tc.contain) {
				t.Errorf("GET %s: %d %.200q, want %d containing %q", tc.path, code, body, tc.code, tc.contain)
			}
		})
	}
}
