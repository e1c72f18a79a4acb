package broker_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// The broker's HTTP port answers the probes: ready while it is registered
// under its session and serving; a missing registration makes it unready
// until its refresh puts it back; liveness does not depend on etcd.
func TestBrokerHealthEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	addr := e.b.HTTPAddr()
	if code, r := testutil.Probe(t, addr, "/readyz"); code != http.StatusOK || r.Status != "ready" || r.Checks["registered"] != "ok" || r.Checks["serving"] != "ok" {
		t.Fatalf("/readyz: %d %+v", code, r)
	}
	if code, r := testutil.Probe(t, addr, "/healthz"); code != http.StatusOK || r.Status != "ok" {
		t.Fatalf("/healthz: %d %+v", code, r)
	}
	// The registration deleted: unready until the refresh (every 2 s)
	// puts it back; a refresh may come between the delete and the probe,
	// so delete until the probe sees it gone.
	var code int
	var r health.Response
	testutil.Eventually(t, 30*time.Second, "/readyz without the registration", func() bool {
		if err := e.c.Store.Delete(ctxT(t), metastore.BrokerAvailableKey(e.b.ID())); err != nil {
			t.Fatal(err)
		}
		code, r = testutil.Probe(t, addr, "/readyz")
		return code != http.StatusOK
	})
	if code != http.StatusServiceUnavailable || r.Code != "NOT_READY" || !strings.HasPrefix(r.Reason, "registered: ") {
		t.Fatalf("/readyz without a registration: %d %+v", code, r)
	}
	testutil.WaitProbe(t, addr, "/readyz", http.StatusOK, 30*time.Second)

	// etcd gone: not ready (lookups and loads need it), still live (a
	// restart would not bring etcd back).
	e.c.Etcd.Close()
	r = testutil.WaitProbe(t, addr, "/readyz", http.StatusServiceUnavailable, 30*time.Second)
	if !strings.HasPrefix(r.Reason, "registered: ") {
		t.Fatalf("/readyz with etcd gone: %+v", r)
	}
	if code, _ := testutil.Probe(t, addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz with etcd gone: %d", code)
	}
}
