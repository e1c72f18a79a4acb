package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// adminServer is a fake admin API that counts its requests.
type adminServer struct {
	*httptest.Server
	hits atomic.Int64
}

func newAdminServer(t *testing.T, h http.HandlerFunc) *adminServer {
	s := &adminServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// answering answers every request with a JSON document naming itself.
func answering(t *testing.T, name string) *adminServer {
	return newAdminServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"from": %q, "path": %q}`, name, r.URL.Path)
	})
}

// stalled accepts requests and never answers (a paused broker) until the
// test ends; arrived, if not nil, is told of each request.
func stalled(t *testing.T, arrived chan<- struct{}) *adminServer {
	stop := make(chan struct{})
	s := newAdminServer(t, func(w http.ResponseWriter, r *http.Request) {
		if arrived != nil {
			arrived <- struct{}{}
		}
		<-stop
	})
	t.Cleanup(func() { close(stop) }) // before s.Close, which waits for handlers
	return s
}

// deadURL is the URL of an address nothing listens on any more.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	return "http://" + ln.Addr().String()
}

// failures records the attempts an adminClient gave up on.
type failures struct {
	mu   sync.Mutex
	urls []string
	errs []error
}

func (f *failures) add(url string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.urls = append(f.urls, url)
	f.errs = append(f.errs, err)
}

func (f *failures) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.urls...)
}

func newTestAdmin(t *testing.T, urls ...string) (*adminClient, *strings.Builder, *failures) {
	t.Helper()
	out, fs := &strings.Builder{}, &failures{}
	a := &adminClient{http: &http.Client{}, timeout: 20 * time.Second, attemptTimeout: 10 * time.Second, out: out, failed: fs.add}
	if err := a.setURLs(strings.Join(urls, ",")); err != nil {
		t.Fatal(err)
	}
	return a, out, fs
}

func TestAdminSkipsDeadURL(t *testing.T) {
	dead, good := deadURL(t), answering(t, "good")
	a, out, fs := newTestAdmin(t, dead, good.URL)
	if err := a.call(context.Background(), "GET", "/admin/v2/brokers", nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"from": "good"`) {
		t.Fatalf("printed %q", out.String())
	}
	if got := fs.list(); len(got) != 1 || got[0] != dead {
		t.Fatalf("gave up on %v, want just the dead URL", got)
	}
}

// A broker that accepts the connection and never answers is given up after
// the attempt timeout, and the next URL answers, well within the call's
// timeout.
func TestAdminSkipsStalledURL(t *testing.T) {
	paused, good := stalled(t, nil), answering(t, "good")
	a, out, fs := newTestAdmin(t, paused.URL, good.URL)
	a.attemptTimeout = 200 * time.Millisecond
	if err := a.call(context.Background(), "PUT", "/admin/v2/tenants/t", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"from": "good"`) || paused.hits.Load() != 1 || good.hits.Load() != 1 {
		t.Fatalf("printed %q; the paused broker got %d requests, the good one %d", out.String(), paused.hits.Load(), good.hits.Load())
	}
	if got := fs.list(); len(got) != 1 || got[0] != paused.URL || !errors.Is(fs.errs[0], context.DeadlineExceeded) {
		t.Fatalf("gave up on %v (%v), want the paused URL, on a timeout", got, fs.errs)
	}
}

// The only broker is not listening yet: the call retries, with backoff,
// until it is (it starts listening once the client failed three times).
func TestAdminRetriesUntilListening(t *testing.T) {
	url := deadURL(t)
	a, out, fs := newTestAdmin(t, url)
	var listening atomic.Bool
	a.failed = func(u string, err error) {
		fs.add(u, err)
		if len(fs.list()) == 3 {
			ln, err := net.Listen("tcp", strings.TrimPrefix(url, "http://"))
			if err != nil {
				t.Errorf("listen again on %s: %v", url, err)
				return
			}
			s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, `{"from": "late"}`)
			}))
			s.Listener.Close()
			s.Listener = ln
			s.Start()
			t.Cleanup(s.Close)
			listening.Store(true)
		}
	}
	start := time.Now()
	if err := a.call(context.Background(), "GET", "/admin/v2/brokers", nil); err != nil {
		t.Fatal(err)
	}
	if !listening.Load() || !strings.Contains(out.String(), `"from": "late"`) {
		t.Fatalf("printed %q", out.String())
	}
	if n := len(fs.list()); n != 3 {
		t.Fatalf("%d failed attempts, want 3", n)
	}
	// Three waits between rounds: 100ms, 200ms and 400ms, each jittered
	// down to at least half.
	if took := time.Since(start); took < 350*time.Millisecond {
		t.Fatalf("retried without backing off: %v for 3 rounds", took)
	}
}

// A 4xx answer is the call's answer: not retried, not asked elsewhere.
func TestAdminClientErrorIsFinal(t *testing.T) {
	notFound := newAdminServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"reason": "topic persistent://public/default/x not found"}`)
	})
	other := answering(t, "other")
	a, _, fs := newTestAdmin(t, notFound.URL, other.URL)
	err := a.call(context.Background(), "GET", "/admin/v2/persistent/public/default/x/stats", nil)
	if err == nil || err.Error() != "topic persistent://public/default/x not found" {
		t.Fatalf("got %v", err)
	}
	if notFound.hits.Load() != 1 || other.hits.Load() != 0 || len(fs.list()) != 0 {
		t.Fatalf("requests: %d to the first, %d to the other; gave up on %v", notFound.hits.Load(), other.hits.Load(), fs.list())
	}
	// Likewise a 500.
	failing := newAdminServer(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	a, _, _ = newTestAdmin(t, failing.URL, other.URL)
	if err := a.call(context.Background(), "GET", "/admin/v2/brokers", nil); err == nil || !strings.Contains(err.Error(), "500") || other.hits.Load() != 0 {
		t.Fatalf("a 500: %v, %d requests to the other", err, other.hits.Load())
	}
}

// 502, 503 and 504 mean this broker cannot answer now: the next one is
// asked.
func TestAdminUnavailableMovesOn(t *testing.T) {
	for _, code := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		busy := newAdminServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, `{"reason": "service not ready"}`)
		})
		good := answering(t, "good")
		a, out, fs := newTestAdmin(t, busy.URL, good.URL)
		if err := a.call(context.Background(), "GET", "/admin/v2/brokers", nil); err != nil {
			t.Fatalf("%d: %v", code, err)
		}
		if !strings.Contains(out.String(), `"from": "good"`) || len(fs.errs) != 1 || !strings.Contains(fs.errs[0].Error(), "service not ready") {
			t.Fatalf("%d: printed %q, gave up on %v", code, out.String(), fs.errs)
		}
	}
}

// When nothing answers, the call ends at its timeout, with each URL's last
// error.
func TestAdminGivesUpAtTimeout(t *testing.T) {
	d1, d2 := deadURL(t), deadURL(t)
	a, _, fs := newTestAdmin(t, d1, d2)
	a.timeout = 500 * time.Millisecond
	err := a.call(context.Background(), "GET", "/admin/v2/brokers", nil)
	if err == nil || !strings.Contains(err.Error(), "no answer within 500ms (--timeout)") ||
		!strings.Contains(err.Error(), d1+": ") || !strings.Contains(err.Error(), d2+": ") {
		t.Fatalf("got %v", err)
	}
	if n := len(fs.list()); n < 4 {
		t.Fatalf("%d attempts in 500ms: no retry round", n)
	}
}

// Ctrl-C ends a call at once, even one waiting on a stalled broker.
func TestAdminInterrupted(t *testing.T) {
	arrived := make(chan struct{}, 1)
	paused := stalled(t, arrived)
	a, _, _ := newTestAdmin(t, paused.URL)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.call(ctx, "GET", "/admin/v2/brokers", nil) }()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

// A 307 from a broker that does not own the topic is followed, method and
// body included, as before.
func TestAdminFollowsRedirect(t *testing.T) {
	owner := newAdminServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, `{"method": %q, "path": %q, "body": %q}`, r.Method, r.URL.Path, body)
	})
	other := newAdminServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, owner.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	a, out, _ := newTestAdmin(t, other.URL)
	if err := a.call(context.Background(), "POST", "/admin/v2/persistent/public/default/t/subscription/s/skip/1", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"method": "POST"`) || !strings.Contains(out.String(), `"body": "{\"n\":1}"`) || owner.hits.Load() != 1 {
		t.Fatalf("printed %q", out.String())
	}
}

// The CLI takes the list, and its timeouts, from flags.
func TestAdminCommandWithSeveralURLs(t *testing.T) {
	good := answering(t, "good")
	var out strings.Builder
	if err := run(context.Background(), &out, "admin", "brokers", "list", "--admin-url", deadURL(t)+", "+good.URL+"/", "--timeout", "10s"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"path": "/admin/v2/brokers"`) {
		t.Fatalf("printed %q", out.String())
	}
	for _, flags := range [][]string{{"--timeout", "0"}, {"--attempt-timeout", "-1s"}} {
		args := append([]string{"admin", "brokers", "list", "--admin-url", good.URL}, flags...)
		if err := run(context.Background(), io.Discard, args...); err == nil || !strings.Contains(err.Error(), flags[0]) {
			t.Errorf("%v: got %v", flags, err)
		}
	}
}

// The client-side commands (admin, client, perf) take their settings from
// MAGNETAR_* variables and --config too, below the command line.
func TestClientCommandsReadEnvAndConfigFile(t *testing.T) {
	good := answering(t, "good")
	dead := deadURL(t)
	tenants := func(t *testing.T, args ...string) (string, error) {
		var out strings.Builder
		err := run(context.Background(), &out, append([]string{"admin", "tenants", "list", "--timeout", "2s"}, args...)...)
		return out.String(), err
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("MAGNETAR_ADMIN_URL", good.URL)
		if out, err := tenants(t); err != nil || !strings.Contains(out, "good") {
			t.Fatalf("with MAGNETAR_ADMIN_URL: %q %v", out, err)
		}
	})
	file := filepath.Join(t.TempDir(), "admin.yaml")
	if err := os.WriteFile(file, []byte("admin-url: "+good.URL+"\ntimeout: 3s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("file", func(t *testing.T) {
		if err := run(context.Background(), io.Discard, "admin", "tenants", "list", "--config", file); err != nil {
			t.Fatalf("with admin-url in --config: %v", err)
		}
	})
	t.Run("env over file", func(t *testing.T) {
		t.Setenv("MAGNETAR_ADMIN_URL", dead)
		if err := run(context.Background(), io.Discard, "admin", "tenants", "list", "--config", file); err == nil {
			t.Fatal("the environment's dead URL was not used over the file's")
		}
	})
	t.Run("flag over env", func(t *testing.T) {
		t.Setenv("MAGNETAR_ADMIN_URL", dead)
		if out, err := tenants(t, "--admin-url", good.URL); err != nil || !strings.Contains(out, "good") {
			t.Fatalf("--admin-url did not win over the environment: %q %v", out, err)
		}
	})
	t.Run("unknown key", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		os.WriteFile(bad, []byte("admin-ulr: x\n"), 0o644)
		if err := run(context.Background(), io.Discard, "admin", "tenants", "list", "--config", bad); err == nil || !strings.Contains(err.Error(), `unknown key "admin-ulr"`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("client url from env", func(t *testing.T) {
		t.Setenv("MAGNETAR_URL", "magnetar://no-port")
		err := run(context.Background(), io.Discard, "client", "produce", "t", "-m", "x")
		if err == nil || !strings.Contains(err.Error(), "no-port") {
			t.Fatalf("client produce with MAGNETAR_URL: %v", err)
		}
	})
	t.Run("perf url from file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "perf.yaml")
		os.WriteFile(f, []byte("url: magnetar://from-file\n"), 0o644)
		err := run(context.Background(), io.Discard, "perf", "produce", "t", "--config", f)
		if err == nil || !strings.Contains(err.Error(), "from-file") {
			t.Fatalf("perf with url in --config: %v", err)
		}
	})
}
