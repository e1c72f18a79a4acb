package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/health"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, h http.Handler, path string) (int, health.Response) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var r health.Response
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
	}
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%s: Content-Type %q", path, rec.Header().Get("Content-Type"))
	}
	return rec.Code, r
}

func check(name string, err error) health.Check {
	return health.Check{Name: name, Fn: func(context.Context) error { return err }}
}

func TestEndpoints(t *testing.T) {
	broken := errors.New("broken")
	for _, c := range []struct {
		name              string
		checks            health.Checks
		live, ready       int
		liveWhy, readyWhy string
	}{
		{name: "no checks", live: 200, ready: 200},
		{name: "all pass", checks: health.Checks{Live: []health.Check{check("a", nil)}, Ready: []health.Check{check("b", nil)}}, live: 200, ready: 200},
		{name: "not ready", checks: health.Checks{Live: []health.Check{check("a", nil)}, Ready: []health.Check{check("b", nil), check("c", broken)}},
			live: 200, ready: 503, readyWhy: "c: broken"},
		// Readiness includes liveness: the first failure is named.
		{name: "not live", checks: health.Checks{Live: []health.Check{check("a", broken)}, Ready: []health.Check{check("b", broken)}},
			live: 503, ready: 503, liveWhy: "a: broken", readyWhy: "a: broken"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := health.Handler(c.checks)
			code, r := get(t, h, "/healthz")
			if code != c.live || r.Reason != c.liveWhy || (code == 200) != (r.Status == "ok") || (code != 200) != (r.Code == "NOT_LIVE") {
				t.Errorf("/healthz: %d %+v", code, r)
			}
			code, r = get(t, h, "/readyz")
			if code != c.ready || r.Reason != c.readyWhy || (code == 200) != (r.Status == "ready") || (code != 200) != (r.Code == "NOT_READY") {
				t.Errorf("/readyz: %d %+v", code, r)
			}
			for _, l := range [][]health.Check{c.checks.Live, c.checks.Ready} {
				for _, ch := range l {
					want := "ok"
					if err := ch.Fn(context.Background()); err != nil {
						want = err.Error()
					}
					if r.Checks[ch.Name] != want {
						t.Errorf("/readyz check %s: %q, want %q", ch.Name, r.Checks[ch.Name], want)
					}
				}
			}
		})
	}
}

// A check that blocks (etcd unreachable) is cut off at CheckTimeout: the
// probe answers, unready, instead of hanging until the kubelet gives up.
func TestBlockedCheckIsCutOff(t *testing.T) {
	h := health.Handler(health.Checks{Ready: []health.Check{{Name: "etcd", Fn: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}}})
	code, r := get(t, h, "/readyz")
	if code != 503 || r.Reason != "etcd: context deadline exceeded" {
		t.Fatalf("/readyz with a blocked check: %d %+v", code, r)
	}
}

// Info goes into /readyz's body whatever the checks say; other methods and
// paths are not served.
func TestInfoAndRouting(t *testing.T) {
	h := health.Handler(health.Checks{Ready: []health.Check{check("x", errors.New("no"))}, Info: func() map[string]any { return map[string]any{"state": "draining"} }})
	if code, r := get(t, h, "/readyz"); code != 503 || r.Info["state"] != "draining" {
		t.Fatalf("/readyz: %d %+v", code, r)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/readyz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /readyz: %d", rec.Code)
	}
}
