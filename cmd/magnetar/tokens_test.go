package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

// The tokens commands make keys and tokens that a standalone started with
// --authentication-enabled checks; the client-side commands present them
// with --auth-token and --auth-token-file, and without one are refused.
func TestTokensAndAnAuthenticatedStandalone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	cmd := func(args ...string) (string, error) {
		var out strings.Builder
		err := run(ctx, &out, args...)
		return strings.TrimSpace(out.String()), err
	}
	secret := filepath.Join(dir, "secret.key")
	if _, err := cmd("tokens", "create-secret-key", "--output", secret); err != nil {
		t.Fatal(err)
	}
	if _, err := cmd("tokens", "create-secret-key", "--output", secret); err == nil {
		t.Fatal("create-secret-key overwrote an existing key")
	}
	token, err := cmd("tokens", "create", "--secret-key", secret, "--subject", "alice", "--expiry-time", "1d")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd("tokens", "validate", "--secret-key", "file://"+secret, token); err != nil || !strings.Contains(out, "subject: alice") {
		t.Fatalf("validate: %q %v", out, err)
	}
	priv, pub := filepath.Join(dir, "private.key"), filepath.Join(dir, "public.key")
	if _, err := cmd("tokens", "create-key-pair", "--output-private-key", priv, "--output-public-key", pub); err != nil {
		t.Fatal(err)
	}
	rsaToken, err := cmd("tokens", "create", "--private-key", priv, "--subject", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd("tokens", "validate", "--public-key", pub, rsaToken); err != nil || !strings.Contains(out, "subject: bob") || !strings.Contains(out, "expires: never") {
		t.Fatalf("validate with the public key: %q %v", out, err)
	}
	if _, err := cmd("tokens", "validate", "--secret-key", secret, rsaToken); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("an RS256 token checked with the secret key: %v", err)
	}
	if _, err := cmd("tokens", "create", "--secret-key", secret); err == nil || !strings.Contains(err.Error(), "subject") {
		t.Fatalf("create without a subject: %v", err)
	}
	if _, err := cmd("tokens", "create", "--secret-key", secret, "--subject", "a", "--expiry-time", "soon"); err == nil || !strings.Contains(err.Error(), "--expiry-time") {
		t.Fatalf("a bad expiry: %v", err)
	}

	out, done := startStandalone(t, ctx, "--authentication-enabled", "--token-secret-key", secret)
	url := "magnetar://" + field(t, out, "clients           magnetar://")
	admin := "http://" + field(t, out, "admin (HTTP)      http://")

	if _, err := cmd("client", "produce", "t", "-m", "x", "--url", url); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("produce without a token: %v", err)
	}
	if _, err := cmd("client", "produce", "t", "-m", "x", "--url", url, "--auth-token", rsaToken); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("produce with a token the broker cannot check: %v", err)
	}
	if out, err := cmd("client", "produce", "t", "-m", "x", "--url", url, "--auth-token", token); err != nil || !strings.HasPrefix(out, "sent ") {
		t.Fatalf("produce with a token: %q %v", out, err)
	}
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	if out, err := cmd("client", "consume", "t", "-s", "s", "-p", "earliest", "-n", "1", "--url", url, "--auth-token-file", tokenFile); err != nil || !strings.HasPrefix(out, "x\t") {
		t.Fatalf("consume with a token file: %q %v", out, err)
	}
	if _, err := cmd("admin", "tenants", "list", "--admin-url", admin, "--timeout", "5s"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("admin without a token: %v", err)
	}
	t.Setenv("MAGNETAR_AUTH_TOKEN_FILE", tokenFile)
	if out, err := cmd("admin", "tenants", "list", "--admin-url", admin); err != nil || !strings.Contains(out, "public") {
		t.Fatalf("admin with MAGNETAR_AUTH_TOKEN_FILE: %q %v", out, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !strings.Contains(err.Error(), "context canceled") {
			t.Fatalf("standalone: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("standalone did not stop")
	}
}

// startStandalone runs `magnetar standalone` with args (on free ports) until
// ctx ends, and returns what its banner says.
func startStandalone(t *testing.T, ctx context.Context, args ...string) (banner string, done <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	d := make(chan error, 1)
	go func() {
		d <- run(ctx, pw, append([]string{"standalone", "--data-dir", t.TempDir(), "--metastore-listen", "127.0.0.1:0",
			"--bookie-listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0", "--http", "127.0.0.1:0", "--log-level", "warn"}, args...)...)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var lines []string
	timeout := time.AfterFunc(time.Minute, func() { pw.CloseWithError(io.ErrUnexpectedEOF) })
	defer timeout.Stop()
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "Press Ctrl-C") {
			break
		}
	}
	go io.Copy(io.Discard, pr)
	return strings.Join(lines, "\n"), d
}

// A standalone serving TLS, with client certificates as authentication:
// the banner gives magnetar+ssl:// and https:// URLs, and the client-side
// commands reach it with the authority's certificate and their own.
func TestTLSStandaloneFromTheCLI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := testutil.NewCA(t, "cluster")
	cert, key := ca.Issue(t, "standalone")
	ccert, ckey := ca.Issue(t, "app1")
	out, done := startStandalone(t, ctx, "--tls-cert-file", cert, "--tls-key-file", key, "--tls-trust-certs-file", ca.CertFile,
		"--authentication-enabled")
	url := "magnetar+ssl://" + field(t, out, "clients           magnetar+ssl://")
	admin := "https://" + field(t, out, "admin (HTTP)      https://")
	cmd := func(args ...string) (string, error) {
		var b strings.Builder
		err := run(ctx, &b, args...)
		return strings.TrimSpace(b.String()), err
	}
	tlsArgs := []string{"--tls-trust-certs-file", ca.CertFile, "--auth-tls-cert-file", ccert, "--auth-tls-key-file", ckey}
	if o, err := cmd(append([]string{"client", "produce", "t", "-m", "x", "--url", url}, tlsArgs...)...); err != nil || !strings.HasPrefix(o, "sent ") {
		t.Fatalf("produce over TLS with a client certificate: %q %v", o, err)
	}
	if _, err := cmd("client", "produce", "t", "-m", "x", "--url", url, "--tls-trust-certs-file", ca.CertFile); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("produce without a client certificate: %v", err)
	}
	if o, err := cmd(append([]string{"admin", "tenants", "list", "--admin-url", admin}, tlsArgs...)...); err != nil || !strings.Contains(o, "public") {
		t.Fatalf("admin over https with a client certificate: %q %v", o, err)
	}
	cancel()
	<-done
}
