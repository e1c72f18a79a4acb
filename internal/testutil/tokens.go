package testutil

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/magnetar-io/magnetar/internal/auth"
)

// TokenKey is a secret token key made in a test: its file (what servers'
// --token-secret-key takes) and a signer of tokens.
type TokenKey struct {
	File   string
	signer *auth.Signer
	t      testing.TB
	dir    string
}

// NewTokenKey makes a random secret key in the test's temporary directory.
func NewTokenKey(t testing.TB) *TokenKey {
	t.Helper()
	dir := t.TempDir()
	k := &TokenKey{File: filepath.Join(dir, "secret.key"), t: t, dir: dir}
	secret := make([]byte, 32)
	rand.Read(secret)
	if err := os.WriteFile(k.File, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if k.signer, err = auth.NewSigner(k.File, ""); err != nil {
		t.Fatal(err)
	}
	return k
}

// Token signs a token of role, valid for expiry (0: no expiry).
func (k *TokenKey) Token(role string, expiry time.Duration) string {
	k.t.Helper()
	tok, err := k.signer.Sign(role, expiry)
	if err != nil {
		k.t.Fatal(err)
	}
	return tok
}

// TokenFile writes a token of role (valid for expiry, 0: no expiry) to a
// file of mode 0600 named after the role, and returns its path.
func (k *TokenKey) TokenFile(role string, expiry time.Duration) string {
	k.t.Helper()
	f := filepath.Join(k.dir, role+".token")
	if err := os.WriteFile(f, []byte(k.Token(role, expiry)), 0o600); err != nil {
		k.t.Fatal(err)
	}
	return f
}
