package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// MetadataKey is the gRPC metadata of the credentials: "Bearer TOKEN", as
// HTTP's Authorization header.
const MetadataKey = "authorization"

// bearer returns the token of an Authorization value.
func bearer(v string) string {
	if t, ok := strings.CutPrefix(v, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

type claimsKey struct{}

// withClaims is ctx carrying the caller's claims (and role).
func withClaims(ctx context.Context, c Claims) context.Context {
	return WithRole(context.WithValue(ctx, claimsKey{}, c), c.Role)
}

// Expiry is when the caller's credentials expire (zero: never, or no
// authentication). A stream handler ends the stream then (ErrExpired).
func Expiry(ctx context.Context) time.Time {
	c, _ := ctx.Value(claimsKey{}).(Claims)
	return c.Expires
}

// ExpiryTimer fires when the caller's credentials expire (with Leeway, as
// Verify accepts them: a token accepted at a stream's start is never
// already expired for it); nil (never fires) without an expiry. stop
// releases it.
func ExpiryTimer(ctx context.Context) (fired <-chan time.Time, stop func()) {
	at := Expiry(ctx)
	if at.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(at.Add(Leeway)))
	return t.C, func() { t.Stop() }
}

// ExpiredError is the error a stream ends with when its credentials
// expired at at.
func ExpiredError(at time.Time) error {
	return fmt.Errorf("%w: the token expired at %s: reconnect with a fresh one", ErrExpired, at.UTC().Format(time.RFC3339))
}

// certRole is the role of a verified client certificate: its common name.
func certRole(chains [][]*x509.Certificate) (string, bool) {
	if len(chains) == 0 || len(chains[0]) == 0 || chains[0][0].Subject.CommonName == "" {
		return "", false
	}
	return chains[0][0].Subject.CommonName, true
}

func (v *Verifier) fromMetadata(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	if len(vals) == 0 && v.TLSClientCerts {
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				if role, ok := certRole(ti.State.VerifiedChains); ok {
					return withClaims(ctx, Claims{Role: role}), nil
				}
			}
		}
	}
	if len(vals) == 0 {
		return nil, fmt.Errorf("%w: no credentials (a token: authorization metadata \"Bearer TOKEN\"%s)", ErrUnauthenticated, v.certHint())
	}
	c, err := v.Verify(bearer(vals[0]))
	if err != nil {
		return nil, err
	}
	return withClaims(ctx, c), nil
}

// UnaryInterceptor authenticates every unary call; nil v lets all through.
func (v *Verifier) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v == nil {
			return h(ctx, req)
		}
		ctx, err := v.fromMetadata(ctx)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamInterceptor authenticates every stream; nil v lets all through.
// The stream's context carries the claims (Role, Expiry).
func (v *Verifier) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if v == nil {
			return h(srv, ss)
		}
		ctx, err := v.fromMetadata(ss.Context())
		if err != nil {
			return err
		}
		return h(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// HTTP authenticates requests to next with their Authorization header,
// except those open lets through (health probes); a failure is answered
// by fail. nil v lets all through.
func (v *Verifier) HTTP(next http.Handler, open func(*http.Request) bool, fail func(http.ResponseWriter, *http.Request, error)) http.Handler {
	if v == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if open(r) {
			next.ServeHTTP(w, r)
			return
		}
		h := r.Header.Get("Authorization")
		if h == "" && v.TLSClientCerts && r.TLS != nil {
			if role, ok := certRole(r.TLS.VerifiedChains); ok {
				next.ServeHTTP(w, r.WithContext(withClaims(r.Context(), Claims{Role: role})))
				return
			}
		}
		if h == "" {
			fail(w, r, fmt.Errorf("%w: no credentials (a token: header \"Authorization: Bearer TOKEN\"%s)", ErrUnauthenticated, v.certHint()))
			return
		}
		c, err := v.Verify(bearer(h))
		if err != nil {
			fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(withClaims(r.Context(), c)))
	})
}

func (v *Verifier) certHint() string {
	if v.TLSClientCerts {
		return ", or a client certificate from a trusted authority"
	}
	return ""
}

// Authenticate verifies a token sent outside gRPC's metadata (Pulsar's
// CONNECT command carries it) and returns ctx with its claims.
func (v *Verifier) Authenticate(ctx context.Context, token string) (context.Context, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: no credentials (a token)", ErrUnauthenticated)
	}
	c, err := v.Verify(token)
	if err != nil {
		return nil, err
	}
	return withClaims(ctx, c), nil
}
