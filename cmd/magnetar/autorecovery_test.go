package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
	"github.com/magnetar-io/magnetar/metastore"
)

// `magnetar autorecovery` joins the election and, alone, becomes the
// auditor; interrupted, it gives the role up at once.
func TestAutorecoveryCommand(t *testing.T) {
	e := testutil.StartEtcd(t)
	store := testutil.OpenStore(t, e.Endpoints(), "/magnetar")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpAddr := testutil.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, io.Discard, "autorecovery", "--metastore", e.Endpoints()[0], "--id", "ar-test", "--lost-bookie-recovery-delay", "0s", "--http", httpAddr)
	}()
	testutil.Eventually(t, 30*time.Second, "the health endpoints serving", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if r := testutil.WaitProbe(t, httpAddr, "/readyz", http.StatusOK, 30*time.Second); r.Checks["session"] != "ok" {
		t.Fatalf("/readyz: %+v", r)
	}
	testutil.Eventually(t, 30*time.Second, "the command becomes the auditor and builds the index", func() bool {
		kv, err := store.Get(context.Background(), metastore.AuditorKey)
		if err != nil || string(kv.Value) != "ar-test" {
			return false
		}
		_, err = store.Get(context.Background(), metastore.IndexBuiltKey)
		return err == nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("autorecovery exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("autorecovery did not stop")
	}
	if _, err := store.Get(context.Background(), metastore.AuditorKey); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("auditor key after stop: %v", err)
	}
}

// With --tls-cert-file and --tls-key-file, the --http port serves over
// TLS: a client trusting the authority gets the probes, plaintext gets
// 400.
func TestAutorecoveryHTTPOverTLS(t *testing.T) {
	e := testutil.StartEtcd(t)
	ca := testutil.NewCA(t, "ops")
	cert, key := ca.Issue(t, "autorecovery")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpAddr := testutil.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, io.Discard, "autorecovery", "--metastore", e.Endpoints()[0], "--id", "ar-tls", "--http", httpAddr,
			"--tls-cert-file", cert, "--tls-key-file", key)
	}()
	tc, err := tlsutil.NewClient(tlsutil.Files{Trust: ca.CertFile}, false)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	testutil.Eventually(t, 30*time.Second, "/healthz over https", func() bool {
		resp, err := hc.Get("https://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err := http.Get("http://" + httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plaintext to the TLS port: %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("autorecovery exited with %v", err)
	}
	// Half the pair is refused before anything starts.
	if err := run(context.Background(), io.Discard, "autorecovery", "--metastore", e.Endpoints()[0], "--http", httpAddr, "--tls-cert-file", cert); err == nil ||
		!strings.Contains(err.Error(), "--tls-key-file") {
		t.Fatalf("a certificate without its key: %v", err)
	}
}
