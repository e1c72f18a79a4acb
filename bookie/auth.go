package bookie

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"

	"github.com/magnetar-io/magnetar/bookie/wire"
	"github.com/magnetar-io/magnetar/internal/auth"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
)

// Authentication of the gRPC port: internal/auth checks the caller's
// credentials (a token, or a client certificate whose common name is the
// role); then its role must be one of Config.AllowedRoles, so that a
// client of the brokers holding a valid token cannot write or read
// entries directly. Errors leave as wire sentinels (UNAUTHENTICATED,
// UNAUTHORIZED).

// authInterceptors are the gRPC port's checks; none with authentication
// off.
func (s *Server) authInterceptors(v *auth.Verifier) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	if v == nil {
		return nil, nil
	}
	allowed := func(ctx context.Context) error {
		if role := auth.Role(ctx); !slices.Contains(s.cfg.AllowedRoles, role) {
			return fmt.Errorf("%w: role %q (the bookie serves %v)", wire.ErrUnauthorized, role, s.cfg.AllowedRoles)
		}
		return nil
	}
	unary := v.UnaryInterceptor()
	stream := v.StreamInterceptor()
	return []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := unary(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				if err := allowed(ctx); err != nil {
					return nil, err
				}
				return h(ctx, req)
			})
			return resp, authError(err)
		}}, []grpc.StreamServerInterceptor{func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := stream(srv, ss, info, func(srv any, ss grpc.ServerStream) error {
				if err := allowed(ss.Context()); err != nil {
					return wire.ToStatus(err)
				}
				return h(srv, ss)
			})
			return authError(err)
		}}
}

// authError turns internal/auth's refusal into the wire's.
func authError(err error) error {
	if errors.Is(err, auth.ErrUnauthenticated) {
		return wire.ToStatus(fmt.Errorf("%w: %v", wire.ErrUnauthenticated, err))
	}
	return err
}

// peer is how this bookie's autorecovery calls other bookies.
func (c *Config) peer() auth.Peer {
	return auth.Peer{TLS: c.TLSCertFile != "", TokenFile: c.ClientAuthTokenFile,
		Files: tlsutil.Files{Cert: c.TLSCertFile, Key: c.TLSKeyFile, Trust: c.TLSTrustCertsFile}}
}
