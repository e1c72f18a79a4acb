package testutil

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/health"
)

// Probe GETs http://addr+path (/healthz or /readyz) as a Kubernetes probe
// would, and decodes the body.
func Probe(t testing.TB, addr, path string) (int, health.Response) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	var r health.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("GET %s%s: %d, body: %v", addr, path, resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s%s: Content-Type %q", addr, path, ct)
	}
	return resp.StatusCode, r
}

// WaitProbe waits until GET addr+path answers status.
func WaitProbe(t testing.TB, addr, path string, status int, timeout time.Duration) health.Response {
	t.Helper()
	var last health.Response
	Eventually(t, timeout, path+" answering "+http.StatusText(status), func() bool {
		var code int
		code, last = Probe(t, addr, path)
		return code == status
	})
	return last
}

// FreeAddr returns a 127.0.0.1 address with a port free a moment ago, for
// a process that must be told its port before it starts (one that prints
// nothing a test could read the bound port from).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := FreePortOn("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
