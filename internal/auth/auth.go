// Package auth authenticates the callers of Magnetar's servers with JWT
// tokens as Pulsar uses them: the subject claim ("sub") is the caller's
// role; a token is signed with a secret key (HS256) or a private key
// (RS256 for RSA, ES256/ES384/ES512 for ECDSA) and checked with the secret
// or the public key.
//
// The algorithm a server accepts is fixed by its key, never taken from
// the token: a secret key accepts HS256 only, an RSA public key RS256
// only, and "none" is never accepted. A token's expiry ("exp"), when it
// has one, is enforced, also on a stream that outlives it (see
// StreamServerInterceptor).
//
// Keys are read as Pulsar's tools write them: a secret key as raw bytes; a
// public key as DER (X.509 SubjectPublicKeyInfo) or PEM; a private key as
// DER (PKCS#8) or PEM. A key reference is a file path, a file:// URL or a
// data:;base64, URL, as in Pulsar's settings.
package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	// ErrUnauthenticated: no credentials, or credentials that do not
	// authenticate (a bad signature, another algorithm, expired).
	ErrUnauthenticated = errors.New("authentication failed")
	// ErrExpired: the credentials of a stream expired while it ran; the
	// caller reconnects with fresh ones.
	ErrExpired = errors.New("authentication expired")
)

// Leeway is the clock skew tolerated on a token's expiry: it is accepted
// until then, and a stream using it ends then.
const Leeway = 5 * time.Second

// maxKeySize caps a key file.
const maxKeySize = 64 << 10

// maxTokenSize caps a token before it is parsed.
const maxTokenSize = 16 << 10

// ReadKey reads a key reference: a path, file://PATH or data:;base64,DATA.
func ReadKey(ref string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(ref, "data:"); ok {
		_, data, ok := strings.Cut(rest, ";base64,")
		if !ok {
			return nil, fmt.Errorf("key %q: a data URL must be data:;base64,...", ref)
		}
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("key data URL: %w", err)
		}
		return b, nil
	}
	path := strings.TrimPrefix(ref, "file://")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if st.Size() > maxKeySize {
		return nil, fmt.Errorf("key %s: %d bytes, more than a key (%d at most)", path, st.Size(), maxKeySize)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("key %s: %w", path, err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("key %s is empty", path)
	}
	return b, nil
}

// der returns the DER bytes of b, decoding PEM if it is PEM.
func der(b []byte) []byte {
	if blk, _ := pem.Decode(b); blk != nil {
		return blk.Bytes
	}
	return b
}

// method is the one algorithm a key signs or checks with.
func method(key any) (jwt.SigningMethod, error) {
	switch k := key.(type) {
	case []byte:
		return jwt.SigningMethodHS256, nil
	case *rsa.PublicKey, *rsa.PrivateKey:
		return jwt.SigningMethodRS256, nil
	case *ecdsa.PublicKey:
		return ecMethod(k.Curve)
	case *ecdsa.PrivateKey:
		return ecMethod(k.Curve)
	}
	return nil, fmt.Errorf("unsupported key type %T (RSA or ECDSA)", key)
}

func ecMethod(c elliptic.Curve) (jwt.SigningMethod, error) {
	switch c {
	case elliptic.P256():
		return jwt.SigningMethodES256, nil
	case elliptic.P384():
		return jwt.SigningMethodES384, nil
	case elliptic.P521():
		return jwt.SigningMethodES512, nil
	}
	return nil, fmt.Errorf("unsupported elliptic curve %s", c.Params().Name)
}

// Verifier authenticates callers: by a token checked with one key, and
// (with TLSClientCerts) by a verified TLS client certificate, whose
// common name is the role.
type Verifier struct {
	key    any // nil: no token is accepted
	method jwt.SigningMethod
	// TLSClientCerts: a caller without a token but with a client
	// certificate the TLS layer verified is authenticated as its common
	// name (mTLS, Pulsar's "tls" provider).
	TLSClientCerts bool
}

// NewVerifier checks tokens with the secret key at secretRef, or the
// public key at publicRef (exactly one).
func NewVerifier(secretRef, publicRef string) (*Verifier, error) {
	switch {
	case (secretRef == "") == (publicRef == ""):
		return nil, errors.New("authentication needs exactly one of --token-secret-key and --token-public-key")
	case secretRef != "":
		b, err := ReadKey(secretRef)
		if err != nil {
			return nil, err
		}
		if len(b) < 32 {
			return nil, fmt.Errorf("secret key of %d bytes: at least 32 (magnetar tokens create-secret-key)", len(b))
		}
		return &Verifier{key: b, method: jwt.SigningMethodHS256}, nil
	}
	b, err := ReadKey(publicRef)
	if err != nil {
		return nil, err
	}
	pub, err := x509.ParsePKIXPublicKey(der(b))
	if err != nil {
		if k, err2 := x509.ParsePKCS1PublicKey(der(b)); err2 == nil {
			pub = k
		} else {
			return nil, fmt.Errorf("public key %s: %w", publicRef, err)
		}
	}
	m, err := method(pub)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", publicRef, err)
	}
	return &Verifier{key: pub, method: m}, nil
}

// NewServerVerifier is a server's authentication: tokens checked with the
// secret or public key (at most one), and with tlsClientCerts verified
// client certificates; at least one of the two.
func NewServerVerifier(secretRef, publicRef string, tlsClientCerts bool) (*Verifier, error) {
	if secretRef == "" && publicRef == "" {
		if !tlsClientCerts {
			return nil, errors.New("authentication needs a token key (--token-secret-key or --token-public-key) or client certificates (--tls-trust-certs-file)")
		}
		return &Verifier{TLSClientCerts: true}, nil
	}
	v, err := NewVerifier(secretRef, publicRef)
	if err != nil {
		return nil, err
	}
	v.TLSClientCerts = tlsClientCerts
	return v, nil
}

// Claims are what a token says of its bearer.
type Claims struct {
	Role    string
	Expires time.Time // zero: never
}

// Verify checks token and returns its claims.
func (v *Verifier) Verify(token string) (Claims, error) {
	if v.key == nil {
		return Claims{}, fmt.Errorf("%w: tokens are not accepted here (no token key configured): use a client certificate", ErrUnauthenticated)
	}
	if token == "" {
		return Claims{}, fmt.Errorf("%w: no token", ErrUnauthenticated)
	}
	if len(token) > maxTokenSize {
		return Claims{}, fmt.Errorf("%w: token of %d bytes (%d at most)", ErrUnauthenticated, len(token), maxTokenSize)
	}
	var rc jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &rc, func(*jwt.Token) (any, error) { return v.key, nil },
		jwt.WithValidMethods([]string{v.method.Alg()}), jwt.WithLeeway(Leeway))
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if rc.Subject == "" {
		return Claims{}, fmt.Errorf("%w: token without a subject (role)", ErrUnauthenticated)
	}
	c := Claims{Role: rc.Subject}
	if rc.ExpiresAt != nil {
		c.Expires = rc.ExpiresAt.Time
	}
	return c, nil
}

// Signer makes tokens with a secret or private key (magnetar tokens).
type Signer struct {
	key    any
	method jwt.SigningMethod
}

// NewSigner signs with the secret key at secretRef, or the private key at
// privateRef (exactly one).
func NewSigner(secretRef, privateRef string) (*Signer, error) {
	switch {
	case (secretRef == "") == (privateRef == ""):
		return nil, errors.New("give exactly one of --secret-key and --private-key")
	case secretRef != "":
		b, err := ReadKey(secretRef)
		if err != nil {
			return nil, err
		}
		return &Signer{key: b, method: jwt.SigningMethodHS256}, nil
	}
	b, err := ReadKey(privateRef)
	if err != nil {
		return nil, err
	}
	var priv any
	if priv, err = x509.ParsePKCS8PrivateKey(der(b)); err != nil {
		if k, err2 := x509.ParsePKCS1PrivateKey(der(b)); err2 == nil {
			priv = k
		} else if k, err3 := x509.ParseECPrivateKey(der(b)); err3 == nil {
			priv = k
		} else {
			return nil, fmt.Errorf("private key %s: %w", privateRef, err)
		}
	}
	m, err := method(priv)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", privateRef, err)
	}
	return &Signer{key: priv, method: m}, nil
}

// Sign makes a token for role, expiring after expiry (0: never).
func (s *Signer) Sign(role string, expiry time.Duration) (string, error) {
	if role == "" {
		return "", errors.New("a token needs a subject (--subject ROLE)")
	}
	rc := jwt.RegisteredClaims{Subject: role}
	if expiry > 0 {
		rc.ExpiresAt = jwt.NewNumericDate(time.Now().Add(expiry))
	}
	return jwt.NewWithClaims(s.method, rc).SignedString(s.key)
}

type roleKey struct{}

// WithRole is ctx carrying the caller's role.
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// Role is the caller's role, "" when unauthenticated (authentication off).
func Role(ctx context.Context) string {
	r, _ := ctx.Value(roleKey{}).(string)
	return r
}
