package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func write(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVerify(t *testing.T) {
	secret := make([]byte, 32)
	rand.Read(secret)
	otherSecret := make([]byte, 32)
	rand.Read(otherSecret)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsaPriv, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	rsaPub, _ := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecPriv, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	ecPub, _ := x509.MarshalPKIXPublicKey(&ecKey.PublicKey)

	secretFile := write(t, "secret.key", secret)
	rsaPubDER := write(t, "rsa.pub", rsaPub)                                                            // as Pulsar writes it
	rsaPubPEM := write(t, "rsa.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: rsaPub})) // as openssl does
	ecPubFile := write(t, "ec.pub", ecPub)

	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hour := time.Now().Add(time.Hour).Unix()
	good := jwt.MapClaims{"sub": "alice", "exp": hour}
	none := sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good)
	for _, tc := range []struct {
		name           string
		secret, public string
		token          string
		role           string // "" : refused
	}{
		{"secret", secretFile, "", sign(jwt.SigningMethodHS256, secret, good), "alice"},
		{"secret as a data URL", "data:;base64," + base64.StdEncoding.EncodeToString(secret), "", sign(jwt.SigningMethodHS256, secret, good), "alice"},
		{"secret, no expiry", "file://" + secretFile, "", sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "bob"}), "bob"},
		{"forged signature", secretFile, "", sign(jwt.SigningMethodHS256, otherSecret, good), ""},
		{"alg none", secretFile, "", none, ""},
		{"alg none, public key", "", rsaPubDER, none, ""},
		{"expired", secretFile, "", sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}), ""},
		{"no subject", secretFile, "", sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"exp": hour}), ""},
		{"HS384 with the secret", secretFile, "", sign(jwt.SigningMethodHS384, secret, good), ""},
		{"RSA DER", "", rsaPubDER, sign(jwt.SigningMethodRS256, rsaKey, good), "alice"},
		{"RSA PEM", "", rsaPubPEM, sign(jwt.SigningMethodRS256, rsaKey, good), "alice"},
		// Key confusion: the public key's bytes as an HMAC secret.
		{"HS256 with the public key as secret", "", rsaPubDER, sign(jwt.SigningMethodHS256, rsaPub, good), ""},
		{"RS512 with the RSA key", "", rsaPubDER, sign(jwt.SigningMethodRS512, rsaKey, good), ""},
		{"EC", "", ecPubFile, sign(jwt.SigningMethodES256, ecKey, good), "alice"},
		{"RSA token to an EC key", "", ecPubFile, sign(jwt.SigningMethodRS256, rsaKey, good), ""},
		{"garbage", secretFile, "", "not.a.token", ""},
		{"empty", secretFile, "", "", ""},
		{"too long", secretFile, "", strings.Repeat("a", maxTokenSize+1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.secret, tc.public)
			if err != nil {
				t.Fatal(err)
			}
			c, err := v.Verify(tc.token)
			switch {
			case tc.role == "" && !errors.Is(err, ErrUnauthenticated):
				t.Fatalf("accepted (%+v, %v), want ErrUnauthenticated", c, err)
			case tc.role != "" && (err != nil || c.Role != tc.role):
				t.Fatalf("%+v %v, want role %s", c, err, tc.role)
			}
		})
	}

	// Signers read what create-key-pair writes, and their tokens verify.
	for _, priv := range []struct {
		name string
		der  []byte
		pub  string
	}{{"rsa", rsaPriv, rsaPubDER}, {"ec", ecPriv, ecPubFile}} {
		s, err := NewSigner("", write(t, priv.name+".key", priv.der))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := s.Sign("carol", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := NewVerifier("", priv.pub)
		if c, err := v.Verify(tok); err != nil || c.Role != "carol" || time.Until(c.Expires) > time.Minute {
			t.Fatalf("%s: %+v %v", priv.name, c, err)
		}
	}
}

func TestBadKeys(t *testing.T) {
	for _, tc := range []struct {
		name           string
		secret, public string
		want           string
	}{
		{"neither", "", "", "exactly one"},
		{"both", "a", "b", "exactly one"},
		{"missing file", "/nonexistent/key", "", "no such file"},
		{"short secret", write(t, "short", []byte("0123456789")), "", "at least 32"},
		{"not a public key", "", write(t, "junk", []byte("junk")), "public key"},
		{"bad data URL", "data:base64,xx", "", "data:;base64,"},
	} {
		if _, err := NewVerifier(tc.secret, tc.public); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestInterceptorsCarryTheRole(t *testing.T) {
	secret := make([]byte, 32)
	v := &Verifier{key: secret, method: jwt.SigningMethodHS256}
	s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "dave", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(MetadataKey, "Bearer "+s))
	var role string
	var exp time.Time
	_, err := v.UnaryInterceptor()(ctx, nil, nil, func(ctx context.Context, _ any) (any, error) {
		role, exp = Role(ctx), Expiry(ctx)
		return nil, nil
	})
	if err != nil || role != "dave" || exp.IsZero() {
		t.Fatalf("%q %v %v", role, exp, err)
	}
	_, err = v.UnaryInterceptor()(context.Background(), nil, nil, func(context.Context, any) (any, error) { return nil, nil })
	if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("without metadata: %v", err)
	}
}
