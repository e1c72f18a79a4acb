package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
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
