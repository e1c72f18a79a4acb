package client

import (
	"context"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Authentication supplies the credentials presented to the brokers with
// every call and stream, as pulsar-client-go's does: a token (JWT) whose
// subject is the client's role.
type Authentication interface {
	// Token returns the token to present now. It is asked again for
	// every new call or stream, so that a supplier or a file can hand
	// out a fresh one before the old one expires (a broker ends a stream
	// whose token expired; the client reconnects with a fresh one).
	Token() (string, error)
}

type tokenAuth func() (string, error)

func (f tokenAuth) Token() (string, error) { return f() }

// NewAuthenticationToken presents token.
func NewAuthenticationToken(token string) Authentication {
	return tokenAuth(func() (string, error) { return token, nil })
}

// maxTokenFile caps a token file.
const maxTokenFile = 16 << 10

// NewAuthenticationTokenFromFile presents the token in the file at path
// (a path or file:// URL), read again for every call, so that it can be
// replaced while the client runs.
func NewAuthenticationTokenFromFile(path string) Authentication {
	path = strings.TrimPrefix(path, "file://")
	return tokenAuth(func() (string, error) {
		st, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if st.Size() > maxTokenFile {
			return "", fmt.Errorf("token file %s: %d bytes (%d at most)", path, st.Size(), maxTokenFile)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	})
}

// NewAuthenticationTokenFromSupplier presents what supplier returns, asked
// for every call.
func NewAuthenticationTokenFromSupplier(supplier func() (string, error)) Authentication {
	return tokenAuth(supplier)
}

// perRPC is an Authentication as gRPC per-call credentials.
type perRPC struct{ a Authentication }

func (p perRPC) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := p.a.Token()
	if err != nil {
		return nil, status.Errorf(codes.Unauthenticated, "client: no token to present: %v", err)
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false: tokens go over plaintext connections
// too (use TLS where the network is not trusted).
func (perRPC) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = perRPC{}
